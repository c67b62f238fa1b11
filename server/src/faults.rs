//! Faults a test asks for with the `x-idemkey-test-fault` request header,
//! compiled only with the `test-faults` cargo feature (which the fault
//! suite enables); release builds contain none of this, and the header is
//! then ignored. Even with the feature, the server honours the header only
//! under `--test-faults` with `IDEMKEY_ALLOW_TEST_FAULTS=1`.

use axum::http::HeaderMap;

use crate::Settings;
#[cfg(feature = "test-faults")]
use crate::hold::{HELD, SERVING};
pub use crate::hold::{HOLD, Hold};

/// Request header naming a fault to inject: `fail-storing-result`,
/// `exit-after-commit`, `drop-after-commit` or `hold-before-commit`.
pub const TEST_FAULT_HEADER: &str = "x-idemkey-test-fault";

/// Response header of a request held by `hold-before-commit`: how many other
/// requests this process was serving when the hold ended, still before the
/// commit. At least 1 proves that a concurrent request overlapped the
/// uncommitted claim (a test's evidence that it tested a race).
pub const OVERLAP_HEADER: &str = "x-idemkey-test-overlap";

/// Exit status of the process when `exit-after-commit` fires.
pub const EXIT_AFTER_COMMIT_STATUS: i32 = 86;

/// A fault to inject into one request.
#[cfg(feature = "test-faults")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The database refuses the stored result: the whole transaction (the
    /// order included) rolls back.
    FailStoringResult,
    /// The process exits right after the commit, before answering.
    ExitAfterCommit,
    /// The connection is closed right after the commit, with no answer.
    DropAfterCommit,
    /// A new order's transaction stays open for [`HOLD`] before its
    /// commit, so concurrent requests with its key overlap it.
    HoldBeforeCommit,
}

/// No faults in this build.
#[cfg(not(feature = "test-faults"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {}

/// The fault a request asks for, if this build and these settings allow it.
#[cfg(feature = "test-faults")]
pub fn requested(settings: &Settings, headers: &HeaderMap) -> Option<Fault> {
    if !settings.test_faults {
        return None;
    }
    match headers.get(TEST_FAULT_HEADER)?.as_bytes() {
        b"fail-storing-result" => Some(Fault::FailStoringResult),
        b"exit-after-commit" => Some(Fault::ExitAfterCommit),
        b"drop-after-commit" => Some(Fault::DropAfterCommit),
        b"hold-before-commit" => Some(Fault::HoldBeforeCommit),
        _ => None,
    }
}

/// The fault a request asks for: never, in this build.
#[cfg(not(feature = "test-faults"))]
pub fn requested(_settings: &Settings, _headers: &HeaderMap) -> Option<Fault> {
    None
}

/// The status to store for a response: one the schema refuses under
/// `fail-storing-result`, so the database itself fails while storing.
pub fn stored_status(fault: Option<Fault>, status: u16) -> u16 {
    #[cfg(feature = "test-faults")]
    if fault == Some(Fault::FailStoringResult) {
        return 0;
    }
    let _ = fault;
    status
}

/// Runs the after-commit faults: exits the process, or says to drop the
/// connection.
pub fn after_commit(fault: Option<Fault>) -> bool {
    #[cfg(feature = "test-faults")]
    match fault {
        Some(Fault::ExitAfterCommit) => {
            tracing::warn!("test fault: exiting right after COMMIT, before answering");
            std::process::exit(EXIT_AFTER_COMMIT_STATUS);
        }
        Some(Fault::DropAfterCommit) => return true,
        _ => {}
    }
    let _ = fault;
    false
}

/// Middleware: counts the requests being served and, for a request that
/// asks for `hold-before-commit`, makes the hold available to the stores and
/// reports its overlap in [`OVERLAP_HEADER`].
#[cfg(feature = "test-faults")]
pub async fn track(
    axum::extract::State(state): axum::extract::State<crate::AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use std::sync::atomic::Ordering;

    struct Serving;
    impl Drop for Serving {
        fn drop(&mut self) {
            SERVING.fetch_sub(1, Ordering::SeqCst);
        }
    }
    SERVING.fetch_add(1, Ordering::SeqCst);
    let _serving = Serving;
    if requested(state.settings(), request.headers()) != Some(Fault::HoldBeforeCommit) {
        return next.run(request).await;
    }
    let hold = Hold::new();
    let overlap = hold.overlap();
    let mut response = HELD.scope(hold, next.run(request)).await;
    let others = overlap.load(Ordering::SeqCst);
    if others != u64::MAX {
        response
            .headers_mut()
            .insert(OVERLAP_HEADER, axum::http::HeaderValue::from(others));
    }
    response
}
