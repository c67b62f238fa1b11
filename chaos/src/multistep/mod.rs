//! The `multi-step` scenario: purchases (`POST /purchases`, an operation
//! of three steps under one key: reserve stock, charge, confirm) placed by
//! C clients × M purchases on two order servers (`--outbox-workers 0`),
//! their external steps run by two `idemkey-server worker` processes
//! against the provider simulator (its own database), which fails some
//! calls with 503 and loses the answers of some effects after their
//! commit. Meanwhile the workers are killed with SIGKILL at seeded random
//! moments and started again (their claims taken over once the short
//! lease ends), and an order server is killed and started again. Some
//! purchases are declined (the charge refused, the reservation released)
//! and some find their sku out of stock. Once, the provider is down for
//! longer than the attempt budget earlier versions had (10 deliveries,
//! about 3 s at these backoffs, when steps were dead-lettered and their
//! purchases stranded `running`): the steps wait it out. Once every
//! execution ended and no step message is pending, `check::check` holds
//! each system's own store to what the clients saw (every purchase done or
//! failed, one charge at most each, no stock held).

mod check;
mod check_stores;
#[cfg(test)]
mod check_tests;
mod facts;
mod figures;
mod load;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use idemkey_testkit::PgCluster;

use crate::checker::Report;
use crate::kit::{Size, Tally, accounts, e, require_faults, runtime, string_args, wait_healthy};
use crate::rng::Rng;
use crate::servers::{Role, ServerSet, server_bin, tail};

/// The provider's fault rates: 503 before any effect, and an effect
/// committed whose answer is lost.
const FAIL_RATE: &str = "0.05";
const LOSE_RATE: &str = "0.2";

/// How long the provider is down, once: several times the budget of the 10
/// deliveries earlier versions dead-lettered a step after (50-500 ms
/// backoffs: about 3 s).
const OUTAGE: Duration = Duration::from_secs(10);

/// Runs the scenario; `dir` keeps the processes' logs.
pub fn run(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let provider_db = pg.create_database("provider").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let mut rng = Rng::new(seed ^ 0x6d75_6c74);
    let secret = format!("chaos-multi-step-{:016x}", rng.next_u64());
    let provider_args = string_args(&[
        "--token",
        &secret,
        "--fail-rate",
        FAIL_RATE,
        "--lose-rate",
        LOSE_RATE,
        // A call a worker gave up on holds its key (409) until this lease
        // ends; the default 30 s would only slow the run down.
        "--lease",
        "5s",
        // Calls that take a while, so kills find workers inside them.
        "--latency-ms",
        "80",
    ]);
    let provider_env = vec![
        ("RUST_LOG".to_owned(), "info".to_owned()),
        ("IDEMKEY_PROVIDER_FAULT_SEED".to_owned(), seed.to_string()),
    ];
    let mut provider = ServerSet::start_role(
        Role::Provider,
        &bin,
        &provider_db,
        1,
        &provider_args,
        dir,
        vec![provider_env],
    )
    .map_err(e("provider"))?;
    let payments_url = provider.bases().remove(0);
    let server_args = string_args(&["--outbox-workers", "0", "--purchase-wait", "250ms"]);
    let mut servers = ServerSet::start(&bin, &url, 2, &server_args, dir).map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    rt.block_on(facts::install_takeover_counter(&url))?;
    let (clients, per_client) = size.pick((6, 12), (12, 50));
    let plan = load::plan(clients, per_client, accounts.len(), seed);
    // A third of the scarce sku's demand cannot be served: a few of its
    // purchases end 409 out-of-stock.
    let demand: u64 = plan
        .iter()
        .flatten()
        .filter(|p| p.sku == load::SCARCE_SKU)
        .map(|p| u64::from(p.quantity))
        .sum();
    let scarce = demand * 2 / 3;
    pg.psql(
        "chaos",
        &format!(
            // Spread over the product's 32 stripes: most purchases find one
            // stripe with enough, the last ones take from several.
            "UPDATE product_stock SET stock = {} + CASE WHEN stripe < {} THEN 1 ELSE 0 END \
             WHERE sku = '{}'",
            scarce / 32,
            scarce % 32,
            load::SCARCE_SKU
        ),
    )
    .map_err(e("stock"))?;
    let stock_before = rt.block_on(facts::stock(&url))?;
    // Short leases and retries, so the killed workers' claims are taken
    // over within seconds. A call may take a lookup and a send, each
    // within --payments-timeout: the lease is at least four of them.
    let worker_args = string_args(&[
        "--payments-url",
        &payments_url,
        "--payments-token",
        &secret,
        "--payments-timeout",
        "700ms",
        "--outbox-lease",
        "3s",
        "--outbox-retry-base",
        "50ms",
        "--outbox-retry-cap",
        "500ms",
        // The default budget (--outbox-retry-for 12h): the outage below is
        // waited out.
        "--outbox-poll",
        "100ms",
    ]);
    let info = vec![("RUST_LOG".to_owned(), "info".to_owned())];
    let mut workers = ServerSet::start_role(
        Role::Worker,
        &bin,
        &url,
        2,
        &worker_args,
        dir,
        vec![info.clone(), info],
    )
    .map_err(e("workers"))?;
    let cfg = load::ClientConfig {
        attempt_timeout: Duration::from_secs(10),
        deadline: Duration::from_secs(size.pick(60, 240)),
        seed,
    };
    let done = AtomicBool::new(false);
    let (history, mut tally) = thread::scope(|scope| {
        let injector = scope.spawn(|| {
            inject(
                size,
                &mut rng,
                &mut workers,
                &mut servers,
                &mut provider,
                &done,
            )
        });
        let history = rt.block_on(load::run_clients(cfg, bases, accounts, plan));
        done.store(true, Ordering::SeqCst);
        let tally = injector.join().unwrap_or_else(|_| {
            let mut t = Tally::default();
            t.violations.push("the fault injector panicked".into());
            t
        });
        (history, tally)
    });
    // Every process the purchases need runs while they settle.
    workers.revive();
    servers.revive();
    provider.revive();
    let settled = rt.block_on(facts::settle(&url, Duration::from_secs(size.pick(40, 180))));
    match &settled {
        Ok(waited) => tally.notes.push(format!(
            "the purchases settled {:.1} s after the load ended",
            waited.as_secs_f64()
        )),
        Err(err) => tally.violations.push(err.clone()),
    }
    let mut store = facts::StoreFacts {
        stock_before,
        ..facts::StoreFacts::default()
    };
    let read = rt
        .block_on(facts::order_side(&url, &mut store))
        .and_then(|()| rt.block_on(facts::provider_side(&payments_url, &secret, &mut store)));
    evidence(&mut tally, &workers, &servers, &provider);
    let exits = (
        workers.unexpected_exits,
        servers.unexpected_exits,
        provider.unexpected_exits,
    );
    if exits != (0, 0, 0) {
        tally.violations.push(format!(
            "exits on their own: {} workers, {} servers, {} providers (logs: {})",
            exits.0,
            exits.1,
            exits.2,
            dir.display()
        ));
    }
    drop(servers);
    drop(workers);
    provider.stop_all();
    let timeline = std::mem::take(&mut tally.timeline);
    let mut report = report(&history, tally);
    match read {
        Ok(()) => {
            let checked = check::check(&history, &store);
            report.finals = checked.outcomes;
            report.duplicates = checked.duplicates;
            report.lost_acks = checked.mismatched;
            let found: u64 = figures::calls(&store.log)
                .values()
                .map(|c| c.found_by_lookup)
                .sum();
            report.notes.insert(
                0,
                format!(
                    "multi-step: {} purchases; worker kills {}, server restarts {}, lost answers \
                     {} ({found} found by lookup), take-overs {}",
                    history.purchases.len(),
                    report.faults.get("worker-kill-9").copied().unwrap_or(0),
                    report.faults.get("server-kill-9").copied().unwrap_or(0),
                    report
                        .faults
                        .get("provider-lost-answer")
                        .copied()
                        .unwrap_or(0),
                    figures::takeovers(&store)
                ),
            );
            report.notes.extend(checked.figures);
            report.violations.extend(checked.violations);
            require_hard_paths(&mut report, figures::takeovers(&store), found);
        }
        Err(err) => report
            .violations
            .push(format!("cannot read the stores: {err}")),
    }
    require_faults(&mut report);
    if !report.ok() {
        report.notes.extend(timeline);
    }
    Ok(report)
}

/// The hard paths the scenario is for, required as its faults are: a kill
/// that interrupted a step (a claim taken over before it settled) and a
/// lost answer that needed a lookup to be found again. A run with neither
/// would pass with those paths never exercised.
fn require_hard_paths(report: &mut Report, takeovers: i64, found_by_lookup: u64) {
    if takeovers == 0 {
        report.violations.push(
            "no kill interrupted a step (no claim was taken over): the take-over path never ran"
                .into(),
        );
    }
    if found_by_lookup == 0 {
        report
            .violations
            .push("no lost answer was found again by a lookup: the lookup path never ran".into());
    }
}

/// Sleeps up to `d`, returning early (false) once `done` is set.
fn nap(done: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if done.load(Ordering::SeqCst) {
            return false;
        }
        thread::sleep(Duration::from_millis(10).min(end - Instant::now()));
    }
    true
}

/// Kills workers (one, now and then both) at random moments and starts
/// them again, and now and then an order server, until the load ends.
fn inject(
    size: Size,
    rng: &mut Rng,
    workers: &mut ServerSet,
    servers: &mut ServerSet,
    provider: &mut ServerSet,
    done: &AtomicBool,
) -> Tally {
    let mut t = Tally::default();
    let every = size.pick(3, 6);
    let mut round = 0u64;
    while nap(done, Duration::from_millis(rng.range(300, 1_200))) {
        // Early in the run, so every purchase placed then waits it out.
        if round == 2 {
            outage(provider, &mut t);
        }
        let victims = if rng.chance(0.2) {
            vec![0, 1]
        } else {
            vec![rng.range(0, 1) as usize]
        };
        for &w in &victims {
            match workers.kill9(w) {
                Ok(true) => {
                    t.add("worker-kill-9");
                    t.at(format!("kill -9 of worker {w}"));
                }
                Ok(false) => {}
                Err(err) => t.violations.push(format!("kill -9 failed: {err}")),
            }
        }
        // The first restart comes early, so a short run has one too.
        if round % every == 1 {
            let s = rng.range(0, servers.len() as u64 - 1) as usize;
            match servers.kill9(s) {
                Ok(true) => {
                    t.add("server-kill-9");
                    t.at(format!("kill -9 of server {s}"));
                }
                Ok(false) => {}
                Err(err) => t.violations.push(format!("kill -9 of server {s}: {err}")),
            }
            match servers.spawn(s) {
                Ok(()) => t.at(format!("server {s} listens again")),
                Err(err) => t.violations.push(format!("server restart failed: {err}")),
            }
        }
        thread::sleep(Duration::from_millis(rng.range(0, 600)));
        for &w in &victims {
            match workers.spawn(w) {
                Ok(()) => t.at(format!("worker {w} started again")),
                Err(err) => t.violations.push(format!("worker restart failed: {err}")),
            }
        }
        round += 1;
    }
    for (what, kind) in [
        ("worker", "worker-kill-9"),
        ("server", "server-kill-9"),
        ("provider outage", "provider-outage"),
    ] {
        if !t.faults.contains_key(kind) {
            t.violations.push(format!(
                "the load ended before any {what} was killed: the scenario did not run as written"
            ));
        }
    }
    t
}

/// The provider down for [`OUTAGE`] (killed, then started again on its
/// port, its database kept): every step due meanwhile finds no provider.
fn outage(provider: &mut ServerSet, t: &mut Tally) {
    match provider.kill9(0) {
        Ok(true) => {
            t.add("provider-outage");
            t.at(format!("the provider is down for {} s", OUTAGE.as_secs()));
        }
        Ok(false) => return,
        Err(err) => {
            t.violations.push(format!("kill -9 of the provider: {err}"));
            return;
        }
    }
    thread::sleep(OUTAGE);
    match provider.spawn(0) {
        Ok(()) => t.at("the provider is back".to_owned()),
        Err(err) => t.violations.push(format!("provider restart failed: {err}")),
    }
}

/// The report of the clients' side and the injector's tally (its
/// timeline left out: the caller adds it to a failing report).
fn report(history: &load::PurchaseHistory, tally: Tally) -> Report {
    let mut r = Report {
        ops: history.purchases.len(),
        elapsed: history.elapsed,
        ..Report::default()
    };
    for a in history.purchases.iter().flat_map(|p| &p.answers) {
        r.attempts += 1;
        if a.ask == load::Ask::Get {
            r.lookups += 1;
        }
        r.max_latency_ms = r.max_latency_ms.max(a.elapsed_ms);
        r.timeouts += usize::from(a.timed_out);
        let label = a.status.map_or("net".to_owned(), |s| s.to_string());
        *r.statuses.entry(label).or_default() += 1;
    }
    for (kind, n) in tally.faults {
        r.fault(&kind, n);
    }
    r.notes.extend(tally.notes);
    r.violations.extend(tally.violations);
    r.violations.extend(history.lost_clients.iter().cloned());
    r
}

/// What the logs show: the provider's lost answers and 503s (counted as
/// the faults they are), and panics.
fn evidence(t: &mut Tally, workers: &ServerSet, servers: &ServerSet, provider: &ServerSet) {
    let log = std::fs::read_to_string(provider.log(0)).unwrap_or_default();
    let mut lost: std::collections::BTreeMap<String, u64> = Default::default();
    for line in log.lines() {
        if line.contains("fault: effect committed") {
            let effect = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("effect="))
                .unwrap_or("?")
                .trim_matches('"')
                .to_owned();
            *lost.entry(effect).or_default() += 1;
            t.add("provider-lost-answer");
        } else if line.contains("fault: 503 before any effect") {
            t.add("provider-503");
        }
    }
    t.notes.push(format!(
        "provider: answers lost after commit by effect: {}",
        lost.iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let logs = [
        (provider, "provider"),
        (workers, "worker"),
        (servers, "server"),
    ];
    for (set, name) in logs {
        for i in 0..set.len() {
            if std::fs::read_to_string(set.log(i)).is_ok_and(|l| l.contains("panicked")) {
                t.violations
                    .push(format!("{name} {i} panicked:\n{}", tail(set.log(i), 2_000)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_faults_fails() {
        let mut tally = Tally::default();
        tally.notes.push("the purchases settled".into());
        let mut report = report_of(tally);
        require_faults(&mut report);
        assert_eq!(
            report.violations,
            ["no fault was injected: the scenario proved nothing"]
        );
        let mut tally = Tally::default();
        tally.add("worker-kill-9");
        let mut report = report_of(tally);
        require_faults(&mut report);
        assert!(report.ok(), "{:?}", report.violations);
    }

    #[test]
    fn a_run_without_a_take_over_or_an_answer_found_by_lookup_fails() {
        let mut report = report_of(Tally::default());
        require_hard_paths(&mut report, 0, 3);
        assert_eq!(
            report.violations,
            ["no kill interrupted a step (no claim was taken over): the take-over path never ran"]
        );
        let mut report = report_of(Tally::default());
        require_hard_paths(&mut report, 2, 0);
        assert_eq!(
            report.violations,
            ["no lost answer was found again by a lookup: the lookup path never ran"]
        );
        let mut report = report_of(Tally::default());
        require_hard_paths(&mut report, 1, 1);
        assert!(report.ok(), "{:?}", report.violations);
    }

    #[test]
    fn a_client_lost_to_a_panic_fails_the_run() {
        let history = load::PurchaseHistory {
            lost_clients: vec!["client 3 ended without its purchases (panic)".into()],
            ..load::PurchaseHistory::default()
        };
        let mut tally = Tally::default();
        tally.add("worker-kill-9");
        let report = report(&history, tally);
        assert_eq!(
            report.violations,
            ["client 3 ended without its purchases (panic)"]
        );
    }

    fn report_of(tally: Tally) -> Report {
        report(&load::PurchaseHistory::default(), tally)
    }
}
