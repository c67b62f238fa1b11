//! stderr behind a buffer: the request's log line costs a copy, not a
//! `write` system call.
//!
//! Writing every line to stderr on the request's thread took 7 % of the
//! server's CPU per cached replay. Here `info` and quieter lines are
//! appended to one shared buffer, which a background thread writes out
//! every [`FLUSH_EVERY`] (and a writer at once when it passes
//! [`FLUSH_AT`]); a `warn` or `error` line writes the buffer and itself at
//! once, so problems are never late. Lines keep their order. The price: a
//! process killed with SIGKILL loses at most the last interval's `info`
//! lines; a clean exit writes everything (drop the [`LogGuard`] last).
//!
//! Kept instead of `tracing-appender`'s non-blocking writer, which an A/B
//! of the same binary with each writer measured costlier per request than
//! the 3 % the project accepts (`bench/ab.sh`, 5 alternating rounds of
//! 10 s at 16 connections, 2026-12-04): server CPU per 1,000 cached replays
//! 0.028 → 0.033 s on PostgreSQL (+18 %) and 0.029 → 0.037 s on SQLite
//! (+28 %), replays 0.88x and 0.94x; new orders 0.96x and 0.98x. Its channel
//! and worker thread cost more than appending to one buffer, and it has no
//! path that writes `warn` and `error` at once.

use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// How long an `info` line may wait in the buffer.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Buffered bytes past which the writer that crosses it writes them out.
pub const FLUSH_AT: usize = 64 * 1024;

/// The buffer, shared by the subscriber and the flushing thread.
#[derive(Default)]
struct Shared {
    buf: Mutex<Vec<u8>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes and empties the buffer (the lock is held across the write,
    /// so an urgent line cannot overtake older ones).
    fn drain(buf: &mut Vec<u8>) {
        if !buf.is_empty() {
            // Nowhere to report a failed write to stderr.
            let _ = std::io::stderr().lock().write_all(buf);
            buf.clear();
        }
    }
}

/// A [`MakeWriter`] for `tracing_subscriber` that buffers stderr.
#[derive(Clone)]
pub struct LogBuffer {
    shared: Arc<Shared>,
}

impl LogBuffer {
    /// The writer and the guard whose drop stops the flushing thread and
    /// writes what is left.
    pub fn start() -> (Self, LogGuard) {
        let shared = Arc::new(Shared::default());
        let flusher = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("idemkey-log".into())
            .spawn(move || flush_until_stopped(&flusher))
            .ok();
        let guard = LogGuard {
            shared: Arc::clone(&shared),
            thread,
        };
        (Self { shared }, guard)
    }
}

fn flush_until_stopped(shared: &Shared) {
    let mut stop = shared.stop.lock().unwrap_or_else(|e| e.into_inner());
    while !*stop {
        stop = match shared.wake.wait_timeout(stop, FLUSH_EVERY) {
            Ok((stop, _)) => stop,
            Err(poisoned) => poisoned.into_inner().0,
        };
        Shared::drain(&mut shared.lock());
    }
}

impl<'a> MakeWriter<'a> for LogBuffer {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        self.writer(false)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        self.writer(is_urgent(*meta.level()))
    }
}

impl LogBuffer {
    fn writer(&self, urgent: bool) -> LineWriter<'_> {
        LineWriter {
            shared: &self.shared,
            urgent,
        }
    }
}

/// Whether a line at `level` is written at once (`warn` and `error`; in
/// `tracing`, more severe levels compare lower).
fn is_urgent(level: Level) -> bool {
    level <= Level::WARN
}

/// One event's writer (the subscriber writes a whole line at once).
pub struct LineWriter<'a> {
    shared: &'a Shared,
    urgent: bool,
}

impl std::io::Write for LineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut buf = self.shared.lock();
        buf.extend_from_slice(bytes);
        if self.urgent || buf.len() >= FLUSH_AT {
            Shared::drain(&mut buf);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Keeps the flushing thread running; its drop writes what is buffered.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogGuard").finish_non_exhaustive()
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        Shared::drain(&mut self.shared.lock());
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A buffer whose flushing thread has stopped, so only writers write.
    fn without_flusher() -> (LogBuffer, LogGuard) {
        let (buffer, mut guard) = LogBuffer::start();
        *buffer.shared.stop.lock().unwrap() = true;
        buffer.shared.wake.notify_all();
        guard.thread.take().unwrap().join().unwrap();
        (buffer, guard)
    }

    fn write(buffer: &LogBuffer, level: Level, line: &[u8]) {
        buffer.writer(is_urgent(level)).write_all(line).unwrap();
    }

    #[test]
    fn info_lines_wait_and_warnings_write_everything_at_once() {
        let (buffer, _guard) = without_flusher();
        write(&buffer, Level::INFO, b"a\n");
        write(&buffer, Level::DEBUG, b"b\n");
        assert_eq!(&buffer.shared.lock()[..], b"a\nb\n", "info waits");
        write(&buffer, Level::WARN, b"c\n");
        assert!(buffer.shared.lock().is_empty(), "a warning writes all");
        write(&buffer, Level::INFO, b"d\n");
        write(&buffer, Level::ERROR, b"e\n");
        assert!(buffer.shared.lock().is_empty(), "an error writes all");
    }

    #[test]
    fn a_full_buffer_is_written_by_the_writer_that_fills_it() {
        let (buffer, _guard) = without_flusher();
        write(&buffer, Level::INFO, &vec![b'x'; FLUSH_AT - 1]);
        assert_eq!(buffer.shared.lock().len(), FLUSH_AT - 1);
        write(&buffer, Level::INFO, b"\n");
        assert!(buffer.shared.lock().is_empty());
    }

    #[test]
    fn the_flusher_empties_the_buffer_within_its_interval() {
        let (buffer, _guard) = LogBuffer::start();
        write(&buffer, Level::INFO, b"x\n");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !buffer.shared.lock().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never flushed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn dropping_the_guard_writes_what_is_left() {
        let (buffer, guard) = without_flusher();
        write(&buffer, Level::INFO, b"x\n");
        drop(guard);
        assert!(buffer.shared.lock().is_empty());
    }
}
