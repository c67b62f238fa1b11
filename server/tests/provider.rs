//! The payment provider simulator (`idemkey-server provider`) as a real
//! process on a real PostgreSQL database and a real SQLite file, spoken to
//! over HTTP by hand and by [`ProviderClient`], whose classification of
//! every outcome (charged, not found, declined, retry, uncertain) is checked
//! against what the process really did.

#[macro_use]
mod common;

use std::time::Duration;

use common::{Backend, Env, Reply, Server, new_key};
use idemkey_provider_sim::scope_of;
use idemkey_provider_sim::store::{ChargeWrite, Db, NewCharge};
use idemkey_server::payments::client::{Attempt, ProviderClient};
use uuid::Uuid;

const SECRET_A: &str = "provider-secret-a";
const SECRET_B: &str = "provider-secret-b";

/// A provider on `env`'s database knowing both secrets, with extra flags.
fn provider(env: &Env, extra: &[&str]) -> Server {
    let mut args = vec![
        "--database-url",
        env.url.as_str(),
        "--token",
        SECRET_A,
        "--token",
        SECRET_B,
    ];
    args.extend_from_slice(extra);
    Server::provider(&args)
}

fn client(server: &Server, secret: &str) -> ProviderClient {
    ProviderClient::new(&server.base, secret, Duration::from_secs(10)).expect("a client")
}

/// A key's characters (what the client takes) and its field value.
fn key() -> String {
    new_key().trim_matches('"').to_owned()
}

/// `POST /charges` by hand.
async fn post(server: &Server, secret: &str, key: &str, amount: i64) -> Reply {
    let body = serde_json::json!({
        "order_id": Uuid::new_v4().to_string(),
        "amount_cents": amount,
        "currency": "EUR",
    });
    let response = server
        .client
        .post(format!("{}/charges", server.base))
        .header("authorization", format!("Bearer {secret}"))
        .header("idempotency-key", format!("\"{key}\""))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    Reply::from(response).await
}

/// The ids of the caller's charges, from `GET /charges`.
async fn charge_ids(server: &Server, secret: &str) -> Vec<String> {
    let list = server.get(secret, "/charges").await;
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()["charges"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().expect("an id").to_owned())
        .collect()
}

fn charged(attempt: &Attempt) -> String {
    match attempt {
        Attempt::Charged(found) => found.charge_id.clone(),
        other => panic!("expected a charge, got {other:?}"),
    }
}

async fn a_key_makes_one_charge_and_replays_it(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let (k, order) = (key(), Uuid::new_v4());
    let first = charged(&a.charge(&k, order, 5980, "EUR").await);
    assert!(first.starts_with("ch_"), "{first}");
    assert_eq!(charged(&a.charge(&k, order, 5980, "EUR").await), first);
    assert_eq!(
        charge_ids(&server, SECRET_A).await,
        std::slice::from_ref(&first)
    );
    assert_eq!(env.count("provider_charges"), 1);
    // The body of the charge says what was charged.
    let found = server.get(SECRET_A, &format!("/charges/{k}")).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let json = found.json();
    assert_eq!(
        (
            json["id"].as_str(),
            json["idempotency_key"].as_str(),
            json["order_id"].as_str(),
            json["amount_cents"].as_i64(),
            json["currency"].as_str(),
        ),
        (
            Some(first.as_str()),
            Some(k.as_str()),
            Some(order.to_string().as_str()),
            Some(5980),
            Some("EUR"),
        )
    );
    // Same key, another amount: the layer refuses it, nothing is charged.
    post(&server, SECRET_A, &k, 1000)
        .await
        .assert_problem(422, "idempotency-key-reused");
    assert_eq!(env.count("provider_charges"), 1);
    match a.charge(&k, order, 1000, "EUR").await {
        Attempt::Declined { reason } => {
            assert!(reason.starts_with("idempotency-key-reused"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    // No key, no charge.
    let keyless = server
        .client
        .post(format!("{}/charges", server.base))
        .header("authorization", format!("Bearer {SECRET_A}"))
        .header("content-type", "application/json")
        .body(r#"{"order_id":"8e03978e-40d5-43e8-bc93-6894a57f9324","amount_cents":1,"currency":"EUR"}"#)
        .send()
        .await
        .expect("send");
    Reply::from(keyless)
        .await
        .assert_problem(400, "idempotency-key-missing");
    assert_eq!(env.count("provider_charges"), 1);
    // Lookup finds it; an unknown key is not found.
    assert_eq!(charged(&a.lookup(&k).await), first);
    assert_eq!(a.lookup(&key()).await, Attempt::NotFound);
    server
        .get(SECRET_A, &format!("/charges/{}", key()))
        .await
        .assert_problem(404, "not-found");
}

async fn each_secret_is_its_own_scope(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let (a, b) = (client(&server, SECRET_A), client(&server, SECRET_B));
    let k = key();
    let mine = charged(&a.charge(&k, Uuid::new_v4(), 5980, "EUR").await);
    // B neither sees A's charge nor replays it: the same key is B's own.
    assert_eq!(b.lookup(&k).await, Attempt::NotFound);
    assert!(charge_ids(&server, SECRET_B).await.is_empty());
    let theirs = charged(&b.charge(&k, Uuid::new_v4(), 1090, "EUR").await);
    assert_ne!(theirs, mine);
    assert_eq!(charge_ids(&server, SECRET_A).await, [mine]);
    assert_eq!(charge_ids(&server, SECRET_B).await, [theirs]);
    // Records and charges are kept under the secret's hash, never the secret.
    let scopes = env.sql("SELECT DISTINCT scope FROM provider_charges ORDER BY scope");
    let mut expected = [scope_of(SECRET_A), scope_of(SECRET_B)];
    expected.sort();
    assert_eq!(scopes, expected.join("\n"));
    assert_eq!(
        env.sql(&format!(
            "SELECT count(*) FROM idempotency_records WHERE scope IN ('{SECRET_A}', '{SECRET_B}')"
        )),
        "0"
    );
    // An unknown or missing secret gets 401 on every route.
    let lookup = format!("/charges/{k}");
    for path in ["/charges", lookup.as_str()] {
        server
            .get("not-a-secret", path)
            .await
            .assert_problem(401, "unauthorized");
    }
    post(&server, "not-a-secret", &key(), 5980)
        .await
        .assert_problem(401, "unauthorized");
    let anonymous = server
        .client
        .get(format!("{}/charges", server.base))
        .send()
        .await
        .expect("send");
    Reply::from(anonymous)
        .await
        .assert_problem(401, "unauthorized");
    // A secret the provider does not know (a rotation half done) says
    // nothing about the payment: sent again later, not declined for good.
    // So does a wrong route (a 404 of the provider's fallback).
    let stranger = client(&server, "not-a-secret");
    let moved = ProviderClient::new(
        &format!("{}/v9", server.base),
        SECRET_A,
        Duration::from_secs(5),
    )
    .expect("client");
    for (attempt, what) in [
        (
            stranger.charge(&key(), Uuid::new_v4(), 5980, "EUR").await,
            "unauthorized",
        ),
        (stranger.lookup(&key()).await, "unauthorized"),
        (
            moved.charge(&key(), Uuid::new_v4(), 5980, "EUR").await,
            "not-found",
        ),
    ] {
        match attempt {
            Attempt::Retry { reason, .. } => assert!(reason.contains(what), "{reason}"),
            other => panic!("expected a retry, got {other:?}"),
        }
    }
    assert_eq!(env.count("provider_charges"), 2);
}

async fn a_declined_amount_stores_no_charge(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(
        &env,
        &["--decline-amount", "402", "--decline-amount", "990"],
    );
    let a = client(&server, SECRET_A);
    for amount in [402, 990] {
        let (k, order) = (key(), Uuid::new_v4());
        for _ in 0..2 {
            match a.charge(&k, order, amount, "EUR").await {
                Attempt::Declined { reason } => {
                    assert!(reason.starts_with("payment-declined"), "{reason}");
                }
                other => panic!("expected a decline, got {other:?}"),
            }
        }
        assert_eq!(a.lookup(&k).await, Attempt::NotFound);
    }
    let reply = post(&server, SECRET_A, &key(), 402).await;
    reply.assert_problem(402, "payment-declined");
    assert_eq!(env.count("provider_charges"), 0);
    // Other amounts go through.
    charged(&a.charge(&key(), Uuid::new_v4(), 5980, "EUR").await);
    assert_eq!(env.count("provider_charges"), 1);
}

async fn a_failing_provider_answers_503_before_any_effect(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &["--fail-rate", "1"]);
    let k = key();
    let reply = post(&server, SECRET_A, &k, 5980).await;
    reply.assert_problem(503, "service-unavailable");
    assert_eq!(reply.header("retry-after"), Some("1"));
    match client(&server, SECRET_A)
        .charge(&k, Uuid::new_v4(), 5980, "EUR")
        .await
    {
        Attempt::Retry { after, reason } => {
            assert_eq!(after, Some(Duration::from_secs(1)));
            assert!(reason.starts_with("service-unavailable"), "{reason}");
        }
        other => panic!("expected a retry, got {other:?}"),
    }
    // Lookups fail too; the list (for checks) does not.
    assert!(matches!(
        client(&server, SECRET_A).lookup(&k).await,
        Attempt::Retry { .. }
    ));
    assert!(charge_ids(&server, SECRET_A).await.is_empty());
    assert_eq!(env.count("provider_charges"), 0);
    assert_eq!(env.count("idempotency_records"), 0);
}

async fn a_lost_response_is_uncertain_and_the_lookup_finds_one_charge(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &["--lose-rate", "1", "--lease", "5s"]);
    let a = client(&server, SECRET_A);
    let (k, order) = (key(), Uuid::new_v4());
    for _ in 0..2 {
        match a.charge(&k, order, 5980, "EUR").await {
            Attempt::Uncertain { reason } => {
                assert!(reason.starts_with("connection lost"), "{reason}");
            }
            other => panic!("expected an uncertain outcome, got {other:?}"),
        }
    }
    let found = charged(&a.lookup(&k).await);
    assert_eq!(charge_ids(&server, SECRET_A).await, [found]);
    assert_eq!(env.count("provider_charges"), 1);
    // A decline is not a charge: its answer is not lost.
    assert!(matches!(
        a.charge(&key(), order, 402, "EUR").await,
        Attempt::Declined { .. }
    ));
}

async fn the_demo_switch_loses_the_next_response_only(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let arm = |secret: &str| {
        server
            .client
            .post(format!("{}/faults/lose-next", server.base))
            .header("authorization", format!("Bearer {secret}"))
            .send()
    };
    Reply::from(arm("not-a-secret").await.expect("send"))
        .await
        .assert_problem(401, "unauthorized");
    assert_eq!(arm(SECRET_B).await.expect("send").status(), 204);
    // A decline does not take the switch; the next charge does.
    assert!(matches!(
        a.charge(&key(), Uuid::new_v4(), 402, "EUR").await,
        Attempt::Declined { .. }
    ));
    let (k, order) = (key(), Uuid::new_v4());
    assert!(matches!(
        a.charge(&k, order, 5980, "EUR").await,
        Attempt::Uncertain { .. }
    ));
    // One shot: the retry gets the stored answer.
    let id = charged(&a.charge(&k, order, 5980, "EUR").await);
    assert_eq!(charged(&a.lookup(&k).await), id);
    assert_eq!(charge_ids(&server, SECRET_A).await, [id]);
}

async fn a_restarted_provider_keeps_its_charges_and_replays(backend: Backend) {
    let env = Env::new(backend);
    let (k, order) = (key(), Uuid::new_v4());
    let server = provider(&env, &[]);
    let first = charged(
        &client(&server, SECRET_A)
            .charge(&k, order, 5980, "EUR")
            .await,
    );
    assert!(server.terminate().success());
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let reply = post(&server, SECRET_A, &k, 5980).await;
    // A fresh order id is another payload under the same key.
    reply.assert_problem(422, "idempotency-key-reused");
    assert_eq!(charged(&a.charge(&k, order, 5980, "EUR").await), first);
    assert_eq!(charged(&a.lookup(&k).await), first);
    assert_eq!(charge_ids(&server, SECRET_A).await, [first]);
}

async fn a_slow_provider_is_uncertain_and_a_closed_port_is_a_retry(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &["--latency-ms", "2000"]);
    let impatient =
        ProviderClient::new(&server.base, SECRET_A, Duration::from_millis(300)).expect("client");
    let k = key();
    match impatient.charge(&k, Uuid::new_v4(), 5980, "EUR").await {
        Attempt::Uncertain { reason } => {
            assert!(reason.starts_with("no answer in time"), "{reason}")
        }
        other => panic!("expected an uncertain outcome, got {other:?}"),
    }
    // The latency comes before any effect: the lookup settles it.
    assert_eq!(
        client(&server, SECRET_A).lookup(&k).await,
        Attempt::NotFound
    );
    // Nothing listens on a port just released: nothing was sent.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let closed = ProviderClient::new(
        &format!("http://127.0.0.1:{port}"),
        SECRET_A,
        Duration::from_secs(5),
    )
    .expect("client");
    for attempt in [
        closed.charge(&k, Uuid::new_v4(), 5980, "EUR").await,
        closed.lookup(&k).await,
    ] {
        match attempt {
            Attempt::Retry {
                after: None,
                reason,
            } => {
                assert!(reason.starts_with("cannot connect"), "{reason}");
                assert!(!reason.contains(SECRET_A));
            }
            other => panic!("expected a retry, got {other:?}"),
        }
    }
    assert_eq!(env.count("provider_charges"), 0);
}

/// The store of `env` (migrated) and a new charge of A's to write in it.
async fn open_with_charge(env: &Env) -> (Db, NewCharge) {
    let db = Db::open(&env.url).await.expect("open");
    let charge = NewCharge {
        scope: scope_of(SECRET_A),
        idempotency_key: key(),
        order_id: Uuid::new_v4(),
        amount_cents: 5980,
        currency: "EUR".into(),
    };
    (db, charge)
}

/// Concurrent writes of one key's charge (a request the layer runs again
/// while its first run is still going) make one charge: the unique
/// constraint decides, and every writer gets that charge back.
async fn concurrent_writes_of_one_key_make_one_charge(backend: Backend) {
    let env = Env::new(backend);
    let (db, charge) = open_with_charge(&env).await;
    let writers: Vec<_> = (0..8)
        .map(|_| {
            let (db, charge) = (db.clone(), charge.clone());
            tokio::spawn(async move { db.insert_charge(&charge).await.expect("insert") })
        })
        .collect();
    let mut created = Vec::new();
    let mut existing = Vec::new();
    for writer in writers {
        match writer.await.expect("join") {
            ChargeWrite::Created(c) => created.push(c),
            ChargeWrite::Existing(c) => existing.push(c),
        }
    }
    assert_eq!(created.len(), 1, "{created:?}");
    assert!(existing.iter().all(|c| *c == created[0]), "{existing:?}");
    assert_eq!(
        db.charges(&charge.scope).await.expect("list"),
        [created[0].clone()]
    );
    assert_eq!(
        db.charge(&charge.scope, &charge.idempotency_key)
            .await
            .expect("lookup"),
        Some(created[0].clone())
    );
    assert_eq!(
        db.charge(&scope_of(SECRET_B), &charge.idempotency_key)
            .await
            .expect("lookup"),
        None
    );
    db.store().close();
}

/// PostgreSQL: an insert that waited for another transaction's insert of
/// the same key, which then committed, neither inserts nor sees that row in
/// its snapshot; it runs again and returns the committed charge.
async fn a_charge_committed_while_the_insert_waits_is_returned(backend: Backend) {
    let env = Env::new(backend);
    let (db, charge) = open_with_charge(&env).await;
    let (mut other, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let tx = other.transaction().await.expect("begin");
    let theirs = Uuid::new_v4();
    tx.execute(
        "INSERT INTO provider_charges (id, scope, idempotency_key, order_id, amount_cents, currency) \
         VALUES ($1, $2, $3, $4, 5980, 'EUR')",
        &[&theirs, &charge.scope, &charge.idempotency_key, &charge.order_id],
    )
    .await
    .expect("their insert");
    let writer = {
        let (db, charge) = (db.clone(), charge.clone());
        tokio::spawn(async move { db.insert_charge(&charge).await })
    };
    common::eventually("the insert waits for the lock", async || {
        env.sql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock' \
               AND query LIKE '%provider_charges%'",
        ) == "1"
    })
    .await;
    tx.commit().await.expect("commit");
    match writer.await.expect("join").expect("insert") {
        ChargeWrite::Existing(found) => assert_eq!(found.id, theirs),
        other => panic!("expected their charge, got {other:?}"),
    }
    assert_eq!(env.count("provider_charges"), 1);
    drop(other);
    let _ = task.await;
    db.store().close();
}

/// PostgreSQL: a charge whose insert waits on a row lock is in progress, and
/// a duplicate gets the layer's 409 with `Retry-After`, which the client
/// turns into a retry honouring it. Nothing is charged twice.
async fn a_duplicate_of_a_charge_in_progress_is_a_retry(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let (k, order) = (key(), Uuid::new_v4());
    // Another transaction holds the key's row: the provider's insert waits.
    let (mut other, connection) = tokio_postgres::connect(&env.url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let task = tokio::spawn(connection);
    let tx = other.transaction().await.expect("begin");
    tx.execute(
        "INSERT INTO provider_charges (id, scope, idempotency_key, order_id, amount_cents, currency) \
         VALUES ($1, $2, $3, $4, 5980, 'EUR')",
        &[&Uuid::new_v4(), &scope_of(SECRET_A), &k, &order],
    )
    .await
    .expect("their insert");
    let first = {
        let (a, k) = (a.clone(), k.clone());
        tokio::spawn(async move { a.charge(&k, order, 5980, "EUR").await })
    };
    common::eventually("the charge is in progress", async || {
        common::count_in_flight(&env.url).await == 1
    })
    .await;
    match a.charge(&k, order, 5980, "EUR").await {
        Attempt::Retry {
            after: Some(after),
            reason,
        } => {
            assert!(after >= Duration::from_secs(1), "{after:?}");
            assert!(
                reason.starts_with("idempotency-request-in-progress"),
                "{reason}"
            );
        }
        other => panic!("expected a retry, got {other:?}"),
    }
    tx.rollback().await.expect("rollback");
    // The first either charged once the lock was gone, or gave up on it
    // (`lock_timeout`) and released its claim: never a second charge.
    match first.await.expect("join") {
        Attempt::Charged { .. } | Attempt::Retry { .. } => {}
        other => panic!("unexpected {other:?}"),
    }
    assert!(env.count("provider_charges") <= 1);
    drop(other);
    let _ = task.await;
}

on_postgres!(
    a_charge_committed_while_the_insert_waits_is_returned,
    a_duplicate_of_a_charge_in_progress_is_a_retry,
);

on_each_backend!(
    concurrent_writes_of_one_key_make_one_charge,
    a_key_makes_one_charge_and_replays_it,
    each_secret_is_its_own_scope,
    a_declined_amount_stores_no_charge,
    a_failing_provider_answers_503_before_any_effect,
    a_lost_response_is_uncertain_and_the_lookup_finds_one_charge,
    a_restarted_provider_keeps_its_charges_and_replays,
    the_demo_switch_loses_the_next_response_only,
    a_slow_provider_is_uncertain_and_a_closed_port_is_a_retry,
    the_request_log_shows_every_charge_request_and_lookup,
);

/// The request log shows what the charges table hides: a second charge
/// request under a key (replayed by the layer, or found by the unique key)
/// and the lookups between, per caller.
async fn the_request_log_shows_every_charge_request_and_lookup(backend: Backend) {
    let env = Env::new(backend);
    let server = provider(&env, &[]);
    let a = client(&server, SECRET_A);
    let (k, order) = (key(), Uuid::new_v4());
    let first = charged(&a.charge(&k, order, 5980, "EUR").await);
    assert_eq!(charged(&a.lookup(&k).await), first);
    // Sent again after a lookup: the discipline holds.
    assert_eq!(charged(&a.charge(&k, order, 5980, "EUR").await), first);
    let log = server.provider_requests(SECRET_A).await;
    let kinds: Vec<(&str, &str)> = log
        .iter()
        .map(|r| (r.kind.as_str(), r.idempotency_key.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("request", k.as_str()),
            ("charge", k.as_str()),
            ("lookup", k.as_str()),
            ("request", k.as_str()),
        ],
        "the replay runs no handler"
    );
    assert_eq!(log[1].order_id, Some(order.to_string()));
    assert!(idemkey_testkit::request_log_violations(&log).is_empty());
    // Sent a third time blindly: one charge, but the log shows the resend.
    assert_eq!(charged(&a.charge(&k, order, 5980, "EUR").await), first);
    assert_eq!(env.count("provider_charges"), 1);
    let log = server.provider_requests(SECRET_A).await;
    let violations = idemkey_testkit::request_log_violations(&log);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("without a lookup"), "{violations:?}");
    // Another secret's log is its own, and the list is not logged.
    assert!(server.provider_requests(SECRET_B).await.is_empty());
    assert_eq!(charge_ids(&server, SECRET_A).await, [first]);
    assert_eq!(server.provider_requests(SECRET_A).await.len(), log.len());
}

/// The provider refuses to start without a secret or with a rate outside
/// 0 to 1.
#[test]
fn the_provider_refuses_bad_settings() {
    let no_secret = common::refused_at_start(
        &[
            "provider",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            "sqlite:///tmp/x.db",
        ],
        &[],
    );
    assert!(no_secret.contains("--token"), "{no_secret}");
    let bad_rate =
        common::refused_at_start(&["provider", "--token", "t", "--fail-rate", "1.5"], &[]);
    assert!(bad_rate.contains("from 0 to 1"), "{bad_rate}");
}

/// The simulator listens on loopback only, unless told otherwise.
#[test]
fn the_provider_refuses_a_non_loopback_address_unless_allowed() {
    let env = Env::new(Backend::Sqlite);
    let url = env.url.clone();
    let file = url.strip_prefix("sqlite://").expect("a path").to_owned();
    for bind in ["0.0.0.0:0", "[::]:0"] {
        let refused = common::refused_at_start(
            &[
                "provider",
                "--bind",
                bind,
                "--database-url",
                &url,
                "--token",
                "t",
            ],
            &[],
        );
        assert!(refused.contains("--allow-non-loopback"), "{refused}");
    }
    assert!(
        !std::path::Path::new(&file).exists(),
        "refused before opening anything"
    );
    let mut child = std::process::Command::new(common::BIN)
        .args(["provider", "--bind", "0.0.0.0:0", "--allow-non-loopback"])
        .args(["--database-url", &url, "--token", "t"])
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let listening = std::io::BufRead::lines(std::io::BufReader::new(stderr))
        .map_while(Result::ok)
        .find(|line| line.contains("listening on http://"));
    let _ = child.kill();
    let _ = child.wait();
    let line = listening.expect("it listens");
    assert!(line.contains("listening on http://0.0.0.0:"), "{line}");
}
