//! Load shedding against the real binary over real HTTP: a write lock that
//! another process holds on the SQLite file, an exhausted PostgreSQL pool,
//! the in-flight cap and the connection cap each get a 503
//! `service-unavailable` with `Retry-After` while the cause still holds
//! (the test removes the cause only after it has the answer), store
//! nothing, leave `/healthz` at 200, and the retry with the same key then
//! creates the order once. Every wait is a poll for a state, bounded only
//! as a guard against hanging.

#[macro_use]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use common::{BODY, Backend, Env, Reply, Server, eventually, new_key};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// A write lock on an SQLite file, held by a connection of the test
/// process (another process than the server's) for at most a given time.
struct WriteLock {
    release: mpsc::Sender<()>,
    released: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WriteLock {
    /// Takes the lock with `BEGIN IMMEDIATE`; it is released by
    /// [`WriteLock::release`], or after `at_most` whatever happens.
    fn take(path: &str, at_most: Duration) -> Self {
        let (taken_tx, taken_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let released = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&released);
        let path = path.to_owned();
        let thread = std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&path).expect("open the file");
            conn.execute_batch("BEGIN IMMEDIATE")
                .expect("take the write lock");
            taken_tx.send(()).expect("tell the test");
            let _ = release_rx.recv_timeout(at_most);
            // Marked before the release: while `held()` is true, it is.
            flag.store(true, Ordering::SeqCst);
            conn.execute_batch("ROLLBACK").expect("release the lock");
        });
        taken_rx.recv().expect("the lock is taken");
        Self {
            release,
            released,
            thread: Some(thread),
        }
    }

    /// Whether the lock is still held.
    fn held(&self) -> bool {
        !self.released.load(Ordering::SeqCst)
    }

    /// Releases the lock and waits until it is released.
    fn release(mut self) {
        let _ = self.release.send(());
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the lock's thread");
        }
    }
}

/// The value of the sample `name` (with its labels) in the server's
/// `/metrics`.
async fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("", "/metrics").await.body;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn assert_shed(reply: &Reply) {
    reply.assert_problem(503, "service-unavailable");
    assert_eq!(reply.header("retry-after"), Some("1"), "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_write_lock_of_another_process_gets_503_within_the_wait() {
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let server = env.serve(&["--pool-wait", "1s"]);
    let lock = WriteLock::take(&env.db, Duration::from_secs(10));

    // Three orders at once: one waits for the lock with the store's
    // connection, two for the connection; each within the one wait.
    let keys = [new_key(), new_key(), new_key()];
    let (a, b, c) = tokio::join!(
        server.post_order(&token, &keys[0], BODY),
        server.post_order(&token, &keys[1], BODY),
        server.post_order(&token, &keys[2], BODY),
    );
    assert!(
        lock.held(),
        "an answer came only after the lock was released"
    );
    for refused in [a, b, c] {
        assert_shed(&refused);
    }
    let health = server.get(&token, "/healthz").await;
    assert_eq!(health.status, 200, "{}", health.body);
    let ready = server.get(&token, "/readyz").await;
    assert!(
        lock.held(),
        "/readyz answered only after the lock was released"
    );
    assert_shed(&ready);
    assert_eq!(env.counts(), (0, 0), "nothing stored on a 503");

    lock.release();
    for key in &keys {
        let created = server.post_order(&token, key, BODY).await;
        assert_eq!(created.status, 201, "{}", created.body);
        assert_eq!(created.header("idempotent-replayed"), None);
        let replay = server.post_order(&token, key, BODY).await;
        assert_eq!((replay.status, &replay.body), (201, &created.body));
    }
    assert_eq!(env.counts(), (3, 3));
    assert_eq!(server.get(&token, "/readyz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_in_flight_cap_get_503_at_once() {
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let server = Arc::new(env.serve(&["--pool-wait", "60s", "--max-in-flight", "2"]));
    let lock = WriteLock::take(&env.db, Duration::from_secs(60));

    // Two orders wait for the lock (one with the store's connection, one
    // for it), holding both places.
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let (server, token, key) = (Arc::clone(&server), token.clone(), new_key());
            tokio::spawn(async move { server.post_order(&token, &key, BODY).await })
        })
        .collect();
    eventually("two requests in progress", async || {
        metric(&server, "idemkey_in_flight").await == 2.0
    })
    .await;

    let key = new_key();
    let refused = server.post_order(&token, &key, BODY).await;
    assert!(lock.held() && waiting.iter().all(|w| !w.is_finished()));
    assert_shed(&refused);
    // The probes are never shed.
    assert_eq!(server.get(&token, "/healthz").await.status, 200);
    assert_eq!(
        metric(&server, "idemkey_shed_total{cap=\"in_flight\"}").await,
        1.0
    );

    lock.release();
    for order in waiting {
        let reply = order.await.expect("the request's task");
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    let created = server.post_order(&token, &key, BODY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.header("idempotent-replayed"), None);
    assert_eq!(env.counts(), (3, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_exhausted_gets_503_within_the_wait() {
    let env = Env::new(Backend::Postgres);
    let token = env.account("shop");
    let server = Arc::new(env.serve(&[
        "--pool-size",
        "1",
        "--pool-wait",
        "500ms",
        "--lock-timeout",
        "60s",
        "--statement-timeout",
        "60s",
    ]));
    let (locker, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let connection = tokio::spawn(connection);
    locker
        .batch_execute("BEGIN; LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the records");

    // The first order waits for the lock on the pool's one connection.
    let first = {
        let (server, token) = (Arc::clone(&server), token.clone());
        tokio::spawn(async move { server.post_order(&token, &new_key(), BODY).await })
    };
    eventually("the first order waits for the lock", async || {
        env.sql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        ) == "1"
    })
    .await;

    let key = new_key();
    let refused = server.post_order(&token, &key, BODY).await;
    assert!(!first.is_finished(), "the lock was released early");
    assert_shed(&refused);
    assert_eq!(server.get(&token, "/healthz").await.status, 200);
    assert_shed(&server.get(&token, "/readyz").await);
    assert!(!first.is_finished(), "the lock was released early");
    assert_eq!(env.count("orders"), 0);

    locker.batch_execute("ROLLBACK").await.expect("unlock");
    drop(locker);
    let _ = connection.await;
    let reply = first.await.expect("the first request's task");
    assert_eq!(reply.status, 201, "{}", reply.body);
    let created = server.post_order(&token, &key, BODY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.header("idempotent-replayed"), None);
    assert_eq!(env.counts(), (2, 2));
    assert_eq!(server.get(&token, "/readyz").await.status, 200);
}

/// `idemkey_probe_queries_total`, both figures: the database queries that
/// `/readyz` and `/metrics` caused so far.
async fn probe_queries(server: &Server) -> f64 {
    metric(server, "idemkey_probe_queries_total{probe=\"readyz\"}").await
        + metric(server, "idemkey_probe_queries_total{probe=\"outbox\"}").await
}

/// Probe loops that hammer the server while orders are sent.
const PROBE_LOOPS: usize = 300;

/// Probes cannot starve orders: [`PROBE_LOOPS`] concurrent loops of
/// `/readyz` and `/metrics` (exempt from `--max-in-flight`) against a
/// two-connection pool: every order sent
/// meanwhile is created (none waits out `--pool-wait` for a 503), and the
/// probes caused at most one query per figure per second, however many
/// they were.
async fn probes_cannot_starve_orders(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = Arc::new(env.serve(&[
        "--pool-size",
        "2",
        "--sqlite-readers",
        "1",
        // Before probes were cached, PostgreSQL orders waited out 500 ms
        // here in every run. Room is left for the CPU that 300 probe loops
        // take from the orders on a small machine.
        "--pool-wait",
        "2s",
    ]));
    let before = probe_queries(&server).await;
    let started = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Loops that have had at least one probe answered.
    let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // One keep-alive connection per loop, so the probes' load is requests,
    // not connections (past --max-connections the orders would be shed for
    // another reason).
    let addr = server.base.trim_start_matches("http://").to_owned();
    let loops: Vec<_> = (0..PROBE_LOOPS)
        .map(|i| {
            let (stop, probes, addr) = (Arc::clone(&stop), Arc::clone(&probes), addr.clone());
            let running = Arc::clone(&running);
            let path = if i % 2 == 0 { "/readyz" } else { "/metrics" };
            tokio::spawn(async move {
                let stream = TcpStream::connect(&addr).await.expect("connect");
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .expect("handshake");
                tokio::spawn(connection);
                let mut first = true;
                while !stop.load(Ordering::SeqCst) {
                    let request = hyper::Request::get(path)
                        .header("host", &addr)
                        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
                        .expect("a request");
                    // Their answers are not the question here (a busy
                    // writer may make /readyz 503); that they keep coming
                    // is.
                    let response = sender.send_request(request).await.expect("probe");
                    http_body_util::BodyExt::collect(response.into_body())
                        .await
                        .expect("probe body");
                    probes.fetch_add(1, Ordering::SeqCst);
                    if std::mem::take(&mut first) {
                        running.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    // Each loop counts once, at its first answer: the probes of a few fast
    // loops cannot stand in for loops that never got going.
    eventually("every probe loop is running", async || {
        running.load(Ordering::SeqCst) == PROBE_LOOPS
    })
    .await;

    // Orders from 4 clients at once while the probes go on.
    let orders: Vec<_> = (0..4)
        .map(|_| {
            let (server, token) = (Arc::clone(&server), token.clone());
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..10 {
                    let reply = server.post_order(&token, &new_key(), BODY).await;
                    statuses.push((reply.status, reply.body));
                }
                statuses
            })
        })
        .collect();
    let mut answers = Vec::new();
    for order in orders {
        answers.extend(order.await.expect("an order client"));
    }
    stop.store(true, Ordering::SeqCst);
    for probe in loops {
        probe.await.expect("a probe loop");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let sent = probes.load(Ordering::SeqCst);

    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status != 201)
        .collect();
    assert!(
        refused.is_empty(),
        "{} of 40 orders refused while probes ran: {refused:?}",
        refused.len()
    );
    assert_eq!(env.count("orders"), 40);
    let caused = probe_queries(&server).await - before;
    // One query per figure per second, plus the one each may have begun
    // before the start and the one at the end.
    let bound = 2.0 * (elapsed.ceil() + 2.0);
    assert!(
        caused <= bound,
        "{sent} probes in {elapsed:.1} s caused {caused} queries (at most {bound})"
    );
    assert!(sent > caused as u64, "{sent} probes, {caused} queries");
}

on_each_backend!(probes_cannot_starve_orders);

/// What became of one raw HTTP/1.1 exchange.
#[derive(Debug, PartialEq, Eq)]
enum Exchange {
    /// The whole response (the server closed the connection after it).
    Answered(String),
    /// Closed without a byte of response (EOF or reset).
    Closed,
    /// No answer and no close before the guard.
    Hung,
}

/// Sends `request` on a new connection and reads until the server closes
/// it; the minute is only a guard against hanging.
async fn exchange(addr: &str, request: &[u8]) -> Exchange {
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(request).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    match tokio::time::timeout(Duration::from_secs(60), attempt).await {
        Err(_) => Exchange::Hung,
        Ok(Err(_)) => Exchange::Closed,
        Ok(Ok(bytes)) if bytes.is_empty() => Exchange::Closed,
        Ok(Ok(bytes)) => Exchange::Answered(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

fn is_shed(response: &str) -> bool {
    response.starts_with("HTTP/1.1 503 ")
        && response.contains("\r\nretry-after: 1\r\n")
        && response.contains(r#""code":"service-unavailable""#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_get_503_and_memory_stays_bounded() {
    const CAP: usize = 20;
    const ATTEMPTS: usize = 2_000;
    const AT_ONCE: usize = 200;
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let cap = CAP.to_string();
    let server = env.serve(&["--max-connections", &cap, "--body-read-timeout", "300s"]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let probe = b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    // CAP connections, each in an order whose body has not come yet.
    let mut holders = Vec::new();
    for _ in 0..CAP {
        let key = new_key();
        let head = format!(
            "POST /orders HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nIdempotency-Key: {key}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            BODY.len()
        );
        let mut stream = TcpStream::connect(&addr).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("send");
        holders.push(stream);
    }
    // Connections are accepted in order: the holders have every place.
    eventually(
        "the connection cap is reached",
        async || matches!(exchange(&addr, probe).await, Exchange::Answered(r) if is_shed(&r)),
    )
    .await;

    let before = rss_kib(server.pid());
    let mut shed = 0;
    let mut closed = 0;
    let mut unexpected = Vec::new();
    for _ in 0..ATTEMPTS / AT_ONCE {
        let batch: Vec<_> = (0..AT_ONCE)
            .map(|_| {
                let addr = addr.clone();
                tokio::spawn(async move { exchange(&addr, probe).await })
            })
            .collect();
        for attempt in batch {
            match attempt.await.expect("an attempt's task") {
                Exchange::Answered(r) if is_shed(&r) => shed += 1,
                Exchange::Closed => closed += 1,
                other => unexpected.push(other),
            }
        }
    }
    let after = rss_kib(server.pid());
    eprintln!(
        "connection cap {CAP}: {ATTEMPTS} attempts past it, {shed} answered 503, {closed} closed; \
         server VmRSS {before} KiB before, {after} KiB after"
    );
    assert!(unexpected.is_empty(), "{unexpected:?}");
    assert_eq!(shed + closed, ATTEMPTS);
    assert!(shed > 0, "no connection past the cap was answered");
    assert!(
        after < 2 * before + 50 * 1024,
        "server memory grew from {before} KiB to {after} KiB"
    );
    // Liveness answers even past the cap.
    let health = exchange(&addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        matches!(&health, Exchange::Answered(r) if r.starts_with("HTTP/1.1 200 ")),
        "{health:?}"
    );

    // The held orders complete, once each.
    for mut stream in holders {
        stream.write_all(BODY.as_bytes()).await.expect("send body");
        let mut response = String::new();
        stream.read_to_string(&mut response).await.expect("read");
        assert!(response.starts_with("HTTP/1.1 201 "), "{response}");
    }
    assert_eq!(env.counts(), (CAP as u64, CAP as u64));
    // With the places free again, connections are served.
    eventually("connections are served again", async || {
        matches!(exchange(&addr, probe).await, Exchange::Answered(r) if r.starts_with("HTTP/1.1 200 "))
    })
    .await;
}
