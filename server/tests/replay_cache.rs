//! The replay cache through real server processes on each backend: a
//! cached replay (or 422) is byte for byte the database's answer, every
//! process answers alike, no copy answers once the database's window is
//! over, and a revoked token stops replaying within `--auth-cache-ttl`.

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::{BODY, Backend, Env, Reply, Server, new_key};

/// Another payload than [`BODY`].
const OTHER: &str = r#"{"sku":"CAFE-1KG","quantity":1}"#;

/// `idemkey_replay_cache_requests_total{result}` of a server (0 when the
/// cache is off and the metric absent).
async fn cache_count(server: &Server, result: &str) -> u64 {
    let text = server.metrics().await;
    let name = format!("idemkey_replay_cache_requests_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&name))
        .map_or(0, |v| v.parse().expect("a count"))
}

/// Status, headers (but the date and the request id, which differ per
/// request) and body: what must be identical between two answers.
fn answer(reply: &Reply) -> (u16, Vec<(String, String)>, String) {
    let mut headers: Vec<_> = reply
        .headers
        .iter()
        .filter(|(n, _)| !matches!(n.as_str(), "date" | "x-request-id"))
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("?").to_owned()))
        .collect();
    headers.sort();
    (reply.status, headers, reply.body.clone())
}

/// The first replay misses and fills the cache; the next is a hit, and both
/// are byte for byte the replay of a process without a cache. A 422 for
/// another payload under the key, served from the cache, is the database's
/// 422 too.
async fn a_cached_answer_is_the_databases(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let cached = env.serve(&[]);
    let uncached = env.serve(&["--replay-cache-mib", "0"]);
    let key = new_key();
    assert_eq!(cached.post_order(&token, &key, BODY).await.status, 201);

    let first = cached.post_order(&token, &key, BODY).await;
    assert_eq!(first.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        (
            cache_count(&cached, "hit").await,
            cache_count(&cached, "miss").await
        ),
        (0, 1)
    );
    let second = cached.post_order(&token, &key, BODY).await;
    assert_eq!(
        cache_count(&cached, "hit").await,
        1,
        "served from the cache"
    );
    let from_db = uncached.post_order(&token, &key, BODY).await;
    assert_eq!(answer(&second), answer(&first));
    assert_eq!(answer(&second), answer(&from_db));

    let reused = cached.post_order(&token, &key, OTHER).await;
    reused.assert_problem(422, "idempotency-key-reused");
    assert_eq!(cache_count(&cached, "hit").await, 2, "422 from the cache");
    let reused_db = uncached.post_order(&token, &key, OTHER).await;
    assert_eq!(answer(&reused), answer(&reused_db));

    // A body that does not parse is refused as it is without a copy, even
    // for a key the cache holds.
    let malformed = cached.post_order(&token, &key, "{\"sku\":").await;
    assert_eq!(malformed.status, 400);
    assert_eq!(
        answer(&malformed),
        answer(&uncached.post_order(&token, &key, "{\"sku\":").await)
    );
    assert_eq!(cache_count(&cached, "hit").await, 2, "no hit for it");

    assert_eq!(cache_count(&uncached, "hit").await, 0);
    assert_eq!(env.counts(), (1, 1), "nothing more was created");
}

/// Two processes with their own caches: after each has filled its copy,
/// every replay from either is the same answer.
async fn every_process_answers_alike(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let (a, b) = (env.serve(&[]), env.serve(&[]));
    let key = new_key();
    let created = a.post_order(&token, &key, BODY).await;
    assert_eq!(created.status, 201);
    let mut answers = Vec::new();
    for server in [&a, &b, &a, &b] {
        answers.push(answer(&server.post_order(&token, &key, BODY).await));
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:#?}");
    assert_eq!(answers[0].2, created.body, "the replay is the 201's body");
    for server in [&a, &b] {
        assert_eq!(cache_count(server, "hit").await, 1);
    }
}

/// Whether the database's own clock has passed every record's window.
fn window_over(env: &Env) -> bool {
    let sql = match env.backend {
        Backend::Postgres => "SELECT bool_and(now() >= replay_until) FROM idempotency_records",
        Backend::Sqlite => {
            "SELECT min(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) >= replay_until) \
             FROM idempotency_records"
        }
    };
    matches!(env.sql(sql).as_str(), "t" | "1")
}

/// With a 2 s window: replays are served from the cache inside it; once the
/// database's clock says the window is over, the very next request gets the
/// database's 410, never the cached replay.
async fn no_copy_answers_after_the_window(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&["--replay-ttl", "2s", "--tombstone-ttl", "1h"]);
    let key = new_key();
    assert_eq!(server.post_order(&token, &key, BODY).await.status, 201);
    for _ in 0..2 {
        let replay = server.post_order(&token, &key, BODY).await;
        assert_eq!(replay.status, 201, "{}", replay.body);
    }
    assert_eq!(cache_count(&server, "hit").await, 1, "the copy answered");
    common::eventually("the database's window is over", async || window_over(&env)).await;
    server
        .post_order(&token, &key, BODY)
        .await
        .assert_problem(410, "idempotency-key-expired");
    assert_eq!(
        cache_count(&server, "hit").await,
        1,
        "no hit after the window"
    );
}

/// A revoked token: new orders are refused at once; a replay the cache
/// holds is refused once `--auth-cache-ttl` has passed since the
/// revocation committed (the cache trusted the token from before it).
async fn a_revoked_token_stops_replaying_within_the_ttl(backend: Backend) {
    let env = Env::new(backend);
    env.account("shop");
    let (ok, out, err) = env.cli(&["token", "create", "shop"]);
    assert!(ok, "{err}");
    let token = out.lines().last().expect("a token").to_owned();
    let ttl = Duration::from_millis(500);
    let server = env.serve(&["--auth-cache-ttl", "500ms"]);
    let key = new_key();
    assert_eq!(server.post_order(&token, &key, BODY).await.status, 201);
    for _ in 0..2 {
        assert_eq!(server.post_order(&token, &key, BODY).await.status, 201);
    }
    assert_eq!(cache_count(&server, "hit").await, 1);

    let (ok, out, err) = env.cli(&["token", "list", "shop"]);
    assert!(ok, "{err}");
    // The header, the account's first token, then this one.
    let id = out
        .lines()
        .nth(2)
        .and_then(|l| l.split('\t').next())
        .expect("an id");
    let (ok, _, err) = env.cli(&["token", "revoke", id]);
    assert!(ok, "{err}");
    let revoked = Instant::now();
    server
        .post_order(&token, &new_key(), BODY)
        .await
        .assert_problem(401, "unauthorized");
    // Whatever the cache answered until now, past the bound it must not.
    tokio::time::sleep((revoked + ttl + Duration::from_millis(50)) - Instant::now()).await;
    server
        .post_order(&token, &key, BODY)
        .await
        .assert_problem(401, "unauthorized");
    assert_eq!(env.counts(), (1, 1));
}

/// A warm cache keeps accounts apart: Alice's key and body, sent by Bob
/// with his own token (itself warm in the cache), create Bob's own order,
/// never a replay of Alice's, while Alice's copy keeps answering her.
async fn a_warm_cache_keeps_accounts_apart(backend: Backend) {
    let env = Env::new(backend);
    let alice = env.account("alice");
    let bob = env.account("bob");
    let server = env.serve(&[]);
    let key = new_key();
    let hers = server.post_order(&alice, &key, BODY).await;
    assert_eq!(hers.status, 201, "{}", hers.body);
    // Alice's entry is in the cache (the first replay fills it, the second
    // is a hit), and so is Bob's token (his replay of another key).
    for _ in 0..2 {
        let replay = server.post_order(&alice, &key, BODY).await;
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    }
    let other = new_key();
    assert_eq!(server.post_order(&bob, &other, BODY).await.status, 201);
    assert_eq!(server.post_order(&bob, &other, BODY).await.status, 201);
    let hits = cache_count(&server, "hit").await;
    assert_eq!(hits, 1, "Alice's copy answered once");

    let his = server.post_order(&bob, &key, BODY).await;
    assert_eq!(his.status, 201, "{}", his.body);
    assert_eq!(his.header("idempotent-replayed"), None, "not a replay");
    assert_ne!(his.json()["id"], hers.json()["id"], "Bob's own order");
    assert_eq!(
        cache_count(&server, "hit").await,
        hits,
        "no copy answered Bob"
    );
    let again = server.post_order(&bob, &key, BODY).await;
    assert_eq!(again.json()["id"], his.json()["id"], "Bob's replay is his");
    let hers_again = server.post_order(&alice, &key, BODY).await;
    assert_eq!(hers_again.json()["id"], hers.json()["id"]);
    assert_eq!(env.count("orders"), 3);
}

/// A duration option past its upper bound stops the server at start with
/// the option and the bound in the message. A huge `--auth-cache-ttl` used
/// to be accepted, and every replay that the cache remembered then
/// panicked adding it to the clock.
async fn a_huge_auth_cache_ttl_is_refused_at_start(backend: Backend) {
    let env = Env::new(backend);
    let err = common::refused_at_start(
        &[
            "serve",
            "--database-url",
            &env.url,
            "--bind",
            "127.0.0.1:0",
            "--auth-cache-ttl",
            "200000000000000d",
        ],
        &[],
    );
    assert!(err.contains("--auth-cache-ttl"), "{err}");
    assert!(err.contains("upper bound of 1h"), "{err}");
}

/// `--replay-cache-mib 0`: no cache, no cache metrics, replays as before.
async fn the_cache_can_be_turned_off(backend: Backend) {
    let env = Env::new(backend);
    let token = env.account("shop");
    let server = env.serve(&["--replay-cache-mib", "0"]);
    let key = new_key();
    assert_eq!(server.post_order(&token, &key, BODY).await.status, 201);
    for _ in 0..3 {
        let replay = server.post_order(&token, &key, BODY).await;
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    }
    let metrics = server.metrics().await;
    assert!(!metrics.contains("idemkey_replay_cache"), "{metrics}");
}

on_each_backend!(
    a_cached_answer_is_the_databases,
    every_process_answers_alike,
    no_copy_answers_after_the_window,
    a_revoked_token_stops_replaying_within_the_ttl,
    the_cache_can_be_turned_off,
    a_warm_cache_keeps_accounts_apart,
    a_huge_auth_cache_ttl_is_refused_at_start,
);
