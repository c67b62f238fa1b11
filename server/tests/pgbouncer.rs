//! idemkey behind PgBouncer in transaction pooling mode (Debian's 1.18: no
//! prepared-statement tracking, no startup `options`): the real server
//! binary over real HTTP, through a throwaway PgBouncer whose pool (2
//! server connections) is smaller than the clients' (4 per process), so
//! consecutive transactions of one client connection land on different
//! server connections. The role's `lock_timeout` and `statement_timeout`
//! are set on PostgreSQL, as docs/pgbouncer.md says. `in_transaction`
//! through PgBouncer is the library's `idemkey/tests/pgbouncer.rs`.

mod common;

use std::process::Command;

use common::{BIN, BODY, Backend, Env, Reply, Server, new_key};
use idemkey_testkit::{BouncedDb, PgBouncer, PgBouncerOptions};

/// Sends every request at once; the replies in completion order.
async fn send_all(requests: Vec<reqwest::RequestBuilder>) -> Vec<Reply> {
    let mut tasks = tokio::task::JoinSet::new();
    for request in requests {
        tasks.spawn(async move { Reply::from(request.send().await.expect("send")).await });
    }
    tasks.join_all().await
}

/// Server connections PgBouncer opens to the database.
const BOUNCER_POOL: u32 = 2;

/// A fresh database, its role's timeouts set, and a PgBouncer in front.
struct Bounced {
    env: Env,
    bouncer: PgBouncer,
    /// The database through PgBouncer.
    url: String,
}

fn bounced() -> Bounced {
    bounced_with(true)
}

fn bounced_with(role_timeouts: bool) -> Bounced {
    // `env.serve` connects through PgBouncer; `env.sql` stays direct.
    let BouncedDb { db, bouncer } = BouncedDb::start(BOUNCER_POOL, role_timeouts);
    Bounced {
        url: db.url.clone(),
        env: Env::from(db),
        bouncer,
    }
}

impl Bounced {
    /// `idemkey-server ARGS --database-url <through PgBouncer> --pg-pooler
    /// transaction`, run to its end.
    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .args(["--database-url", &self.url, "--pg-pooler", "transaction"])
            .env_remove("DATABASE_URL")
            .env_remove("IDEMKEY_PG_POOLER")
            .output()
            .expect("run idemkey-server")
    }

    /// An account made with the CLI through PgBouncer; its token.
    fn account(&self, name: &str) -> String {
        let out = self.cli(&["account", "create", name]);
        assert!(
            out.status.success(),
            "account create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        stdout.lines().last().expect("a token").to_owned()
    }

    /// A server through PgBouncer with 4 connections of its own.
    fn serve(&self) -> Server {
        self.env
            .serve(&["--pg-pooler", "transaction", "--pool-size", "4"])
    }

    /// PgBouncer's client and server connections to the database.
    fn connections(&self) -> (usize, usize) {
        let count = |what: &str| {
            let list = self.bouncer.admin(&format!("SHOW {what}")).expect("admin");
            list.lines()
                .filter(|line| line.split('|').nth(2) == Some(self.env.db.as_str()))
                .count()
        };
        (count("CLIENTS"), count("SERVERS"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_replays_and_422_through_pgbouncer() {
    let b = bounced();
    let token = b.account("shop");
    let server = b.serve();

    let key = new_key();
    let first = server.post_order(&token, &key, BODY).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let again = server.post_order(&token, &key, BODY).await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (201, first.body.as_str())
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    server
        .post_order(&token, &key, r#"{"sku":"LIBRO-TS","quantity":3}"#)
        .await
        .assert_problem(422, "idempotency-key-reused");

    // Many new orders at once: the server's 4 connections share PgBouncer's
    // 2, so a statement prepared on one would be missing on the other.
    let replies = send_all(
        (0..40)
            .map(|_| server.order_request(&token, &new_key(), BODY))
            .collect(),
    )
    .await;
    for reply in &replies {
        assert_eq!(reply.status, 201, "{}", reply.body);
    }
    let (clients, servers) = b.connections();
    assert!(
        clients > servers && servers <= BOUNCER_POOL as usize,
        "{clients} client connections on {servers} server connections"
    );
    assert_eq!(b.env.count("orders"), 41);

    // The reads: one order, the recent ones, a key's lookup.
    let id = first.json()["id"].as_str().expect("an id").to_owned();
    let order = server.get(&token, &format!("/orders/{id}")).await;
    assert_eq!(order.status, 200, "{}", order.body);
    let recent = server.get(&token, "/orders").await;
    assert_eq!(recent.status, 200, "{}", recent.body);
    assert!(recent.body.contains(&id), "{}", recent.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_same_key_requests_over_two_processes_make_one_order() {
    let b = bounced();
    let token = b.account("shop");
    let (one, two) = (b.serve(), b.serve());
    let key = new_key();
    let replies = send_all(
        (0..200)
            .map(|i| {
                let server = if i % 2 == 0 { &one } else { &two };
                server.order_request(&token, &key, BODY)
            })
            .collect(),
    )
    .await;
    let first = &replies[0];
    assert_eq!(first.status, 201, "{}", first.body);
    for reply in &replies {
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (201, first.body.as_str())
        );
    }
    let replayed = replies
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("true"))
        .count();
    assert_eq!(replayed, 199);
    assert_eq!(b.env.counts(), (1, 1));
    let (clients, servers) = b.connections();
    assert!(
        clients > servers && servers <= BOUNCER_POOL as usize,
        "{clients} client connections on {servers} server connections"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_through_pgbouncer_once_from_two_processes() {
    let b = bounced();
    let spawn = || {
        Command::new(BIN)
            .args([
                "migrate",
                "--database-url",
                &b.url,
                "--pg-pooler",
                "transaction",
            ])
            .env_remove("DATABASE_URL")
            .output()
    };
    let (first, second) = std::thread::scope(|s| {
        let a = s.spawn(spawn);
        let b = s.spawn(spawn);
        (a.join().unwrap(), b.join().unwrap())
    });
    for out in [first.expect("migrate"), second.expect("migrate")] {
        assert!(
            out.status.success(),
            "migrate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every migration file, each recorded once.
    assert_eq!(
        b.env.sql(
            "SELECT string_agg(component || '/' || version, ',' ORDER BY component, version) \
             FROM idemkey_migrations"
        ),
        "orders/1,orders/2,orders/3,orders/4,outbox/1,outbox/2,records/1,records/2,records/3,records/4,steps/1"
    );
    // No session is left holding a lock (a session-level advisory lock
    // would stay on a server connection after its client went away).
    assert_eq!(
        b.env
            .sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_on_postgres_through_pgbouncer() {
    let b = bounced();
    let fixture = Server::fixture(&["--database-url", &b.url, "--pg-pooler", "transaction"]);
    let echo = |key: &str, body: &'static str| {
        fixture
            .client
            .post(format!("{}/echo", fixture.base))
            .header("idempotency-key", key)
            .header("content-type", "text/plain")
            .body(body)
    };
    let send = async |request: reqwest::RequestBuilder| {
        Reply::from(request.send().await.expect("send")).await
    };
    let first = send(echo("k-1", "one")).await;
    assert_eq!((first.status, first.body.as_str()), (201, "one"));
    let again = send(echo("k-1", "one")).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    send(echo("k-1", "two"))
        .await
        .assert_problem(422, "idempotency-key-reused");
    let replies = send_all((0..30).map(|i| echo(&format!("many-{i}"), "x")).collect()).await;
    assert!(replies.iter().all(|r| r.status == 201));
    assert_eq!(fixture.handler_runs().await, 31);
}

/// `idemkey-server migrate` through `url` without `--pg-pooler`: it must
/// fail; what it said.
fn refused_without_flag(url: &str) -> String {
    let out = Command::new(BIN)
        .args(["migrate", "--database-url", url])
        .env_remove("DATABASE_URL")
        .env_remove("IDEMKEY_PG_POOLER")
        .output()
        .expect("run");
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_the_role_must_hold_the_timeouts() {
    // Without the role's settings, the server refuses to start and says
    // what to run.
    let b = bounced_with(false);
    let out = b.cli(&["migrate"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ALTER ROLE"), "{stderr}");
    // Without --pg-pooler, PgBouncer refuses the startup parameter that
    // carries the timeouts of a direct connection, and the error says
    // which flag the user forgot.
    let stderr = refused_without_flag(&b.url);
    assert!(
        stderr.contains("unsupported startup parameter: options"),
        "{stderr}"
    );
    assert!(stderr.contains("use --pg-pooler transaction"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooler_that_drops_the_startup_options_is_detected() {
    // `ignore_startup_parameters = options`: PgBouncer accepts the
    // connection and drops the timeouts; without --pg-pooler the server
    // would run with none and with named statements: it refuses to start.
    let env = Env::new(Backend::Postgres);
    let bouncer = PgBouncer::start_with(
        env.cluster(),
        PgBouncerOptions::new().ignore_startup_parameter("options"),
    )
    .expect("start pgbouncer");
    let stderr = refused_without_flag(&bouncer.url(&env.db));
    assert!(stderr.contains("--pg-pooler transaction"), "{stderr}");
}
