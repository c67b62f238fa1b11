//! The Redis store beyond the suites every store runs (`records.rs` here,
//! `layer.rs` in the order service's tests): what only Redis has — expiry
//! instead of trim, scripts a client may resend, a cluster's slots and a
//! live resharding. Every test runs real `redis-server` processes from the
//! testkit. `WAIT`, TLS and what the binary refuses run through the order
//! service's fixture (`server/tests/redis_fixture.rs`).

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use idemkey::Db;
use idemkey::idempotency::{
    self, ClaimToken, Claimed, Done, Mode, NewClaim, Outcome, Policy, RecordKey, Records as _,
    Scope, StoredResponse,
};
use idemkey::store::{RedisSettings, StoreSettings};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId, Stored};
use idemkey_testkit::{RedisCluster, RedisNode, age_records, count_records};

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
    // The record's name ends with the length-prefixed scope, operation and
    // key (its hash tag comes first); a single node answers `KEYS`.
    let (scope, operation, key) = (k.scope.as_str(), k.operation.as_str(), k.key.as_str());
    let tail = format!(
        ":{}:{scope}:{}:{operation}:{key}",
        scope.len(),
        operation.len()
    );
    let names: Vec<String> = redis::cmd("KEYS")
        .arg("idemkey:*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    let mut names = names.into_iter().filter(|name| name.ends_with(&tail));
    let name = names.next().expect("the record is stored");
    assert!(names.next().is_none(), "one record per key");
    redis::cmd("PEXPIRETIME")
        .arg(name)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRETIME")
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
