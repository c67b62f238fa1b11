//! `GET /operations/{key}`: what became of a key, for the caller's account.
//!
//! It is where a client goes after a 410, or after it gave up retrying: it
//! answers during and after the replay window, for as long as the key's
//! tombstone is kept, and never executes anything.

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use idemkey_core::{
    FieldError, IdempotencyKey, KeyError, KeyProfile, LookupState, MAX_KEY_LEN, ORDER_OPERATION,
    OperationId, PURCHASE_OPERATION, Problem, ProblemCode,
};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde::Serialize;

use super::authed::authed;
use crate::AppState;
use crate::auth::bearer_hash;
use idemkey::duration::rfc3339;
use idemkey::problems::ApiError;
use idemkey::problems::json_response;

/// Characters escaped in a path segment (RFC 3986 `pchar` keeps the rest).
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// Where a key's operation can be looked up: `/operations/{key}`, the key's
/// characters percent-encoded.
pub fn lookup_path(key: &IdempotencyKey) -> String {
    format!("/operations/{}", utf8_percent_encode(key.as_str(), SEGMENT))
}

/// Reads the key of a lookup path under the server's profile. The segment
/// holds the key's characters (`/operations/abc-123`); a segment that starts
/// with `"` is read as the header's field value itself.
fn key_from_segment(
    segment: &str,
    profile: idemkey_core::KeyProfile,
) -> Result<IdempotencyKey, KeyError> {
    if segment.starts_with('"') {
        return IdempotencyKey::parse(segment.as_bytes(), profile);
    }
    // Quote the characters as an sf-string so every profile reads exactly
    // them; the core still rules on what it accepts.
    let mut quoted = String::with_capacity(segment.len() + 2);
    quoted.push('"');
    for ch in segment.chars() {
        if ch == '"' || ch == '\\' {
            quoted.push('\\');
        }
        quoted.push(ch);
    }
    quoted.push('"');
    IdempotencyKey::parse(quoted.as_bytes(), profile)
}

/// Exactly the (percent-decoded) path segments `GET /operations/{key}`
/// accepts under `profile`, as an anchored ECMA-262 regex for the published
/// contract: a segment that starts with `"` is a field value as the header
/// carries it (no leading whitespace: it starts with the quote); any other
/// segment is the key's characters, which must be those of an sf-string
/// (printable ASCII, 1 to 255 of them) or, under `uuid`, a UUID.
pub fn lookup_segment_pattern(profile: KeyProfile) -> String {
    let characters = match profile {
        KeyProfile::Uuid => profile.bare_pattern().unwrap_or_default(),
        KeyProfile::Strict | KeyProfile::Lenient => {
            format!(r"[\x20\x21\x23-\x7E][\x20-\x7E]{{0,{}}}", MAX_KEY_LEN - 1)
        }
    };
    format!(
        r"^(?:{}[\x20\x09]*|{characters})$",
        profile.quoted_pattern()
    )
}

#[derive(Serialize)]
struct OperationBody<'a> {
    key: &'a str,
    operation: &'a str,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    purchase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_until: Option<String>,
}

/// Which operation a lookup asks about, from the query: `operation=orders`
/// (the default) or `operation=purchases`; a key is scoped to its
/// operation. Other parameters are ignored; a repeated or unknown
/// `operation` is 400.
fn operation_of(query: Option<&str>) -> Result<OperationId, Problem> {
    let invalid = |detail: &str| {
        Problem::new(
            ProblemCode::RequestInvalid,
            "The operation query parameter names orders or purchases, once.",
        )
        .with_errors(vec![FieldError::new("/operation", detail)])
    };
    let mut named = None;
    for pair in query.unwrap_or_default().split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name != "operation" {
            continue;
        }
        if named.is_some() {
            return Err(invalid("must appear once"));
        }
        named = Some(value);
    }
    match named {
        None | Some("orders") => Ok(ORDER_OPERATION),
        Some("purchases") => Ok(PURCHASE_OPERATION),
        Some(_) => Err(invalid("must be orders or purchases")),
    }
}

/// `GET /operations/{key}`.
pub(super) async fn show(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(segment): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let token = bearer_hash(&headers).ok_or_else(Problem::unauthorized)?;
    let key = key_from_segment(&segment, state.settings().key_profile)?;
    let operation = operation_of(query.as_deref())?;
    let read = authed(
        &state,
        token,
        state.db().lookup(token, &operation, &key).await?,
    )?;
    let purchase = operation == PURCHASE_OPERATION;
    // The state at the database's clock, in the core's words.
    let lookup_state = LookupState::of(
        read.record
            .as_ref()
            .map_or(idemkey_core::Stored::Nothing, |r| r.stored),
        read.now,
    );
    let body = match read.record {
        None => OperationBody {
            key: key.as_str(),
            operation: operation.as_str(),
            state: lookup_state.as_str(),
            order: None,
            purchase: None,
            created_at: None,
            replay_until: None,
        },
        Some(record) => OperationBody {
            key: key.as_str(),
            operation: operation.as_str(),
            state: lookup_state.as_str(),
            order: (!purchase)
                .then(|| {
                    record
                        .resource_id
                        .as_ref()
                        .map(|id| format!("/orders/{id}"))
                })
                .flatten(),
            purchase: purchase
                .then(|| {
                    record
                        .resource_id
                        .as_ref()
                        .map(|id| format!("/purchases/{id}"))
                })
                .flatten(),
            created_at: Some(rfc3339(record.created_at)),
            replay_until: record.replay_until.map(rfc3339),
        },
    };
    let json = serde_json::to_string(&body).unwrap_or_default();
    Ok(json_response(StatusCode::OK, json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemkey_core::KeyProfile;

    #[test]
    fn the_operation_is_read_from_the_query_once() {
        assert_eq!(operation_of(None).unwrap(), ORDER_OPERATION);
        assert_eq!(operation_of(Some("x=1")).unwrap(), ORDER_OPERATION);
        assert_eq!(
            operation_of(Some("operation=purchases")).unwrap(),
            PURCHASE_OPERATION
        );
        assert_eq!(
            operation_of(Some("operation=orders")).unwrap(),
            ORDER_OPERATION
        );
        for bad in [
            "operation=null",
            "operation=purchases&operation=purchases",
            "operation=",
        ] {
            let problem = operation_of(Some(bad)).unwrap_err();
            assert_eq!(problem.code(), ProblemCode::RequestInvalid, "{bad}");
        }
    }

    #[test]
    fn lookup_paths_round_trip_through_the_segment_reader() {
        for raw in ["abc-123", r#"a"b\c"#, "a/b?c#d%e f"] {
            let key = key_from_segment(raw, KeyProfile::Strict).unwrap();
            assert_eq!(key.as_str(), raw);
            let path = lookup_path(&key);
            let segment = path.strip_prefix("/operations/").unwrap();
            assert!(!segment.contains(['/', '?', '#', ' ']), "{segment}");
            let decoded = percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .unwrap();
            assert_eq!(key_from_segment(&decoded, KeyProfile::Strict).unwrap(), key);
        }
    }

    #[test]
    fn segment_pattern_is_the_segment_reader() {
        let long = "k".repeat(MAX_KEY_LEN);
        let over = "k".repeat(MAX_KEY_LEN + 1);
        let uuid = "8E03978E-40D5-43E8-BC93-6894A57F9324";
        let quoted_uuid = format!("\"{uuid}\";v=1 ");
        let corpus = [
            "abc-123",
            " leading space",
            "a\"b",
            "a\\b",
            "\"abc\"",
            "\"abc\";v=1\t",
            "\"abc",
            "\"abc\"x",
            " \"abc\"",
            "caf\u{e9}",
            "tab\there",
            "",
            long.as_str(),
            over.as_str(),
            uuid,
            quoted_uuid.as_str(),
            "8e03978e40d543e8bc936894a57f9324",
        ];
        for profile in KeyProfile::ALL {
            let re = regex::Regex::new(&lookup_segment_pattern(profile)).unwrap();
            for segment in corpus {
                let read = key_from_segment(segment, profile);
                assert_eq!(
                    re.is_match(segment),
                    read.is_ok(),
                    "{profile} {segment:?}: {read:?}"
                );
            }
        }
    }

    #[test]
    fn uuid_profile_reads_bare_and_quoted_segments() {
        let bare = key_from_segment("8E03978E-40D5-43E8-BC93-6894A57F9324", KeyProfile::Uuid);
        let quoted = key_from_segment(
            r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#,
            KeyProfile::Uuid,
        );
        assert_eq!(bare.unwrap(), quoted.unwrap());
        assert!(key_from_segment("not-a-uuid", KeyProfile::Uuid).is_err());
    }
}
