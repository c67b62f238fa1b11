//! Orders with prices, purchase references and their charge in the outbox,
//! committed together or not at all, on both backends (real server, real
//! database). Delivery to a provider is tested in `payments.rs`.

mod common;

use common::{BODY, Backend, Env, new_key};
use idemkey_core::{CATALOGUE, CURRENCY};

fn backends() -> [Backend; 2] {
    [Backend::Postgres, Backend::Sqlite]
}

/// `(orders, records, outbox messages)`.
fn counts(env: &Env) -> (u64, u64, u64) {
    let (orders, records) = env.counts();
    (orders, records, env.count("outbox"))
}

#[tokio::test]
async fn the_catalogue_migration_holds_the_cores_seed() {
    for backend in backends() {
        let env = Env::new(backend);
        // Migrate by starting a server once.
        drop(env.serve(&[]));
        let mut rows: Vec<(String, i64, String)> = env
            .sql("SELECT sku || ',' || unit_price_cents || ',' || currency FROM products ORDER BY sku")
            .lines()
            .map(|line| {
                let mut parts = line.split(',');
                (
                    parts.next().unwrap().to_owned(),
                    parts.next().unwrap().parse().unwrap(),
                    parts.next().unwrap().to_owned(),
                )
            })
            .collect();
        rows.sort();
        let mut seed: Vec<(String, i64, String)> = CATALOGUE
            .iter()
            .map(|(sku, cents)| ((*sku).to_owned(), *cents, CURRENCY.to_owned()))
            .collect();
        seed.sort();
        assert_eq!(rows, seed, "{backend:?}");
    }
}

#[tokio::test]
async fn a_new_order_has_its_amount_and_a_pending_payment_and_one_outbox_message() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve(&[]);
        let key = new_key();
        let created = server.post_order(&token, &key, BODY).await;
        assert_eq!(created.status, 201, "{}", created.body);
        let order = created.json();
        assert_eq!(order["amount_cents"], 2 * 2990, "{order}");
        assert_eq!(order["currency"], "EUR");
        assert_eq!(order["payment"]["status"], "pending");
        assert_eq!(order["payment"]["attempts"], 0);
        assert!(order.get("reference").is_none(), "{order}");
        // The replay is the original 201, and adds no second message.
        let replay = server.post_order(&token, &key, BODY).await;
        assert_eq!((replay.status, &replay.body), (201, &created.body));
        assert_eq!(counts(&env), (1, 1, 1), "{backend:?}");
        let id = order["id"].as_str().unwrap();
        assert_eq!(
            env.sql("SELECT effect || ' ' || resource_id || ' ' || status FROM outbox"),
            format!("charge {id} pending")
        );
        // The order keeps its charge's id.
        assert_eq!(
            env.sql("SELECT charge_message FROM orders"),
            env.sql("SELECT id FROM outbox")
        );
        let payload: serde_json::Value =
            serde_json::from_str(&env.sql("SELECT payload FROM outbox")).unwrap();
        assert_eq!(payload["order_id"], id);
        assert_eq!(payload["amount_cents"], 5980);
        assert_eq!(payload["currency"], "EUR");
        // GET shows the same order with its payment as it stands.
        let shown = server.get(&token, &format!("/orders/{id}")).await.json();
        assert_eq!(shown["amount_cents"], 5980);
        assert_eq!(shown["payment"]["status"], "pending");
        let listed = server.get(&token, "/orders").await.json();
        assert_eq!(listed["orders"][0]["id"], id);
        assert_eq!(listed["orders"][0]["payment"]["status"], "pending");
    }
}

#[tokio::test]
async fn an_unknown_sku_is_refused_with_a_pointer_and_stores_nothing() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve(&[]);
        let reply = server
            .post_order(&token, &new_key(), r#"{"sku":"NOT-SOLD","quantity":1}"#)
            .await;
        reply.assert_problem(400, "request-invalid");
        assert_eq!(
            reply.json()["errors"][0]["pointer"],
            "/sku",
            "{}",
            reply.body
        );
        assert_eq!(counts(&env), (0, 0, 0), "{backend:?}");
    }
}

#[tokio::test]
async fn a_reference_belongs_to_one_order_for_ever() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let other = env.account("other shop");
        let server = env.serve(&[]);
        let body = r#"{"sku":"TAZA-01","quantity":1,"reference":"PO-1001"}"#;
        let (first_key, second_key) = (new_key(), new_key());
        let first = server.post_order(&token, &first_key, body).await;
        assert_eq!(first.status, 201, "{}", first.body);
        assert_eq!(first.json()["reference"], "PO-1001");
        let id = first.json()["id"].as_str().unwrap().to_owned();
        // Another key, same reference: 409 naming the order, nothing stored,
        // every time (the key stays unused).
        for _ in 0..2 {
            let again = server.post_order(&token, &second_key, body).await;
            again.assert_problem(409, "order-reference-exists");
            assert_eq!(again.json()["order"], id.as_str(), "{}", again.body);
        }
        assert_eq!(counts(&env), (1, 1, 1), "{backend:?}");
        // Its own key still replays the order.
        let replay = server.post_order(&token, &first_key, body).await;
        assert_eq!((replay.status, &replay.body), (201, &first.body));
        // Past the replay window, with the records gone, the reference still
        // holds: the constraint is on the orders.
        env.sql("DELETE FROM idempotency_records");
        let after = server.post_order(&token, &new_key(), body).await;
        after.assert_problem(409, "order-reference-exists");
        // Another account's reference space is its own.
        let theirs = server.post_order(&other, &new_key(), body).await;
        assert_eq!(theirs.status, 201, "{}", theirs.body);
        assert_eq!(env.count("orders"), 2);
    }
}

#[tokio::test]
async fn a_failure_while_storing_rolls_back_the_order_its_record_and_its_message() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve_with_faults(&[]);
        let reply = server
            .post_order_with(
                &token,
                &new_key(),
                BODY,
                &[("x-idemkey-test-fault", "fail-storing-result")],
            )
            .await;
        assert!(reply.status >= 500, "{}", reply.body);
        assert_eq!(counts(&env), (0, 0, 0), "{backend:?}");
    }
}

#[tokio::test]
async fn a_changed_price_is_charged_at_the_catalogues_price() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = env.serve(&[]);
        // The server reads the catalogue on its first order.
        let first = server.post_order(&token, &new_key(), BODY).await;
        assert_eq!(first.json()["amount_cents"], 5980);
        env.sql("UPDATE products SET unit_price_cents = 3500 WHERE sku = 'LIBRO-TS'");
        let second = server.post_order(&token, &new_key(), BODY).await;
        assert_eq!(second.status, 201, "{}", second.body);
        assert_eq!(second.json()["amount_cents"], 7000, "{backend:?}");
        assert_eq!(
            env.sql("SELECT count(*) FROM orders WHERE amount_cents = 7000"),
            "1"
        );
        // A product removed from the catalogue is no longer sold.
        env.sql("DELETE FROM products WHERE sku = 'CAFE-1KG'");
        let gone = server
            .post_order(&token, &new_key(), r#"{"sku":"CAFE-1KG","quantity":1}"#)
            .await;
        gone.assert_problem(400, "request-invalid");
        assert_eq!(env.count("orders"), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_orders_with_one_reference_make_one_order_and_409s() {
    for backend in backends() {
        let env = Env::new(backend);
        let token = env.account("shop");
        let server = std::sync::Arc::new(env.serve(&[]));
        let body = r#"{"sku":"TAZA-02","quantity":1,"reference":"PO-RACE"}"#;
        let mut sends = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (server, token) = (std::sync::Arc::clone(&server), token.clone());
            sends.spawn(async move { server.post_order(&token, &new_key(), body).await });
        }
        let (mut created, mut refused) = (Vec::new(), 0);
        while let Some(reply) = sends.join_next().await {
            let reply = reply.expect("task");
            match reply.status {
                201 => created.push(reply.json()["id"].as_str().unwrap().to_owned()),
                409 => {
                    reply.assert_problem(409, "order-reference-exists");
                    refused += 1;
                }
                other => panic!("{backend:?}: {other} {}", reply.body),
            }
        }
        assert_eq!((created.len(), refused), (1, 19), "{backend:?}");
        assert_eq!(counts(&env), (1, 1, 1), "{backend:?}");
    }
}
