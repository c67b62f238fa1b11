//! A purchase's local step on SQLite: reserve the stock (and price the
//! purchase) in the journal's transaction, or release it.
//!
//! A product's stock is split over stripes (`product_stock`, orders/4, as
//! on PostgreSQL). Every write here is serial (the transaction holds the
//! file's write lock), so a purchase takes from the stripe with the most,
//! or, when no one stripe has enough, from as many as it needs.

use idemkey::flow::{StepContext, StepError};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::db::reservation::{Reservation, reservation_of, stripe_of};

/// One stripe with enough (the fullest), priced in the same statement.
const TAKE_ONE: &str = "UPDATE product_stock SET stock = stock - ?2 \
     WHERE sku = ?1 AND stripe = (SELECT stripe FROM product_stock \
         WHERE sku = ?1 AND stock >= ?2 ORDER BY stock DESC LIMIT 1) \
     RETURNING (SELECT unit_price_cents FROM products WHERE sku = ?1), \
         (SELECT currency FROM products WHERE sku = ?1)";
const STRIPES: &str = "SELECT stripe, stock FROM product_stock WHERE sku = ?1 ORDER BY stripe";
const TAKE: &str = "UPDATE product_stock SET stock = stock - ?3 WHERE sku = ?1 AND stripe = ?2";
const PRICE: &str = "SELECT unit_price_cents, currency FROM products WHERE sku = ?1";
const INSERT: &str = "INSERT INTO reservations (id, account_id, sku, quantity, amount_cents, \
                      currency, state) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'reserved')";
const RELEASE: &str = "UPDATE reservations SET state = 'released', \
     released_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) \
     WHERE account_id = ?2 AND id = ?1 AND state = 'reserved' RETURNING sku, quantity";
/// Given back to the purchase's own stripe: the product's sum is what
/// counts, whichever stripes it was taken from.
const RESTOCK: &str = "UPDATE product_stock SET stock = stock + ?2 WHERE sku = ?1 AND stripe = ?3";

fn retry(err: rusqlite::Error) -> StepError {
    StepError::Retry(idemkey::store::sqlite::sqlite_error(err).to_string())
}

/// Takes `quantity` of `sku`: its price, or `None` when the stripes'
/// sum is short (nothing taken then).
fn take(conn: &Connection, sku: &str, quantity: i64) -> rusqlite::Result<Option<(i64, String)>> {
    let one = conn
        .prepare_cached(TAKE_ONE)?
        .query_row(params![sku, quantity], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if one.is_some() {
        return Ok(one);
    }
    let stripes: Vec<(i64, i64)> = conn
        .prepare_cached(STRIPES)?
        .query_map(params![sku], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if stripes.iter().map(|(_, stock)| stock).sum::<i64>() < quantity {
        return Ok(None);
    }
    let mut left = quantity;
    for (stripe, stock) in stripes {
        let taken = stock.min(left);
        if taken > 0 {
            conn.prepare_cached(TAKE)?
                .execute(params![sku, stripe, taken])?;
            left -= taken;
        }
    }
    conn.prepare_cached(PRICE)?
        .query_row(params![sku], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
}

/// Reserves the purchase's stock: refused for good when there is not
/// enough.
pub(crate) fn reserve(conn: &Connection, ctx: StepContext) -> Result<Value, StepError> {
    let Reservation { sku, quantity } = reservation_of(&ctx)?;
    let Some((unit, currency)) = take(conn, &sku, i64::from(quantity)).map_err(retry)? else {
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
            .and_then(|mut stmt| stmt.execute(params![sku, quantity, stripe_of(ctx.flow_id)]))
            .map_err(retry)?;
    }
    Ok(Value::Null)
}
