//! An order's payment end to end, with real processes over real HTTP: the
//! order service (its outbox worker inside `serve`, or `idemkey-server
//! worker` processes), and the payment provider simulator on its own
//! database. Every order ends with exactly one charge of its amount, keyed
//! by its derived key, whatever answers get lost.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{BIN, BODY, Backend, Env, Server, age_records, eventually, new_key};
use idemkey_core::{IdempotencyKey, KeyProfile, ORDER_OPERATION, instance_downstream_key_of};

const SECRET: &str = "payments-test-secret";

fn provider(env: &Env, extra: &[&str]) -> Server {
    let mut args = vec!["--database-url", env.url.as_str(), "--token", SECRET];
    args.extend_from_slice(extra);
    Server::provider(&args)
}

/// The outbox flags of `serve` and `worker`: fast retries for tests.
fn payments_flags(provider: &Server) -> Vec<String> {
    [
        "--payments-url",
        &provider.base,
        "--payments-token",
        SECRET,
        "--payments-timeout",
        "2s",
        "--outbox-lease",
        "10s",
        "--outbox-retry-base",
        "50ms",
        "--outbox-retry-cap",
        "200ms",
        "--outbox-poll",
        "50ms",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The provider's charges: `(idempotency key, order id, amount, currency)`.
async fn charges(provider: &Server) -> Vec<(String, String, i64, String)> {
    let list = provider.get(SECRET, "/charges").await;
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()["charges"]
        .as_array()
        .expect("charges")
        .iter()
        .map(|c| {
            (
                c["idempotency_key"].as_str().unwrap().to_owned(),
                c["order_id"].as_str().unwrap().to_owned(),
                c["amount_cents"].as_i64().unwrap(),
                c["currency"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The derived key of the order `order` created under `key` by `account`:
/// the order's own, so a second order of a re-executed key has another.
fn derived(account: &str, key: &str, order: &str) -> String {
    let key = IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key");
    instance_downstream_key_of(
        account,
        ORDER_OPERATION.as_str(),
        key.as_str(),
        "charge",
        order,
    )
    .to_string()
}

/// The provider's request log holds to the delivery discipline: at most
/// one run of the charge handler per order, a lookup before every resend.
/// Returns the log.
async fn assert_discipline(provider: &Server) -> Vec<idemkey_testkit::LoggedRequest> {
    let log = provider.provider_requests(SECRET).await;
    let violations = idemkey_testkit::request_log_violations(&log);
    assert!(violations.is_empty(), "{violations:?}\n{log:?}");
    log
}

fn account_of(env: &Env) -> String {
    env.sql("SELECT id FROM accounts LIMIT 1")
}

/// Places an order under a new key; its id.
async fn place(server: &Server, token: &str) -> String {
    let created = server.post_order(token, &new_key(), BODY).await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.json()["id"].as_str().unwrap().to_owned()
}

async fn payment(server: &Server, token: &str, id: &str) -> serde_json::Value {
    server.get(token, &format!("/orders/{id}")).await.json()["payment"].clone()
}

#[tokio::test]
async fn an_order_is_charged_once_with_its_amount_under_its_derived_key() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        let flags = payments_flags(&provider);
        let server = env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>());
        let key = new_key();
        let created = server.post_order(&token, &key, BODY).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let id = created.json()["id"].as_str().unwrap().to_owned();
        eventually("the order is charged", async || {
            payment(&server, &token, &id).await["status"] == "charged"
        })
        .await;
        let charges = charges(&provider).await;
        let expected = derived(&account_of(&env), &key, &id);
        assert_eq!(
            charges,
            [(expected.clone(), id.clone(), 5980, "EUR".to_owned())],
            "{backend:?}"
        );
        let paid = payment(&server, &token, &id).await;
        assert_eq!(paid["attempts"], 1);
        assert!(
            paid["charge_id"].as_str().unwrap().starts_with("ch_"),
            "{paid}"
        );
        // A replay of the order neither re-enqueues nor re-charges.
        server.post_order(&token, &key, BODY).await;
        assert_eq!(env.count("outbox"), 1);
        assert_eq!(
            env.sql("SELECT downstream_key FROM outbox"),
            expected,
            "the key sent is recorded"
        );
        let metrics = server.metrics().await;
        assert!(
            metrics.contains(
                r#"idemkey_outbox_deliveries_total{effect="charge",outcome="delivered"} 1"#
            ),
            "{metrics}"
        );
        assert!(metrics.contains("idemkey_outbox_pending 0"), "{metrics}");
        // One charge request, one run of the handler, no lookup needed.
        let counts: Vec<(String, idemkey_testkit::KeyCounts)> =
            idemkey_testkit::counts_by_key(&assert_discipline(&provider).await)
                .into_iter()
                .map(|(k, c)| (k.to_owned(), c))
                .collect();
        let once = idemkey_testkit::KeyCounts {
            requests: 1,
            lookups: 0,
            charges: 1,
        };
        assert_eq!(counts, [(expected, once)], "{backend:?}");
    }
}

#[tokio::test]
async fn a_charge_whose_answer_is_lost_is_looked_up_and_charged_once() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        // Every charge commits at the provider, then its answer is lost.
        let provider = provider(&provider_env, &["--lose-rate", "1"]);
        let flags = payments_flags(&provider);
        let server = env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>());
        let mut ids = Vec::new();
        for _ in 0..3 {
            let created = server.post_order(&token, &new_key(), BODY).await;
            ids.push(created.json()["id"].as_str().unwrap().to_owned());
        }
        for id in &ids {
            eventually("the order is charged", async || {
                payment(&server, &token, id).await["status"] == "charged"
            })
            .await;
            // Sent once (answer lost), then found by the look-up.
            assert_eq!(payment(&server, &token, id).await["attempts"], 2);
        }
        let charges = charges(&provider).await;
        assert_eq!(charges.len(), 3, "{backend:?}: {charges:?}");
        // Each order: one charge request (its answer lost), then lookups
        // only: never sent twice.
        let log = assert_discipline(&provider).await;
        for (key, counts) in idemkey_testkit::counts_by_key(&log) {
            assert_eq!((counts.requests, counts.charges), (1, 1), "{key}: {log:?}");
            assert!(counts.lookups >= 1, "{key}: {log:?}");
        }
        let orders: HashSet<&str> = charges.iter().map(|c| c.1.as_str()).collect();
        assert_eq!(orders, ids.iter().map(String::as_str).collect());
        let metrics = server.metrics().await;
        for (outcome, n) in [("uncertain", 3), ("delivered", 3)] {
            let line = format!(
                r#"idemkey_outbox_deliveries_total{{effect="charge",outcome="{outcome}"}} {n}"#
            );
            assert!(metrics.contains(&line), "{line}\n{metrics}");
        }
    }
}

#[tokio::test]
async fn a_declined_charge_fails_the_payment_for_good() {
    let (env, provider_env) = (Env::new(Backend::Sqlite), Env::new(Backend::Sqlite));
    let token = env.account("shop");
    let provider = provider(&provider_env, &[]);
    let flags = payments_flags(&provider);
    let server = env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let created = server
        .post_order(&token, &new_key(), r#"{"sku":"DECLINE-TEST","quantity":1}"#)
        .await;
    assert_eq!(created.json()["amount_cents"], 402);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    eventually("the payment fails", async || {
        payment(&server, &token, &id).await["status"] == "failed"
    })
    .await;
    let failed = payment(&server, &token, &id).await;
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .contains("payment-declined"),
        "{failed}"
    );
    assert_eq!(failed["attempts"], 1);
    assert!(charges(&provider).await.is_empty());
    assert_eq!(
        env.sql("SELECT status FROM outbox"),
        "failed",
        "never sent again"
    );
}

/// An `idemkey-server worker` process, killed on drop.
struct WorkerProcess(Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(env: &Env, flags: &[String]) -> WorkerProcess {
    WorkerProcess(
        Command::new(BIN)
            .args(["worker", "--database-url", &env.url])
            .args(flags)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_on_postgres_deliver_500_messages_each_once() {
    let (env, provider_env) = (Env::new(Backend::Postgres), Env::new(Backend::Postgres));
    let token = env.account("shop");
    let provider = provider(&provider_env, &[]);
    // Orders only: nobody delivers yet.
    let server = env.serve(&["--outbox-workers", "0"]);
    let n = 500;
    let mut pending = tokio::task::JoinSet::new();
    let server = std::sync::Arc::new(server);
    for i in 0..n {
        let (server, token) = (std::sync::Arc::clone(&server), token.clone());
        pending.spawn(async move {
            let body = format!(r#"{{"sku":"TAZA-01","quantity":{}}}"#, i % 20 + 1);
            server.post_order(&token, &new_key(), &body).await.status
        });
        if pending.len() >= 16 {
            assert_eq!(pending.join_next().await.unwrap().unwrap(), 201);
        }
    }
    while let Some(status) = pending.join_next().await {
        assert_eq!(status.unwrap(), 201);
    }
    assert_eq!(
        env.sql("SELECT count(*) FROM outbox WHERE status = 'pending'"),
        n.to_string()
    );
    let flags = payments_flags(&provider);
    let (_one, _two) = (worker(&env, &flags), worker(&env, &flags));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while env.sql("SELECT count(*) FROM outbox WHERE status = 'delivered'") != n.to_string() {
        assert!(std::time::Instant::now() < deadline, "not all delivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each message was claimed once (no worker delivered another's), and
    // the provider holds one charge per order with its amount.
    assert_eq!(
        env.sql("SELECT count(*) FROM outbox WHERE attempts <> 1"),
        "0"
    );
    let charges = charges(&provider).await;
    assert_eq!(charges.len(), n);
    let amounts: std::collections::HashMap<String, i64> = env
        .sql("SELECT id || '|' || amount_cents FROM orders")
        .lines()
        .map(|l| {
            let (id, amount) = l.split_once('|').unwrap();
            (id.to_owned(), amount.parse().unwrap())
        })
        .collect();
    let keys: HashSet<&str> = charges.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(keys.len(), n, "one key per order");
    for (_, order, amount, _) in &charges {
        assert_eq!(amounts.get(order), Some(amount), "{order}");
    }
    let log = assert_discipline(&provider).await;
    assert_eq!(log.iter().filter(|r| r.kind == "request").count(), n);
}

#[tokio::test]
async fn a_dead_letter_is_listed_and_sent_back_by_the_operator() {
    let (env, provider_env) = (Env::new(Backend::Sqlite), Env::new(Backend::Sqlite));
    let token = env.account("shop");
    // A provider that fails every charge (503): the budget of 2 runs out.
    let failing = provider(&provider_env, &["--fail-rate", "1"]);
    let mut flags = payments_flags(&failing);
    flags.extend(["--outbox-max-attempts", "2"].map(str::to_owned));
    let server = env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let id = place(&server, &token).await;
    eventually("the payment gives up", async || {
        payment(&server, &token, &id).await["status"] == "failed"
    })
    .await;
    let failed = payment(&server, &token, &id).await;
    assert!(
        failed["reason"].as_str().unwrap().contains("2 attempts"),
        "{failed}"
    );
    assert!(server.metrics().await.contains("idemkey_outbox_dead 1"));
    drop(server);
    let (ok, listed, err) = env.cli(&["outbox", "list", "--status", "dead"]);
    assert!(ok, "{err}");
    let line = listed.lines().nth(1).expect("one dead letter");
    assert!(
        line.contains(&id) && line.contains("\tdead\t2\tcharge\t"),
        "{listed}"
    );
    // The provider recovers; the operator sends the letter back.
    drop(failing);
    let healthy = provider(&provider_env, &[]);
    let (ok, out, err) = env.cli(&["outbox", "retry", "--all-dead"]);
    assert!(ok && out.contains("1 message"), "{out}{err}");
    let flags = payments_flags(&healthy);
    let server = env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    eventually("the order is charged", async || {
        payment(&server, &token, &id).await["status"] == "charged"
    })
    .await;
    assert_eq!(charges(&healthy).await.len(), 1);
    // A retry of a letter that is not dead is refused.
    let (ok, _, _) = env.cli(&["outbox", "retry", "1"]);
    assert!(!ok);
}

/// A server that delivers nothing itself (`worker` processes do) and runs a
/// key anew after its one-hour window.
const REEXECUTING: [&str; 6] = [
    "--outbox-workers",
    "0",
    "--expiry-policy",
    "reexecute",
    "--replay-ttl",
    "1h",
];

/// A port nothing listens on (just released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The outbox row of an order: `status|attempts`.
fn message_of(env: &Env, order: &str) -> String {
    env.sql(&format!(
        "SELECT status || '|' || attempts FROM outbox WHERE resource_id = '{order}'"
    ))
}

/// Under `--expiry-policy reexecute`, a key sent again after its window
/// creates a second order. Each order is charged once, with its own
/// amount, under its own key: the second order's delivery, retried after
/// the provider was unreachable, looks up its own key and never takes the
/// first order's charge for its own. The provider loses the answer of
/// every charge, so each is found by a lookup.
#[tokio::test]
async fn each_order_of_a_re_executed_key_is_charged_once_with_its_own_amount() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &["--lose-rate", "1"]);
        let server = env.serve(&REEXECUTING);
        let flags = payments_flags(&provider);
        let key = new_key();
        let first = server.post_order(&token, &key, BODY).await;
        assert_eq!(first.status, 201, "{}", first.body);
        let first = first.json()["id"].as_str().unwrap().to_owned();
        let delivering = worker(&env, &flags);
        eventually("the first order is charged", async || {
            payment(&server, &token, &first).await["status"] == "charged"
        })
        .await;
        drop(delivering);
        // Past the key's window on the database's clock: the key runs anew.
        age_records(&env.url, Duration::from_secs(7200)).await;
        // The same payload (another one is refused under a key even after
        // its window): a new order, with the same amount.
        let second = server.post_order(&token, &key, BODY).await;
        assert_eq!(second.status, 201, "{}", second.body);
        let second = second.json()["id"].as_str().unwrap().to_owned();
        assert_ne!(first, second);
        // Its first delivery finds the provider unreachable.
        let mut unreachable = payments_flags(&provider);
        unreachable[1] = format!("http://127.0.0.1:{}", closed_port());
        let failing = worker(&env, &unreachable);
        eventually("the second order's first delivery fails", async || {
            !env.sql(&format!(
                "SELECT coalesce(last_error, '') FROM outbox WHERE resource_id = '{second}'"
            ))
            .is_empty()
        })
        .await;
        drop(failing);
        assert!(
            message_of(&env, &second).starts_with("pending|"),
            "{}",
            message_of(&env, &second)
        );
        let _delivering = worker(&env, &flags);
        eventually("the second order is charged", async || {
            payment(&server, &token, &second).await["status"] == "charged"
        })
        .await;
        let account = account_of(&env);
        let charges = charges(&provider).await;
        assert_eq!(
            charges
                .iter()
                .map(|c| (c.0.as_str(), c.1.as_str(), c.2))
                .collect::<Vec<_>>(),
            [
                (
                    derived(&account, &key, &first).as_str(),
                    first.as_str(),
                    5980
                ),
                (
                    derived(&account, &key, &second).as_str(),
                    second.as_str(),
                    5980
                ),
            ],
            "{backend:?}"
        );
        // Each order shows its own charge.
        let ids = provider.get(SECRET, "/charges").await.json()["charges"].clone();
        for (i, order) in [&first, &second].into_iter().enumerate() {
            assert_eq!(
                payment(&server, &token, order).await["charge_id"],
                ids[i]["id"],
                "{backend:?} {order}"
            );
        }
        let log = assert_discipline(&provider).await;
        for (key, counts) in idemkey_testkit::counts_by_key(&log) {
            assert_eq!((counts.requests, counts.charges), (1, 1), "{key}: {log:?}");
        }
    }
}

/// A provider that does not take the request (401: a secret it does not
/// know) has not declined the payment: the message is retried up to the
/// dead-letter limit, never marked failed. The operator sends it back once
/// the secret is fixed, and also a payment an earlier version marked failed
/// for such a reason; a message older than the provider's key retention
/// (at the database's clock) is refused unless forced or the retention
/// says otherwise.
#[tokio::test]
async fn an_auth_failure_is_retried_and_the_operator_sends_it_back() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        let server = env.serve(&["--outbox-workers", "0"]);
        let mut orders = Vec::new();
        for _ in 0..2 {
            orders.push(place(&server, &token).await);
        }
        let mut wrong = payments_flags(&provider);
        wrong[3] = "not-the-secret".into();
        wrong.extend(["--outbox-max-attempts", "2"].map(str::to_owned));
        let refused = worker(&env, &wrong);
        eventually("both messages run out of attempts", async || {
            env.sql("SELECT count(*) FROM outbox WHERE status <> 'pending'") == "2"
        })
        .await;
        drop(refused);
        assert_eq!(
            env.sql("SELECT status || '|' || attempts FROM outbox ORDER BY id"),
            "dead|2\ndead|2",
            "{backend:?}: a 401 is not a decline"
        );
        let error = env.sql("SELECT last_error FROM outbox ORDER BY id LIMIT 1");
        assert!(error.contains("unauthorized"), "{error}");
        let ids: Vec<String> = env
            .sql("SELECT id FROM outbox ORDER BY id")
            .lines()
            .map(str::to_owned)
            .collect();
        let (a, b) = (ids[0].as_str(), ids[1].as_str());
        // As an earlier version left it: failed for good for a 401.
        env.sql(&format!(
            "UPDATE outbox SET status = 'failed', result = 'unauthorized: no', \
             last_error = NULL WHERE id = {b}"
        ));
        // Both older than the provider's key retention, by the database.
        env.sql(match backend {
            Backend::Postgres => "UPDATE outbox SET created_at = created_at - interval '2 days'",
            Backend::Sqlite => "UPDATE outbox SET created_at = created_at - 172800000",
        });
        let (ok, out, err) = env.cli(&["outbox", "retry", "--all-dead"]);
        assert!(!ok, "{out}{err}");
        assert!(
            err.contains("older than the provider's key retention") && err.contains(a),
            "{err}"
        );
        assert!(out.contains("0 message"), "{out}");
        let (ok, _, err) = env.cli(&["outbox", "retry", b]);
        assert!(!ok && err.contains("--force"), "{err}");
        assert_eq!(
            env.sql("SELECT status FROM outbox ORDER BY id"),
            "dead\nfailed",
            "refused: nothing changed"
        );
        // The provider keeps keys longer than that, or the operator checked.
        let (ok, out, err) = env.cli(&["outbox", "retry", a, "--payments-key-retention", "3d"]);
        assert!(ok && out.contains("1 message"), "{out}{err}");
        let (ok, out, err) = env.cli(&["outbox", "retry", b, "--force"]);
        assert!(ok && out.contains("1 message"), "{out}{err}");
        assert_eq!(
            env.sql("SELECT status || '|' || attempts || '|' || coalesce(result, '') FROM outbox ORDER BY id"),
            "pending|0|\npending|0|"
        );
        let _fixed = worker(&env, &payments_flags(&provider));
        for order in &orders {
            eventually("the order is charged", async || {
                payment(&server, &token, order).await["status"] == "charged"
            })
            .await;
        }
        assert_eq!(charges(&provider).await.len(), 2, "{backend:?}");
        let log = assert_discipline(&provider).await;
        for (key, counts) in idemkey_testkit::counts_by_key(&log) {
            // Sent back: looked up before the charge is sent.
            assert_eq!((counts.requests, counts.charges), (1, 1), "{key}: {log:?}");
            assert!(counts.lookups >= 1, "{key}: {log:?}");
        }
    }
}

/// Credentials in `--payments-url` (userinfo) reach no log line (at debug
/// level), no payment reason, no `outbox list` and no `/metrics`; nor the
/// error of a URL the server refuses at start.
#[tokio::test]
async fn payments_url_credentials_stay_out_of_logs_errors_and_metrics() {
    const CREDENTIAL: &str = "pa55w0rd-in-the-url";
    let env = Env::new(Backend::Sqlite);
    let token = env.account("shop");
    let url = format!("http://user:{CREDENTIAL}@127.0.0.1:{}/v1", closed_port());
    let server = env.serve_with_env(
        &[
            "--payments-url",
            &url,
            "--payments-token",
            SECRET,
            "--outbox-retry-base",
            "50ms",
            "--outbox-retry-cap",
            "200ms",
            "--outbox-poll",
            "50ms",
            "--outbox-max-attempts",
            "3",
        ],
        &[("RUST_LOG", "debug".to_owned())],
    );
    let id = place(&server, &token).await;
    eventually("the deliveries run out", async || {
        payment(&server, &token, &id).await["status"] == "failed"
    })
    .await;
    let reason = payment(&server, &token, &id).await.to_string();
    assert!(reason.contains("cannot connect"), "{reason}");
    let metrics = server.metrics().await;
    let (ok, listed, err) = env.cli(&["outbox", "list"]);
    assert!(ok, "{err}");
    let log = server.log();
    for (what, text) in [
        ("reason", &reason),
        ("metrics", &metrics),
        ("outbox list", &listed),
        ("log", &log),
    ] {
        assert!(!text.contains(CREDENTIAL), "{what}: {text}");
    }
    assert!(
        log.contains("http://***@127.0.0.1:"),
        "the URL is logged redacted:\n{log}"
    );
    let refused = common::refused_at_start(
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            &env.url,
            "--payments-url",
            &format!("ftp://user:{CREDENTIAL}@127.0.0.1:9"),
            "--payments-token",
            SECRET,
        ],
        &[("RUST_LOG", "debug")],
    );
    assert!(refused.contains("ftp://***@127.0.0.1:9"), "{refused}");
    assert!(!refused.contains(CREDENTIAL), "{refused}");
}

/// Messages an earlier version already sent under the tuple-only key (the
/// key both orders of a re-executed key share) are delivered once: one the
/// old worker charged and lost the answer of (settled, or claimed and never
/// settled) is found under that key and not charged again; the second order
/// of a re-executed key, whose old-version delivery was uncertain, finds the
/// first order's charge under that key, never takes it for its own, and is
/// charged under its own key.
#[tokio::test]
async fn messages_sent_under_the_shared_key_by_an_earlier_version_are_delivered_once() {
    use idemkey_server::payments::client::{Attempt, ProviderClient};
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        let server = env.serve(&REEXECUTING);
        let account = account_of(&env);
        let old_worker =
            ProviderClient::new(&provider.base, SECRET, Duration::from_secs(10)).expect("client");
        let shared = |key: &str| {
            let key = IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key");
            idemkey_core::downstream_key_of(
                &account,
                ORDER_OPERATION.as_str(),
                key.as_str(),
                "charge",
            )
            .to_string()
        };
        let order = async |key: &str| {
            let created = server.post_order(&token, key, BODY).await;
            assert_eq!(created.status, 201, "{}", created.body);
            created.json()["id"].as_str().unwrap().to_owned()
        };
        // What the earlier version did: charge under the shared key, and
        // record it (settled, or claimed and never settled).
        let old_charge = async |key: &str, order: &str| match old_worker
            .charge(&shared(key), order.parse().unwrap(), 5980, "EUR")
            .await
        {
            Attempt::Charged(found) => found.charge_id,
            other => panic!("{other:?}"),
        };
        let record = |order: &str, sent: Option<&str>, attempts: u32| {
            let sent = sent.map_or("NULL".to_owned(), |k| format!("'{k}'"));
            env.sql(&format!(
                "UPDATE outbox SET attempts = {attempts}, downstream_key = {sent}, \
                 last_error = 'connection lost after sending' WHERE resource_id = '{order}'"
            ));
        };
        // A settled uncertain attempt, and a worker that died while sending.
        let (lost_key, died_key) = (new_key(), new_key());
        let lost = order(&lost_key).await;
        let lost_charge = old_charge(&lost_key, &lost).await;
        record(&lost, Some(&shared(&lost_key)), 1);
        let died = order(&died_key).await;
        let died_charge = old_charge(&died_key, &died).await;
        record(&died, None, 1);
        // A re-executed key: the first order charged under the shared key,
        // the second's old-version attempt uncertain under it too.
        let key = new_key();
        let first = order(&key).await;
        let first_charge = old_charge(&key, &first).await;
        env.sql(&format!(
            "UPDATE outbox SET status = 'delivered', attempts = 1, result = '{first_charge}', \
             downstream_key = '{}', settled_at = created_at WHERE resource_id = '{first}'",
            shared(&key)
        ));
        age_records(&env.url, Duration::from_secs(7200)).await;
        let second = order(&key).await;
        assert_ne!(first, second);
        record(&second, Some(&shared(&key)), 1);
        let _delivering = worker(&env, &payments_flags(&provider));
        for id in [&lost, &died, &second] {
            eventually("the order is charged", async || {
                payment(&server, &token, id).await["status"] == "charged"
            })
            .await;
        }
        for (id, charge) in [(&lost, &lost_charge), (&died, &died_charge)] {
            assert_eq!(
                &payment(&server, &token, id).await["charge_id"],
                charge.as_str(),
                "{backend:?}: found, not charged again"
            );
        }
        let second_charge = payment(&server, &token, &second).await["charge_id"].clone();
        assert_ne!(second_charge, first_charge.as_str(), "{backend:?}");
        let charges = charges(&provider).await;
        assert_eq!(
            charges
                .iter()
                .map(|c| (c.0.clone(), c.1.clone()))
                .collect::<Vec<_>>(),
            [
                (shared(&lost_key), lost.clone()),
                (shared(&died_key), died.clone()),
                (shared(&key), first.clone()),
                (derived(&account, &key, &second), second.clone()),
            ],
            "{backend:?}: one charge per order"
        );
        let log = provider.provider_requests(SECRET).await;
        assert!(
            idemkey_testkit::request_log_violations(&log).is_empty(),
            "{log:?}"
        );
    }
}
