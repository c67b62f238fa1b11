//! The named scenarios. Each starts its own throwaway database and real
//! server processes, runs the load while a fault injector works, then
//! checks the history against the database.

use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use idemkey_testkit::PgCluster;

use crate::checker::{Report, pg_facts, sqlite_facts};
use crate::driver::Account;
pub use crate::kit::Size;
use crate::kit::{
    Tally, accounts, e, finish, load_config, load_with, runtime, string_args, wait_healthy,
    work_dir,
};
use crate::proxy::Proxy;
use crate::replication::Pair;
use crate::rng::Rng;
use crate::servers::{ServerSet, server_bin};

/// Every scenario, in the order `all` runs them.
pub const ALL: [&str; 10] = [
    "kill9",
    "pg-immediate",
    "proxy-cut",
    "slow-db",
    "failover",
    "hostile",
    "sqlite-kill",
    "clock-skew",
    "payments",
    "multi-step",
];

/// Runs scenario `name`; `Err` when it could not be set up at all.
pub fn run(name: &str, size: Size, seed: u64) -> Result<Report, String> {
    run_skipping(name, size, seed, &[])
}

/// [`run`], skipping the hostile sweep's checks named in `skip` (case
/// names, or `slow-body`).
pub fn run_skipping(name: &str, size: Size, seed: u64, skip: &[&str]) -> Result<Report, String> {
    let dir = work_dir(name)?;
    let result = match name {
        "kill9" => kill9(size, seed, &dir),
        "pg-immediate" => pg_immediate(size, seed, &dir),
        "proxy-cut" => proxy_cut(size, seed, &dir),
        "slow-db" => slow_db(size, seed, &dir),
        "failover" => failover(size, seed, &dir),
        "hostile" => crate::hostile::run_skipping(size, seed, &dir, skip),
        "sqlite-kill" => sqlite_kill(size, seed, &dir),
        "clock-skew" => clock_skew(size, seed, &dir),
        "payments" => crate::payments::run(size, seed, &dir),
        "multi-step" => crate::multistep::run(size, seed, &dir),
        other => Err(format!("unknown scenario {other:?}; known: {ALL:?}")),
    };
    match &result {
        Ok(report) if report.ok() || report.pending.is_some() => {
            let _ = fs::remove_dir_all(&dir);
        }
        Ok(_) | Err(_) => eprintln!("chaos: server logs kept in {}", dir.display()),
    }
    result.map(|mut r| {
        r.scenario = name.to_owned();
        r.seed = seed;
        r
    })
}

/// `kill -9` of a random server among three, started again after a short
/// while, repeatedly; some sends also ask the server to exit right after
/// COMMIT or to drop the response after COMMIT.
fn kill9(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let mut servers = ServerSet::start(&bin, &url, 3, &string_args(&["--test-faults"]), dir)
        .map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let mut cfg = load_config(size, seed);
    cfg.lose_response_rate = 0.03;
    let kills = size.pick(6, 60);
    let mut rng = Rng::new(seed ^ 0x6b69_6c6c);
    let incarnations = servers.incarnations();
    let (history, tally) = load_with(&rt, cfg, bases, incarnations, accounts, |flags| {
        let mut t = Tally::default();
        for _ in 0..kills {
            if !flags.sleep(Duration::from_millis(rng.range(150, 600))) {
                break;
            }
            let victim = rng.range(0, servers.len() as u64 - 1) as usize;
            match servers.kill9(victim) {
                Ok(true) => {
                    t.add("kill-9");
                    t.at(format!("kill -9 of server {victim}"));
                }
                Ok(false) => {}
                Err(err) => t.violations.push(format!("kill -9 failed: {err}")),
            }
            thread::sleep(Duration::from_millis(rng.range(0, 400)));
            match servers.spawn(victim) {
                Ok(()) => t.at(format!("server {victim} listens again")),
                Err(err) => t.violations.push(format!("restart failed: {err}")),
            }
        }
        // The schedule is over: the load may end, and until it does the
        // servers that exit on their own are started again.
        flags.schedule_over();
        while flags.sleep(Duration::from_millis(50)) {
            if servers.revive() > 0 {
                t.at("servers that exited on their own were started again".into());
            }
        }
        if servers.unexpected_exits > 0 {
            t.notes.push(format!(
                "{} server exits on their own (exit-after-commit faults) were restarted",
                servers.unexpected_exits
            ));
        }
        t
    });
    let facts = rt.block_on(pg_facts(&url));
    Ok(finish(&history, facts, tally))
}

/// libfaketime, which runs a process with its wall clock off.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Two servers on one database, one with its own clock hours off (ahead,
/// then behind, restarted between), under `reexecute` with a one-hour
/// window and lost responses that send retries to either server: the
/// database's clock decides every window and lease, so nothing is
/// re-executed and no acknowledged order is lost.
fn clock_skew(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    if !Path::new(LIBFAKETIME).exists() {
        return Err(format!(
            "{LIBFAKETIME} is missing: install Debian's faketime"
        ));
    }
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let skewed = |offset: &str| {
        vec![
            ("LD_PRELOAD".to_owned(), LIBFAKETIME.to_owned()),
            ("FAKETIME".to_owned(), offset.to_owned()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".to_owned(), "1".to_owned()),
        ]
    };
    let args = string_args(&[
        "--test-faults",
        "--expiry-policy",
        "reexecute",
        "--replay-ttl",
        "1h",
    ]);
    let mut servers =
        ServerSet::start_with_env(&bin, &url, 2, &args, dir, vec![Vec::new(), skewed("+2h")])
            .map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let mut cfg = load_config(size, seed);
    cfg.lose_response_rate = 0.05;
    let swaps = size.pick(3, 30);
    let mut rng = Rng::new(seed ^ 0x736b_6577);
    let incarnations = servers.incarnations();
    let skewed_base = bases[1].clone();
    let (history, tally) = load_with(&rt, cfg, bases, incarnations, accounts, |flags| {
        let mut t = Tally::default();
        count_clock_offset(&mut t, &skewed_base, "+2h");
        for round in 0..swaps {
            if !flags.sleep(Duration::from_millis(rng.range(300, 900))) {
                break;
            }
            // The skewed server comes back with the other offset.
            let offset = if round % 2 == 0 { "-3h" } else { "+2h" };
            servers.set_env(1, skewed(offset));
            if let Err(err) = servers.kill9(1) {
                t.violations.push(format!("kill -9 failed: {err}"));
            }
            match servers.spawn(1) {
                Ok(()) => count_clock_offset(&mut t, &skewed_base, offset),
                Err(err) => t.violations.push(format!("restart failed: {err}")),
            }
        }
        // The schedule is over: the load may end, and until it does the
        // servers that exit on their own are started again.
        flags.schedule_over();
        while flags.sleep(Duration::from_millis(50)) {
            if servers.revive() > 0 {
                t.at("servers that exited on their own were started again".into());
            }
        }
        t
    });
    let facts = rt.block_on(pg_facts(&url));
    Ok(finish(&history, facts, tally))
}

/// Counts a `clock-offset` fault only once the skewed server's own `Date`
/// header shows `offset`; a skew that did not take effect is a violation
/// (the run would otherwise pass without any skew).
fn count_clock_offset(t: &mut Tally, base: &str, offset: &str) {
    match idemkey_testkit::check_clock_skew(base, offset) {
        Ok(secs) => {
            t.add("clock-offset");
            t.at(format!(
                "the skewed server's clock is {secs:+} s off ({offset})"
            ));
        }
        Err(why) => t.violations.push(why),
    }
}

/// PostgreSQL stopped with `-m immediate` (a crash) and started again,
/// repeatedly, under load.
fn pg_immediate(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let mut pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let servers = ServerSet::start(&bin, &url, 2, &[], dir).map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let cfg = load_config(size, seed);
    let crashes = size.pick(3, 25);
    let mut rng = Rng::new(seed ^ 0x7067);
    let (history, tally) = load_with(&rt, cfg, bases, servers.incarnations(), accounts, |flags| {
        let mut t = Tally::default();
        for _ in 0..crashes {
            if !flags.sleep(Duration::from_millis(rng.range(300, 900))) {
                break;
            }
            match pg.stop_immediate() {
                Ok(()) => t.add("pg-stop-immediate"),
                Err(err) => t.violations.push(format!("pg stop: {err}")),
            }
            thread::sleep(Duration::from_millis(rng.range(50, 1_000)));
            if let Err(err) = pg.start_again() {
                t.violations.push(format!("pg start: {err}"));
                break;
            }
        }
        t
    });
    let facts = rt.block_on(pg_facts(&url));
    drop(servers);
    Ok(finish(&history, facts, tally))
}

/// A TCP proxy between the servers and PostgreSQL cuts connections at
/// random moments, and right after forwarding a commit.
fn proxy_cut(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let rt = runtime()?;
    let proxy = rt
        .block_on(Proxy::start(pg.port(), seed))
        .map_err(e("proxy"))?;
    let proxied = format!("postgres://postgres@127.0.0.1:{}/chaos", proxy.port());
    let servers = ServerSet::start(&bin, &proxied, 2, &[], dir).map_err(e("servers"))?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let cfg = load_config(size, seed);
    let rounds = size.pick(12, 150);
    let mut rng = Rng::new(seed ^ 0x0063_7574);
    proxy.set_cut_after_commit(0.05);
    let control = proxy.clone();
    let (history, mut tally) =
        load_with(&rt, cfg, bases, servers.incarnations(), accounts, |flags| {
            let mut t = Tally::default();
            for _ in 0..rounds {
                if !flags.sleep(Duration::from_millis(rng.range(50, 400))) {
                    break;
                }
                if rng.chance(0.2) {
                    control.cut_all();
                } else {
                    control.cut_one();
                }
            }
            control.set_cut_after_commit(0.0);
            t.notes
                .push("cuts after commit stop with the injector".into());
            t
        });
    let stats = proxy.stats();
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::SeqCst);
    *tally.faults.entry("cut".into()).or_default() += load(&stats.cuts);
    *tally.faults.entry("cut-after-commit".into()).or_default() += load(&stats.cuts_after_commit);
    tally.notes.push(format!(
        "proxy: {} connections, {} commits forwarded",
        load(&stats.connections),
        load(&stats.commits_seen)
    ));
    let facts = rt.block_on(pg_facts(&url));
    drop(servers);
    Ok(finish(&history, facts, tally))
}

/// Lock waits longer than `lock_timeout` (an outside session holding
/// `LOCK TABLE` or row locks) and a pool too small for the clients: the
/// servers must answer 409/503 with `Retry-After` within bounded time, and
/// recover.
fn slow_db(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let args = string_args(&[
        "--pool-size",
        "2",
        "--pool-wait",
        "300ms",
        "--lock-timeout",
        "200ms",
        "--statement-timeout",
        "1s",
    ]);
    let servers = ServerSet::start(&bin, &url, 2, &args, dir).map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let mut cfg = load_config(size, seed);
    cfg.clients = size.pick(12, 32);
    // Every answer is due within lock_timeout + pool_wait + statement_timeout
    // and change; 5 s means the server hung.
    cfg.attempt_timeout = Duration::from_secs(5);
    let holds = size.pick(4, 40);
    let mut rng = Rng::new(seed ^ 0x736c_6f77);
    let (history, tally) = load_with(&rt, cfg, bases, servers.incarnations(), accounts, |flags| {
        let mut t = Tally::default();
        for i in 0..holds {
            if !flags.sleep(Duration::from_millis(rng.range(200, 600))) {
                break;
            }
            let hold_ms = rng.range(500, 1_500);
            let (kind, sql) = if i % 2 == 0 {
                (
                    "lock-table",
                    format!(
                        "BEGIN; LOCK TABLE idempotency_records IN EXCLUSIVE MODE; \
                             SELECT pg_sleep({}); COMMIT;",
                        hold_ms as f64 / 1000.0
                    ),
                )
            } else {
                (
                    "row-locks",
                    format!(
                        "BEGIN; SELECT count(*) FROM (SELECT 1 FROM accounts FOR UPDATE) l; \
                             SELECT pg_sleep({}); COMMIT;",
                        hold_ms as f64 / 1000.0
                    ),
                )
            };
            match pg.psql("chaos", &sql) {
                Ok(_) => t.add(kind),
                Err(err) => t.violations.push(format!("{kind}: {err}")),
            }
        }
        t
    });
    let facts = rt.block_on(pg_facts(&url));
    drop(servers);
    let mut report = finish(&history, facts, tally);
    let busy = report.statuses.get("409").copied().unwrap_or(0)
        + report.statuses.get("503").copied().unwrap_or(0);
    if busy == 0 {
        report
            .violations
            .push("no 409/503 seen: the locks and the small pool did not bite".into());
    }
    Ok(report)
}

/// A primary with a synchronous standby; servers use a multi-host URL with
/// `target_session_attrs=read-write`; the primary is killed mid-load and
/// the standby promoted.
fn failover(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let mut made: Option<(String, Vec<Account>)> = None;
    let pair = Pair::start(&dir.join("standby"), |primary| {
        let url = primary.create_database("chaos")?;
        let accounts = accounts(&bin, &url, 2).map_err(std::io::Error::other)?;
        made = Some((url, accounts));
        Ok(())
    })
    .map_err(e("replication pair"))?;
    let Some((_, accounts)) = made else {
        return Err("no accounts".into());
    };
    let url = pair.url("chaos");
    let servers = ServerSet::start(&bin, &url, 2, &[], dir).map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let cfg = load_config(size, seed);
    let mut rng = Rng::new(seed ^ 0x6661_696c);
    let mut pair = pair;
    let (history, tally) = load_with(&rt, cfg, bases, servers.incarnations(), accounts, |flags| {
        let mut t = Tally::default();
        if !flags.sleep(Duration::from_millis(
            size.pick(1_500, 20_000) + rng.range(0, 500),
        )) {
            t.violations
                .push("the load ended before the failover".into());
            return t;
        }
        match pair.primary.stop_immediate() {
            Ok(()) => t.add("primary-killed"),
            Err(err) => t.violations.push(format!("kill primary: {err}")),
        }
        thread::sleep(Duration::from_millis(rng.range(100, 1_000)));
        let promoted = Instant::now();
        match pair.promote() {
            Ok(()) => t.add("standby-promoted"),
            Err(err) => t.violations.push(format!("promote: {err}")),
        }
        t.notes.push(format!(
            "promotion took {} ms",
            promoted.elapsed().as_millis()
        ));
        // Keep the load going on the new primary for a while.
        flags.sleep(Duration::from_millis(size.pick(1_500, 20_000)));
        t
    });
    if !tally.faults.contains_key("standby-promoted") {
        // No promotion to wait for: the report says why.
        let facts = rt.block_on(pg_facts(&pair.primary.url("chaos")));
        drop(servers);
        return Ok(finish(&history, facts, tally));
    }
    // `pg_ctl promote -w` returns once promotion is done, but a check over a
    // busy socket can fail or race it: poll for a while before concluding.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match pair.standby_in_recovery() {
            Ok(false) => break,
            Ok(true) if Instant::now() >= deadline => {
                return Err(format!(
                    "the standby is still in recovery after promotion{}",
                    evidence(&tally, &pair)
                ));
            }
            Err(err) if Instant::now() >= deadline => {
                return Err(format!(
                    "cannot ask the promoted standby: {err}{}",
                    evidence(&tally, &pair)
                ));
            }
            _ => thread::sleep(Duration::from_millis(200)),
        }
    }
    let facts = rt.block_on(pg_facts(&pair.standby.url("chaos")));
    drop(servers);
    Ok(finish(&history, facts, tally))
}

/// What the fault injector saw and the end of the standby's log, for a
/// failover that could not be checked.
fn evidence(tally: &Tally, pair: &Pair) -> String {
    let log = fs::read_to_string(pair.standby.log_file()).unwrap_or_default();
    let start = log.len().saturating_sub(3_000);
    let start = (start..log.len())
        .find(|&i| log.is_char_boundary(i))
        .unwrap_or(0);
    format!(
        "\ninjector: violations {:?}, notes {:?}\nstandby log (end):\n{}",
        tally.violations,
        tally.notes,
        &log[start..]
    )
}

/// Two servers on one SQLite file, one of them killed with SIGKILL now and
/// then. Pending until the server has an SQLite backend.
fn sqlite_kill(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let file = dir.join("chaos.db");
    let url = format!("sqlite://{}", file.display());
    let probe = std::process::Command::new(&bin)
        .args(["migrate", "--database-url", &url])
        .output()
        .map_err(e("migrate"))?;
    if !probe.status.success() {
        return Ok(Report {
            pending: Some(format!(
                "the server does not take {url}: {}",
                String::from_utf8_lossy(&probe.stderr).trim()
            )),
            ..Report::default()
        });
    }
    let accounts = accounts(&bin, &url, 2)?;
    let mut servers = ServerSet::start(&bin, &url, 2, &string_args(&["--test-faults"]), dir)
        .map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let mut cfg = load_config(size, seed);
    cfg.lose_response_rate = 0.02;
    let kills = size.pick(6, 60);
    let mut rng = Rng::new(seed ^ 0x7371);
    let incarnations = servers.incarnations();
    let (history, tally) = load_with(&rt, cfg, bases, incarnations, accounts, |flags| {
        let mut t = Tally::default();
        for _ in 0..kills {
            if !flags.sleep(Duration::from_millis(rng.range(150, 600))) {
                break;
            }
            let victim = rng.range(0, servers.len() as u64 - 1) as usize;
            match servers.kill9(victim) {
                Ok(true) => t.add("kill-9"),
                Ok(false) => {}
                Err(err) => t.violations.push(format!("kill -9 failed: {err}")),
            }
            thread::sleep(Duration::from_millis(rng.range(0, 300)));
            if let Err(err) = servers.spawn(victim) {
                t.violations.push(format!("restart failed: {err}"));
            }
        }
        // The schedule is over: the load may end, and until it does the
        // servers that exit on their own are started again.
        flags.schedule_over();
        while flags.sleep(Duration::from_millis(50)) {
            if servers.revive() > 0 {
                t.at("servers that exited on their own were started again".into());
            }
        }
        t
    });
    drop(servers);
    Ok(finish(&history, sqlite_facts(&file), tally))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::DbFacts;
    use crate::checker::tests::{attempt, facts, history};
    use crate::driver::History;

    /// One operation answered 201 whose order and record are stored; with
    /// `injected`, its send asked for that fault and got no answer.
    fn clean_run(injected: Option<&'static str>) -> (History, DbFacts) {
        let mut sent = attempt(201, r#"{"id":"o1"}"#);
        if injected.is_some() {
            sent.status = None;
            sent.error = Some("connection closed".into());
            sent.injected = injected;
        }
        (history(vec![sent], "o1"), facts(&["o1"], "o1"))
    }

    #[test]
    fn a_run_without_faults_fails() {
        let (history, facts) = clean_run(None);
        let report = finish(&history, Ok(facts), Tally::default());
        assert!(!report.ok());
        assert_eq!(
            report.violations,
            ["no fault was injected: the scenario proved nothing"]
        );
    }

    #[test]
    fn a_fault_that_happened_counts_and_passes() {
        let (history, facts) = clean_run(Some("drop-after-commit"));
        let report = finish(&history, Ok(facts.clone()), Tally::default());
        assert!(report.ok(), "{:?}", report.violations);
        let (history, _) = clean_run(None);
        let mut tally = Tally::default();
        tally.add("kill-9");
        assert!(finish(&history, Ok(facts), tally).ok());
    }

    #[test]
    fn an_unreadable_database_fails() {
        let (history, _) = clean_run(Some("drop-after-commit"));
        let report = finish(&history, Err("connection refused".into()), Tally::default());
        assert!(report.violations[0].contains("cannot read the database"));
    }
}
