//! `redis-failover`: load through two fixture processes on a Redis Cluster
//! (3 masters, two replicas each) while one master is killed with SIGKILL
//! and one of its replicas promoted; handler executions are counted per
//! logical operation. Two faults:
//! - **lagging replicas**: the master's replicas fall behind first
//!   (SIGSTOP for 1 s, under operations with large responses), so the
//!   promoted one misses what the master acknowledged meanwhile;
//! - **the master alone**: it dies, its replicas keep up.
//!
//! Figures, printed by each run, appended to the test command's summary
//! (`IDEMKEY_FIGURES`) and published in docs/reliability.md:
//! - **duplicates**: handler executions beyond one per operation (every
//!   operation is retried until it is acknowledged, so each ran at least
//!   once);
//! - **lost acknowledgements**: operations acknowledged with a fresh 2xx
//!   whose key, sent again after the failover, runs the handler again
//!   instead of replaying;
//! - **unconfirmed writes**: claims and completions the store could not
//!   confirm (with `WAIT`, fewer replicas than asked for in time, or the
//!   call failed with the write in flight), each answered 503 and never
//!   acknowledged; the client's retry replays the
//!   stored answer or, if the failover lost it, runs the handler again.
//!
//! What is asserted is what a working `WAIT` must do, each against a
//! control:
//! - **lagging replicas**: while the replicas are frozen no write on their
//!   master can be confirmed, so the run with `--redis-wait-replicas 1`
//!   (`WAIT` timing out at 200 ms, well inside the 1 s freeze) refuses
//!   writes as unconfirmed (503) and loses **no** acknowledgement given
//!   while the replicas were frozen. The control, the same fault without
//!   `WAIT`, refuses none and loses some acknowledgements given then (the
//!   fault bites in the very window the `WAIT` run is judged on). A `WAIT`
//!   that is not sent, or whose answer is ignored, fails both. Outside
//!   that window `WAIT` is no consensus commit (docs/redis.md): a replica
//!   that acknowledged can still lose the election to one that did not,
//!   so losses from before the freeze are reported, not bounded;
//! - **the master alone**: with `WAIT`, no acknowledgement is lost. Its
//!   controls: the killed master's records were carried over by the
//!   promoted replica (acknowledged operations went through the
//!   failover), and the check itself sees a loss: records of a few of
//!   those operations deleted on the promoted replica are counted lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use idemkey_testkit::RedisCluster;
use tokio::sync::Mutex;

mod common;
use common::Server;

/// Clients sending operations at once, each one after the other, from
/// before the replicas fall behind until a second after the failover.
const CLIENTS: usize = 8;

/// What a run measured.
#[derive(Debug)]
struct Figures {
    operations: usize,
    before_fault: usize,
    executions: u64,
    duplicates: u64,
    lost_acknowledgements: usize,
    /// Lost acknowledgements given while the replicas were frozen (from
    /// [`SETTLED`] after the freeze until the kill).
    lost_while_frozen: usize,
    /// 503 answers the clients got while the replicas were frozen (the
    /// same window).
    refused_while_frozen: usize,
    /// Writes refused because `WAIT` counted too few replicas in time.
    wait_refused: usize,
    /// Writes whose pipeline failed in flight, answered 503 too.
    fate_unknown: usize,
    retries: usize,
}

/// After the freeze, how long before an acknowledgement cannot rest on a
/// replica's confirmation anymore (a `WAIT` answered just before the
/// freeze may reach its client just after it).
const SETTLED: Duration = Duration::from_millis(100);

/// What a run leaves for a control to look at: the cluster after the
/// failover, the fixtures, the operations acknowledged with a fresh
/// execution, and the port of the replica promoted in the master's place.
struct Aftermath {
    cluster: RedisCluster,
    fixtures: Arc<[Server; 2]>,
    acknowledged: Vec<(usize, &'static str)>,
    promoted: u16,
}

/// What operations started while the replicas lag ask for: a 256 KiB
/// response, so the replication stream outgrows the sockets' buffers and
/// stays in the master's memory (on loopback a small stream would sit in
/// the frozen replica's receive buffer and survive the master).
const HEAVY: &str = "/large?bytes=262144";

/// Sends operation `op` until it is acknowledged (a 2xx): answers whether
/// the acknowledgement was a fresh execution (not a replay), and how many
/// retries it took. Notes in `refusals` when each 503 came.
async fn until_acknowledged(
    fixtures: &[Server; 2],
    op: usize,
    path: &str,
    refusals: &StdMutex<Vec<Instant>>,
) -> (bool, usize) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut retries = 0;
    loop {
        let fixture = &fixtures[(op + retries) % 2];
        let sent = fixture
            .client
            .post(format!("{}{path}", fixture.base))
            .header("idempotency-key", format!("\"op-{op}\""))
            .header("content-type", "application/json")
            .body(format!(r#"{{"op":{op}}}"#))
            .send()
            .await;
        if let Ok(response) = sent {
            if response.status().is_success() {
                let replayed = response.headers().get("idempotent-replayed").is_some();
                return (!replayed, retries);
            }
            if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                refusals.lock().unwrap().push(Instant::now());
            }
        }
        assert!(
            Instant::now() < deadline,
            "operation {op} never acknowledged"
        );
        retries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Which fault a run injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The master's replicas are frozen for a second under large
    /// responses, then the master is killed.
    LaggingReplicas,
    /// The master is killed; its replicas keep up.
    MasterAlone,
}

async fn failover(wait_replicas: &str, fault: Fault) -> (Figures, Aftermath) {
    // Two replicas per master: after the failover the promoted replica
    // still has one, so `WAIT 1` can be met again.
    let mut cluster = RedisCluster::start(3, 2).expect("start a Redis Cluster");
    let url = cluster.url();
    // A `WAIT` that gives up well inside the 1 s freeze: with the default
    // 1 s one, a write's `WAIT` is still waiting when the master dies, and
    // the cluster client sends the pipeline again to the promoted replica
    // instead of reporting the frozen replicas.
    let args = [
        "--database-url",
        url.as_str(),
        "--lease",
        "2s",
        "--redis-wait-replicas",
        wait_replicas,
        "--redis-wait-timeout",
        "200ms",
    ];
    let fixtures = Arc::new([Server::fixture(&args), Server::fixture(&args)]);
    let next = Arc::new(AtomicUsize::new(0));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let retries = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = Arc::new(AtomicBool::new(false));
    let refusals = Arc::new(StdMutex::new(Vec::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (fixtures, next) = (Arc::clone(&fixtures), Arc::clone(&next));
            let (acknowledged, retries) = (Arc::clone(&acknowledged), Arc::clone(&retries));
            let (stop, heavy) = (Arc::clone(&stop), Arc::clone(&heavy));
            let refusals = Arc::clone(&refusals);
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let op = next.fetch_add(1, Ordering::SeqCst);
                    let path = if heavy.load(Ordering::SeqCst) {
                        HEAVY
                    } else {
                        "/echo"
                    };
                    let (fresh, tries) = until_acknowledged(&fixtures, op, path, &refusals).await;
                    retries.fetch_add(tries, Ordering::SeqCst);
                    if fresh {
                        acknowledged.lock().await.push((op, path, Instant::now()));
                    }
                }
            })
        })
        .collect();
    // Half a second of load, then the fault.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before_fault = next.load(Ordering::SeqCst);
    let victim = cluster.master_ports()[0];
    let replicas: Vec<u16> = cluster
        .replicas_of(victim)
        .iter()
        .map(|n| n.port())
        .collect();
    assert_eq!(replicas.len(), 2, "two replicas per master");
    let frozen_at = Instant::now();
    if fault == Fault::LaggingReplicas {
        // Its replicas fall behind first (frozen for 1 s while the master
        // goes on acknowledging), as a replica under load or across a
        // slow link does; then the master dies and a replica that missed
        // those writes is promoted.
        for node in cluster.replicas_of(victim) {
            node.freeze().expect("freeze a replica");
        }
        heavy.store(true, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let node = cluster
        .nodes_mut()
        .iter_mut()
        .find(|n| n.port() == victim)
        .expect("the master");
    node.kill();
    let killed_at = Instant::now();
    heavy.store(false, Ordering::SeqCst);
    if fault == Fault::LaggingReplicas {
        for node in cluster
            .nodes()
            .iter()
            .filter(|n| replicas.contains(&n.port()))
        {
            node.thaw().expect("thaw a replica");
        }
    }
    cluster
        .wait_until_ok(Duration::from_secs(60))
        .expect("the replica took over");
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.expect("client");
    }
    let operations = next.load(Ordering::SeqCst);
    let executions = fixtures[0].handler_runs().await + fixtures[1].handler_runs().await;
    let promoted = cluster
        .master_ports()
        .into_iter()
        .find(|port| replicas.contains(port))
        .expect("a replica of the killed master promoted");
    // Every acknowledged execution, sent again: a replay, or lost.
    let mut lost = 0;
    let mut lost_while_frozen = 0;
    let mut lost_ops = Vec::new();
    let acknowledged = acknowledged.lock().await.clone();
    let frozen =
        |at: Instant| fault == Fault::LaggingReplicas && at > frozen_at + SETTLED && at < killed_at;
    let ignored = StdMutex::new(Vec::new());
    for &(op, path, at) in &acknowledged {
        let (fresh, _) = until_acknowledged(&fixtures, op, path, &ignored).await;
        if fresh {
            lost += 1;
            lost_ops.push(op);
            lost_while_frozen += usize::from(frozen(at));
        }
    }
    let refused_while_frozen = refusals
        .lock()
        .unwrap()
        .iter()
        .filter(|at| frozen(**at))
        .count();
    lost_ops.sort_unstable();
    println!("re-executed after the failover: {lost_ops:?}");
    // Too few replicas in time, or the call failed in flight.
    let logged =
        |text: &str| -> usize { fixtures.iter().map(|f| f.log().matches(text).count()).sum() };
    let figures = Figures {
        operations,
        before_fault,
        executions,
        duplicates: executions.saturating_sub(operations as u64),
        lost_acknowledgements: lost,
        lost_while_frozen,
        refused_while_frozen,
        wait_refused: logged("replicas acknowledged the write in time"),
        fate_unknown: logged("the write's fate is unknown"),
        retries: retries.load(Ordering::SeqCst),
    };
    let Figures {
        operations,
        before_fault,
        executions,
        duplicates,
        lost_acknowledgements,
        lost_while_frozen,
        refused_while_frozen,
        wait_refused,
        fate_unknown,
        retries,
    } = &figures;
    let fault = match fault {
        Fault::LaggingReplicas => "replicas lagging",
        Fault::MasterAlone => "master alone",
    };
    let line = format!(
        "redis-failover ({fault}), --redis-wait-replicas {wait_replicas}: lost acknowledgements \
         {lost_acknowledgements} ({lost_while_frozen} given while the replicas were frozen), \
         operations {operations} ({before_fault} before the fault), executions {executions}, \
         duplicates {duplicates}, unconfirmed writes {} ({wait_refused} WAIT fell short, \
         {fate_unknown} failed in flight), 503s while the replicas were frozen \
         {refused_while_frozen}, client retries {retries}",
        wait_refused + fate_unknown
    );
    println!("{line}");
    idemkey_testkit::publish_figures(&line).expect("write the figures file");
    let acknowledged = acknowledged
        .iter()
        .map(|&(op, path, _)| (op, path))
        .collect();
    let aftermath = Aftermath {
        cluster,
        fixtures,
        acknowledged,
        promoted,
    };
    (figures, aftermath)
}

/// What every run must show: each operation ran at least once, the load
/// went on through the fault, and every write the store could not confirm
/// was answered 503 (never acknowledged) and retried.
fn assert_sound(figures: &Figures) {
    assert!(
        figures.executions >= figures.operations as u64,
        "{figures:?}"
    );
    assert!(
        figures.operations > figures.before_fault,
        "load ran through the fault: {figures:?}"
    );
    assert!(
        figures.retries >= figures.wait_refused + figures.fate_unknown,
        "every unconfirmed write was answered 503 and retried: {figures:?}"
    );
}

/// Replicas that lag, then the master dies. Without `WAIT` (the control)
/// nothing is refused and the promoted replica forgets completions
/// acknowledged while the replicas were frozen; with `WAIT 1` writes on
/// that master are refused as unconfirmed while they are frozen, and none
/// acknowledged then is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_with_lagging_replicas_wait_refuses_what_no_replica_confirmed() {
    let (without, _) = failover("0", Fault::LaggingReplicas).await;
    assert_sound(&without);
    assert_eq!(
        (without.wait_refused, without.refused_while_frozen),
        (0, 0),
        "no WAIT: nothing refused while the replicas were frozen: {without:?}"
    );
    assert!(
        without.lost_while_frozen > 0,
        "without WAIT the fault lost no acknowledgement given while the replicas were frozen, \
         so it cannot show what WAIT changes: {without:?}"
    );
    let (with, _) = failover("1", Fault::LaggingReplicas).await;
    assert_sound(&with);
    assert!(
        with.wait_refused > 0 && with.refused_while_frozen > 0,
        "WAIT refused no write while the replicas were frozen: {with:?}"
    );
    assert_eq!(
        with.lost_while_frozen, 0,
        "WAIT acknowledged a write no replica had confirmed: {with:?} (without WAIT: {without:?})"
    );
}

/// The records the node on `port` holds (`idemkey:{TAG}:…:op-N`), with
/// their operation.
fn records_on(cluster: &RedisCluster, port: u16) -> Vec<(usize, String)> {
    let node = cluster
        .nodes()
        .iter()
        .find(|n| n.port() == port)
        .expect("the node");
    let keys = node
        .cli(&["--scan", "--pattern", "idemkey:*"])
        .expect("scan the node");
    keys.lines()
        .filter_map(|key| {
            let op = key.rsplit_once(":op-")?.1.parse().ok()?;
            Some((op, key.to_owned()))
        })
        .collect()
}

/// Only the master dies, its replicas in step: with `WAIT 1` every
/// acknowledged completion is on a replica, and no acknowledgement is
/// lost. Controls: the promoted replica holds records of acknowledged
/// operations (the failover carried some over, so the 0 is about them),
/// and deleting a few of those records there makes the check count them
/// lost (it can see a loss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_of_the_master_alone_with_wait_loses_no_acknowledgement() {
    let (figures, after) = failover("1", Fault::MasterAlone).await;
    assert_sound(&figures);
    assert_eq!(figures.lost_acknowledgements, 0, "{figures:?}");
    let acknowledged: std::collections::BTreeMap<usize, &'static str> =
        after.acknowledged.iter().copied().collect();
    let carried: Vec<(usize, String)> = records_on(&after.cluster, after.promoted)
        .into_iter()
        .filter(|(op, _)| acknowledged.contains_key(op))
        .collect();
    println!(
        "acknowledged operations whose records the promoted replica carried: {}",
        carried.len()
    );
    assert!(
        !carried.is_empty(),
        "the failover carried no acknowledged record: the check above proves nothing"
    );
    let node = after
        .cluster
        .nodes()
        .iter()
        .find(|n| n.port() == after.promoted)
        .expect("the promoted replica");
    for (op, key) in carried.iter().take(3) {
        assert_eq!(node.cli(&["DEL", key]).expect("DEL"), "1", "{key}");
        let ignored = StdMutex::new(Vec::new());
        let (fresh, _) = until_acknowledged(&after.fixtures, *op, acknowledged[op], &ignored).await;
        assert!(
            fresh,
            "operation {op}'s record was deleted, yet the check saw a replay"
        );
    }
}
