//! An order's payment end to end, with real processes over real HTTP: the
//! order service (its outbox worker inside `serve`, or `idemkey-server
//! worker` processes), and the payment provider simulator on its own
//! database. Every order ends with exactly one charge of its amount, keyed
//! by its derived key, whatever answers get lost.

mod common;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{BIN, BODY, Backend, Env, Server, eventually, new_key};
use idemkey_core::{IdempotencyKey, KeyProfile, ORDER_OPERATION, downstream_key};

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

/// The derived key of an order created under `key` by `account`.
fn derived(account: &str, key: &str) -> String {
    let key = IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key");
    downstream_key(account, &ORDER_OPERATION, &key, "charge").to_string()
}

fn account_of(env: &Env) -> String {
    env.sql("SELECT id FROM accounts LIMIT 1")
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
        let expected = derived(&account_of(&env), &key);
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
}
