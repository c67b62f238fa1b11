//! Confirmations on PostgreSQL: the charges' statements, for the mail sink.

use tokio_postgres::Row;
use tokio_postgres::types::Type;
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::duration::from_system_time;
use idemkey::store::postgres::db_error;

use super::{INSERT_TRIES, Statements};
use crate::store::confirmation::{Confirmation, ConfirmationWrite, NewConfirmation};

const INSERT_CONFIRMATION: &str = include_str!("sql/insert_confirmation.sql");
const CONFIRMATION: &str = include_str!("sql/confirmation.sql");
const CONFIRMATIONS: &str = include_str!("sql/confirmations.sql");

impl Statements<'_> {
    pub(in crate::store) async fn insert_confirmation(
        &self,
        new: &NewConfirmation,
    ) -> Result<ConfirmationWrite, StoreError> {
        let client = self.0.client().await?;
        let id = Uuid::new_v4();
        for _ in 0..INSERT_TRIES {
            let rows = client
                .query_typed(
                    INSERT_CONFIRMATION,
                    &[
                        (&id, Type::UUID),
                        (&new.scope, Type::TEXT),
                        (&new.idempotency_key, Type::TEXT),
                        (&new.order_id, Type::UUID),
                        (&new.recipient, Type::TEXT),
                        (&new.text, Type::TEXT),
                    ],
                )
                .await
                .map_err(db_error)?;
            if let Some(row) = rows.first() {
                let created: bool = row.try_get("created").map_err(db_error)?;
                let stored = confirmation_from_row(row)?;
                return Ok(if created {
                    ConfirmationWrite::Created(stored)
                } else {
                    ConfirmationWrite::Existing(stored)
                });
            }
        }
        Err(StoreError::Unavailable(
            "the confirmation's key changed under every try".into(),
        ))
    }

    pub(in crate::store) async fn confirmation(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Confirmation>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(CONFIRMATION, &[(&scope, Type::TEXT), (&key, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.first().map(confirmation_from_row).transpose()
    }

    pub(in crate::store) async fn confirmations(
        &self,
        scope: &str,
    ) -> Result<Vec<Confirmation>, StoreError> {
        let client = self.0.client().await?;
        let rows = client
            .query_typed(CONFIRMATIONS, &[(&scope, Type::TEXT)])
            .await
            .map_err(db_error)?;
        rows.iter().map(confirmation_from_row).collect()
    }
}

fn confirmation_from_row(row: &Row) -> Result<Confirmation, StoreError> {
    Ok(Confirmation {
        id: row.try_get("id").map_err(db_error)?,
        idempotency_key: row.try_get("idempotency_key").map_err(db_error)?,
        order_id: row.try_get("order_id").map_err(db_error)?,
        recipient: row.try_get("recipient").map_err(db_error)?,
        text: row.try_get("message").map_err(db_error)?,
        created_at: from_system_time(row.try_get("created_at").map_err(db_error)?),
    })
}
