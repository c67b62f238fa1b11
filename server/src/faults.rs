//! Faults a test asks for with the `x-idemkey-test-fault` request header,
//! compiled only with the `test-faults` cargo feature (which the fault
//! suite enables); release builds contain none of this, and the header is
//! then ignored. Even with the feature, the server honours the header only
//! under `--test-faults` with `IDEMKEY_ALLOW_TEST_FAULTS=1`.

use axum::http::HeaderMap;

use crate::Settings;

/// Request header naming a fault to inject: `fail-storing-result`,
/// `exit-after-commit` or `drop-after-commit`.
pub const TEST_FAULT_HEADER: &str = "x-idemkey-test-fault";

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
