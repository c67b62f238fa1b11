//! The accept loop: HTTP/1.1 connections served by hyper, each with a
//! [`ConnectionControl`] in its requests' extensions, and graceful shutdown.
//!
//! `axum::serve` would do for the happy path, but a fault that must look like
//! a lost response (the effect commits, then the client sees the connection
//! close with no status line) needs a handle on the connection itself: a
//! handler calls [`ConnectionControl::abort`], and the connection's task
//! drops the connection, which closes the socket without writing anything.
//!
//! The loop also sheds load ([`crate::load_shed`]): connections past
//! [`Limits::max_connections`] get a quick 503 and are closed, and requests
//! past [`Limits::max_in_flight`] get a 503 before any handler runs.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt as _;
use tracing::{debug, info, warn};

pub use crate::load_shed::{Limits, healthz};

use crate::load_shed::{self, Admission, Shedder};

/// How long a client may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A handle on the connection a request arrived on.
#[derive(Clone, Debug, Default)]
pub struct ConnectionControl {
    abort: Arc<Notify>,
}

impl ConnectionControl {
    /// A handle for a new connection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Closes the connection at once, without sending a response to any
    /// request on it (in-flight handlers are dropped).
    pub fn abort(&self) {
        self.abort.notify_one();
    }

    async fn aborted(&self) {
        self.abort.notified().await;
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets in-flight requests finish for up to `grace`, and returns.
/// Sheds load past the default [`Limits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> io::Result<()> {
    serve_with(listener, router, shutdown, grace, Limits::default()).await
}

/// [`serve()`], shedding load past `limits`.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
    limits: Limits,
) -> io::Result<()> {
    let shedder = Shedder::new(limits);
    let router = shedder.limit_in_flight(router);
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    // Out of file descriptors and the like: back off, go on.
                    warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(err) = stream.set_nodelay(true) {
            debug!(error = %err, "set_nodelay failed");
        }
        let place = match shedder.admit() {
            Admission::Serve(place) => place,
            Admission::Reject(place) => {
                debug!(%peer, "connection cap reached: 503");
                tokio::spawn(load_shed::reject(stream, place));
                continue;
            }
            Admission::Close => {
                debug!(%peer, "connection cap reached: closed");
                continue;
            }
        };
        let control = ConnectionControl::new();
        let for_requests = control.clone();
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(for_requests.clone());
            router.clone().oneshot(request.map(Body::new))
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _place = place;
            tokio::select! {
                result = connection => {
                    if let Err(err) = result {
                        debug!(%peer, error = %err, "connection ended with an error");
                    }
                }
                // Dropping the connection future closes the socket unanswered.
                () = control.aborted() => debug!(%peer, "connection aborted"),
            }
        });
    }
    drop(listener);
    info!("shutting down: no new connections, finishing in-flight requests");
    tokio::select! {
        () = graceful.shutdown() => info!("all connections closed"),
        () = tokio::time::sleep(grace) => warn!("shutdown grace period over; closing anyway"),
    }
    Ok(())
}

/// Binds `addr`, answering the address actually bound (a port of 0 gets
/// one from the system) or a message that says which address failed.
pub async fn bind(
    addr: std::net::SocketAddr,
) -> Result<(TcpListener, std::net::SocketAddr), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    Ok((listener, local))
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            warn!(error = %err, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => info!("SIGINT received"),
        () = terminate => info!("SIGTERM received"),
    }
}
