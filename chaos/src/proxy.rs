//! A TCP proxy between the servers and PostgreSQL that cuts connections on
//! command, and on its own right after it forwarded a commit: an `Execute`
//! followed by `Sync` (an autocommit statement commits at `Sync`) or a
//! simple `COMMIT` query. The server then cannot know whether its commit
//! happened; the contract says it answers 503 and the retry finds out.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

use crate::rng::Rng;

/// Counters of what the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Commits seen going to the database.
    pub commits_seen: AtomicU64,
    /// Connections cut right after a commit was forwarded.
    pub cuts_after_commit: AtomicU64,
    /// Connections cut on command.
    pub cuts: AtomicU64,
}

struct Control {
    conns: Mutex<HashMap<u64, Arc<Notify>>>,
    next_id: AtomicU64,
    /// Probability (per mille) of a cut right after a forwarded commit.
    after_commit_per_mille: AtomicU64,
    rng: Mutex<Rng>,
    stats: ProxyStats,
}

/// A running proxy; its tasks live on the current tokio runtime.
#[derive(Clone)]
pub struct Proxy {
    port: u16,
    control: Arc<Control>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: u16, seed: u64) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", crate::servers::free_port()?)).await?;
        let port = listener.local_addr()?.port();
        let control = Arc::new(Control {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            after_commit_per_mille: AtomicU64::new(0),
            rng: Mutex::new(Rng::new(seed)),
            stats: ProxyStats::default(),
        });
        let accept_control = Arc::clone(&control);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let control = Arc::clone(&accept_control);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        pipe(control, client, server).await;
                    }
                });
            }
        });
        Ok(Self { port, control })
    }

    /// The port servers connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The counters.
    pub fn stats(&self) -> &ProxyStats {
        &self.control.stats
    }

    /// Sets the chance of a cut right after each forwarded commit.
    pub fn set_cut_after_commit(&self, probability: f64) {
        let per_mille = (probability.clamp(0.0, 1.0) * 1000.0) as u64;
        self.control
            .after_commit_per_mille
            .store(per_mille, Ordering::SeqCst);
    }

    /// Cuts every open connection; returns how many.
    pub fn cut_all(&self) -> usize {
        let conns = lock(&self.control.conns);
        for notify in conns.values() {
            notify.notify_one();
        }
        self.control
            .stats
            .cuts
            .fetch_add(conns.len() as u64, Ordering::SeqCst);
        conns.len()
    }

    /// Cuts one open connection chosen at random; returns whether one was open.
    pub fn cut_one(&self) -> bool {
        let conns = lock(&self.control.conns);
        if conns.is_empty() {
            return false;
        }
        let pick = lock(&self.control.rng).range(0, conns.len() as u64 - 1) as usize;
        if let Some(notify) = conns.values().nth(pick) {
            notify.notify_one();
            self.control.stats.cuts.fetch_add(1, Ordering::SeqCst);
        }
        true
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn pipe(control: Arc<Control>, client: TcpStream, server: TcpStream) {
    let id = control.next_id.fetch_add(1, Ordering::SeqCst);
    let cut = Arc::new(Notify::new());
    lock(&control.conns).insert(id, Arc::clone(&cut));
    control.stats.connections.fetch_add(1, Ordering::SeqCst);
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = {
        let control = Arc::clone(&control);
        let cut = Arc::clone(&cut);
        async move {
            let mut framer = Framer::default();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = client_read.read(&mut buf).await?;
                if n == 0 {
                    return Ok::<(), io::Error>(());
                }
                let commits = framer.feed(&buf[..n]);
                server_write.write_all(&buf[..n]).await?;
                if commits > 0 {
                    control
                        .stats
                        .commits_seen
                        .fetch_add(commits, Ordering::SeqCst);
                    let (hit, delay) = {
                        let mut rng = lock(&control.rng);
                        let p = control.after_commit_per_mille.load(Ordering::SeqCst);
                        (rng.range(0, 999) < p, rng.range(0, 3))
                    };
                    if hit {
                        // Let the database commit (or not: 0 ms may beat
                        // it), then lose the answer.
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        control
                            .stats
                            .cuts_after_commit
                            .fetch_add(1, Ordering::SeqCst);
                        cut.notify_one();
                    }
                }
            }
        }
    };
    let downstream = async move {
        tokio::io::copy(&mut server_read, &mut client_write).await?;
        client_write.shutdown().await
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        () = cut.notified() => {}
    }
    lock(&control.conns).remove(&id);
    // Both halves drop here: the sockets close under the server and the
    // database alike.
}

/// Frames the frontend side of the PostgreSQL protocol, enough to spot
/// commits.
#[derive(Default)]
struct Framer {
    started: bool,
    buf: Vec<u8>,
    executed: bool,
}

/// Protocol 3.0 in a startup message.
const PROTOCOL_3: u32 = 196_608;

impl Framer {
    /// Takes more bytes; returns how many commits they completed.
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.buf.extend_from_slice(bytes);
        let mut commits = 0;
        loop {
            if !self.started {
                // Untyped: SSLRequest, GSSENCRequest, CancelRequest, startup.
                if self.buf.len() < 8 {
                    break;
                }
                let len = be32(&self.buf[0..4]) as usize;
                if len < 8 || self.buf.len() < len {
                    break;
                }
                if be32(&self.buf[4..8]) == PROTOCOL_3 {
                    self.started = true;
                }
                self.buf.drain(..len);
                continue;
            }
            if self.buf.len() < 5 {
                break;
            }
            let len = be32(&self.buf[1..5]) as usize;
            if self.buf.len() < 1 + len {
                break;
            }
            match self.buf[0] {
                b'E' => self.executed = true,
                b'S' if self.executed => {
                    self.executed = false;
                    commits += 1;
                }
                b'Q' => {
                    let text = String::from_utf8_lossy(&self.buf[5..1 + len]);
                    if text.trim_start().to_ascii_uppercase().starts_with("COMMIT") {
                        commits += 1;
                    }
                }
                _ => {}
            }
            self.buf.drain(..1 + len);
        }
        commits
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn execute_then_sync_and_commit_queries_count_as_commits() {
        let mut startup = Vec::new();
        startup.extend_from_slice(&16u32.to_be_bytes());
        startup.extend_from_slice(&PROTOCOL_3.to_be_bytes());
        startup.extend_from_slice(b"user\0\0\0\0");
        let mut stream = startup;
        stream.extend(msg(b'P', b"\0SELECT 1\0\0\0"));
        stream.extend(msg(b'S', b"")); // a prepare: no commit
        stream.extend(msg(b'B', b"\0\0\0\0\0\0\0\0"));
        stream.extend(msg(b'E', b"\0\0\0\0\0"));
        stream.extend(msg(b'S', b"")); // commit
        stream.extend(msg(b'Q', b"COMMIT\0"));
        let mut framer = Framer::default();
        // Byte by byte, as a slow network would deliver it.
        let total: u64 = stream.iter().map(|b| framer.feed(&[*b])).sum();
        assert_eq!(total, 2);
    }
}
