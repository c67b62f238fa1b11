//! The `hold-before-commit` test fault as the order stores see it: a hold
//! the route passes in a new order's draft, kept apart from the request
//! plumbing in [`crate::faults`] so the stores depend on nothing else.

use std::time::Duration;

/// How long `hold-before-commit` keeps a new order's transaction open.
pub const HOLD: Duration = Duration::from_millis(500);

/// Requests this process is serving (`hold-before-commit`'s evidence).
#[cfg(feature = "test-faults")]
pub(crate) static SERVING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(feature = "test-faults")]
tokio::task_local! {
    pub(crate) static HELD: Hold;
}

/// The `hold-before-commit` fault of the request being served: the route
/// puts it in the new order's draft ([`crate::db::OrderDraft::hold`]) and
/// the store holds the transaction open before its commit. Nothing in builds
/// without the `test-faults` feature: no request can make one there.
#[derive(Clone, Debug)]
pub struct Hold {
    /// Other requests served when the hold ended; `u64::MAX` until then.
    #[cfg(feature = "test-faults")]
    overlap: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Hold {
    /// A hold that has not ended yet.
    #[cfg(feature = "test-faults")]
    pub(crate) fn new() -> Self {
        Self {
            overlap: std::sync::Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
        }
    }

    /// Where [`Hold::wait`] records how many other requests overlapped it.
    #[cfg(feature = "test-faults")]
    pub(crate) fn overlap(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        std::sync::Arc::clone(&self.overlap)
    }

    /// The current request's hold, if it asked for one. Call it on the
    /// request's task (before handing work to a blocking thread).
    pub fn current() -> Option<Self> {
        #[cfg(feature = "test-faults")]
        return HELD.try_with(Self::clone).ok();
        #[cfg(not(feature = "test-faults"))]
        None
    }

    /// Holds for [`HOLD`], then records how many other requests this
    /// process serves.
    pub async fn wait(&self) {
        #[cfg(feature = "test-faults")]
        {
            tracing::warn!("test fault: holding a new order for {HOLD:?} before its commit");
            tokio::time::sleep(HOLD).await;
            self.ended();
        }
    }

    /// [`Hold::wait`] on a blocking thread (the SQLite store).
    pub fn wait_blocking(&self) {
        #[cfg(feature = "test-faults")]
        {
            tracing::warn!("test fault: holding a new order for {HOLD:?} before its commit");
            std::thread::sleep(HOLD);
            self.ended();
        }
    }

    #[cfg(feature = "test-faults")]
    fn ended(&self) {
        use std::sync::atomic::Ordering;
        let others = SERVING.load(Ordering::SeqCst).saturating_sub(1);
        self.overlap.store(others, Ordering::SeqCst);
    }
}
