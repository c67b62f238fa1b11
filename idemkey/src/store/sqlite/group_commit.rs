//! Group commit of new requests: one writer thread takes every request waiting
//! at that moment and runs them in one `BEGIN IMMEDIATE` transaction, each
//! in its own savepoint, then commits once. SQLite's cost per request is the
//! commit's fsync (`synchronous=FULL`); a batch pays it once.
//!
//! What each request keeps:
//! - its effect and its key's record still commit together (the savepoint
//!   is released only when the engine stored the response, as one
//!   transaction of its own would commit);
//! - a failing request rolls back to its savepoint: its batch-mates go on;
//! - every answer waits for the batch's commit: a request is told
//!   "created" (or "replayed", for a key another order of the same batch
//!   created) only once that is durable; if the commit fails, every
//!   request of the batch gets 503 and nothing of it was written;
//! - the bounded wait: a request whose wait (`--pool-wait`) is over before
//!   its batch starts gets 503 without running.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::Connection;
use tokio::sync::oneshot;
use tracing::warn;

use super::connection::{immediate, sqlite_error};
use crate::store::StoreError;

/// Most requests in one transaction: bounds how long another process waits
/// for the file's write lock behind one batch.
const MAX_BATCH: usize = 128;

/// One unit of work for the writer: runs in the batch's open transaction
/// (behind a savepoint it takes itself) and returns how to answer its
/// caller once the batch's commit is known.
type Work = Box<dyn FnOnce(&mut rusqlite::Transaction<'_>) -> Answer + Send + 'static>;

/// Sends a job's answer, given the batch's commit result.
type Answer = Box<dyn FnOnce(Result<(), StoreError>) + Send + 'static>;

struct Job {
    work: Work,
    deadline: Instant,
    /// Answers a job that never ran (its wait was over, the batch could
    /// not start).
    refuse: Box<dyn FnOnce(StoreError) + Send>,
}

/// The queue of one SQLite store's writer thread.
#[derive(Clone)]
pub(super) struct GroupCommit {
    jobs: Sender<Job>,
    queued: Arc<AtomicUsize>,
    counts: Arc<Counts>,
}

/// Batches committed and the requests they carried, for metrics.
#[derive(Default)]
struct Counts {
    batches: AtomicU64,
    orders: AtomicU64,
}

impl GroupCommit {
    /// Starts the writer thread over `conn`; it ends when the last clone of
    /// the queue is dropped. `busy` counts batches in progress (the pool
    /// gauges); `wait` is the busy timeout restored after each batch.
    pub(super) fn start(
        conn: Arc<Mutex<Connection>>,
        busy: Arc<AtomicUsize>,
        wait: Duration,
    ) -> Result<Self, StoreError> {
        let (jobs, queue) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let counts = Arc::new(Counts::default());
        let writer = Writer {
            conn,
            busy,
            wait,
            queued: Arc::clone(&queued),
            counts: Arc::clone(&counts),
        };
        std::thread::Builder::new()
            .name("idemkey-sqlite-writer".into())
            .spawn(move || writer.run(&queue))
            .map_err(|e| StoreError::Unavailable(format!("writer thread: {e}")))?;
        Ok(Self {
            jobs,
            queued,
            counts,
        })
    }

    /// `(batches, requests)` committed so far: requests per batch is how much
    /// one fsync carried.
    pub(super) fn committed(&self) -> (u64, u64) {
        (
            self.counts.batches.load(Ordering::Relaxed),
            self.counts.orders.load(Ordering::Relaxed),
        )
    }

    /// Requests waiting for a batch (the pool gauge `waiting`).
    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Runs `work` in the next batch, at most `wait` from now before it
    /// starts, and returns its answer once the batch committed.
    pub(super) async fn submit<T, F>(&self, wait: Duration, work: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut rusqlite::Transaction<'_>) -> Result<T, StoreError> + Send + 'static,
    {
        let (to, answer) = oneshot::channel();
        // The job is either run or refused: whichever happens takes `to`.
        let to = Arc::new(Mutex::new(Some(to)));
        let refuse_to = Arc::clone(&to);
        let job = Job {
            work: Box::new(move |tx| {
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(tx)))
                    .unwrap_or_else(|_| Err(StoreError::Unavailable("a request panicked".into())));
                let to = to.lock().take();
                Box::new(move |committed: Result<(), StoreError>| {
                    // The caller may have gone away (its client disconnected).
                    if let Some(to) = to {
                        let _ = to.send(committed.and(result));
                    }
                })
            }),
            deadline: Instant::now() + wait,
            refuse: Box::new(move |err| {
                if let Some(to) = refuse_to.lock().take() {
                    let _ = to.send(Err(err));
                }
            }),
        };
        self.queued.fetch_add(1, Ordering::Relaxed);
        if self.jobs.send(job).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::Unavailable(
                "the SQLite writer has stopped".into(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Unavailable(
                "the SQLite writer has stopped".into(),
            ))
        })
    }
}

struct Writer {
    conn: Arc<Mutex<Connection>>,
    busy: Arc<AtomicUsize>,
    wait: Duration,
    queued: Arc<AtomicUsize>,
    counts: Arc<Counts>,
}

impl Writer {
    fn run(&self, queue: &Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.queued.fetch_sub(batch.len(), Ordering::Relaxed);
            self.commit(batch);
        }
    }

    /// Runs one batch; every job is answered exactly once.
    fn commit(&self, batch: Vec<Job>) {
        let Some(latest) = batch.iter().map(|j| j.deadline).max() else {
            return;
        };
        let wait = latest.saturating_duration_since(Instant::now());
        let Some(mut conn) = self.conn.try_lock_for(wait) else {
            warn!("no SQLite connection within the wait");
            refuse_all(
                batch,
                &StoreError::Unavailable("connection wait timed out".into()),
            );
            return;
        };
        self.busy.fetch_add(1, Ordering::Relaxed);
        // Another process's write lock may take only what is left.
        let left = latest.saturating_duration_since(Instant::now());
        match conn.busy_timeout(left) {
            Ok(()) => {
                if let Some(orders) = run_batch(&mut conn, batch) {
                    self.counts.batches.fetch_add(1, Ordering::Relaxed);
                    self.counts.orders.fetch_add(orders, Ordering::Relaxed);
                }
            }
            Err(err) => refuse_all(batch, &sqlite_error(err)),
        }
        let _ = conn.busy_timeout(self.wait);
        drop(conn);
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Answers every job of `batch` with `err` (503), none of them run.
fn refuse_all(batch: Vec<Job>, err: &StoreError) {
    for job in batch {
        (job.refuse)(err.clone());
    }
}

/// The batch's one transaction; every job is answered exactly once.
/// Returns how many requests a committed batch carried.
fn run_batch(conn: &mut Connection, batch: Vec<Job>) -> Option<u64> {
    let now = Instant::now();
    let (late, batch): (Vec<_>, Vec<_>) = batch.into_iter().partition(|j| j.deadline <= now);
    refuse_all(
        late,
        &StoreError::Unavailable("the wait for the database is over".into()),
    );
    if batch.is_empty() {
        return None;
    }
    let mut tx = match immediate(conn) {
        Ok(tx) => tx,
        Err(err) => {
            refuse_all(batch, &err);
            return None;
        }
    };
    let mut answers = Vec::with_capacity(batch.len());
    let mut jobs = batch.into_iter();
    for job in jobs.by_ref() {
        answers.push((job.work)(&mut tx));
        if tx.is_autocommit() {
            // SQLite rolled the whole transaction back (a disk or memory
            // error): nothing of the batch survives.
            break;
        }
    }
    let rolled_back = || StoreError::Unavailable("the batch was rolled back".into());
    refuse_all(jobs.collect(), &rolled_back());
    let committed = if tx.is_autocommit() {
        Err(rolled_back())
    } else {
        tx.commit().map_err(sqlite_error)
    };
    let carried = committed.is_ok().then_some(answers.len() as u64);
    for answer in answers {
        answer(committed.clone());
    }
    carried
}
