//! Test harness: a throwaway database per test, the real `idemkey-server`
//! binary started as child processes, accounts made with its CLI, and an
//! HTTP client.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemkey_testkit::{PgCluster, PgOptions};
use reqwest::{Client, Response};

/// The server binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_idemkey-server");

/// The article's key.
pub const ARTICLE_KEY: &str = r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;

/// A valid order body.
pub const BODY: &str = r#"{"sku":"LIBRO-TS","quantity":2}"#;

/// Which backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// A throwaway PostgreSQL cluster.
    Postgres,
    /// An SQLite file in a temporary directory.
    Sqlite,
}

/// Where a test's cluster comes from.
enum Cluster {
    Shared(&'static PgCluster),
    Own(Box<PgCluster>),
    /// The SQLite file's directory, removed on drop.
    File(std::path::PathBuf),
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Cluster::File(dir) = &self.cluster {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// One test's database.
pub struct Env {
    pub backend: Backend,
    cluster: Cluster,
    pub db: String,
    pub url: String,
}

impl Env {
    /// A fresh database on the process's shared cluster.
    pub fn new(backend: Backend) -> Self {
        if backend == Backend::Sqlite {
            let dir = std::env::temp_dir().join(format!(
                "idemkey-test-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let file = dir.join("idemkey.db");
            return Self {
                backend,
                url: format!("sqlite://{}", file.display()),
                db: file.display().to_string(),
                cluster: Cluster::File(dir),
            };
        }
        let cluster = PgCluster::shared().expect("start PostgreSQL");
        let db = cluster.fresh_database().expect("create database");
        Self {
            backend,
            cluster: Cluster::Shared(cluster),
            db: db.name,
            url: db.url,
        }
    }

    /// A fresh database on a cluster of its own, which the test may stop
    /// and restart.
    pub fn with_own_cluster(backend: Backend, options: PgOptions) -> Self {
        let cluster = PgCluster::start_with(options).expect("start PostgreSQL");
        let url = cluster.create_database("idemkey").expect("create database");
        Self {
            backend,
            cluster: Cluster::Own(Box::new(cluster)),
            db: "idemkey".into(),
            url,
        }
    }

    /// The cluster (for reading its log, say).
    pub fn cluster(&self) -> &PgCluster {
        match &self.cluster {
            Cluster::Shared(c) => c,
            Cluster::Own(c) => c,
            Cluster::File(_) => panic!("no cluster under SQLite"),
        }
    }

    /// The cluster, to stop or restart it (own clusters only).
    pub fn cluster_mut(&mut self) -> &mut PgCluster {
        match &mut self.cluster {
            Cluster::Shared(_) | Cluster::File(_) => panic!("no cluster of this test's own"),
            Cluster::Own(c) => c,
        }
    }

    /// Runs SQL and returns its unaligned output.
    pub fn sql(&self, sql: &str) -> String {
        if self.backend == Backend::Sqlite {
            return sqlite_query(&self.db, sql);
        }
        self.cluster().psql(&self.db, sql).expect("psql")
    }

    /// Rows in `table`.
    pub fn count(&self, table: &str) -> u64 {
        self.sql(&format!("SELECT count(*) FROM {table}"))
            .parse()
            .expect("a count")
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

/// Runs one query on an SQLite file and prints it as psql -A -t would.
fn sqlite_query(path: &str, sql: &str) -> String {
    let conn = rusqlite::Connection::open(path).expect("open sqlite");
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    let mut stmt = conn.prepare(sql).expect("prepare");
    let columns = stmt.column_count();
    let rows = stmt
        .query_map([], |row| {
            let mut cells = Vec::new();
            for i in 0..columns {
                use rusqlite::types::ValueRef;
                cells.push(match row.get_ref(i)? {
                    ValueRef::Null => String::new(),
                    ValueRef::Integer(n) => n.to_string(),
                    ValueRef::Real(x) => x.to_string(),
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    ValueRef::Blob(b) => format!("{b:02x?}"),
                });
            }
            Ok(cells.join("|"))
        })
        .expect("query")
        .collect::<Result<Vec<_>, _>>()
        .expect("rows");
    rows.join("\n")
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

/// Moves every idempotency record of the database at `url` back in time by
/// `by`, as if that much time had passed on the database's clock (which
/// decides leases and windows).
pub async fn age_records(url: &str, by: Duration) {
    let ms = i64::try_from(by.as_millis()).expect("fits");
    if idemkey::store::redis::is_redis_url(url) {
        redis_on_masters(url, AGE_REDIS_RECORDS, ms).await;
        return;
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        let conn = rusqlite::Connection::open(path).expect("open sqlite");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        conn.execute(
            "UPDATE idempotency_records SET created_at = created_at - ?1, \
             lease_until = lease_until - ?1, replay_until = replay_until - ?1",
            [ms],
        )
        .expect("age records");
        return;
    }
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    client
        .execute(
            "UPDATE idempotency_records SET created_at = created_at - $1::int8 * interval '1 ms', \
             lease_until = lease_until - $1 * interval '1 ms', \
             replay_until = replay_until - $1 * interval '1 ms', \
             check_at = check_at - $1 * interval '1 ms'",
            &[&ms],
        )
        .await
        .expect("age records");
    drop(client);
    let _ = task.await;
}

/// How many idempotency records the database at `url` holds.
pub async fn count_records(url: &str) -> i64 {
    if idemkey::store::redis::is_redis_url(url) {
        return redis_on_masters(url, COUNT_REDIS_RECORDS, 0).await;
    }
    count(url, "SELECT count(*) FROM idempotency_records").await
}

/// How many idempotency records of the database at `url` are in flight (a
/// claim not yet completed): how a test knows a request is under way.
pub async fn count_in_flight(url: &str) -> i64 {
    if idemkey::store::redis::is_redis_url(url) {
        return redis_on_masters(url, COUNT_REDIS_IN_FLIGHT, 0).await;
    }
    count(
        url,
        "SELECT count(*) FROM idempotency_records WHERE status = 'in_flight'",
    )
    .await
}

/// The one number `sql` selects from the database at `url`.
async fn count(url: &str, sql: &str) -> i64 {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let conn = rusqlite::Connection::open(path).expect("open sqlite");
        conn.busy_timeout(Duration::from_secs(10))
            .expect("busy timeout");
        return conn.query_row(sql, [], |row| row.get(0)).expect("count");
    }
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let n = client.query_one(sql, &[]).await.expect("count").get(0);
    drop(client);
    let _ = task.await;
    n
}

/// Waits until `done` says a state was reached, polling: tests sequence on
/// what happened, never on how long it took. The minute is only a guard
/// against hanging forever; reaching it fails the test.
pub async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let guard = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(Instant::now() < guard, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Moves every record of a Redis node back by ARGV[1] ms: its times and its
/// expiry, as if that much time had passed on the node's clock. Answers how
/// many records it moved.
const AGE_REDIS_RECORDS: &str = r"
local by = tonumber(ARGV[1])
local keys = redis.call('KEYS', 'idemkey:*')
for _, k in ipairs(keys) do
  for _, f in ipairs({'created', 'lease_until', 'replay_until'}) do
    local v = redis.call('HGET', k, f)
    if v then redis.call('HSET', k, f, string.format('%.0f', tonumber(v) - by)) end
  end
  local at = redis.call('PEXPIRETIME', k)
  if at > 0 then redis.call('PEXPIREAT', k, string.format('%.0f', at - by)) end
end
return #keys
";

/// How many records a Redis node holds.
const COUNT_REDIS_RECORDS: &str = r"return #redis.call('KEYS', 'idemkey:*')";

/// How many records of a Redis node are in flight.
const COUNT_REDIS_IN_FLIGHT: &str = r"
local n = 0
for _, k in ipairs(redis.call('KEYS', 'idemkey:*')) do
  if redis.call('HGET', k, 'status') == 'in_flight' then n = n + 1 end
end
return n
";

/// Runs a test script on every master of the Redis node or cluster at
/// `url` (one connection per node: records live on the master owning their
/// slot) and sums the answers.
pub async fn redis_on_masters(url: &str, script: &str, arg: i64) -> i64 {
    let nodes: Vec<String> = match url.strip_prefix("redis+cluster://") {
        Some(seeds) => seeds.split(',').map(|s| format!("redis://{s}")).collect(),
        None => vec![url.to_owned()],
    };
    let mut total = 0;
    for node in nodes {
        let client = redis::Client::open(node.as_str()).expect("redis url");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis");
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .expect("ROLE");
        if role.first() != Some(&redis::Value::BulkString(b"master".to_vec())) {
            continue;
        }
        let n: i64 = redis::Script::new(script)
            .arg(arg)
            .invoke_async(&mut conn)
            .await
            .expect("run the test script");
        total += n;
    }
    total
}

/// A Redis store of one test's own: a node, or a 3-master cluster with a
/// replica each. Killed when dropped.
pub enum RedisStore {
    /// One node.
    Node(idemkey_testkit::RedisNode),
    /// A cluster.
    Cluster(idemkey_testkit::RedisCluster),
}

impl RedisStore {
    /// A fresh node.
    pub fn node() -> Self {
        Self::Node(idemkey_testkit::RedisNode::start().expect("start redis-server"))
    }

    /// A fresh cluster of 3 masters and 3 replicas.
    pub fn cluster() -> Self {
        Self::Cluster(idemkey_testkit::RedisCluster::start(3, 1).expect("start a Redis Cluster"))
    }

    /// Its URL.
    pub fn url(&self) -> String {
        match self {
            Self::Node(n) => n.url(),
            Self::Cluster(c) => c.url(),
        }
    }
}
