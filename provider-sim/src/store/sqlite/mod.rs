//! The payment provider's charges, confirmations, refunds and request log
//! on SQLite (see [`super::Charge`]).

use idemkey_core::UnixMillis;
use rusqlite::{OptionalExtension as _, Row, params};
use uuid::Uuid;

use idemkey::StoreError;
use idemkey::store::sqlite::SqliteDb;
use idemkey::store::sqlite::{immediate, sqlite_error};

use super::charge::{Charge, ChargeWrite, Endpoint, NewCharge, ProviderRequest, RequestKind};

mod confirmations;
mod refunds;

/// The simulator's statements over one store.
pub(super) struct Statements<'a>(pub(super) &'a SqliteDb);

const INSERT_CHARGE: &str = include_str!("sql/insert_charge.sql");
const CHARGE: &str = include_str!("sql/charge.sql");
const CHARGES: &str = include_str!("sql/charges.sql");
const LOG_REQUEST: &str = include_str!("sql/log_request.sql");
const REQUESTS: &str = include_str!("sql/requests.sql");

impl Statements<'_> {
    pub(super) async fn insert_charge(
        &self,
        charge: &NewCharge,
    ) -> Result<ChargeWrite, StoreError> {
        let charge = charge.clone();
        self.0
            .with_conn(move |conn| {
                let tx = immediate(conn)?;
                let inserted = tx
                    .execute(
                        INSERT_CHARGE,
                        params![
                            Uuid::new_v4().to_string(),
                            charge.scope,
                            charge.idempotency_key,
                            charge.order_id.to_string(),
                            charge.amount_cents,
                            charge.currency,
                        ],
                    )
                    .map_err(sqlite_error)?;
                let stored = tx
                    .query_row(
                        CHARGE,
                        params![charge.scope, charge.idempotency_key],
                        read_row,
                    )
                    .map_err(sqlite_error)?;
                tx.commit().map_err(sqlite_error)?;
                let stored = stored.into_charge()?;
                Ok(if inserted == 1 {
                    ChargeWrite::Created(stored)
                } else {
                    ChargeWrite::Existing(stored)
                })
            })
            .await
    }

    pub(super) async fn charge(
        &self,
        scope: &str,
        key: &str,
    ) -> Result<Option<Charge>, StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        self.0
            .with_reader(move |conn| {
                conn.query_row(CHARGE, params![scope, key], read_row)
                    .optional()
                    .map_err(sqlite_error)?
                    .map(RawCharge::into_charge)
                    .transpose()
            })
            .await
    }

    pub(super) async fn charges(&self, scope: &str) -> Result<Vec<Charge>, StoreError> {
        let scope = scope.to_owned();
        self.0
            .with_reader(move |conn| {
                let mut stmt = conn.prepare_cached(CHARGES).map_err(sqlite_error)?;
                let rows = stmt
                    .query_map([scope], read_row)
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(sqlite_error)?;
                rows.into_iter().map(RawCharge::into_charge).collect()
            })
            .await
    }

    pub(super) async fn log_provider_request(
        &self,
        scope: &str,
        effect: Endpoint,
        kind: RequestKind,
        key: &str,
        order_id: Option<Uuid>,
    ) -> Result<(), StoreError> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        let order_id = order_id.map(|id| id.to_string());
        self.0
            .with_conn(move |conn| {
                conn.prepare_cached(LOG_REQUEST)
                    .and_then(|mut stmt| {
                        stmt.execute(params![
                            scope,
                            kind.as_str(),
                            key,
                            order_id,
                            effect.as_str()
                        ])
                    })
                    .map(drop)
                    .map_err(sqlite_error)
            })
            .await
    }

    pub(super) async fn provider_requests(
        &self,
        scope: &str,
        effect: Option<Endpoint>,
    ) -> Result<Vec<ProviderRequest>, StoreError> {
        let scope = scope.to_owned();
        let effect = effect.map(Endpoint::as_str);
        self.0
            .with_reader(move |conn| {
                let mut stmt = conn.prepare_cached(REQUESTS).map_err(sqlite_error)?;
                let rows = stmt
                    .query_map(params![scope, effect], |row| {
                        Ok((
                            row.get::<_, i64>("seq")?,
                            row.get::<_, String>("kind")?,
                            row.get::<_, String>("effect")?,
                            row.get::<_, String>("idempotency_key")?,
                            row.get::<_, Option<String>>("order_id")?,
                            row.get::<_, i64>("created_at")?,
                        ))
                    })
                    .and_then(Iterator::collect::<Result<Vec<_>, _>>)
                    .map_err(sqlite_error)?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(seq, kind, effect, idempotency_key, order_id, created_at)| {
                            ProviderRequest {
                                seq,
                                kind,
                                effect,
                                idempotency_key,
                                order_id: order_id.and_then(|id| Uuid::try_parse(&id).ok()),
                                created_at: millis(created_at),
                            }
                        },
                    )
                    .collect())
            })
            .await
    }
}

/// A row as SQLite stores it (ids as text).
struct RawCharge {
    id: String,
    order_id: String,
    charge: Charge,
}

fn read_row(row: &Row<'_>) -> rusqlite::Result<RawCharge> {
    Ok(RawCharge {
        id: row.get("id")?,
        order_id: row.get("order_id")?,
        charge: Charge {
            id: Uuid::nil(),
            idempotency_key: row.get("idempotency_key")?,
            order_id: Uuid::nil(),
            amount_cents: row.get("amount_cents")?,
            currency: row.get("currency")?,
            created_at: millis(row.get("created_at")?),
        },
    })
}

impl RawCharge {
    fn into_charge(self) -> Result<Charge, StoreError> {
        Ok(Charge {
            id: uuid(&self.id)?,
            order_id: uuid(&self.order_id)?,
            ..self.charge
        })
    }
}

/// An id stored as text.
fn uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::try_parse(text).map_err(|_| StoreError::Unavailable("an id is not a UUID".into()))
}

/// A time stored as Unix milliseconds.
fn millis(stored: i64) -> UnixMillis {
    UnixMillis(u64::try_from(stored).unwrap_or(0))
}
