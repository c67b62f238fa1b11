//! Confirmations on SQLite: the charges' statements, for the mail sink.

use rusqlite::{OptionalExtension as _, Row, params};
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::store::sqlite::{immediate, sqlite_error};

use super::{Statements, millis, uuid};
use crate::store::confirmation::{Confirmation, ConfirmationWrite, NewConfirmation};

const INSERT_CONFIRMATION: &str = include_str!("sql/insert_confirmation.sql");
const CONFIRMATION: &str = include_str!("sql/confirmation.sql");
const CONFIRMATIONS: &str = include_str!("sql/confirmations.sql");

impl Statements<'_> {
    pub(in crate::store) async fn insert_confirmation(
        &self,
        new: &NewConfirmation,
    ) -> Result<ConfirmationWrite, StoreError> {
        let new = new.clone();
        self.0
            .with_conn(move |conn| {
                let tx = immediate(conn)?;
                let inserted = tx
                    .execute(
                        INSERT_CONFIRMATION,
                        params![
                            Uuid::new_v4().to_string(),
                            new.scope,
                            new.idempotency_key,
                            new.order_id.to_string(),
                            new.recipient,
                            new.text,
                        ],
                    )
                    .map_err(sqlite_error)?;
                let stored = tx
                    .query_row(
                        CONFIRMATION,
                        params![new.scope, new.idempotency_key],
                        read_row,
                    )
                    .map_err(sqlite_error)?;
                tx.commit().map_err(sqlite_error)?;
                let stored = stored.into_confirmation()?;
                Ok(if inserted == 1 {
                    ConfirmationWrite::Created(stored)
                } else {
                    ConfirmationWrite::Existing(stored)
                })
            })
            .await
    }

    pub(in crate::store) async fn confirmation(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Confirmation>, StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.0
            .with_reader(move |conn| {
                conn.query_row(CONFIRMATION, params![scope, key], read_row)
                    .optional()
                    .map_err(sqlite_error)?
                    .map(RawConfirmation::into_confirmation)
                    .transpose()
            })
            .await
    }

    pub(in crate::store) async fn confirmations(
        &self,
        scope: &str,
    ) -> Result<Vec<Confirmation>, StoreError> {
        let scope = scope.to_owned();
        self.0
            .with_reader(move |conn| {
                let mut stmt = conn.prepare_cached(CONFIRMATIONS).map_err(sqlite_error)?;
                let rows = stmt
                    .query_map([scope], read_row)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(sqlite_error)?;
                rows.into_iter()
                    .map(RawConfirmation::into_confirmation)
                    .collect()
            })
            .await
    }
}

/// A row as SQLite stores it (ids as text).
struct RawConfirmation {
    id: String,
    order_id: String,
    confirmation: Confirmation,
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<RawConfirmation> {
    Ok(RawConfirmation {
        id: row.get("id")?,
        order_id: row.get("order_id")?,
        confirmation: Confirmation {
            id: Uuid::nil(),
            idempotency_key: row.get("idempotency_key")?,
            order_id: Uuid::nil(),
            recipient: row.get("recipient")?,
            text: row.get("message")?,
            created_at: millis(row.get("created_at")?),
        },
    })
}

impl RawConfirmation {
    fn into_confirmation(self) -> Result<Confirmation, StoreError> {
        Ok(Confirmation {
            id: uuid(&self.id)?,
            order_id: uuid(&self.order_id)?,
            ..self.confirmation
        })
    }
}
