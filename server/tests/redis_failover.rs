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
//! Bounds asserted: with lagging replicas, the run without `WAIT` loses
//! acknowledgements (the fault bites: otherwise the comparison proves
//! nothing) and the run with `--redis-wait-replicas 1` loses no more; when
//! the master alone dies, `WAIT` loses none. `WAIT` is no consensus commit
//! (docs/redis.md): with lagging replicas a replica that acknowledged can
//! still lose the election to one that did not, so that run's losses are
//! bounded by the run without, not asserted to be 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    unconfirmed_completions: usize,
    retries: usize,
}

/// What operations started while the replicas lag ask for: a 256 KiB
/// response, so the replication stream outgrows the sockets' buffers and
/// stays in the master's memory (on loopback a small stream would sit in
/// the frozen replica's receive buffer and survive the master).
const HEAVY: &str = "/large?bytes=262144";

/// Sends operation `op` until it is acknowledged (a 2xx): answers whether
/// the acknowledgement was a fresh execution (not a replay), and how many
/// retries it took.
async fn until_acknowledged(fixtures: &[Server; 2], op: usize, path: &str) -> (bool, usize) {
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
        if let Ok(response) = sent
            && response.status().is_success()
        {
            let replayed = response.headers().get("idempotent-replayed").is_some();
            return (!replayed, retries);
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

async fn failover(wait_replicas: &str, fault: Fault) -> Figures {
    // Two replicas per master: after the failover the promoted replica
    // still has one, so `WAIT 1` can be met again.
    let mut cluster = RedisCluster::start(3, 2).expect("start a Redis Cluster");
    let url = cluster.url();
    let args = [
        "--database-url",
        url.as_str(),
        "--lease",
        "2s",
        "--redis-wait-replicas",
        wait_replicas,
    ];
    let fixtures = Arc::new([Server::fixture(&args), Server::fixture(&args)]);
    let next = Arc::new(AtomicUsize::new(0));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let retries = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (fixtures, next) = (Arc::clone(&fixtures), Arc::clone(&next));
            let (acknowledged, retries) = (Arc::clone(&acknowledged), Arc::clone(&retries));
            let (stop, heavy) = (Arc::clone(&stop), Arc::clone(&heavy));
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let op = next.fetch_add(1, Ordering::SeqCst);
                    let path = if heavy.load(Ordering::SeqCst) {
                        HEAVY
                    } else {
                        "/echo"
                    };
                    let (fresh, tries) = until_acknowledged(&fixtures, op, path).await;
                    retries.fetch_add(tries, Ordering::SeqCst);
                    if fresh {
                        acknowledged.lock().await.push((op, path));
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
    // Every acknowledged execution, sent again: a replay, or lost.
    let mut lost = 0;
    let mut lost_ops = Vec::new();
    for &(op, path) in acknowledged.lock().await.iter() {
        let (fresh, _) = until_acknowledged(&fixtures, op, path).await;
        if fresh {
            lost += 1;
            lost_ops.push(op);
        }
    }
    lost_ops.sort_unstable();
    println!("re-executed after the failover: {lost_ops:?}");
    let figures = Figures {
        operations,
        before_fault,
        executions,
        duplicates: executions.saturating_sub(operations as u64),
        lost_acknowledgements: lost,
        unconfirmed_completions: fixtures
            .iter()
            .map(|f| {
                let log = f.log();
                // Too few replicas in time, or the call failed in flight.
                log.matches("replicas acknowledged the write in time")
                    .count()
                    + log.matches("the write's fate is unknown").count()
            })
            .sum(),
        retries: retries.load(Ordering::SeqCst),
    };
    let Figures {
        operations,
        before_fault,
        executions,
        duplicates,
        lost_acknowledgements,
        unconfirmed_completions,
        retries,
    } = &figures;
    let fault = match fault {
        Fault::LaggingReplicas => "replicas lagging",
        Fault::MasterAlone => "master alone",
    };
    let line = format!(
        "redis-failover ({fault}), --redis-wait-replicas {wait_replicas}: lost acknowledgements \
         {lost_acknowledgements}, operations {operations} ({before_fault} before the fault), \
         executions {executions}, duplicates {duplicates}, unconfirmed completions \
         {unconfirmed_completions}, client retries {retries}"
    );
    println!("{line}");
    idemkey_testkit::publish_figures(&line).expect("write the figures file");
    figures
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
        figures.retries >= figures.unconfirmed_completions,
        "every unconfirmed write was answered 503 and retried: {figures:?}"
    );
}

/// Replicas that lag, then the master dies: without `WAIT` the promoted
/// replica forgets acknowledged completions (asserted, so the run can see
/// what `WAIT` is for); with `WAIT 1` no more are lost than without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_with_lagging_replicas_wait_loses_no_more() {
    let without = failover("0", Fault::LaggingReplicas).await;
    assert_sound(&without);
    assert!(
        without.lost_acknowledgements > 0,
        "the fault lost no acknowledgement without WAIT, so it cannot show what WAIT \
         changes: {without:?}"
    );
    let with = failover("1", Fault::LaggingReplicas).await;
    assert_sound(&with);
    assert!(
        with.lost_acknowledgements <= without.lost_acknowledgements,
        "WAIT lost more acknowledgements than no WAIT: {with:?} against {without:?}"
    );
}

/// Only the master dies, its replicas in step: with `WAIT 1` every
/// acknowledged completion is on a replica, and no acknowledgement is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failover_of_the_master_alone_with_wait_loses_no_acknowledgement() {
    let figures = failover("1", Fault::MasterAlone).await;
    assert_sound(&figures);
    assert_eq!(figures.lost_acknowledgements, 0, "{figures:?}");
}
