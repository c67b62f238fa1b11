//! The order route's statements on PostgreSQL: the one-round-trip fast
//! path of `POST /orders`, its transactional slow path, and the reads.
//!
//! On a direct connection the statements are prepared once per connection:
//! planning the fused statement costs more than running it (a replay: about
//! 8 times the throughput of an unnamed statement in pgbench, see
//! docs/pgbouncer.md). Behind a transaction pooler they are unnamed and
//! typed (`query_typed`): still one round trip, nothing left on a server
//! connection that the next transaction may not get.

use std::borrow::Cow;
use std::sync::LazyLock;

use deadpool_postgres::Object;
use idemkey_core::{Decision, IdempotencyKey, OperationId};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};
use uuid::Uuid;

use crate::db::without_payments::statement;
use crate::db::{
    AccountId, Authed, Order, OrderAnswer, OrderAttempt, OrderDraft, OrderEffectError, Payment,
    Price, Refusal, StoreError, TokenHash, from_system_time, to_system_time,
};
use idemkey::idempotency::{self, ClaimToken, Done, Outcome, Policy, Read, RecordKey, Source};
use idemkey::store::postgres::{db_error, query_in, read_from_row, run_in_transaction};

/// The fused statement (without its charge in a `without-payments` build).
static CREATE_ORDER: LazyLock<Cow<'static, str>> =
    LazyLock::new(|| statement(include_str!("sql/create_order.sql")));
/// The slow path's order insert (the same).
static INSERT_ORDER: LazyLock<Cow<'static, str>> =
    LazyLock::new(|| statement(include_str!("sql/insert_order.sql")));
const LOOKUP: &str = include_str!("sql/lookup.sql");
const ORDER: &str = include_str!("sql/order.sql");
const PRODUCTS: &str = include_str!("sql/products.sql");
const RECENT_ORDERS: &str = include_str!("sql/recent_orders.sql");

impl super::PgOrders {
    /// `POST /orders`: the fused statement claims the key, inserts the order
    /// and stores its response in one round trip, or returns what the key
    /// holds; the engine answers from that, and only a take-over or a
    /// re-execution takes the transactional path.
    pub(crate) async fn create_order(
        &self,
        token: TokenHash,
        draft: &OrderDraft,
        policy: &Policy,
    ) -> Result<Authed<OrderAttempt>, StoreError> {
        let mut client = self.client().await?;
        // `None`: another order took the reference while the statement ran;
        // run it again, to see that order.
        match self
            .create_order_once(&mut client, token, draft, policy)
            .await?
        {
            Some(attempt) => Ok(attempt),
            None => self
                .create_order_once(&mut client, token, draft, policy)
                .await?
                .ok_or_else(|| StoreError::Unavailable("purchase reference conflict".into())),
        }
    }

    async fn create_order_once(
        &self,
        client: &mut Object,
        token: TokenHash,
        draft: &OrderDraft,
        policy: &Policy,
    ) -> Result<Option<Authed<OrderAttempt>>, StoreError> {
        let fingerprint = &draft.fingerprint.as_bytes()[..];
        let (operation, key) = (draft.operation.as_str(), draft.key.as_str());
        let headers = draft.response.headers_json();
        let body = draft.response.body.as_deref().unwrap_or_default();
        let replay = idemkey::duration::millis(policy.replay_ttl);
        let quantity = i32::from(draft.order.quantity);
        let created_at = to_system_time(draft.order.created_at);
        let status = i32::from(draft.response.status);
        let claim = ClaimToken::random().0;
        let (amount, currency) = match &draft.order.amount {
            Some((cents, currency)) => (*cents, currency.as_str()),
            None => (0, ""),
        };
        let reference = draft.order.reference.as_deref();
        let params: [(&(dyn ToSql + Sync), Type); 18] = [
            (&&token.0[..], Type::BYTEA),
            (&operation, Type::TEXT),
            (&key, Type::TEXT),
            (&fingerprint, Type::BYTEA),
            (&claim, Type::UUID),
            (&body, Type::BYTEA),
            (&headers, Type::TEXT),
            (&replay, Type::INT8),
            (&draft.order.id, Type::UUID),
            (&draft.order.sku, Type::TEXT),
            (&quantity, Type::INT4),
            (&created_at, Type::TIMESTAMPTZ),
            (&status, Type::INT4),
            (&draft.price.unit_cents, Type::INT8),
            (&currency, Type::TEXT),
            (&reference, Type::TEXT),
            (&amount, Type::INT8),
            (&draft.charge, Type::TEXT),
        ];
        let fused = match &draft.hold {
            None => self.rows_raw(client, &CREATE_ORDER, &params).await,
            // A test fault: the same statement, its transaction held open
            // before the commit when it created the order.
            Some(hold) => {
                let tx = client.transaction().await.map_err(db_error)?;
                let rows = tx.query_typed(&CREATE_ORDER, &params).await;
                if let Ok(rows) = &rows
                    && rows
                        .first()
                        .and_then(|r| r.try_get::<_, &str>("outcome").ok())
                        == Some("created")
                {
                    hold.wait().await;
                }
                match rows {
                    Ok(rows) => tx.commit().await.map(|()| rows),
                    Err(err) => Err(err),
                }
            }
        };
        let rows = match fused {
            Ok(rows) => rows,
            Err(err) if is_reference_conflict(&err) => return Ok(None),
            Err(err) => return Err(db_error(err)),
        };
        let (account, read) = match rows.first() {
            Some(row) => match row.try_get::<_, &str>("outcome").map_err(db_error)? {
                "created" => {
                    return Ok(Some(Authed::Ok(
                        Outcome::Executed {
                            decision: Decision::Execute,
                            value: (),
                            response: draft.response.clone(),
                            stored: true,
                        }
                        .into(),
                    )));
                }
                "unauthorized" => return Ok(Some(Authed::Unauthorized)),
                "catalogue" => {
                    return Ok(Some(Authed::Ok(OrderAttempt::Refused(
                        Refusal::PriceChanged,
                    ))));
                }
                "reference" => {
                    let id: Option<&str> = row.try_get("resource_id").map_err(db_error)?;
                    let id = id
                        .and_then(|id| Uuid::try_parse(id).ok())
                        .unwrap_or_default();
                    return Ok(Some(Authed::Ok(OrderAttempt::Refused(
                        Refusal::ReferenceTaken(id),
                    ))));
                }
                _ => (account_of_row(row)?, read_from_row(row)?),
            },
            // The claim waited for a concurrent claimant that committed:
            // this statement's snapshot could not see its row. A new one can.
            None => match self.lookup_row(client, token, operation, key).await? {
                Authed::Unauthorized => return Ok(Some(Authed::Unauthorized)),
                Authed::Ok(found) => found,
            },
        };
        let record_key = RecordKey {
            scope: account.scope(),
            operation: draft.operation.clone(),
            key: draft.key.clone(),
        };
        if let Some(answer) =
            idempotency::answer_for(&read, &record_key, draft.fingerprint, policy, Source::Store)
        {
            return Ok(Some(Authed::Ok(OrderAttempt::Answered(Box::new(
                OrderAnswer {
                    outcome: answer.into(),
                    seen: Some((account, read)),
                },
            )))));
        }
        // The transactional path: a take-over or a re-execution (rare).
        let (order, response) = (draft.order.clone(), draft.response.clone());
        let (price, charge) = (draft.price.clone(), draft.charge.clone());
        let (operation, key) = (operation.to_owned(), key.to_owned());
        let outcome = run_in_transaction(
            self,
            client,
            &record_key,
            draft.fingerprint,
            policy,
            None,
            |tx| {
                Box::pin(async move {
                    let quantity = i32::from(order.quantity);
                    let created_at = to_system_time(order.created_at);
                    let amount = order.amount.as_ref().map_or(0, |(cents, _)| *cents);
                    let reference = order.reference.as_deref();
                    let rows = query_in(
                        &*tx,
                        &INSERT_ORDER,
                        &[
                            (&order.id, Type::UUID),
                            (&account.0, Type::UUID),
                            (&order.sku, Type::TEXT),
                            (&quantity, Type::INT4),
                            (&created_at, Type::TIMESTAMPTZ),
                            (&price.unit_cents, Type::INT8),
                            (&price.currency, Type::TEXT),
                            (&reference, Type::TEXT),
                            (&amount, Type::INT8),
                            (&operation, Type::TEXT),
                            (&key, Type::TEXT),
                            (&charge, Type::TEXT),
                        ],
                    )
                    .await
                    .map_err(db_error)?;
                    let row = rows.first().ok_or_else(|| {
                        OrderEffectError::Store(StoreError::Unavailable(
                            "order insert returned no row".into(),
                        ))
                    })?;
                    let created: bool = row.try_get("created").map_err(db_error)?;
                    if !created {
                        let taken: Option<Uuid> = row.try_get("taken").map_err(db_error)?;
                        return Err(OrderEffectError::Refused(match taken {
                            Some(id) => Refusal::ReferenceTaken(id),
                            None => Refusal::PriceChanged,
                        }));
                    }
                    Ok(Done {
                        response,
                        resource: Some(order.id.to_string()),
                        value: (),
                    })
                })
            },
        )
        .await;
        Ok(Some(Authed::Ok(match OrderEffectError::split(outcome)? {
            Ok(outcome) => outcome.into(),
            Err(refusal) => OrderAttempt::Refused(refusal),
        })))
    }

    /// The catalogue: every sku with its price.
    pub(crate) async fn products(&self) -> Result<Vec<(String, Price)>, StoreError> {
        let client = self.client().await?;
        let rows = self
            .query_pooled(&client, PRODUCTS, &[])
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get("sku").map_err(db_error)?,
                    Price {
                        unit_cents: row.try_get("unit_price_cents").map_err(db_error)?,
                        currency: row.try_get("currency").map_err(db_error)?,
                    },
                ))
            })
            .collect()
    }

    pub(crate) async fn lookup(
        &self,
        token: TokenHash,
        operation: &OperationId,
        key: &IdempotencyKey,
    ) -> Result<Authed<Read>, StoreError> {
        let client = self.client().await?;
        Ok(
            match self
                .lookup_row(&client, token, operation.as_str(), key.as_str())
                .await?
            {
                Authed::Unauthorized => Authed::Unauthorized,
                Authed::Ok((_, read)) => Authed::Ok(read),
            },
        )
    }

    pub(crate) async fn order(
        &self,
        token: TokenHash,
        id: Uuid,
    ) -> Result<Authed<Option<Order>>, StoreError> {
        let client = self.client().await?;
        let rows = self
            .rows(
                &client,
                ORDER,
                &[(&&token.0[..], Type::BYTEA), (&id, Type::UUID)],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Authed::Unauthorized);
        };
        Ok(Authed::Ok(order_from_row(row)?))
    }

    pub(crate) async fn recent_orders(
        &self,
        token: TokenHash,
        limit: u32,
    ) -> Result<Authed<Vec<Order>>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query_typed(
                RECENT_ORDERS,
                &[
                    (&&token.0[..], Type::BYTEA),
                    (&i64::from(limit), Type::INT8),
                ],
            )
            .await
            .map_err(db_error)?;
        if rows.is_empty() {
            return Ok(Authed::Unauthorized);
        }
        let mut orders = Vec::with_capacity(rows.len());
        for row in &rows {
            orders.extend(order_from_row(row)?);
        }
        Ok(Authed::Ok(orders))
    }
}

/// A unique violation of the purchase reference: a concurrent order took it.
fn is_reference_conflict(err: &tokio_postgres::Error) -> bool {
    err.as_db_error().is_some_and(|db| {
        *db.code() == tokio_postgres::error::SqlState::UNIQUE_VIOLATION
            && db.constraint() == Some("orders_account_reference")
    })
}

impl super::PgOrders {
    /// Runs one of the order route's statements on `client`, as the store
    /// decides for its pooler (`idemkey::store::postgres::query_in`).
    async fn rows(
        &self,
        client: &Object,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, StoreError> {
        self.rows_raw(client, sql, params).await.map_err(db_error)
    }

    /// [`Self::rows`] with the driver's error, for the caller to look at.
    async fn rows_raw(
        &self,
        client: &Object,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        self.query_pooled(client, sql, params).await
    }

    async fn lookup_row(
        &self,
        client: &Object,
        token: TokenHash,
        operation: &str,
        key: &str,
    ) -> Result<Authed<(AccountId, Read)>, StoreError> {
        let rows = self
            .rows(
                client,
                LOOKUP,
                &[
                    (&&token.0[..], Type::BYTEA),
                    (&operation, Type::TEXT),
                    (&key, Type::TEXT),
                ],
            )
            .await?;
        match rows.first() {
            None => Ok(Authed::Unauthorized),
            Some(row) => Ok(Authed::Ok((account_of_row(row)?, read_from_row(row)?))),
        }
    }
}

fn account_of_row(row: &Row) -> Result<AccountId, StoreError> {
    let id: Uuid = row.try_get("account_id").map_err(db_error)?;
    Ok(AccountId(id))
}

/// An order from a row of order.sql or recent_orders.sql; `None` for the
/// NULL row that stands for "no order".
fn order_from_row(row: &Row) -> Result<Option<Order>, StoreError> {
    let id: Option<Uuid> = row.try_get("id").map_err(db_error)?;
    let Some(id) = id else {
        return Ok(None);
    };
    let quantity: i32 = row.try_get("quantity").map_err(db_error)?;
    let amount: Option<i64> = row.try_get("amount_cents").map_err(db_error)?;
    let currency: Option<String> = row.try_get("currency").map_err(db_error)?;
    let status: Option<String> = row.try_get("payment_status").map_err(db_error)?;
    let attempts: Option<i32> = row.try_get("payment_attempts").map_err(db_error)?;
    let payment = match status {
        None => None,
        Some(status) => Some(Payment::from_outbox(
            &status,
            row.try_get("payment_result").map_err(db_error)?,
            row.try_get("payment_error").map_err(db_error)?,
            i64::from(attempts.unwrap_or_default()),
        )),
    };
    Ok(Some(Order {
        id,
        sku: row.try_get("sku").map_err(db_error)?,
        quantity: u8::try_from(quantity)
            .map_err(|_| StoreError::Unavailable("quantity out of range".into()))?,
        reference: row.try_get("reference").map_err(db_error)?,
        amount: amount.zip(currency),
        created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
        payment,
    }))
}
