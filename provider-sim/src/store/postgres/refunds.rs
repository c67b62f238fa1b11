//! Refunds on PostgreSQL. Unlike a charge's, a refund's write is a few
//! statements outside a transaction: the key's refund, the charge, the
//! insert, and on a conflict what it conflicted with. Each statement sees
//! what committed before it began (READ COMMITTED), and nothing read is
//! ever updated or deleted, so the reads stay true; the unique keys decide
//! every race.

use tokio_postgres::Row;
use tokio_postgres::types::Type;
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::duration::from_system_time;
use idemkey::store::postgres::db_error;

use super::{INSERT_TRIES, Statements, charge_from_row};
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
        let client = self.0.client().await?;
        let by_key = async || -> Result<Option<Refund>, StoreError> {
            let rows = client
                .query_typed(
                    REFUND,
                    &[(&new.scope, Type::TEXT), (&new.idempotency_key, Type::TEXT)],
                )
                .await
                .map_err(db_error)?;
            rows.first().map(refund_from_row).transpose()
        };
        if let Some(refund) = by_key().await? {
            return Ok(RefundWrite::Existing(refund));
        }
        let rows = client
            .query_typed(
                CHARGE_BY_ID,
                &[(&new.scope, Type::TEXT), (&new.charge_id, Type::UUID)],
            )
            .await
            .map_err(db_error)?;
        let Some(charge) = rows.first().map(charge_from_row).transpose()? else {
            return Ok(RefundWrite::NoCharge);
        };
        if charge.amount_cents != new.amount_cents {
            return Ok(RefundWrite::AmountMismatch {
                charge_amount_cents: charge.amount_cents,
            });
        }
        let id = Uuid::new_v4();
        for _ in 0..INSERT_TRIES {
            let rows = client
                .query_typed(
                    INSERT_REFUND,
                    &[
                        (&id, Type::UUID),
                        (&new.scope, Type::TEXT),
                        (&new.idempotency_key, Type::TEXT),
                        (&charge.id, Type::UUID),
                        (&charge.order_id, Type::UUID),
                        (&charge.amount_cents, Type::INT8),
                        (&charge.currency, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?;
            if let Some(row) = rows.first() {
                return Ok(RefundWrite::Created(refund_from_row(row)?));
            }
            // A conflict, with a row committed before this statement ends:
            // the key's refund, or the charge's under another key.
            if let Some(refund) = by_key().await? {
                return Ok(RefundWrite::Existing(refund));
            }
            let rows = client
                .query_typed(
                    REFUND_OF_CHARGE,
                    &[(&new.scope, Type::TEXT), (&charge.id, Type::UUID)],
                )
                .await
                .map_err(db_error)?;
            if let Some(row) = rows.first() {
                return Ok(RefundWrite::AlreadyRefunded(refund_from_row(row)?));
            }
        }
        Err(StoreError::Unavailable(
            "the refund's key or charge changed under every try".into(),
        ))
    }

    pub(in crate::store) async fn refund(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Refund>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(REFUND, &[(&scope, Type::TEXT), (&key, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.first().map(refund_from_row).transpose()
    }

    pub(in crate::store) async fn refunds(&self, scope: &str) -> Result<Vec<Refund>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(REFUNDS, &[(&scope, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.iter().map(refund_from_row).collect()
    }
}

fn refund_from_row(row: &Row) -> Result<Refund, StoreError> {
    Ok(Refund {
        id: row.try_get("id").map_err(db_error)?,
        idempotency_key: row.try_get("idempotency_key").map_err(db_error)?,
        charge_id: row.try_get("charge_id").map_err(db_error)?,
        order_id: row.try_get("order_id").map_err(db_error)?,
        amount_cents: row.try_get("amount_cents").map_err(db_error)?,
        currency: row.try_get("currency").map_err(db_error)?,
        created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
    })
}
