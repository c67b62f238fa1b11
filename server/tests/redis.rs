//! The Redis store beyond the suites every store runs (`layer.rs`,
//! `records.rs`): what only Redis has — expiry instead of trim, scripts a
//! client may resend, a cluster's slots and a live resharding, `WAIT` —
//! and what it refuses. Every test runs real `redis-server` processes
//! from the testkit.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::store::{RedisSettings, StoreSettings};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, Stored};
use idemkey_server::idempotency::{
    self, ClaimToken, Claimed, Done, Mode, NewClaim, Outcome, Policy, RecordKey, Records as _,
    Scope, StoredResponse,
};
use idemkey_testkit::{RedisCluster, RedisNode};

mod common;
use common::{BIN, Server, age_records, count_in_flight, count_records, eventually};

const OPERATION: OperationId = OperationId::from_static("http:v1");

fn key(name: &str) -> RecordKey {
    RecordKey {
        scope: Scope::new("tenant-r").expect("a scope"),
        operation: OPERATION,
        key: IdempotencyKey::parse(format!("\"{name}\"").as_bytes(), KeyProfile::Lenient)
            .expect("a key"),
    }
}

fn new_claim(lease: Duration) -> NewClaim {
    NewClaim {
        token: ClaimToken::random(),
        fingerprint: Fingerprint::of_json(&OPERATION, "1").expect("json"),
        lease,
        replay_ttl: Duration::from_secs(3600),
    }
}

async fn open(url: &str, settings: &RedisSettings) -> Db {
    Db::open(
        url,
        &StoreSettings {
            redis: settings.clone(),
            ..StoreSettings::default()
        },
    )
    .await
    .expect("open the Redis store")
}

/// `PEXPIRETIME` of the record behind `k` (on a single node).
async fn expiry_of(url: &str, k: &RecordKey) -> i64 {
    let client = redis::Client::open(url).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("PEXPIRETIME")
        .arg(idemkey::store::redis::record_name(k))
        .query_async(&mut conn)
        .await
        .expect("PEXPIRETIME")
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_expire_on_their_own_and_trim_has_nothing_to_do() {
    let node = RedisNode::start().expect("start redis-server");
    let url = node.url();
    let hour = Duration::from_secs(3600);
    let db = open(
        &url,
        &RedisSettings {
            retention: hour,
            ..RedisSettings::default()
        },
    )
    .await;
    let k = key("expires");
    let c = new_claim(Duration::from_secs(30));
    assert_eq!(db.claim(&k, &c).await.expect("claim"), Claimed::Won);
    let read = db.read(&k).await.expect("read");
    let Some(Stored::InFlight { lease_until, .. }) = read.record.map(|r| r.stored) else {
        panic!("an in-flight claim");
    };
    // An abandoned claim is forgotten one retention after its lease.
    assert_eq!(
        expiry_of(&url, &k).await,
        i64::try_from(lease_until.0).unwrap() + 3_600_000
    );
    let response = StoredResponse::new(201, "done");
    assert!(
        db.complete(&k, c.token, &response, 2 * hour, Some("r-1"))
            .await
            .expect("complete")
    );
    let record = db.read(&k).await.expect("read").record.expect("a record");
    let replay_until = record.replay_until.expect("a window").0;
    assert_eq!(record.response, Some(response));
    assert_eq!(record.resource_id.as_deref(), Some("r-1"));
    // A completed record lives through its window (longer than the
    // retention here), then goes.
    assert_eq!(
        expiry_of(&url, &k).await,
        i64::try_from(replay_until).unwrap()
    );
    let report = db.trim(hour, 100).await.expect("trim");
    assert_eq!((report.trimmed, report.deleted), (0, 0));
    assert_eq!(count_records(&url).await, 1);
    // Once the node's clock passes the expiry, Redis has deleted it.
    age_records(&url, 3 * hour).await;
    assert_eq!(db.read(&k).await.expect("read").record, None);
    assert_eq!(count_records(&url).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_script_finds_its_own_claim_and_completion() {
    let node = RedisNode::start().expect("start redis-server");
    let db = open(&node.url(), &RedisSettings::default()).await;
    let k = key("resent");
    let c = new_claim(Duration::from_secs(30));
    assert_eq!(db.claim(&k, &c).await.expect("claim"), Claimed::Won);
    // The same claim again (its reply was lost): still ours.
    assert_eq!(db.claim(&k, &c).await.expect("claim"), Claimed::Won);
    // Anyone else's claim finds it taken.
    let other = new_claim(Duration::from_secs(30));
    assert!(matches!(
        db.claim(&k, &other).await.expect("claim"),
        Claimed::Taken(_)
    ));
    let response = StoredResponse::new(200, "once");
    let ttl = Duration::from_secs(60);
    assert!(
        db.complete(&k, c.token, &response, ttl, None)
            .await
            .unwrap()
    );
    assert!(
        db.complete(&k, c.token, &response, ttl, None)
            .await
            .unwrap()
    );
    assert!(
        !db.complete(&k, other.token, &response, ttl, None)
            .await
            .unwrap()
    );
    assert!(!db.release(&k, c.token).await.unwrap(), "completed stays");
    let record = db.read(&k).await.unwrap().record.expect("a record");
    assert_eq!(record.token, c.token);
    assert!(matches!(record.stored, Stored::Completed { .. }));
}

/// Keys per master, by `DBSIZE` on each node that is a master now.
fn keys_per_master(cluster: &RedisCluster) -> HashMap<u16, u64> {
    cluster
        .master_ports()
        .into_iter()
        .map(|port| {
            let node = cluster.nodes().iter().find(|n| n.port() == port).unwrap();
            let n = node.cli(&["dbsize"]).expect("dbsize").parse().unwrap();
            (port, n)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_spread_over_all_three_masters() {
    let cluster = RedisCluster::start(3, 1).expect("start a Redis Cluster");
    let db = open(&cluster.url(), &RedisSettings::default()).await;
    let n = 300;
    for i in 0..n {
        let c = new_claim(Duration::from_secs(30));
        let won = db.claim(&key(&format!("spread-{i}")), &c).await;
        assert_eq!(won.expect("claim"), Claimed::Won);
    }
    let spread = keys_per_master(&cluster);
    println!("records per master (port: count): {spread:?}");
    assert_eq!(spread.len(), 3);
    assert_eq!(spread.values().sum::<u64>(), n);
    // Uniform would be 100 each; the hash tag is ours, so no client key
    // can pile records onto one slot.
    assert!(spread.values().all(|&c| c >= 50), "{spread:?}");
}

fn lease_policy() -> Policy {
    Policy::new(
        Mode::Lease,
        Duration::from_secs(30),
        Duration::from_secs(3600),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_resharding_neither_loses_nor_duplicates_a_record() {
    let cluster = RedisCluster::start(3, 1).expect("start a Redis Cluster");
    let db = open(&cluster.url(), &RedisSettings::default()).await;
    let masters = cluster.master_ports();
    let node = |port: u16| cluster.nodes().iter().find(|n| n.port() == port).unwrap();
    let id = |port: u16| node(port).cli(&["cluster", "myid"]).expect("myid");
    let (from, to) = (masters[0], masters[1]);
    let (from_id, to_id) = (id(from), id(to));
    let keys: Vec<RecordKey> = (0..150).map(|i| key(&format!("moving-{i}"))).collect();
    let runs: Vec<AtomicUsize> = keys.iter().map(|_| AtomicUsize::new(0)).collect();
    let run_all = async |round: usize| -> usize {
        let mut replays = 0;
        for (i, k) in keys.iter().enumerate() {
            let body = format!("r-{i}");
            let outcome = idempotency::run(&db, k, fingerprint(), &lease_policy(), async || {
                runs[i].fetch_add(1, Ordering::SeqCst);
                Ok::<_, ()>(Done {
                    response: StoredResponse::new(201, body.clone()),
                    resource: None,
                    value: (),
                })
            })
            .await
            .unwrap_or_else(|e| panic!("round {round}, key {i}: {e:?}"));
            match outcome {
                Outcome::Executed {
                    response, stored, ..
                } => {
                    assert!(stored, "round {round}, key {i}: stored");
                    assert_eq!(response.body.as_deref(), Some(body.as_bytes()));
                }
                Outcome::Replayed(r) => {
                    replays += 1;
                    assert_eq!(r.body.as_deref(), Some(body.as_bytes()));
                }
                other => panic!("round {round}, key {i}: {other:?}"),
            }
        }
        replays
    };
    assert_eq!(run_all(0).await, 0, "the first round executes every key");
    let before = keys_per_master(&cluster);

    // Move 3000 slots (about half of one master's) while requests run.
    let done = Arc::new(AtomicBool::new(false));
    let reshard = {
        let done = Arc::clone(&done);
        let seed = format!("127.0.0.1:{from}");
        std::thread::spawn(move || {
            let out = Command::new(idemkey_testkit::REDIS_CLI)
                .args(["--cluster", "reshard", &seed, "--cluster-from", &from_id])
                .args(["--cluster-to", &to_id, "--cluster-slots", "3000"])
                .args(["--cluster-yes", "--cluster-pipeline", "1"])
                .output()
                .expect("run redis-cli --cluster reshard");
            done.store(true, Ordering::SeqCst);
            out
        })
    };
    let mut rounds = 1;
    let mut replays = 0;
    loop {
        let finished = done.load(Ordering::SeqCst);
        replays += run_all(rounds).await;
        rounds += 1;
        if finished {
            break;
        }
    }
    let out = reshard.join().expect("reshard thread");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster
        .wait_until_ok(Duration::from_secs(30))
        .expect("cluster ok");
    let after = keys_per_master(&cluster);
    println!(
        "rounds during the resharding: {rounds}; records per master before {before:?}, after {after:?}"
    );
    assert!(rounds >= 3, "requests ran while slots moved");
    assert!(
        after[&to] > before[&to],
        "records moved: {before:?} → {after:?}"
    );
    assert!(
        after[&from] < before[&from],
        "records moved: {before:?} → {after:?}"
    );
    assert_eq!(after.values().sum::<u64>(), keys.len() as u64, "none lost");
    for (i, n) in runs.iter().enumerate() {
        assert_eq!(n.load(Ordering::SeqCst), 1, "key {i} ran once");
    }
    assert_eq!(replays, keys.len() * (rounds - 1));
}

fn fingerprint() -> Fingerprint {
    Fingerprint::of_json(&OPERATION, "1").expect("json")
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
    let runs_before = fixture.handler_runs().await;

    let slow = |fixture: &Server| {
        fixture
            .client
            .post(format!("{}/slow?ms=3000", fixture.base))
            .header("idempotency-key", "\"unconfirmed-1\"")
            .header("content-type", "application/json")
            .body("{}")
            .send()
    };
    // Warm-up claims whose WAIT fell short stay in flight until their lease.
    let in_flight_before = count_in_flight(&url).await;
    let first = tokio::spawn(slow(&fixture));
    // The claim is confirmed (its WAIT passed) and the handler is running:
    // stop the replica so that the completion's WAIT cannot pass.
    eventually("the claim is in flight", async || {
        first.is_finished() || count_in_flight(&url).await == in_flight_before + 1
    })
    .await;
    if first.is_finished() {
        let early = first.await.expect("task").expect("an answer");
        let status = early.status();
        panic!(
            "the slow request ended before its claim was seen: {status} {}",
            early.text().await.unwrap_or_default()
        );
    }
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

    let retry = slow(&fixture).await.expect("the retry's answer");
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
