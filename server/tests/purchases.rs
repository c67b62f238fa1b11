//! Purchases (an operation of several steps under one key) end to end, with
//! real processes over real HTTP: the order service (its worker inside
//! `serve`, or an `idemkey-server worker`), and the provider simulator on
//! its own database for the charge, the refund and the confirmation. Every
//! step's effect once, read from each system's own store.

mod common;

use std::process::{Command, Stdio};

use common::{Backend, Env, Server, eventually, new_key};
use idemkey_core::{
    IdempotencyKey, KeyProfile, PURCHASE_OPERATION, StepAction, step_downstream_key_of,
};
use serde_json::Value;

const SECRET: &str = "purchases-test-secret";
const TEA: &str = r#"{"sku":"TAZA-01","quantity":3}"#;

fn provider(env: &Env, extra: &[&str]) -> Server {
    let mut args = vec!["--database-url", env.url.as_str(), "--token", SECRET];
    args.extend_from_slice(extra);
    Server::provider(&args)
}

/// The outbox flags of `serve` and `worker`: fast retries for tests.
fn flags(provider: &Server, extra: &[&str]) -> Vec<String> {
    let mut flags: Vec<String> = [
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
    .to_vec();
    flags.extend(extra.iter().map(|s| (*s).to_owned()));
    flags
}

fn serve(env: &Env, flags: &[String]) -> Server {
    env.serve(&flags.iter().map(String::as_str).collect::<Vec<_>>())
}

async fn post(server: &Server, token: &str, key: &str, body: &str) -> common::Reply {
    server.post_purchase(token, key, body).await
}

/// The provider's list at `path` (`/charges`, `/confirmations`,
/// `/refunds`) under `member`.
async fn listed(provider: &Server, path: &str, member: &str) -> Vec<Value> {
    let list = provider.get(SECRET, path).await;
    assert_eq!(list.status, 200, "{}", list.body);
    list.json()[member].as_array().cloned().unwrap_or_default()
}

/// The provider's request log of every effect (`GET /requests?effect=all`),
/// by effect, each effect's handler runs named `charge` (see
/// `idemkey_testkit::request_log_by_effect`).
async fn requests_by_effect(
    provider: &Server,
) -> std::collections::BTreeMap<String, Vec<idemkey_testkit::LoggedRequest>> {
    let log = provider.get(SECRET, "/requests?effect=all").await;
    assert_eq!(log.status, 200, "{}", log.body);
    idemkey_testkit::request_log_by_effect(&log.json()).expect("a request log")
}

fn step_key(account: &str, key: &str, flow: &str, step: &str, action: StepAction) -> String {
    let key = IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient).expect("key");
    step_downstream_key_of(
        account,
        PURCHASE_OPERATION.as_str(),
        key.as_str(),
        flow,
        step,
        action,
    )
    .to_string()
}

/// A product's stock: the sum of its stripes.
fn stock(env: &Env, sku: &str) -> i64 {
    env.sql(&format!(
        "SELECT sum(stock) FROM product_stock WHERE sku = '{sku}'"
    ))
    .parse()
    .expect("stock")
}

/// Sets a product's stock to `total`, spread over its 32 stripes as
/// evenly as it goes (the first `total % 32` hold one more).
fn set_stock(env: &Env, sku: &str, total: i64) {
    env.sql(&format!(
        "UPDATE product_stock SET stock = {} + CASE WHEN stripe < {} THEN 1 ELSE 0 END \
         WHERE sku = '{sku}'",
        total / 32,
        total % 32
    ));
    assert_eq!(stock(env, sku), total);
}

/// Polls `GET /purchases/{id}` until it ended; its document.
async fn ended(server: &Server, token: &str, id: &str) -> Value {
    let mut last = Value::Null;
    eventually("the purchase ends", async || {
        let reply = server.get(token, &format!("/purchases/{id}")).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        last = reply.json();
        last["result_status"].is_number()
    })
    .await;
    last
}

#[tokio::test]
async fn a_purchase_runs_each_step_once_and_replays_its_answer() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        let server = serve(&env, &flags(&provider, &["--purchase-wait", "0s"]));
        let before = stock(&env, "TAZA-01");
        let key = new_key();
        let first = post(&server, &token, &key, TEA).await;
        assert_eq!(first.status, 202, "{}", first.body);
        let doc = first.json();
        assert_eq!(doc["code"], "operation-in-progress", "{doc}");
        assert_eq!(doc["steps"][0]["name"], "reserve");
        assert_eq!(doc["steps"][0]["state"], "done");
        let id = doc["id"].as_str().expect("id").to_owned();
        assert_eq!(first.header("location"), Some(&*format!("/purchases/{id}")));
        assert_eq!(
            stock(&env, "TAZA-01"),
            before - 3,
            "reserved in the first transaction"
        );
        let polled = ended(&server, &token, &id).await;
        assert_eq!(polled["state"], "done", "{polled}");
        assert_eq!(polled["result_status"], 201);
        // The retry replays the final answer like any other key.
        let replay = post(&server, &token, &key, TEA).await;
        assert_eq!(replay.status, 201, "{}", replay.body);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        let purchase = replay.json();
        assert_eq!(purchase["amount_cents"], 3 * 990);
        let account = env.sql("SELECT id FROM accounts LIMIT 1");
        let charges = listed(&provider, "/charges", "charges").await;
        assert_eq!(charges.len(), 1, "{charges:?}");
        assert_eq!(
            charges[0]["idempotency_key"],
            step_key(&account, &key, &id, "charge", StepAction::Run)
        );
        assert_eq!(charges[0]["amount_cents"], 2970);
        assert_eq!(purchase["charge_id"], charges[0]["id"], "{purchase}");
        let confirmations = listed(&provider, "/confirmations", "confirmations").await;
        assert_eq!(confirmations.len(), 1, "{confirmations:?}");
        assert_eq!(
            confirmations[0]["idempotency_key"],
            step_key(&account, &key, &id, "confirm", StepAction::Run)
        );
        assert_eq!(stock(&env, "TAZA-01"), before - 3);
        assert!(listed(&provider, "/refunds", "refunds").await.is_empty());
        // The key's lookup finds it as a purchase (its own operation), not
        // as an order.
        let looked = server
            .get(&token, &format!("/operations/{key}?operation=purchases"))
            .await
            .json();
        assert_eq!(looked["state"], "completed", "{looked}");
        assert_eq!(looked["purchase"], format!("/purchases/{id}"));
        assert_eq!(looked["operation"], "POST /purchases:v1");
        let as_order = server
            .get(&token, &format!("/operations/{key}"))
            .await
            .json();
        assert_eq!(as_order["state"], "unknown", "{as_order}");
        server
            .get(&token, &format!("/operations/{key}?operation=refunds"))
            .await
            .assert_problem(400, "request-invalid");
        // Another body under the key: 422; another account: 404 for the id.
        post(&server, &token, &key, r#"{"sku":"TAZA-01","quantity":4}"#)
            .await
            .assert_problem(422, "idempotency-key-reused");
        let other = env.account("other");
        let hidden = server.get(&other, &format!("/purchases/{id}")).await;
        hidden.assert_problem(404, "not-found");
    }
}

#[tokio::test]
async fn a_declined_charge_releases_the_stock_and_ends_402() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        let server = serve(&env, &flags(&provider, &[]));
        let before = stock(&env, "DECLINE-TEST");
        let account = env.sql("SELECT id FROM accounts LIMIT 1");
        let key = new_key();
        let body = r#"{"sku":"DECLINE-TEST","quantity":1}"#;
        let first = post(&server, &token, &key, body).await;
        let id = match first.status {
            402 => first
                .header("location")
                .unwrap_or_default()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            202 => first.json()["id"].as_str().unwrap_or_default().to_owned(),
            other => panic!("{other}: {}", first.body),
        };
        let polled = ended(&server, &token, &id).await;
        assert_eq!(polled["state"], "failed", "{polled}");
        assert_eq!(polled["failed_step"], "charge");
        assert_eq!(polled["result_status"], 402);
        post(&server, &token, &key, body)
            .await
            .assert_problem(402, "payment-declined");
        assert_eq!(
            stock(&env, "DECLINE-TEST"),
            before,
            "the reservation was released"
        );
        assert_eq!(
            env.sql("SELECT state FROM reservations"),
            "released",
            "{backend:?}"
        );
        assert!(
            listed(&provider, "/confirmations", "confirmations")
                .await
                .is_empty()
        );
        // Declined before anything was stored: no charge at the provider,
        // so nothing to refund; the charge was asked for, and no refund or
        // confirmation ever was.
        assert!(listed(&provider, "/charges", "charges").await.is_empty());
        assert!(listed(&provider, "/refunds", "refunds").await.is_empty());
        let by_effect = requests_by_effect(&provider).await;
        assert_eq!(
            by_effect.keys().map(String::as_str).collect::<Vec<_>>(),
            ["charges"],
            "{by_effect:?}"
        );
        let charge = step_key(&account, &key, &id, "charge", StepAction::Run);
        let counts = idemkey_testkit::counts_by_key(&by_effect["charges"]);
        assert_eq!(
            counts.keys().copied().collect::<Vec<_>>(),
            [charge.as_str()]
        );
        assert_eq!(counts[charge.as_str()].charges, 0, "{counts:?}");
    }
}

#[tokio::test]
async fn lost_answers_are_looked_up_and_each_effect_happens_once() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        // Every effect commits at the provider, then its answer is lost.
        let provider = provider(&provider_env, &["--lose-rate", "1"]);
        let server = serve(&env, &flags(&provider, &["--purchase-wait", "0s"]));
        let mut ids = Vec::new();
        for _ in 0..3 {
            let reply = post(&server, &token, &new_key(), TEA).await;
            assert_eq!(reply.status, 202, "{}", reply.body);
            ids.push(reply.json()["id"].as_str().unwrap().to_owned());
        }
        for id in &ids {
            assert_eq!(ended(&server, &token, id).await["result_status"], 201);
        }
        assert_eq!(listed(&provider, "/charges", "charges").await.len(), 3);
        assert_eq!(
            listed(&provider, "/confirmations", "confirmations")
                .await
                .len(),
            3
        );
        // Every effect's log, not only the charges': each key sent once,
        // its answer lost, looked up once and found (a lookup before any
        // resend; no second run).
        let by_effect = requests_by_effect(&provider).await;
        assert_eq!(
            by_effect.keys().map(String::as_str).collect::<Vec<_>>(),
            ["charges", "confirmations"],
            "{by_effect:?}"
        );
        for (effect, log) in &by_effect {
            let violations = idemkey_testkit::request_log_violations(log);
            assert!(violations.is_empty(), "{effect}: {violations:?}");
            let counts = idemkey_testkit::counts_by_key(log);
            assert_eq!(counts.len(), 3, "{effect}: {counts:?}");
            for (key, c) in counts {
                assert_eq!(
                    c,
                    idemkey_testkit::KeyCounts {
                        requests: 1,
                        lookups: 1,
                        charges: 1
                    },
                    "{effect} under {key}: sent once, its lost answer found by one lookup"
                );
            }
        }
        assert!(listed(&provider, "/refunds", "refunds").await.is_empty());
    }
}

#[tokio::test]
async fn a_retry_resumes_a_purchase_a_worker_process_finishes() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (env, provider_env) = (Env::new(backend), Env::new(backend));
        let token = env.account("shop");
        let provider = provider(&provider_env, &[]);
        // No worker in the server: the purchase stops after its first
        // transaction until one runs.
        let server = serve(
            &env,
            &flags(
                &provider,
                &["--outbox-workers", "0", "--purchase-wait", "0s"],
            ),
        );
        let key = new_key();
        let first = post(&server, &token, &key, TEA).await;
        assert_eq!(first.status, 202, "{}", first.body);
        let again = post(&server, &token, &key, TEA).await;
        assert_eq!(again.status, 202);
        assert_eq!(again.json()["id"], first.json()["id"]);
        assert_eq!(again.json()["steps"], first.json()["steps"]);
        assert_eq!(env.count("reservations"), 1, "resumed, not restarted");
        let mut worker = Command::new(common::BIN)
            .args(["worker", "--database-url", &env.url])
            .args(flags(&provider, &[]))
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn worker");
        eventually("the worker finishes the purchase", async || {
            post(&server, &token, &key, TEA).await.status == 201
        })
        .await;
        let _ = worker.kill();
        let _ = worker.wait();
        assert_eq!(listed(&provider, "/charges", "charges").await.len(), 1);
    }
}

/// Concurrent purchases of one product whose stock is split over stripes
/// that each hold less than most purchases want: every unit is sold once
/// (never oversold), and every purchase the stripes' sum could serve is
/// served (never refused for a stripe that was short or locked).
#[tokio::test]
async fn concurrent_purchases_of_one_sku_take_its_stock_exactly_across_stripes() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve(&["--purchase-wait", "0s"]);
        // 61 units: 29 stripes of 2 and 3 of 1. Purchases of 2 take the
        // full stripes one each; the last one the ones of 1 can serve
        // takes from two stripes.
        set_stock(&env, "LAMPARA-9", 61);
        let client = reqwest::Client::new();
        let mut purchases = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let request = client
                .post(format!("{}/purchases", server.base))
                .header("authorization", format!("Bearer {token}"))
                .header("idempotency-key", new_key())
                .header("content-type", "application/json")
                .body(r#"{"sku":"LAMPARA-9","quantity":2}"#);
            purchases.spawn(async move { request.send().await.expect("send").status().as_u16() });
        }
        let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
        while let Some(status) = purchases.join_next().await {
            *statuses.entry(status.expect("a purchase")).or_default() += 1;
        }
        assert_eq!(
            statuses,
            [(202, 30), (409, 10)].into(),
            "{backend:?}: 30 purchases of 2 fit in 61"
        );
        assert_eq!(stock(&env, "LAMPARA-9"), 1, "{backend:?}");
        let reserved: i64 = env
            .sql("SELECT sum(quantity) FROM reservations WHERE sku = 'LAMPARA-9'")
            .parse()
            .expect("a sum");
        assert_eq!(reserved, 60, "{backend:?}");
        // The last unit is still sold, from whichever stripe holds it.
        let last = post(
            &server,
            &token,
            &new_key(),
            r#"{"sku":"LAMPARA-9","quantity":1}"#,
        )
        .await;
        assert_eq!(last.status, 202, "{backend:?}: {}", last.body);
        assert_eq!(stock(&env, "LAMPARA-9"), 0, "{backend:?}");
    }
}

#[tokio::test]
async fn out_of_stock_ends_at_once_409_with_nothing_queued() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve(&[]);
        set_stock(&env, "CAFE-1KG", 1);
        let reply = post(
            &server,
            &token,
            &new_key(),
            r#"{"sku":"CAFE-1KG","quantity":2}"#,
        )
        .await;
        reply.assert_problem(409, "out-of-stock");
        assert_eq!(env.count("outbox"), 0, "{backend:?}");
        assert_eq!(env.count("reservations"), 0);
        assert_eq!(stock(&env, "CAFE-1KG"), 1);
    }
}
