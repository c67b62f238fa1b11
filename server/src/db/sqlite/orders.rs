//! The order route's statements on SQLite: `POST /orders` as one `BEGIN
//! IMMEDIATE` transaction through the engine, and the reads.

use idemkey_core::{IdempotencyKey, OperationId, UnixMillis};
use rusqlite::{Connection, OptionalExtension as _, params};
use uuid::Uuid;

use crate::db::without_payments;
use crate::db::{
    AccountId, Authed, Order, OrderAnswer, OrderAttempt, OrderDraft, OrderEffectError, Payment,
    Price, Refusal, StoreError, TokenHash,
};
use idemkey::idempotency::{Done, Policy, Read, RecordKey};
use idemkey::store::sqlite::SqliteDb;
use idemkey::store::sqlite::{SqliteTx, run_in_savepoint, sqlite_error};

const ACCOUNT: &str = include_str!("sql/account.sql");
const PRODUCTS: &str = include_str!("sql/products.sql");
const REFERENCE_TAKEN: &str = include_str!("sql/reference_taken.sql");
const INSERT_ORDER: &str = include_str!("sql/insert_order.sql");
const ORDER: &str = include_str!("sql/order.sql");
const RECENT_ORDERS: &str = include_str!("sql/recent_orders.sql");

fn ms(t: UnixMillis) -> i64 {
    i64::try_from(t.0).unwrap_or(i64::MAX)
}

fn from_ms(v: i64) -> UnixMillis {
    UnixMillis(u64::try_from(v).unwrap_or(0))
}

fn account_of(conn: &Connection, token: TokenHash) -> Result<Option<AccountId>, StoreError> {
    let id: Option<String> = conn
        .prepare_cached(ACCOUNT)
        .and_then(|mut stmt| stmt.query_row([&token.0[..]], |row| row.get(0)).optional())
        .map_err(sqlite_error)?;
    id.map(|id| {
        Uuid::try_parse(&id)
            .map(AccountId)
            .map_err(|_| StoreError::Unavailable("account id is not a UUID".into()))
    })
    .transpose()
}

impl From<rusqlite::Error> for OrderEffectError {
    fn from(err: rusqlite::Error) -> Self {
        Self::Store(sqlite_error(err))
    }
}

/// The order's effect: its charge in the outbox and the order with its
/// amount and its charge's id, when its price is the catalogue's and its
/// reference is free.
fn insert_order(
    conn: SqliteTx<'_>,
    account: AccountId,
    key: &RecordKey,
    draft: &OrderDraft,
) -> Result<(), OrderEffectError> {
    let order = &draft.order;
    if let Some(reference) = &order.reference {
        let taken: Option<String> = conn
            .prepare_cached(REFERENCE_TAKEN)?
            .query_row(params![account.0.to_string(), reference], |row| row.get(0))
            .optional()?;
        if let Some(id) = taken {
            let id = Uuid::try_parse(&id).unwrap_or_default();
            return Err(OrderEffectError::Refused(Refusal::ReferenceTaken(id)));
        }
    }
    let id = order.id.to_string();
    // The charge first: the order keeps its id. A refused order rolls its
    // savepoint back, the charge with it.
    let charge = if without_payments::ENABLED {
        None
    } else {
        Some(
            conn.enqueue(key, "charge", Some(&id), &draft.charge)
                .map_err(OrderEffectError::Store)?,
        )
    };
    let amount = order.amount.as_ref().map_or(0, |(cents, _)| *cents);
    let inserted = conn.prepare_cached(INSERT_ORDER)?.execute(params![
        id,
        account.0.to_string(),
        order.sku,
        i64::from(order.quantity),
        ms(order.created_at),
        draft.price.unit_cents,
        draft.price.currency,
        order.reference,
        amount,
        charge,
    ])?;
    if inserted == 0 {
        return Err(OrderEffectError::Refused(Refusal::PriceChanged));
    }
    Ok(())
}

/// One order in the batch's open transaction `tx`, in its own savepoint.
fn create_order_in(
    db: &SqliteDb,
    tx: &mut rusqlite::Transaction<'_>,
    token: TokenHash,
    draft: &OrderDraft,
    policy: &Policy,
    hold: Option<&crate::hold::Hold>,
) -> Result<Authed<OrderAttempt>, StoreError> {
    let Some(account) = account_of(tx, token)? else {
        return Ok(Authed::Unauthorized);
    };
    let key = RecordKey {
        scope: account.scope(),
        operation: draft.operation.clone(),
        key: draft.key.clone(),
    };
    let outcome = run_in_savepoint(db, tx, &key, draft.fingerprint, policy, |conn| {
        insert_order(conn, account, &key, draft)?;
        if let Some(hold) = hold {
            hold.wait_blocking();
        }
        Ok(Done {
            response: draft.response.clone(),
            resource: Some(draft.order.id.to_string()),
            value: (),
        })
    });
    let outcome = match OrderEffectError::split(outcome)? {
        Ok(outcome) => outcome,
        Err(refusal) => return Ok(Authed::Ok(OrderAttempt::Refused(refusal))),
    };
    // Answered from a completed record: read it back for the replay cache.
    let seen = if outcome.answerable_from_copy() {
        Some((account, db.records(tx).read_now(&key)?))
    } else {
        None
    };
    Ok(Authed::Ok(OrderAttempt::Answered(Box::new(OrderAnswer {
        outcome,
        seen,
    }))))
}

/// An order with its payment from a row of order.sql or recent_orders.sql.
fn order_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Order> {
    let id: String = row.get(0)?;
    let quantity: i64 = row.get(2)?;
    let amount: Option<i64> = row.get(4)?;
    let currency: Option<String> = row.get(5)?;
    let status: Option<String> = row.get(7)?;
    let payment = match status {
        None => None,
        Some(status) => Some(Payment::from_outbox(
            &status,
            row.get(8)?,
            row.get(9)?,
            row.get(10)?,
        )),
    };
    Ok(Order {
        id: Uuid::try_parse(&id).unwrap_or(Uuid::nil()),
        sku: row.get(1)?,
        quantity: u8::try_from(quantity).unwrap_or(0),
        reference: row.get(3)?,
        amount: amount.zip(currency),
        created_at: from_ms(row.get(6)?),
        payment,
    })
}

impl super::SqliteOrders {
    /// `POST /orders`: authenticate, then claim, insert the order and store
    /// its response in one savepoint of the next group-committed batch
    /// ([`super::group_commit`]), answered once the batch committed.
    pub(crate) async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        policy: &Policy,
    ) -> Result<Authed<OrderAttempt>, StoreError> {
        let (draft, policy) = (draft.clone(), *policy);
        let db = SqliteDb::clone(self);
        self.group_commit(move |tx| {
            create_order_in(&db, tx, token, &draft, &policy, draft.hold.as_ref())
        })
        .await
    }

    pub(crate) async fn lookup(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Read>, StoreError> {
        let (operation, key) = (operation.clone(), key.clone());
        let db = SqliteDb::clone(self);
        self.with_reader(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            let key = RecordKey {
                scope: account.scope(),
                operation,
                key,
            };
            db.records(conn).read_now(&key).map(Authed::Ok)
        })
        .await
    }

    pub(crate) async fn order(
        &self,
        token: TokenHash,
        id: Uuid,
    ) -> Result<Authed<Option<Order>>, StoreError> {
        self.with_reader(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            let order = conn
                .prepare_cached(ORDER)
                .and_then(|mut stmt| {
                    stmt.query_row(
                        params![account.0.to_string(), id.to_string()],
                        order_from_row,
                    )
                    .optional()
                })
                .map_err(sqlite_error)?;
            Ok(Authed::Ok(order))
        })
        .await
    }

    pub(crate) async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        self.with_reader(move |conn| {
            let Some(account) = account_of(conn, token)? else {
                return Ok(Authed::Unauthorized);
            };
            let orders = conn
                .prepare_cached(RECENT_ORDERS)
                .and_then(|mut stmt| {
                    stmt.query_map(
                        params![account.0.to_string(), i64::from(limit)],
                        order_from_row,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(sqlite_error)?;
            Ok(Authed::Ok(orders))
        })
        .await
    }
}

impl super::SqliteOrders {
    /// The catalogue: every sku with its price.
    pub(crate) async fn products(&self) -> Result<Vec<(String, Price)>, StoreError> {
        self.with_reader(|conn| {
            conn.prepare_cached(PRODUCTS)
                .and_then(|mut stmt| {
                    stmt.query_map([], |row| {
                        Ok((
                            row.get(0)?,
                            Price {
                                unit_cents: row.get(1)?,
                                currency: row.get(2)?,
                            },
                        ))
                    })?
                    .collect()
                })
                .map_err(sqlite_error)
        })
        .await
    }
}
