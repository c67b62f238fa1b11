//! The Redis store through the order service's binary: `serve`, `migrate`
//! and `account create` refuse a Redis URL, and the fixture (the idempotency
//! layer on Redis) waits for replicas (`WAIT`), speaks TLS to a `rediss://`
//! URL and decides leases on Redis's clock when its own is off. Every test
//! runs real `redis-server` processes from the testkit; the store's own
//! protocol is the library's `idemkey/tests/redis.rs`.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::store::StoreSettings;
use idemkey_testkit::{RedisCluster, RedisNode};

mod common;
use common::{BIN, Server, eventually};

#[test]
fn serve_migrate_and_account_refuse_a_redis_url_and_say_why() {
    let node = RedisNode::start().expect("start redis-server");
    let url = node.url();
    for args in [
        vec!["serve", "--bind", "127.0.0.1:0", "--database-url", &url],
        vec!["migrate", "--database-url", &url],
        vec!["account", "create", "x", "--database-url", &url],
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("DATABASE_URL")
            .output()
            .expect("run idemkey-server");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must refuse Redis");
        assert!(
            stderr.contains("lease mode") && stderr.contains("one database transaction"),
            "{args:?}: {stderr}"
        );
    }
}

async fn post_echo(server: &Server, key: &str) -> (u16, String) {
    let response = server
        .client
        .post(format!("{}/echo", server.base))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(r#"{"pay":1}"#)
        .send()
        .await
        .expect("send");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_replica_that_is_not_there_is_503_and_runs_nothing() {
    let node = RedisNode::start().expect("start redis-server");
    let url = node.url();
    let fixture = Server::fixture(&[
        "--database-url",
        &url,
        "--redis-wait-replicas",
        "1",
        "--redis-wait-timeout",
        "50ms",
    ]);
    let (status, body) = post_echo(&fixture, "\"w-1\"").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unavailable"), "{body}");
    assert!(!body.contains("WAIT"), "internals stay in the log: {body}");
    assert_eq!(fixture.handler_runs().await, 0, "the claim was not durable");
}

/// A completion whose `WAIT` falls short (its replica stopped while the
/// handler ran) is answered 503, never acknowledged; the retry with the same
/// key replays what the master stored, and the handler ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_completion_is_503_and_the_retry_replays() {
    let master = RedisNode::start().expect("start redis-server");
    let port = master.port().to_string();
    let replica =
        RedisNode::start_with(&["--replicaof", "127.0.0.1", &port]).expect("start a replica");
    let url = master.url();
    let fixture = Server::fixture(&[
        "--database-url",
        &url,
        "--redis-wait-replicas",
        "1",
        "--redis-wait-timeout",
        "200ms",
    ]);
    let warm_up = AtomicUsize::new(0);
    eventually("the replica acknowledges writes", async || {
        let n = warm_up.fetch_add(1, Ordering::SeqCst);
        post_echo(&fixture, &format!("\"warm-{n}\"")).await.0 == 201
    })
    .await;

    let slow = |fixture: &Server, key: String| {
        fixture
            .client
            .post(format!("{}/slow?ms=3000", fixture.base))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    // The handler runs, so its claim is confirmed: stop the replica then,
    // so that the completion's WAIT cannot pass. On a busy box the claim's
    // own WAIT may fall short (the handler never runs, the answer is 503
    // and that claim stays in flight until its lease): try a new key.
    let mut attempt = 0;
    let (key, first) = loop {
        attempt += 1;
        assert!(attempt <= 5, "no claim was confirmed in 5 tries");
        let key = format!("\"unconfirmed-{attempt}\"");
        let runs = fixture.handler_runs().await;
        let first = tokio::spawn(slow(&fixture, key.clone()));
        eventually("the handler runs, or the request ends", async || {
            first.is_finished() || fixture.handler_runs().await == runs + 1
        })
        .await;
        if !first.is_finished() {
            break (key, first);
        }
        let early = first.await.expect("task").expect("an answer");
        let status = early.status().as_u16();
        assert_eq!(
            status,
            503,
            "only an unconfirmed claim ends before its handler: {}",
            early.text().await.unwrap_or_default()
        );
    };
    let runs_before = fixture.handler_runs().await - 1;
    replica.freeze().expect("SIGSTOP the replica");
    let answer = first.await.expect("task").expect("an answer");
    replica.thaw().expect("SIGCONT the replica");
    let status = answer.status().as_u16();
    let body = answer.text().await.expect("body");
    assert_eq!(
        status, 503,
        "an unconfirmed completion is not acknowledged: {body}"
    );
    assert!(!body.contains("WAIT"), "internals stay in the log: {body}");

    let retry = slow(&fixture, key).await.expect("the retry's answer");
    assert_eq!(retry.status().as_u16(), 200);
    assert!(
        retry.headers().get("idempotent-replayed").is_some(),
        "the retry replays the stored answer"
    );
    assert_eq!(retry.text().await.expect("body"), "slept:3000");
    assert_eq!(
        fixture.handler_runs().await,
        runs_before + 1,
        "the handler ran once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_each_masters_replica_acknowledges_and_replays() {
    let cluster = RedisCluster::start(3, 1).expect("start a Redis Cluster");
    let url = cluster.url();
    let fixture = Server::fixture(&["--database-url", &url, "--redis-wait-replicas", "1"]);
    for i in 0..20 {
        let key = format!("\"w-{i}\"");
        let first = post_echo(&fixture, &key).await;
        assert_eq!(first.0, 201, "{}", first.1);
        assert_eq!(post_echo(&fixture, &key).await, first);
    }
    assert_eq!(fixture.handler_runs().await, 20);
}

/// Two fixtures on one Redis node, one with its clock an hour ahead: it
/// neither takes over the other's live claim nor re-executes a key inside
/// its window, because Redis's clock (`TIME` in the scripts) decides both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixture_with_a_skewed_clock_runs_each_handler_once_on_redis() {
    let node = RedisNode::start().expect("start redis-server");
    let url = node.url();
    let flags = [
        "--database-url",
        url.as_str(),
        "--lease",
        "30s",
        "--replay-ttl",
        "10m",
        "--expiry-policy",
        "reexecute",
    ];
    let on_time = Server::fixture(&flags);
    let ahead = Server::fixture_skewed(&flags, "+1h");
    let slow = {
        let (client, base) = (on_time.client.clone(), on_time.base.clone());
        tokio::spawn(async move {
            client
                .post(format!("{base}/slow?ms=1500"))
                .header("idempotency-key", "\"skew-1\"")
                .send()
                .await
                .expect("send")
                .status()
        })
    };
    // The slow request holds its claim for 1.5 s; its lease is 30 s.
    while on_time.handler_runs().await == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let post = |server: &Server, path: &str, key: &str| {
        server
            .client
            .post(format!("{}{path}", server.base))
            .header("idempotency-key", key)
            .send()
    };
    let answer = post(&ahead, "/slow?ms=1500", "\"skew-1\"")
        .await
        .expect("send");
    assert_eq!(answer.status(), 409, "a live claim is not taken over");
    assert_eq!(slow.await.expect("join"), 200);
    let replay = post(&ahead, "/slow?ms=1500", "\"skew-1\"")
        .await
        .expect("send");
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let first = post(&on_time, "/echo", "\"skew-2\"").await.expect("send");
    assert_eq!(first.status(), 201);
    let again = post(&ahead, "/echo", "\"skew-2\"").await.expect("send");
    assert_eq!(
        again.headers()["idempotent-replayed"],
        "true",
        "inside the window"
    );
    assert_eq!(on_time.handler_runs().await + ahead.handler_runs().await, 2);
}

/// `rediss://`: the store over TLS (rustls), trusting a CA given by
/// `--redis-ca-file`; without it the system's roots refuse the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_speaks_tls_to_a_rediss_url() {
    let node = RedisNode::start_tls().expect("start a TLS redis-server");
    let url = node.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let ca = node.tls_ca().expect("a CA file").to_owned();
    let refused = Db::open(&url, &StoreSettings::default()).await;
    assert!(
        refused.is_err(),
        "a certificate from an unknown CA is refused"
    );
    let fixture = Server::fixture(&[
        "--database-url",
        &url,
        "--redis-ca-file",
        ca.to_str().expect("utf-8 path"),
    ]);
    let first = post_echo(&fixture, "\"tls-1\"").await;
    assert_eq!(first.0, 201, "{}", first.1);
    assert_eq!(post_echo(&fixture, "\"tls-1\"").await, first);
    assert_eq!(fixture.handler_runs().await, 1);
    assert_eq!(node.cli(&["dbsize"]).expect("dbsize"), "1");
}
