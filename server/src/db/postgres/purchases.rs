//! A purchase's local step on PostgreSQL: reserve the stock (and price the
//! purchase) in the journal's transaction, or release it.
//!
//! A product's stock is split over stripes (`product_stock`, orders/4): a
//! purchase takes its quantity from one stripe with enough that no other
//! transaction holds (`SKIP LOCKED`), so purchases of one product do not
//! wait for each other's commits. When no such stripe is free, it locks
//! every stripe of the product in order (waiting, never skipping) and
//! takes from as many as it needs: refused only when their sum is short.

use idemkey::flow::{StepContext, StepError};
use idemkey::store::postgres::PgStepFuture;
use idemkey::store::postgres::{execute_in, query_in};
use serde_json::json;
use tokio_postgres::Transaction;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::db::reservation::{Reservation, reservation_of, stripe_of};

/// The fast path: one free stripe with enough, tried from the purchase's
/// own stripe on (`$5`), so concurrent purchases start apart.
const RESERVE_ONE: &str = "WITH picked AS (
        SELECT stripe FROM product_stock
        WHERE sku = $3::text AND stock >= $4::int4
        ORDER BY (stripe + $5::int4) % 32
        LIMIT 1
        FOR UPDATE SKIP LOCKED),
    taken AS (
        UPDATE product_stock s SET stock = s.stock - $4::int4
        FROM picked
        WHERE s.sku = $3::text AND s.stripe = picked.stripe AND s.stock >= $4::int4
        RETURNING s.sku)
    INSERT INTO reservations (id, account_id, sku, quantity, amount_cents, currency, state)
    SELECT $1::uuid, $2::uuid, $3::text, $4::int4, p.unit_price_cents * $4::int4, p.currency,
        'reserved'
    FROM taken JOIN products p ON p.sku = taken.sku
    RETURNING amount_cents, currency";
/// The exact path: every stripe locked in order (so two of these never
/// deadlock), read as committed, and the quantity taken from the first
/// ones; nothing taken when their sum is short.
const RESERVE_ACROSS: &str = "WITH locked AS MATERIALIZED (
        SELECT stripe, stock FROM product_stock
        WHERE sku = $3::text ORDER BY stripe FOR UPDATE),
    plan AS (
        SELECT stripe,
            least(stock, greatest($4::int4 - (sum(stock) OVER (ORDER BY stripe) - stock), 0))
                ::int4 AS take,
            sum(stock) OVER () AS total
        FROM locked),
    taken AS (
        UPDATE product_stock s SET stock = s.stock - plan.take
        FROM plan
        WHERE plan.total >= $4::int4 AND plan.take > 0
            AND s.sku = $3::text AND s.stripe = plan.stripe
        RETURNING plan.take)
    INSERT INTO reservations (id, account_id, sku, quantity, amount_cents, currency, state)
    SELECT $1::uuid, $2::uuid, $3::text, $4::int4, p.unit_price_cents * $4::int4, p.currency,
        'reserved'
    FROM products p
    WHERE p.sku = $3::text AND (SELECT sum(take) FROM taken) = $4::int4
    RETURNING amount_cents, currency";
/// Given back to the purchase's own stripe: the product's sum is what
/// counts, whichever stripes it was taken from.
const RELEASE: &str = "WITH released AS (
        UPDATE reservations SET state = 'released', released_at = statement_timestamp()
        WHERE account_id = $2::uuid AND id = $1::uuid AND state = 'reserved'
        RETURNING sku, quantity)
    UPDATE product_stock s SET stock = s.stock + r.quantity
    FROM released r WHERE s.sku = r.sku AND s.stripe = $3::int2";

fn retry(err: tokio_postgres::Error) -> StepError {
    StepError::Retry(idemkey::store::postgres::db_error(err).to_string())
}

/// Reserves the purchase's stock: refused for good when there is not
/// enough.
pub(crate) fn reserve<'t>(tx: &'t Transaction<'_>, ctx: StepContext) -> PgStepFuture<'t> {
    Box::pin(async move {
        let Reservation { sku, quantity } = reservation_of(&ctx)?;
        let account = Uuid::try_parse(&ctx.scope).map_err(|e| StepError::Retry(e.to_string()))?;
        let quantity = i32::from(quantity);
        let stripe = i32::from(stripe_of(ctx.flow_id));
        let mut rows = query_in(
            tx,
            RESERVE_ONE,
            &[
                (&ctx.flow_id, Type::UUID),
                (&account, Type::UUID),
                (&sku, Type::TEXT),
                (&quantity, Type::INT4),
                (&stripe, Type::INT4),
            ],
        )
        .await
        .map_err(retry)?;
        if rows.is_empty() {
            rows = query_in(
                tx,
                RESERVE_ACROSS,
                &[
                    (&ctx.flow_id, Type::UUID),
                    (&account, Type::UUID),
                    (&sku, Type::TEXT),
                    (&quantity, Type::INT4),
                ],
            )
            .await
            .map_err(retry)?;
        }
        let Some(row) = rows.first() else {
            return Err(StepError::Refused(format!("out of stock: {sku}")));
        };
        let amount: i64 = row.get(0);
        let currency: String = row.get(1);
        Ok(
            json!({ "sku": sku, "quantity": quantity, "amount_cents": amount, "currency": currency }),
        )
    })
}

/// Releases the purchase's reservation (once: a released one stays so).
pub(crate) fn release<'t>(tx: &'t Transaction<'_>, ctx: StepContext) -> PgStepFuture<'t> {
    Box::pin(async move {
        let account = Uuid::try_parse(&ctx.scope).map_err(|e| StepError::Retry(e.to_string()))?;
        let stripe = i16::from(stripe_of(ctx.flow_id));
        execute_in(
            tx,
            RELEASE,
            &[
                (&ctx.flow_id, Type::UUID),
                (&account, Type::UUID),
                (&stripe, Type::INT2),
            ],
        )
        .await
        .map_err(retry)?;
        Ok(serde_json::Value::Null)
    })
}
