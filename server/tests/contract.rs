//! The HTTP contract around the happy path: every bad input gets its
//! problem and stores nothing, lookups, expiry policies, the trim task,
//! bounded lock waits, and the problem fallbacks.

#[macro_use]
mod common;

use std::time::Duration;

use common::{BODY, Backend, Env, age_records, eventually, new_key};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Sends raw bytes and returns the status code of the answer.
async fn raw_status(base: &str, request: &[u8]) -> u16 {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let mut read = 0;
    while read < 12 {
        let n = stream.read(&mut buf[read..]).await.unwrap();
        assert!(n > 0, "connection closed");
        read += n;
    }
    std::str::from_utf8(&buf[9..12]).unwrap().parse().unwrap()
}

/// Every bad input gets its problem code, stores nothing, and the key of a
/// rejected request is not consumed.
async fn every_bad_input_gets_its_problem_and_stores_nothing(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[]);
    let key = new_key();
    let long_key = format!("\"{}\"", "k".repeat(256));
    let url = format!("{}/orders", server.base);
    let bearer = format!("Bearer {token}");
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, String, u16, &'a str);
    let json = || ("content-type", "application/json".to_owned());
    let auth = || ("authorization", bearer.clone());
    let k = |v: &str| ("idempotency-key", v.to_owned());
    let cases: Vec<Case> = vec![
        (
            "missing key",
            vec![auth(), json()],
            BODY.into(),
            400,
            "idempotency-key-missing",
        ),
        (
            "malformed key",
            vec![auth(), json(), k("\"open")],
            BODY.into(),
            400,
            "idempotency-key-invalid",
        ),
        (
            "empty key",
            vec![auth(), json(), k("\"\"")],
            BODY.into(),
            400,
            "idempotency-key-invalid",
        ),
        (
            "too long key",
            vec![auth(), json(), k(&long_key)],
            BODY.into(),
            400,
            "idempotency-key-invalid",
        ),
        (
            "repeated key",
            vec![auth(), json(), k(&key), k(&key)],
            BODY.into(),
            400,
            "idempotency-key-invalid",
        ),
        (
            "no token",
            vec![json(), k(&key)],
            BODY.into(),
            401,
            "unauthorized",
        ),
        (
            "unknown token",
            vec![
                ("authorization", "Bearer idk_nobody".into()),
                json(),
                k(&key),
            ],
            BODY.into(),
            401,
            "unauthorized",
        ),
        (
            "not bearer",
            vec![("authorization", format!("Basic {token}")), json(), k(&key)],
            BODY.into(),
            401,
            "unauthorized",
        ),
        (
            "bad json",
            vec![auth(), json(), k(&key)],
            "{\"sku\":".into(),
            400,
            "request-invalid",
        ),
        (
            "not an object",
            vec![auth(), json(), k(&key)],
            "[1,2]".into(),
            400,
            "request-invalid",
        ),
        (
            "extra member",
            vec![auth(), json(), k(&key)],
            r#"{"sku":"A","quantity":1,"price":0}"#.into(),
            400,
            "request-invalid",
        ),
        (
            "invalid sku",
            vec![auth(), json(), k(&key)],
            r#"{"sku":"libro","quantity":1}"#.into(),
            400,
            "request-invalid",
        ),
        (
            "quantity 0",
            vec![auth(), json(), k(&key)],
            r#"{"sku":"A","quantity":0}"#.into(),
            400,
            "request-invalid",
        ),
        (
            "quantity 21",
            vec![auth(), json(), k(&key)],
            r#"{"sku":"A","quantity":21}"#.into(),
            400,
            "request-invalid",
        ),
        (
            "wrong content type",
            vec![auth(), ("content-type", "text/plain".into()), k(&key)],
            BODY.into(),
            415,
            "unsupported-media-type",
        ),
        (
            "no content type",
            vec![auth(), k(&key)],
            BODY.into(),
            415,
            "unsupported-media-type",
        ),
        (
            "oversize body",
            vec![auth(), json(), k(&key)],
            format!(r#"{{"sku":"A","quantity":1,"pad":"{}"}}"#, "x".repeat(9000)),
            413,
            "payload-too-large",
        ),
    ];
    for (name, headers, body, status, code) in cases {
        let mut request = server.client.post(&url).body(body);
        for (h, v) in headers {
            request = request.header(h, v);
        }
        let reply = common::Reply::from(request.send().await.unwrap()).await;
        assert_eq!(
            (reply.status, reply.code().as_str()),
            (status, code),
            "{name}: {}",
            reply.body
        );
        reply.assert_problem(status, code);
        assert_eq!(env.counts(), (0, 0), "{name} stored something");
    }
    let invalid = server
        .post_order(&token, &key, r#"{"sku":"A","quantity":1,"x":1}"#)
        .await;
    let pointers: Vec<_> = invalid.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pointers, ["/x"]);

    // A chunked body over the limit, with no Content-Length to check first.
    let chunk = "x".repeat(9000);
    let raw = format!(
        "POST /orders HTTP/1.1\r\nhost: t\r\nauthorization: {bearer}\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    assert_eq!(raw_status(&server.base, raw.as_bytes()).await, 413);
    assert_eq!(env.counts(), (0, 0));

    // The key that every rejected request carried is still free.
    let ok = server.post_order(&token, &key, BODY).await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(ok.header("idempotent-replayed"), None);
    assert_eq!(env.counts(), (1, 1));
}

/// Unknown routes, wrong methods and malformed ids are problems too.
async fn fallbacks_are_problems(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[]);
    server
        .get(&token, "/nothing-here")
        .await
        .assert_problem(404, "not-found");
    server
        .get(&token, "/orders/not-a-uuid")
        .await
        .assert_problem(404, "not-found");
    server
        .get("idk_nobody", "/orders/not-a-uuid")
        .await
        .assert_problem(401, "unauthorized");
    let reply = common::Reply::from(
        server
            .client
            .delete(format!("{}/orders", server.base))
            .send()
            .await
            .unwrap(),
    )
    .await;
    reply.assert_problem(405, "method-not-allowed");
    let health = server.get(&token, "/healthz").await;
    assert_eq!(
        (health.status, health.header("cache-control")),
        (200, Some("no-store"))
    );
}

/// The lookup tells what became of a key: unknown, completed with the order,
/// expired after the window (still with the order), and, once the trim task
/// has made the record a tombstone, still expired with the order and still
/// guarded against reuse; after the tombstone's retention, unknown.
async fn lookup_follows_a_key_through_its_retention(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&[
        "--replay-ttl",
        "1s",
        "--tombstone-ttl",
        "3s",
        "--trim-interval",
        "200ms",
    ]);
    let key = new_key();
    let bare = key.trim_matches('"').to_owned();
    let path = format!("/operations/{bare}");
    assert_eq!(server.get(&token, &path).await.json()["state"], "unknown");
    let created = server.post_order(&token, &key, BODY).await;
    let location = created.header("location").unwrap().to_owned();
    let done = server.get(&token, &path).await.json();
    assert_eq!(
        (done["state"].as_str(), done["order"].as_str()),
        (Some("completed"), Some(location.as_str()))
    );
    assert_eq!(done["operation"], "POST /orders:v1");
    assert_eq!(done["key"], bare);
    // Quoted, percent-encoded field value works as well.
    let quoted = server
        .get(&token, &format!("/operations/%22{bare}%22"))
        .await
        .json();
    assert_eq!(quoted["state"], "completed");

    // The trim task's work, seen in the database (the window is 1 s on the
    // database's clock; the tombstone lasts 3 s more).
    eventually("the trim task made the record a tombstone", async || {
        env.sql("SELECT status FROM idempotency_records") == "tombstone"
    })
    .await;
    let trimmed = env.sql(
        "SELECT status, CASE WHEN response_body IS NULL THEN 't' ELSE 'f' END, \
         CASE WHEN resource_id IS NOT NULL THEN 't' ELSE 'f' END FROM idempotency_records",
    );
    assert_eq!(
        trimmed, "tombstone|t|t",
        "the tombstone keeps the order, not the response"
    );
    let expired = server.get(&token, &path).await.json();
    assert_eq!(
        (expired["state"].as_str(), expired["order"].as_str()),
        (Some("expired"), Some(location.as_str()))
    );
    server
        .post_order(&token, &key, BODY)
        .await
        .assert_problem(410, "idempotency-key-expired");
    server
        .post_order(&token, &key, r#"{"sku":"LIBRO-TS","quantity":5}"#)
        .await
        .assert_problem(422, "idempotency-key-reused");
    assert_eq!(env.counts(), (1, 1));

    eventually("the tombstone is deleted after its retention", async || {
        env.count("idempotency_records") == 0
    })
    .await;
    assert_eq!(server.get(&token, &path).await.json()["state"], "unknown");
    assert_eq!(env.count("orders"), 1, "orders are never trimmed");
    // Another account sees nothing of this key.
    let other = env.account("other");
    assert_eq!(server.get(&other, &path).await.json()["state"], "unknown");
}

/// Under `--expiry-policy reexecute`, a key sent again after its window runs
/// anew: a new order replaces the record in the same transaction.
async fn reexecute_policy_runs_the_request_anew_after_the_window(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&["--replay-ttl", "1s", "--expiry-policy", "reexecute"]);
    let key = new_key();
    let first = server.post_order(&token, &key, BODY).await;
    assert_eq!(first.status, 201);
    // Past the window on the database's clock, which decides it.
    age_records(&env.url, Duration::from_secs(2)).await;
    let second = server.post_order(&token, &key, BODY).await;
    assert_eq!(second.status, 201);
    assert_eq!(second.header("idempotent-replayed"), None);
    assert_ne!(first.json()["id"], second.json()["id"]);
    assert_eq!(env.counts(), (2, 1));
    // Each order keeps its own charge's id.
    assert_eq!(
        env.sql(
            "SELECT count(*) FROM orders o JOIN outbox m \
             ON m.id = o.charge_message AND m.resource_id = CAST(o.id AS text) \
             AND m.effect = 'charge'"
        ),
        "2"
    );
    let replay = server.post_order(&token, &key, BODY).await;
    assert_eq!((replay.status, replay.body), (201, second.body));
    server
        .post_order(&token, &key, r#"{"sku":"LIBRO-TS","quantity":9}"#)
        .await
        .assert_problem(422, "idempotency-key-reused");
}

/// A request that waits longer than `lock_timeout` for a concurrent claimant
/// of its key gets 409 with Retry-After, and may retry once that ends.
async fn lock_wait_over_the_timeout_answers_409_with_retry_after(backend: Backend) {
    let env = std::sync::Arc::new(Env::new(backend));
    let token = env.account("shop");
    let server = env.serve(&["--lock-timeout", "300ms"]);
    let key = new_key();
    let bare = key.trim_matches('"').to_owned();
    let holder = {
        let env = std::sync::Arc::clone(&env);
        let bare = bare.clone();
        std::thread::spawn(move || {
            env.sql(&format!(
                "BEGIN;
                 INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim,
                     status, response_status, response_body, created_at, replay_until)
                 SELECT id::text, 'POST /orders:v1', '{bare}', sha256('x'), gen_random_uuid(),
                     'completed', 201, '{{}}', now(), now() + interval '1 day'
                 FROM accounts;
                 SELECT pg_sleep(5);
                 ROLLBACK;"
            ))
        })
    };
    // The holder's uncommitted row is in place once it sleeps.
    eventually("the holder holds the key's row", async || {
        env.sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'") == "1"
    })
    .await;
    let blocked = server.post_order(&token, &key, BODY).await;
    blocked.assert_problem(409, "idempotency-request-in-progress");
    assert_eq!(blocked.header("retry-after"), Some("1"));
    holder.join().unwrap();
    let retry = server.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201);
    assert_eq!(env.counts(), (1, 1));
}

/// `--test-faults` is refused without the explicit environment switch.
async fn test_faults_are_refused_in_normal_use(backend: Backend) {
    let env = Env::new(backend);
    let out = std::process::Command::new(common::BIN)
        .args([
            "serve",
            "--database-url",
            &env.url,
            "--bind",
            "127.0.0.1:0",
            "--test-faults",
        ])
        .env_remove("IDEMKEY_ALLOW_TEST_FAULTS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("IDEMKEY_ALLOW_TEST_FAULTS"));
    // Without the flag the fault header is ignored.
    let token = env.account("shop");
    let server = env.serve(&[]);
    let reply = server
        .post_order_with(
            &token,
            &new_key(),
            BODY,
            &[("x-idemkey-test-fault", "exit-after-commit")],
        )
        .await;
    assert_eq!(reply.status, 201);
}

/// Demo mode: the page at `/`, the demo account's token at `/demo/token`
/// (both demo accounts' at `/demo/tokens`),
/// and the "lose the next response" switch: the order commits, the
/// connection closes with no response, and the retry replays the order.
/// A restart keeps the same demo account.
async fn demo_mode_loses_the_next_response_and_the_retry_replays(backend: Backend) {
    let env = Env::new(backend);
    let site = std::env::temp_dir().join(format!("idemkey-site-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("index.html"), "<h1>shop</h1>").unwrap();
    let site_arg = site.display().to_string();
    let server = env.serve(&["--demo", "--demo-dir", &site_arg]);
    let page = server.get("", "/").await;
    assert_eq!((page.status, page.body.as_str()), (200, "<h1>shop</h1>"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    server
        .get("", "/missing.js")
        .await
        .assert_problem(404, "not-found");
    let token = server.get("", "/demo/token").await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // The page's "switch account" control: both demo accounts.
    let tokens = server.get("", "/demo/tokens").await.json();
    assert_eq!(tokens["accounts"][0]["name"], "demo");
    assert_eq!(
        tokens["accounts"][0]["token"].as_str(),
        Some(token.as_str())
    );
    assert_eq!(tokens["accounts"][1]["name"], "demo-b");
    assert!(tokens["accounts"][1]["token"].is_string());

    let armed = server
        .client
        .post(format!("{}/demo/lose-next-response", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(armed.status(), 200);
    let key = new_key();
    let lost = server.order_request(&token, &key, BODY).send().await;
    assert!(lost.is_err(), "no response at all");
    assert_eq!(env.counts(), (1, 1));
    let retry = server.post_order(&token, &key, BODY).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    // The switch is one-shot.
    let next = server.post_order(&token, &new_key(), BODY).await;
    assert_eq!(next.status, 201);
    drop(server);

    let again = env.serve(&["--demo", "--demo-dir", &site_arg]);
    let new_token = again.get("", "/demo/token").await.json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new_token, token);
    let lookup = again
        .get(
            &new_token,
            &format!("/operations/{}", key.trim_matches('"')),
        )
        .await;
    assert_eq!(lookup.json()["state"], "completed", "same demo account");
    assert_eq!(
        env.count("accounts"),
        2,
        "demo and demo-b, kept across restarts"
    );
    let _ = std::fs::remove_dir_all(&site);
}

/// A body that stops half-way gets 400 `request-invalid` once the body read
/// deadline passes, its connection is closed, and nothing is stored.
async fn a_body_that_stops_half_way_is_answered_and_closed(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("alice");
    let server = env.serve(&["--body-read-timeout", "300ms"]);
    let before = env.counts();
    let head = format!(
        "POST /orders HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\
         idempotency-key: {}\r\ncontent-type: application/json\r\n\
         content-length: 40\r\n\r\n{}",
        new_key(),
        &BODY[..10]
    );
    let addr = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    // What happened is the assertion (answered 400 and closed); the minute
    // only guards against hanging forever.
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("request-invalid"), "{answer}");
    assert!(answer.contains("did not arrive in time"), "{answer}");
    assert_eq!(env.counts(), before);
    // The server goes on serving.
    let ok = server.post_order(&token, &new_key(), BODY).await;
    assert_eq!(ok.status, 201);
}

/// `GET /orders` lists the caller's orders, newest first, within the
/// limit, and nobody else's.
async fn the_order_list_is_the_callers_newest_first(backend: Backend) {
    let env = Env::new(backend);
    let alice = env.account("alice");
    let bob = env.account("bob");
    let server = env.serve(&[]);
    let empty = server.get(&alice, "/orders").await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.header("cache-control"), Some("no-store"));
    assert_eq!(empty.json(), serde_json::json!({ "orders": [] }));
    let mut ids = Vec::new();
    for quantity in 1..=3 {
        let body = format!(r#"{{"sku":"LIBRO-TS","quantity":{quantity}}}"#);
        let created = server.post_order(&alice, &new_key(), &body).await;
        assert_eq!(created.status, 201);
        ids.push(created.json()["id"].as_str().unwrap().to_owned());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(server.post_order(&bob, &new_key(), BODY).await.status, 201);
    let list = server.get(&alice, "/orders").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert_eq!(list.header("cache-control"), Some("no-store"));
    let orders = list.json()["orders"].as_array().unwrap().clone();
    let listed: Vec<&str> = orders.iter().map(|o| o["id"].as_str().unwrap()).collect();
    ids.reverse();
    assert_eq!(listed, ids, "alice's three, newest first");
    assert_eq!(orders[0]["sku"], "LIBRO-TS");
    assert_eq!(orders[0]["quantity"], 3);
    assert!(orders[0]["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(orders[0]["amount_cents"], 3 * 2990);
    assert_eq!(orders[0]["currency"], "EUR");
    assert_eq!(orders[0]["payment"]["status"], "pending");
    assert_eq!(
        orders[0].as_object().unwrap().len(),
        7,
        "id, sku, quantity, amount_cents, currency, created_at, payment"
    );
    let two = server.get(&alice, "/orders?limit=2").await;
    assert_eq!(two.json()["orders"].as_array().unwrap().len(), 2);
    let capped = server.get(&alice, "/orders?limit=100000").await;
    assert_eq!(capped.json()["orders"].as_array().unwrap().len(), 3);
    server
        .get(&alice, "/orders?limit=0")
        .await
        .assert_problem(400, "request-invalid");
    server
        .get("not-a-token", "/orders")
        .await
        .assert_problem(401, "unauthorized");
    let bobs = server.get(&bob, "/orders").await.json();
    assert_eq!(bobs["orders"].as_array().unwrap().len(), 1);
}

on_each_backend!(
    the_order_list_is_the_callers_newest_first,
    a_body_that_stops_half_way_is_answered_and_closed,
    every_bad_input_gets_its_problem_and_stores_nothing,
    fallbacks_are_problems,
    lookup_follows_a_key_through_its_retention,
    reexecute_policy_runs_the_request_anew_after_the_window,
    test_faults_are_refused_in_normal_use,
    demo_mode_loses_the_next_response_and_the_retry_replays,
);

on_postgres!(lock_wait_over_the_timeout_answers_409_with_retry_after);

/// With no database URL at all, `serve` uses `sqlite://idemkey.db` in the
/// working directory, creates it, and says so in its first log line.
#[test]
fn serve_without_a_database_url_uses_sqlite_in_the_working_directory() {
    use std::io::BufRead as _;
    let dir = std::env::temp_dir().join(format!("idemkey-default-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = std::process::Command::new(common::BIN)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .current_dir(&dir)
        .env_remove("DATABASE_URL")
        .env("RUST_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let listening = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("listening on")));
    let _ = child.kill();
    let _ = child.wait();
    assert!(first.contains("sqlite://idemkey.db"), "{first}");
    assert!(listening.is_some());
    assert!(dir.join("idemkey.db").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
