//! A purchase's local step on PostgreSQL: reserve the stock (and price the
//! purchase) in the journal's transaction, or release it.

use idemkey::flow::{PgStepFuture, StepContext, StepError};
use serde_json::json;
use tokio_postgres::Transaction;
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
        let row = tx
            .query_opt(
                RESERVE,
                &[&ctx.flow_id, &account, &sku, &i32::from(quantity)],
            )
            .await
            .map_err(retry)?;
        let Some(row) = row else {
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
        tx.execute(RELEASE, &[&ctx.flow_id, &account])
            .await
            .map_err(retry)?;
        Ok(serde_json::Value::Null)
    })
}
