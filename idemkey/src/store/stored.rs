//! A stored record and response as every store reads them back: one
//! decoder each, one rule. A row without a status holds no response; a
//! status outside HTTP's range, headers that are not the JSON
//! [`StoredResponse::headers_json`] wrote, or a record column of the wrong
//! shape are [`StoreError::Corrupt`], never replaced by a default (a replay
//! must send what was stored, or nothing).

use idemkey_core::{Fingerprint, UnixMillis};
use uuid::Uuid;

use crate::error::StoreError;
use crate::idempotency::{ClaimToken, Read, Record, StoredResponse, stored_from_columns};

/// A row that selects the store's clock as `now` and the records table's
/// columns by name (as the SQL backends' `read.sql` does), in the types its
/// driver reads them as. A backend implements this for its row type and
/// decodes with [`read_record`]; a column it cannot read is `Err` (made
/// with [`malformed`]), a NULL is `Ok(None)`.
#[allow(
    dead_code,
    reason = "only the SQL backends read records from rows; a build with Redis alone has none"
)]
pub(crate) trait RecordRow {
    /// A timestamp column, in the store's milliseconds.
    fn time(&self, column: &str) -> Result<Option<UnixMillis>, StoreError>;
    /// A bytes column.
    fn bytes(&self, column: &str) -> Result<Option<Vec<u8>>, StoreError>;
    /// A text column.
    fn text(&self, column: &str) -> Result<Option<String>, StoreError>;
    /// An integer column.
    fn int(&self, column: &str) -> Result<Option<i64>, StoreError>;
    /// A UUID column.
    fn uuid(&self, column: &str) -> Result<Option<Uuid>, StoreError>;
}

/// A record row's column that does not hold what the schema keeps there.
#[allow(
    dead_code,
    reason = "only the SQL backends read records from rows; a build with Redis alone has none"
)]
pub(crate) fn malformed(what: &str) -> StoreError {
    StoreError::Corrupt(format!("malformed record row: {what}"))
}

/// The store's clock and the record (if any) from a [`RecordRow`].
#[allow(
    dead_code,
    reason = "only the SQL backends read records from rows; a build with Redis alone has none"
)]
pub(crate) fn read_record(row: &impl RecordRow) -> Result<Read, StoreError> {
    let now = row.time("now")?.ok_or_else(|| malformed("now"))?;
    let Some(fingerprint) = row.bytes("fingerprint")? else {
        return Ok(Read { now, record: None });
    };
    let fingerprint = <[u8; 32]>::try_from(fingerprint.as_slice())
        .map(Fingerprint::from_bytes)
        .map_err(|_| malformed("fingerprint length"))?;
    let token = row.uuid("claim")?.ok_or_else(|| malformed("claim"))?;
    let state = row.text("status")?.ok_or_else(|| malformed("status"))?;
    let (lease_until, replay_until) = (row.time("lease_until")?, row.time("replay_until")?);
    let created_at = row.time("created_at")?.unwrap_or(now);
    let response = decode_response(
        row.int("response_status")?,
        row.text("response_headers")?.as_deref(),
        row.bytes("response_body")?,
    )?;
    Ok(Read {
        now,
        record: Some(Record {
            stored: stored_from_columns(&state, fingerprint, lease_until, replay_until),
            token: ClaimToken(token),
            response,
            resource_id: row.text("resource_id")?,
            created_at,
            replay_until,
        }),
    })
}

/// The response stored in a record's or an execution's columns: its
/// status (`None`: no response stored), its headers' JSON (`None`: none
/// stored) and its body (`None`: not stored).
pub fn decode_response(
    status: Option<i64>,
    headers: Option<&str>,
    body: Option<Vec<u8>>,
) -> Result<Option<StoredResponse>, StoreError> {
    let Some(status) = status else {
        return Ok(None);
    };
    let status = u16::try_from(status)
        .ok()
        .filter(|s| (100..=999).contains(s))
        .ok_or_else(|| StoreError::Corrupt("malformed stored response: status".into()))?;
    let headers = match headers {
        Some(json) => serde_json::from_str::<Vec<(String, String)>>(json)
            .map_err(|_| StoreError::Corrupt("malformed stored response: headers".into()))?,
        None => Vec::new(),
    };
    Ok(Some(StoredResponse {
        status,
        headers,
        body: body.map(Into::into),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_response_round_trips() {
        let r = StoredResponse::new(201, "{}").with_header("location", "/orders/x");
        let back = decode_response(Some(201), Some(&r.headers_json()), Some(b"{}".to_vec()));
        assert_eq!(back.expect("decoded"), Some(r));
    }

    #[test]
    fn no_status_is_no_response() {
        assert_eq!(decode_response(None, None, None).expect("decoded"), None);
    }

    #[test]
    fn malformed_headers_are_corrupt_not_empty() {
        for headers in ["not json", "{\"a\":1}", "[[\"a\"]]", "[[1,2]]"] {
            let read = decode_response(Some(200), Some(headers), None);
            assert!(
                matches!(read, Err(StoreError::Corrupt(_))),
                "{headers}: {read:?}"
            );
        }
    }

    #[test]
    fn a_status_outside_http_is_corrupt() {
        for status in [-1, 0, 99, 1000, 70_000, i64::MAX] {
            let read = decode_response(Some(status), Some("[]"), None);
            assert!(
                matches!(read, Err(StoreError::Corrupt(_))),
                "{status}: {read:?}"
            );
        }
    }
}
