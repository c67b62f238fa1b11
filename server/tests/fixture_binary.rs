//! The `idemkey-server fixture` binary on every backend: processes started
//! with its flags that speak HTTP, two of them on one database, one killed
//! mid-request, one with a skewed clock. The Layer and the fixture's routes
//! in-process are the library's tests (`idemkey/tests/layer.rs`).

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemkey_testkit::{AnyBackend as Backend, AnyDb};

mod common;
use common::{BIN, age_records, count_in_flight, eventually};

/// A fresh store on `backend`.
fn database(backend: Backend) -> AnyDb {
    AnyDb::new(backend)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_refuses_a_non_loopback_bind() {
    let err = common::refused_at_start(&["fixture", "--bind", "0.0.0.0:0"], &[]);
    assert!(err.contains("--allow-non-loopback"), "{err}");
    assert!(err.contains("0.0.0.0:0"), "{err}");
}

// ------------------------------------------------------- the fixture binary

/// A running `idemkey-server fixture`.
struct Fixture {
    child: Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Fixture {
    fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[])
    }

    /// A fixture whose own clock is off by `offset` (libfaketime's syntax);
    /// fails unless its `Date` header shows the skew.
    fn start_skewed(args: &[&str], offset: &str) -> Self {
        let fixture = Self::start_with(args, &common::skewed_clock(offset));
        common::assert_skewed(&fixture.base, offset);
        fixture
    }

    fn start_with(args: &[&str], env: &[(&str, String)]) -> Self {
        use std::io::{BufRead as _, BufReader};
        let mut child = Command::new(BIN)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .args(["fixture", "--bind", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("IDEMKEY_FIXTURE_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the fixture");
        let stderr = child.stderr.take().expect("piped");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        let (tx, rx) = std::sync::mpsc::channel();
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
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!(
                "the fixture did not start:\n{}",
                log.lock().unwrap().join("\n")
            );
        };
        Self {
            child,
            base: format!("http://{addr}"),
            log,
        }
    }

    /// Sends SIGTERM and waits for the process to exit.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..400 {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("the fixture did not stop on SIGTERM");
    }

    /// Kills the process at once (SIGKILL), as a crash would.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    async fn post(&self, path: &str, key: &str) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .header("idempotency-key", key)
            .send()
            .await
            .expect("send")
    }

    async fn count(&self) -> u64 {
        let json: serde_json::Value = reqwest::get(format!("{}/counter", self.base))
            .await
            .expect("send")
            .json()
            .await
            .expect("json");
        json["count"].as_u64().expect("a count")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "---- fixture log ----\n{}",
                self.log.lock().unwrap().join("\n")
            );
        }
    }
}

fn retry_after(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds")
}

/// Two fixture processes on one database: a duplicate sent to the second
/// while the first still runs `/slow` gets 409, then the replay.
async fn a_duplicate_on_another_process_during_slow_gets_409(backend: Backend) {
    let db = database(backend);
    let one = Fixture::start(&["--database-url", &db.url]);
    let two = Fixture::start(&["--database-url", &db.url]);
    let slow = tokio::spawn({
        let base = one.base.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/slow?ms=1500"))
                .header("idempotency-key", "\"p-1\"")
                .send()
                .await
                .expect("send")
        }
    });
    eventually("the first process claimed the key", async || {
        count_in_flight(&db.url).await == 1
    })
    .await;
    let busy = two.post("/slow?ms=1500", "p-1").await;
    assert_eq!(busy.status(), 409);
    assert!(retry_after(&busy) >= 1);
    assert!(retry_after(&busy) <= 30);
    let first = slow.await.expect("join");
    assert_eq!(first.status(), 200);
    assert_eq!(first.text().await.unwrap(), "slept:1500");
    let replay = two.post("/slow?ms=1500", "p-1").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.unwrap(), "slept:1500");
    assert_eq!(one.count().await + two.count().await, 1);
}

/// A process killed while its handler runs leaves a claim; after the lease
/// a retry to a restarted process takes it over.
async fn a_claim_left_by_a_killed_process_is_taken_over_after_its_lease(backend: Backend) {
    let db = database(backend);
    let args = ["--database-url", db.url.as_str(), "--lease", "2s"];
    let doomed = Fixture::start(&args);
    let base = doomed.base.clone();
    let lost = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/slow?ms=1000"))
            .header("idempotency-key", "p-2")
            .send()
            .await
    });
    eventually("the doomed process claimed the key", async || {
        count_in_flight(&db.url).await == 1
    })
    .await;
    doomed.kill();
    assert!(lost.await.expect("join").is_err(), "the response was lost");

    let fixture = Fixture::start(&args);
    let busy = fixture.post("/slow?ms=1000", "p-2").await;
    assert_eq!(busy.status(), 409);
    assert_eq!(retry_after(&busy), 1, "the short hint");
    // The lease ends on the database's clock, which decides it.
    age_records(&db.url, Duration::from_secs(3)).await;
    let taken = fixture.post("/slow?ms=1000", "p-2").await;
    assert_eq!(taken.status(), 200);
    assert!(taken.headers().get("idempotent-replayed").is_none());
    assert_eq!(fixture.count().await, 1);
}

/// Two fixture processes on one PostgreSQL database, the second with its
/// clock an hour ahead (more than the lease and the window): it neither
/// takes over the first one's live claim nor re-executes a key inside its
/// window, because the database's clock decides both. (On SQLite every
/// process reads the host's one clock through SQLite itself.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixture_with_a_skewed_clock_runs_each_handler_once() {
    let db = database(Backend::Postgres);
    let flags = [
        "--database-url",
        db.url.as_str(),
        "--lease",
        "30s",
        "--replay-ttl",
        "10m",
        "--expiry-policy",
        "reexecute",
    ];
    let on_time = Fixture::start(&flags);
    let ahead = Fixture::start_skewed(&flags, "+1h");
    let slow = tokio::spawn({
        let base = on_time.base.clone();
        async move {
            reqwest::Client::new()
                .post(format!("{base}/slow?ms=1500"))
                .header("idempotency-key", "skew-1")
                .send()
                .await
                .expect("send")
        }
    });
    eventually("the on-time process claimed the key", async || {
        count_in_flight(&db.url).await == 1
    })
    .await;
    let busy = ahead.post("/slow?ms=1500", "skew-1").await;
    assert_eq!(busy.status(), 409, "a live claim is not taken over");
    assert_eq!(slow.await.expect("join").status(), 200);
    let replay = ahead.post("/slow?ms=1500", "skew-1").await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    assert_eq!(on_time.post("/echo", "skew-2").await.status(), 201);
    let again = ahead.post("/echo", "skew-2").await;
    assert_eq!(
        again.headers()["idempotent-replayed"],
        "true",
        "inside the window"
    );
    assert_eq!(on_time.count().await + ahead.count().await, 2);
}

/// `--replay-ttl` and `--expiry-policy` on the command line.
async fn the_fixture_applies_its_expiry_flags(backend: Backend) {
    for (policy, expect) in [("reject", 410), ("reexecute", 201)] {
        let db = database(backend);
        let fixture = Fixture::start(&[
            "--database-url",
            &db.url,
            "--replay-ttl",
            "1s",
            "--expiry-policy",
            policy,
        ]);
        assert_eq!(fixture.post("/echo", "p-3").await.status(), 201);
        assert_eq!(fixture.post("/echo", "p-3").await.status(), 201);
        // Past the window on the database's clock, which decides it.
        age_records(&db.url, Duration::from_secs(2)).await;
        let after = fixture.post("/echo", "p-3").await;
        assert_eq!(after.status().as_u16(), expect, "{policy}");
        let runs = if policy == "reject" { 1 } else { 2 };
        assert_eq!(fixture.count().await, runs, "{policy}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_defaults_to_a_fresh_sqlite_file_and_resets_its_counter() {
    let fixture = Fixture::start(&[]);
    let reply = fixture.post("/echo", "p-4").await;
    assert_eq!(reply.status(), 201);
    assert_eq!(reply.headers()["cache-control"], "no-store");
    assert_eq!(fixture.count().await, 1);
    let reset = reqwest::Client::new()
        .post(format!("{}/reset", fixture.base))
        .send()
        .await
        .expect("send");
    assert_eq!(reset.status(), 204, "outside the layer: no key needed");
    assert_eq!(fixture.count().await, 0);
    let log = fixture.log.lock().unwrap().join("\n");
    let path = log
        .split("path=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no database path logged:\n{log}"))
        .to_owned();
    assert!(path.contains("idemkey-fixture-"), "{path}");
    assert!(std::path::Path::new(&path).exists(), "{path}");
    // A clean stop removes the temporary database.
    let status = fixture.terminate();
    assert!(status.success(), "{status}");
    assert!(!std::path::Path::new(&path).exists(), "{path} left behind");
}

mod fixture_binary {
    macro_rules! both {
        ($($scenario:ident),* $(,)?) => {
            $(
                mod $scenario {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn sqlite() {
                        super::super::$scenario(super::super::Backend::Sqlite).await;
                    }
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn postgres() {
                        super::super::$scenario(super::super::Backend::Postgres).await;
                    }
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn redis() {
                        super::super::$scenario(super::super::Backend::Redis).await;
                    }
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn redis_cluster() {
                        super::super::$scenario(super::super::Backend::RedisCluster).await;
                    }
                }
            )*
        };
    }
    both!(
        a_duplicate_on_another_process_during_slow_gets_409,
        a_claim_left_by_a_killed_process_is_taken_over_after_its_lease,
        the_fixture_applies_its_expiry_flags,
    );
}
