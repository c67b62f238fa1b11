//! Logging: the subscriber set-up (the request lines themselves are the
//! library's [`idemkey::request_log`]).

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;
use crate::log_buffer::{LogBuffer, LogGuard};

/// Installs the global subscriber: `RUST_LOG` if set, else `info`; text or
/// JSON lines on stderr through a [`LogBuffer`]. Safe to call more than
/// once (later calls do nothing). Keep the guard until the process ends:
/// its drop writes the lines still buffered.
#[must_use = "dropping the guard stops the log flusher"]
pub fn init(format: LogFormat) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = LogBuffer::start();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    guard
}
