//! The payment provider's charges, confirmations, refunds and request log
//! on PostgreSQL (see [`super::Charge`]). Unnamed statements, one round
//! trip each.

use tokio_postgres::Row;
use tokio_postgres::types::Type;
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::duration::from_system_time;
use idemkey::store::postgres::PgDb;
use idemkey::store::postgres::db_error;

use super::charge::{Charge, ChargeWrite, Endpoint, NewCharge, ProviderRequest, RequestKind};

mod confirmations;
mod refunds;

/// The simulator's statements over one store.
pub(super) struct Statements<'a>(pub(super) &'a PgDb);

const INSERT_CHARGE: &str = include_str!("sql/insert_charge.sql");
const CHARGE: &str = include_str!("sql/charge.sql");
const CHARGES: &str = include_str!("sql/charges.sql");
const LOG_REQUEST: &str = include_str!("sql/log_request.sql");
const REQUESTS: &str = include_str!("sql/requests.sql");

/// How often an insert runs again when a concurrent insert of the same key
/// committed after its snapshot (so it neither inserted nor saw the row).
const INSERT_TRIES: usize = 3;

impl Statements<'_> {
    pub(super) async fn insert_charge(
        &self,
        charge: &NewCharge,
    ) -> Result<ChargeWrite, StoreError> {
        let client = self.0.client().await?;
        let id = Uuid::new_v4();
        for _ in 0..INSERT_TRIES {
            let rows = client
                .query_typed(
                    INSERT_CHARGE,
                    &[
                        (&id, Type::UUID),
                        (&charge.scope, Type::TEXT),
                        (&charge.idempotency_key, Type::TEXT),
                        (&charge.order_id, Type::UUID),
                        (&charge.amount_cents, Type::INT8),
                        (&charge.currency, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?;
            if let Some(row) = rows.first() {
                let created: bool = row.try_get("created").map_err(db_error)?;
                let stored = charge_from_row(row)?;
                return Ok(if created {
                    ChargeWrite::Created(stored)
                } else {
                    ChargeWrite::Existing(stored)
                });
            }
        }
        Err(StoreError::Unavailable(
            "the charge's key changed under every try".into(),
        ))
    }

    pub(super) async fn charge(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Charge>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(CHARGE, &[(&scope, Type::TEXT), (&key, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.first().map(charge_from_row).transpose()
    }

    pub(super) async fn charges(&self, scope: &str) -> Result<Vec<Charge>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(CHARGES, &[(&scope, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.iter().map(charge_from_row).collect()
    }

    pub(super) async fn log_provider_request(
        &self,
        scope: &str,
        effect: Endpoint,
        kind: RequestKind,
        key: &str,
        order_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        let client = self.0.client().await?;
        client
            .query_typed(
                LOG_REQUEST,
                &[
                    (&scope, Type::TEXT),
                    (&kind.as_str(), Type::TEXT),
                    (&key, Type::TEXT),
                    (&order_id, Type::UUID),
                    (&effect.as_str(), Type::TEXT),
                ],
            )
            .await
            .map(drop)
            .map_err(db_error)
    }

    pub(super) async fn provider_requests(
        &self,
        scope: &str,
        effect: Option<Endpoint>,
    ) -> Result<Vec<ProviderRequest>, StoreError> {
        let client = self.0.client().await?;
        let effect = effect.map(Endpoint::as_str);
        let rows = client
            .query_typed(REQUESTS, &[(&scope, Type::TEXT), (&effect, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                Ok(ProviderRequest {
                    seq: row.try_get("seq").map_err(db_error)?,
                    kind: row.try_get("kind").map_err(db_error)?,
                    effect: row.try_get("effect").map_err(db_error)?,
                    idempotency_key: row.try_get("idempotency_key").map_err(db_error)?,
                    order_id: row.try_get("order_id").map_err(db_error)?,
                    created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
                })
            })
            .collect()
    }
}

fn charge_from_row(row: &Row) -> Result<Charge, StoreError> {
    Ok(Charge {
        id: row.try_get("id").map_err(db_error)?,
        idempotency_key: row.try_get("idempotency_key").map_err(db_error)?,
        order_id: row.try_get("order_id").map_err(db_error)?,
        amount_cents: row.try_get("amount_cents").map_err(db_error)?,
        currency: row.try_get("currency").map_err(db_error)?,
        created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
    })
}
