//! Test harness: a throwaway database per test (the testkit's, shared with
//! the library's tests), the real `idemkey-server` binary started as child
//! processes, accounts made with its CLI, and an HTTP client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// Each test binary uses its part of the harness.
#[allow(unused_imports)]
pub use idemkey_testkit::{
    Backend, RedisStore, age_records, count_in_flight, count_records, eventually,
};
use idemkey_testkit::{PgOptions, TestDb};
use reqwest::{Client, Response};

/// The server binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_idemkey-server");

/// The article's key.
pub const ARTICLE_KEY: &str = r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;

/// A valid order body.
pub const BODY: &str = r#"{"sku":"LIBRO-TS","quantity":2}"#;

/// One test's database ([`TestDb`]: its URL, backend and SQL) and what the
/// order service's binary does on it.
pub struct Env(TestDb);

impl Deref for Env {
    type Target = TestDb;

    fn deref(&self) -> &TestDb {
        &self.0
    }
}

impl DerefMut for Env {
    fn deref_mut(&mut self) -> &mut TestDb {
        &mut self.0
    }
}

impl From<TestDb> for Env {
    fn from(db: TestDb) -> Self {
        Self(db)
    }
}

impl Env {
    /// A fresh database on the process's shared cluster.
    pub fn new(backend: Backend) -> Self {
        Self(TestDb::new(backend))
    }

    /// A fresh database on a cluster of its own, which the test may stop
    /// and restart.
    pub fn with_own_cluster(backend: Backend, options: PgOptions) -> Self {
        Self(TestDb::with_own_cluster(backend, options))
    }

    /// `(orders, idempotency records)`.
    pub fn counts(&self) -> (u64, u64) {
        (self.count("orders"), self.count("idempotency_records"))
    }

    /// Creates an account with the CLI and returns its token (the last line
    /// of stdout).
    pub fn account(&self, name: &str) -> String {
        let out = Command::new(BIN)
            .args(["account", "create", name, "--database-url", &self.url])
            .env_remove("DATABASE_URL")
            .output()
            .expect("run account create");
        assert!(
            out.status.success(),
            "account create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        stdout.lines().last().expect("a token line").to_owned()
    }

    /// Runs an `idemkey-server` command on this database; returns whether it
    /// succeeded, its stdout and its stderr.
    pub fn cli(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(BIN)
            .args(args)
            .args(["--database-url", &self.url])
            .env_remove("DATABASE_URL")
            .output()
            .expect("run idemkey-server");
        (
            out.status.success(),
            String::from_utf8(out.stdout).expect("utf-8"),
            String::from_utf8(out.stderr).expect("utf-8"),
        )
    }

    /// Starts `idemkey-server serve` on a free port with extra flags.
    pub fn serve(&self, extra: &[&str]) -> Server {
        Server::start(&self.url, extra, false)
    }

    /// Starts a server with `--test-faults` (and the environment switch).
    pub fn serve_with_faults(&self, extra: &[&str]) -> Server {
        Server::start(&self.url, extra, true)
    }

    /// Starts a server with extra environment variables (`RUST_LOG` among
    /// them replaces the default `info`).
    #[allow(dead_code)]
    pub fn serve_with_env(&self, extra: &[&str], env: &[(&str, String)]) -> Server {
        Server::start_with(&self.url, extra, false, env)
    }

    /// Starts a server whose own clock is off by `offset` (libfaketime's
    /// syntax, e.g. `+2h`), as on a host whose clock drifted; fails unless
    /// its `Date` header shows the skew (see [`assert_skewed`]).
    pub fn serve_skewed(&self, extra: &[&str], offset: &str) -> Server {
        let server = Server::start_with(&self.url, extra, false, &skewed_clock(offset));
        assert_skewed(&server.base, offset);
        server
    }
}

/// Runs `idemkey-server` with these arguments and environment, expecting
/// it to refuse to start: asserts a failing exit (within a guard of 30 s,
/// killing it past that) and returns its stderr.
pub fn refused_at_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("DATABASE_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn idemkey-server");
    let guard = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > guard {
            let _ = child.kill();
            panic!("idemkey-server {args:?} did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{args:?} started: {stderr}");
    stderr
}

/// libfaketime, which the test command installs (Debian's `faketime`).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that runs a process with its wall clock off by `offset`
/// (monotonic time, which timers use, is left alone).
pub fn skewed_clock(offset: &str) -> Vec<(&'static str, String)> {
    assert!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install Debian's faketime (scripts/test.sh does)"
    );
    vec![
        ("LD_PRELOAD", LIBFAKETIME.to_owned()),
        ("FAKETIME", offset.to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
    ]
}

/// Asserts that the process serving `base` runs with its clock off by
/// `offset`, as its own `Date` header says: a skew test whose preload did
/// not take would otherwise pass without any skew. Returns the measured
/// offset in seconds.
pub fn assert_skewed(base: &str, offset: &str) -> i64 {
    idemkey_testkit::check_clock_skew(base, offset).unwrap_or_else(|why| panic!("{why}"))
}

/// Declares each listed `async fn name(Backend)` as a test on every backend.
#[allow(unused_macros)]
macro_rules! on_each_backend {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await;
                }
            )*
        }
    };
}

/// Declares each listed `async fn name(Backend)` as a PostgreSQL-only test.
#[allow(unused_macros)]
macro_rules! on_postgres {
    ($($name:ident),* $(,)?) => {
        mod postgres_only {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await;
                }
            )*
        }
    };
}

/// A running `idemkey-server serve` process.
pub struct Server {
    child: Child,
    pub base: String,
    log: Arc<Mutex<Vec<String>>>,
    pub client: Client,
}

impl Server {
    fn start(url: &str, extra: &[&str], faults: bool) -> Self {
        Self::start_with(url, extra, faults, &[])
    }

    fn start_with(url: &str, extra: &[&str], faults: bool, env: &[(&str, String)]) -> Self {
        Self::spawn(&["serve", "--database-url", url], extra, faults, env)
    }

    /// Starts `idemkey-server fixture` on a free port with these flags.
    pub fn fixture(args: &[&str]) -> Self {
        Self::spawn(&["fixture"], args, false, &[])
    }

    /// Starts `idemkey-server provider` (the payment provider simulator) on
    /// a free port with these flags.
    pub fn provider(args: &[&str]) -> Self {
        Self::spawn(&["provider"], args, false, &[])
    }

    /// A fixture whose own clock is off by `offset` (see [`skewed_clock`]);
    /// fails unless its `Date` header shows the skew.
    pub fn fixture_skewed(args: &[&str], offset: &str) -> Self {
        let fixture = Self::spawn(&["fixture"], args, false, &skewed_clock(offset));
        assert_skewed(&fixture.base, offset);
        fixture
    }

    fn spawn(command: &[&str], extra: &[&str], faults: bool, env: &[(&str, String)]) -> Self {
        let mut cmd = Command::new(BIN);
        cmd.env("RUST_LOG", "info");
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        cmd.args(command)
            .args(["--bind", "127.0.0.1:0"])
            .args(extra)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if faults {
            cmd.arg("--test-faults")
                .env("IDEMKEY_ALLOW_TEST_FAULTS", "1");
        }
        let mut child = cmd.spawn().expect("spawn idemkey-server");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(addr.to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start:\n{}", log.lock().unwrap().join("\n"));
            }
        };
        Self {
            child,
            base: format!("http://{addr}"),
            log,
            client: Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client"),
        }
    }

    /// `GET /metrics`, as text.
    pub async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// How many POST handlers a fixture ran (`GET /counter`).
    pub async fn handler_runs(&self) -> u64 {
        let json: serde_json::Value = self
            .client
            .get(format!("{}/counter", self.base))
            .send()
            .await
            .expect("send")
            .json()
            .await
            .expect("json");
        json["count"].as_u64().expect("a count")
    }

    /// A provider simulator's request log (`GET /requests`) of the caller
    /// with `secret`, in arrival order.
    #[allow(dead_code)]
    pub async fn provider_requests(&self, secret: &str) -> Vec<idemkey_testkit::LoggedRequest> {
        let list = self.get(secret, "/requests").await;
        assert_eq!(list.status, 200, "{}", list.body);
        idemkey_testkit::parse_request_log(&list.json()).expect("a request log")
    }

    /// The server process's id (to read its `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.wait(Duration::from_secs(20))
    }

    /// Waits for the process to exit.
    pub fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `POST /orders` with a token, a key field value and a body.
    pub async fn post_order(&self, token: &str, key: &str, body: &str) -> Reply {
        self.post_order_with(token, key, body, &[]).await
    }

    /// `POST /orders` as a client sends it, not yet sent: for tests that
    /// add their own headers or expect no response at all.
    pub fn order_request(&self, token: &str, key: &str, body: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}/orders", self.base))
            .header("authorization", format!("Bearer {token}"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body.to_owned())
    }

    /// `POST /purchases` with a token, a key field value and a body.
    pub async fn post_purchase(&self, token: &str, key: &str, body: &str) -> Reply {
        let request = self
            .client
            .post(format!("{}/purchases", self.base))
            .header("authorization", format!("Bearer {token}"))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body.to_owned());
        Reply::from(request.send().await.expect("send")).await
    }

    /// `POST /orders` with extra headers.
    pub async fn post_order_with(
        &self,
        token: &str,
        key: &str,
        body: &str,
        extra: &[(&str, &str)],
    ) -> Reply {
        let mut request = self.order_request(token, key, body);
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        Reply::from(request.send().await.expect("send")).await
    }

    /// `GET path` with a token.
    pub async fn get(&self, token: &str, path: &str) -> Reply {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .expect("send");
        Reply::from(response).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- server log ----\n{}", self.log());
        }
    }
}

/// A response, read whole.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    /// Reads a response.
    pub async fn from(response: Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("body of {status}: {e:?}"));
        Self {
            status,
            headers,
            body,
        }
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// The problem's `code`.
    pub fn code(&self) -> String {
        self.json()["code"].as_str().unwrap_or_default().to_owned()
    }

    /// Asserts a problem with this status and code, sent as the contract says.
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "{}",
            self.body
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(self.header("cache-control"), Some("no-store"));
    }
}

/// A fresh key, in header form.
pub fn new_key() -> String {
    format!("\"{}\"", uuid::Uuid::new_v4())
}
