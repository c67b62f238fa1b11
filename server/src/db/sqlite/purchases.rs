//! A purchase's local step on SQLite: reserve the stock (and price the
//! purchase) in the journal's transaction, or release it.

use idemkey::flow::{StepContext, StepError};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::db::reservation::{Reservation, reservation_of};

const TAKE: &str = "UPDATE products SET stock = stock - ?2 WHERE sku = ?1 AND stock >= ?2 \
                    RETURNING unit_price_cents, currency";
const INSERT: &str = "INSERT INTO reservations (id, account_id, sku, quantity, amount_cents, \
                      currency, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'reserved')";
const RELEASE: &str = "UPDATE reservations SET state = 'released', \
     released_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) \
     WHERE account_id = ?2 AND id = ?1 AND state = 'reserved' RETURNING sku, quantity";
const RESTOCK: &str = "UPDATE products SET stock = stock + ?2 WHERE sku = ?1";

fn retry(err: rusqlite::Error) -> StepError {
    StepError::Retry(idemkey::store::sqlite::sqlite_error(err).to_string())
}

/// Reserves the purchase's stock: refused for good when there is not
/// enough.
pub(crate) fn reserve(conn: &Connection, ctx: StepContext) -> Result<Value, StepError> {
    let Reservation { sku, quantity } = reservation_of(&ctx)?;
    let taken: Option<(i64, String)> = conn
        .prepare_cached(TAKE)
        .and_then(|mut stmt| {
            stmt.query_row(params![sku, quantity], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(retry)?;
    let Some((unit, currency)) = taken else {
        return Err(StepError::Refused(format!("out of stock: {sku}")));
    };
    let amount = unit * i64::from(quantity);
    conn.prepare_cached(INSERT)
        .and_then(|mut stmt| {
            stmt.execute(params![
                ctx.flow_id.to_string(),
                ctx.scope,
                sku,
                quantity,
                amount,
                currency
            ])
        })
        .map_err(retry)?;
    Ok(json!({ "sku": sku, "quantity": quantity, "amount_cents": amount, "currency": currency }))
}

/// Releases the purchase's reservation (once: a released one stays so).
pub(crate) fn release(conn: &Connection, ctx: StepContext) -> Result<Value, StepError> {
    let released: Option<(String, i64)> = conn
        .prepare_cached(RELEASE)
        .and_then(|mut stmt| {
            stmt.query_row(params![ctx.flow_id.to_string(), ctx.scope], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
        })
        .map_err(retry)?;
    if let Some((sku, quantity)) = released {
        conn.prepare_cached(RESTOCK)
            .and_then(|mut stmt| stmt.execute(params![sku, quantity]))
            .map_err(retry)?;
    }
    Ok(Value::Null)
}
