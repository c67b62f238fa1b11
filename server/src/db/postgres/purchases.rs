//! A purchase's local step on PostgreSQL: reserve the stock (and price the
//! purchase) in the journal's transaction, or release it.

use idemkey::flow::{StepContext, StepError};
use idemkey::store::postgres::PgStepFuture;
use idemkey::store::postgres::{execute_in, query_in};
use serde_json::json;
use tokio_postgres::Transaction;
use tokio_postgres::types::Type;
use uuid::Uuid;

use crate::db::reservation::{Reservation, reservation_of};

const RESERVE: &str = "WITH taken AS (
        UPDATE products SET stock = stock - $4::int4
        WHERE sku = $3::text AND stock >= $4::int4
        RETURNING unit_price_cents, currency)
    INSERT INTO reservations (id, account_id, sku, quantity, amount_cents, currency, state)
    SELECT $1::uuid, $2::uuid, $3::text, $4::int4, unit_price_cents * $4::int4, currency, 'reserved'
    FROM taken
    RETURNING amount_cents, currency";
const RELEASE: &str = "WITH released AS (
        UPDATE reservations SET state = 'released', released_at = statement_timestamp()
        WHERE account_id = $2::uuid AND id = $1::uuid AND state = 'reserved'
        RETURNING sku, quantity)
    UPDATE products p SET stock = p.stock + r.quantity
    FROM released r WHERE p.sku = r.sku";

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
        let rows = query_in(
            tx,
            RESERVE,
            &[
                (&ctx.flow_id, Type::UUID),
                (&account, Type::UUID),
                (&sku, Type::TEXT),
                (&quantity, Type::INT4),
            ],
        )
        .await
        .map_err(retry)?;
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
        execute_in(
            tx,
            RELEASE,
            &[(&ctx.flow_id, Type::UUID), (&account, Type::UUID)],
        )
        .await
        .map_err(retry)?;
        Ok(serde_json::Value::Null)
    })
}
