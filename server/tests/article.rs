//! The article's checks, each a named test that reads like its sentence,
//! run against the real binary and a throwaway database.

#[macro_use]
mod common;

use common::{ARTICLE_KEY, BODY, Backend, Env, eventually, new_key};

/// Both answers are 201, with the same id and the same body.
async fn same_key_twice_returns_the_same_201_and_order_id(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[]);
    let first = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        first.header("location"),
        Some(format!("/orders/{id}").as_str())
    );
    assert_eq!(first.header("content-type"), Some("application/json"));
    assert_eq!(first.header("cache-control"), Some("no-store"));
    assert_eq!(first.header("idempotent-replayed"), None);
    let order = first.json();
    assert_eq!(
        (order["sku"].as_str(), order["quantity"].as_u64()),
        (Some("LIBRO-TS"), Some(2))
    );

    let second = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(second.status, 201);
    assert_eq!(second.body, first.body);
    assert_eq!(second.header("location"), first.header("location"));
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(second.header("cache-control"), Some("no-store"));
    assert_eq!(env.counts(), (1, 1));
    // Logs never contain tokens or request bodies. The line is written as
    // the response leaves and read from the child's pipe, so it may arrive
    // just after the reply.
    let id = first.json()["id"].as_str().expect("an id").to_owned();
    eventually("the order's log line", async || {
        server
            .log()
            .lines()
            .any(|l| l.contains(&id) && l.contains("outcome=\"executed\""))
    })
    .await;
    let log = server.log();
    assert!(!log.contains(&token) && !log.contains("LIBRO-TS"), "{log}");
}

/// The response is lost after COMMIT; the retry with the same key gets the
/// order that was already created, never a second one.
async fn retry_after_lost_response_replays_the_same_order(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve_with_faults(&[]);
    let key = new_key();
    let lost = server
        .order_request(&token, &key, BODY)
        .header("x-idemkey-test-fault", "drop-after-commit")
        .send()
        .await;
    assert!(
        lost.is_err(),
        "the connection must close without a response"
    );
    assert_eq!(env.counts(), (1, 1), "the order was committed");

    let retry = server.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    let id = retry.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(env.sql("SELECT id FROM orders"), id);
    assert_eq!(env.counts(), (1, 1));
}

/// Same key, quantity 3 instead of 2: 422, and the original order is untouched.
async fn same_key_with_another_quantity_is_rejected_with_422(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[]);
    let first = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(first.status, 201);
    let other = server
        .post_order(&token, ARTICLE_KEY, r#"{"sku":"LIBRO-TS","quantity":3}"#)
        .await;
    other.assert_problem(422, "idempotency-key-reused");
    assert_eq!(env.sql("SELECT quantity FROM orders"), "2");
    assert_eq!(env.counts(), (1, 1));
    // Field order in the JSON does not change the payload: still a replay.
    let reordered = server
        .post_order(&token, ARTICLE_KEY, r#"{"quantity":2,"sku":"LIBRO-TS"}"#)
        .await;
    assert_eq!((reordered.status, reordered.body), (201, first.body));
}

/// The same key under another account is another operation, and no account
/// reads another's order.
async fn accounts_are_isolated(backend: Backend) {
    let env = Env::new(backend);
    let (alice, bob) = (env.account("alice"), env.account("bob"));
    let server = env.serve(&[]);
    let a = server.post_order(&alice, ARTICLE_KEY, BODY).await;
    let b = server.post_order(&bob, ARTICLE_KEY, BODY).await;
    assert_eq!((a.status, b.status), (201, 201));
    assert_eq!(
        b.header("idempotent-replayed"),
        None,
        "bob gets his own order"
    );
    assert_ne!(a.json()["id"], b.json()["id"]);
    assert_eq!(env.counts(), (2, 2));

    let a_location = a.header("location").unwrap();
    let own = server.get(&alice, a_location).await;
    assert_eq!((own.status, own.body.as_str()), (200, a.body.as_str()));
    let foreign = server.get(&bob, a_location).await;
    foreign.assert_problem(404, "not-found");
    let missing = server
        .get(&bob, &format!("/orders/{}", uuid::Uuid::new_v4()))
        .await;
    assert_eq!(
        foreign.body, missing.body,
        "someone else's order looks missing"
    );
    // Bob's lookup of the same key shows his own order, not Alice's.
    let lookup = server
        .get(&bob, "/operations/8e03978e-40d5-43e8-bc93-6894a57f9324")
        .await;
    assert_eq!(lookup.json()["order"], b.header("location").unwrap());
}

/// After the replay window: 410 with a lookup link, and no new order.
async fn expired_key_gives_410_without_a_new_order(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&["--replay-ttl", "1s"]);
    let first = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(first.status, 201);
    // Past the window on the database's clock, which decides it.
    common::age_records(&env.url, std::time::Duration::from_secs(2)).await;
    let late = server.post_order(&token, ARTICLE_KEY, BODY).await;
    late.assert_problem(410, "idempotency-key-expired");
    let lookup = late.json()["lookup"].as_str().unwrap().to_owned();
    assert_eq!(lookup, "/operations/8e03978e-40d5-43e8-bc93-6894a57f9324");
    assert_eq!(env.counts(), (1, 1));
    let found = server.get(&token, &lookup).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.json()["state"], "expired");
    assert_eq!(found.json()["order"], first.header("location").unwrap());
    // Another payload under the expired key is still reuse: 422.
    let other = server
        .post_order(&token, ARTICLE_KEY, r#"{"sku":"LIBRO-TS","quantity":3}"#)
        .await;
    other.assert_problem(422, "idempotency-key-reused");
}

/// A failure while storing the result rolls back both the order and the
/// key; the retry then creates exactly one order.
async fn failure_while_storing_the_result_rolls_back_the_order_and_the_key(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve_with_faults(&[]);
    let key = new_key();
    let failed = server
        .post_order_with(
            &token,
            &key,
            BODY,
            &[("x-idemkey-test-fault", "fail-storing-result")],
        )
        .await;
    failed.assert_problem(503, "service-unavailable");
    assert_eq!(failed.header("retry-after"), Some("1"));
    assert!(
        !failed.body.to_lowercase().contains("violates"),
        "{}",
        failed.body
    );
    assert_eq!(env.counts(), (0, 0), "neither order nor key");
    let retry = server.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), None);
    assert_eq!(env.counts(), (1, 1));
}

/// A process killed right after COMMIT, before answering: the retry, to
/// another process, gets the same order.
async fn process_killed_after_commit_is_recovered_by_the_retry(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let mut doomed = env.serve_with_faults(&[]);
    let key = new_key();
    let lost = doomed
        .order_request(&token, &key, BODY)
        .header("x-idemkey-test-fault", "exit-after-commit")
        .send()
        .await;
    assert!(lost.is_err(), "no answer from a dead process");
    let status = doomed.wait(std::time::Duration::from_secs(10));
    assert_eq!(status.code(), Some(86));
    assert_eq!(env.counts(), (1, 1));

    let other = env.serve(&[]);
    let retry = other.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        retry.json()["id"].as_str().unwrap(),
        env.sql("SELECT id FROM orders")
    );
    assert_eq!(env.counts(), (1, 1));
}

/// Keys and orders survive a restart of the server.
async fn keys_and_orders_survive_a_server_restart(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[]);
    let first = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(first.status, 201);
    assert!(server.terminate().success(), "graceful exit on SIGTERM");
    let again = env.serve(&[]);
    let replay = again.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!((replay.status, replay.body), (201, first.body.clone()));
    let order = again.get(&token, first.header("location").unwrap()).await;
    assert_eq!(order.body, first.body);
    assert_eq!(env.counts(), (1, 1));
}

/// Keys and orders survive a restart of PostgreSQL (crash and recovery);
/// while it is down the server answers 503 and keeps serving afterwards.
async fn keys_and_orders_survive_a_database_restart(backend: Backend) {
    let mut env = Env::with_own_cluster(backend, idemkey_testkit::PgOptions::new());
    let token = env.account("shop");
    let server = env.serve(&["--pool-wait", "1s"]);
    let first = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!(first.status, 201);

    env.cluster_mut().stop_immediate().unwrap();
    let key = new_key();
    let down = server.post_order(&token, &key, BODY).await;
    down.assert_problem(503, "service-unavailable");
    assert!(down.header("retry-after").is_some());
    // Liveness does not touch the database; readiness does.
    let health = server.get(&token, "/healthz").await;
    assert_eq!(health.status, 200, "{}", health.body);
    let ready = server.get(&token, "/readyz").await;
    ready.assert_problem(503, "service-unavailable");

    env.cluster_mut().start_again().unwrap();
    let replay = server.post_order(&token, ARTICLE_KEY, BODY).await;
    assert_eq!((replay.status, replay.body), (201, first.body));
    // The key that met the outage was never consumed.
    let later = server.post_order(&token, &key, BODY).await;
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotent-replayed"), None);
    assert_eq!(env.counts(), (2, 2));
}

on_each_backend!(
    same_key_twice_returns_the_same_201_and_order_id,
    retry_after_lost_response_replays_the_same_order,
    same_key_with_another_quantity_is_rejected_with_422,
    accounts_are_isolated,
    expired_key_gives_410_without_a_new_order,
    failure_while_storing_the_result_rolls_back_the_order_and_the_key,
    process_killed_after_commit_is_recovered_by_the_retry,
    keys_and_orders_survive_a_server_restart,
);

on_postgres!(keys_and_orders_survive_a_database_restart);
