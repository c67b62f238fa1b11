//! Refunds on SQLite: every check and the insert in one `BEGIN IMMEDIATE`
//! transaction, so nothing changes between them.

use rusqlite::{OptionalExtension as _, Row, params};
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::store::sqlite::{immediate, sqlite_error};

use super::{Statements, millis, uuid};
use crate::store::refund::{NewRefund, Refund, RefundWrite};

const CHARGE_BY_ID: &str = include_str!("sql/charge_by_id.sql");
const INSERT_REFUND: &str = include_str!("sql/insert_refund.sql");
const REFUND: &str = include_str!("sql/refund.sql");
const REFUND_OF_CHARGE: &str = include_str!("sql/refund_of_charge.sql");
const REFUNDS: &str = include_str!("sql/refunds.sql");

impl Statements<'_> {
    pub(in crate::store) async fn insert_refund(
        &self,
        new: &NewRefund,
    ) -> Result<RefundWrite, StoreError> {
        let new = new.clone();
        self.0
            .with_conn(move |conn| {
                let tx = immediate(conn)?;
                let written = write(&tx, &new)?;
                tx.commit().map_err(sqlite_error)?;
                Ok(written)
            })
            .await
    }

    pub(in crate::store) async fn refund(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Refund>, StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.0
            .with_reader(move |conn| {
                conn.query_row(REFUND, params![scope, key], read_row)
                    .optional()
                    .map_err(sqlite_error)?
                    .map(RawRefund::into_refund)
                    .transpose()
            })
            .await
    }

    pub(in crate::store) async fn refunds(&self, scope: &str) -> Result<Vec<Refund>, StoreError> {
        let scope = scope.to_owned();
        self.0
            .with_reader(move |conn| {
                let mut stmt = conn.prepare_cached(REFUNDS).map_err(sqlite_error)?;
                let rows = stmt
                    .query_map([scope], read_row)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(sqlite_error)?;
                rows.into_iter().map(RawRefund::into_refund).collect()
            })
            .await
    }
}

/// The checks of [`RefundWrite`], in its order, then the insert.
fn write(tx: &rusqlite::Transaction<'_>, new: &NewRefund) -> Result<RefundWrite, StoreError> {
    let one = |sql: &str, key: &str| {
        tx.query_row(sql, params![new.scope, key], read_row)
            .optional()
            .map_err(sqlite_error)?
            .map(RawRefund::into_refund)
            .transpose()
    };
    if let Some(refund) = one(REFUND, &new.idempotency_key)? {
        return Ok(RefundWrite::Existing(refund));
    }
    let charge_id = new.charge_id.to_string();
    let charge = tx
        .query_row(CHARGE_BY_ID, params![new.scope, charge_id], |row| {
            Ok((
                row.get::<_, String>("order_id")?,
                row.get::<_, i64>("amount_cents")?,
                row.get::<_, String>("currency")?,
            ))
        })
        .optional()
        .map_err(sqlite_error)?;
    let Some((order_id, amount_cents, currency)) = charge else {
        return Ok(RefundWrite::NoCharge);
    };
    if amount_cents != new.amount_cents {
        return Ok(RefundWrite::AmountMismatch {
            charge_amount_cents: amount_cents,
        });
    }
    if let Some(refund) = one(REFUND_OF_CHARGE, &charge_id)? {
        return Ok(RefundWrite::AlreadyRefunded(refund));
    }
    tx.execute(
        INSERT_REFUND,
        params![
            Uuid::new_v4().to_string(),
            new.scope,
            new.idempotency_key,
            charge_id,
            order_id,
            amount_cents,
            currency,
        ],
    )
    .map_err(sqlite_error)?;
    match one(REFUND, &new.idempotency_key)? {
        Some(refund) => Ok(RefundWrite::Created(refund)),
        None => Err(StoreError::Unavailable(
            "the refund just written is not there".into(),
        )),
    }
}

/// A row as SQLite stores it (ids as text).
struct RawRefund {
    id: String,
    charge_id: String,
    order_id: String,
    refund: Refund,
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<RawRefund> {
    Ok(RawRefund {
        id: row.get("id")?,
        charge_id: row.get("charge_id")?,
        order_id: row.get("order_id")?,
        refund: Refund {
            id: Uuid::nil(),
            idempotency_key: row.get("idempotency_key")?,
            charge_id: Uuid::nil(),
            order_id: Uuid::nil(),
            amount_cents: row.get("amount_cents")?,
            currency: row.get("currency")?,
            created_at: millis(row.get("created_at")?),
        },
    })
}

impl RawRefund {
    fn into_refund(self) -> Result<Refund, StoreError> {
        Ok(Refund {
            id: uuid(&self.id)?,
            charge_id: uuid(&self.charge_id)?,
            order_id: uuid(&self.order_id)?,
            ..self.refund
        })
    }
}
