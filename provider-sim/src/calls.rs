//! Which requests are calls of an effect: the ones the request log records
//! ([`crate::requests`]) and the fault switches apply to ([`crate::faults`]).
//! A leaf, so that neither of them depends on the other for it.

use axum::http::Method;

use crate::store::Endpoint;

/// A call a client makes of one effect: its `POST` (no key in the path) or
/// the `GET` of one key (the key as the path has it, percent-encoded). The
/// lists (`GET /charges`) are not calls: they are for checks, never logged
/// and never faulted.
pub(crate) fn call_of<'a>(method: &Method, path: &'a str) -> Option<(Endpoint, Option<&'a str>)> {
    let path = path.strip_prefix('/')?;
    let (collection, key) = match path.split_once('/') {
        Some((collection, key)) => (collection, Some(key)),
        None => (path, None),
    };
    let endpoint = Endpoint::from_name(collection)?;
    match (method, key) {
        (&Method::POST, None) => Some((endpoint, None)),
        (&Method::GET, Some(key)) if !key.is_empty() && !key.contains('/') => {
            Some((endpoint, Some(key)))
        }
        _ => None,
    }
}
