//! A stored response as every store reads it back: one function, one rule.
//! A row without a status holds no response; a status outside HTTP's range
//! or headers that are not the JSON [`StoredResponse::headers_json`] wrote
//! are [`StoreError::Corrupt`], never replaced by a default (a replay must
//! send what was stored, or nothing).

use crate::error::StoreError;
use crate::idempotency::StoredResponse;

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
