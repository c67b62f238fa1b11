//! What every scenario shares: its size, its working directory, the load
//! it drives, the faults it tallies and the report it ends with.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::checker::{DbFacts, Report, check};
use crate::driver::{Account, History, LoadConfig, run_load};
use crate::rng::Rng;
use crate::servers::create_account;

/// How big a run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Seconds per scenario, for CI.
    Small,
    /// Minutes per scenario, by hand.
    Large,
}

impl Size {
    pub(crate) fn pick<T>(self, small: T, large: T) -> T {
        match self {
            Self::Small => small,
            Self::Large => large,
        }
    }
}

pub(crate) fn work_dir(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "idemkey-chaos-{name}-{}-{}",
        std::process::id(),
        Rng::fresh_seed() % 100_000
    ));
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))
}

pub(crate) fn e<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |err| format!("{what}: {err}")
}

pub(crate) fn accounts(bin: &Path, url: &str, n: usize) -> Result<Vec<Account>, String> {
    (0..n)
        .map(|i| {
            create_account(bin, url, &format!("chaos-{i}"))
                .map(|(id, token)| Account { id, token })
                .map_err(e("account create"))
        })
        .collect()
}

pub(crate) fn string_args(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// What an injector did.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) faults: BTreeMap<String, u64>,
    pub(crate) notes: Vec<String>,
    pub(crate) violations: Vec<String>,
    /// What the injector did when (UTC), shown only when the run fails.
    pub(crate) timeline: Vec<String>,
}

impl Tally {
    pub(crate) fn add(&mut self, kind: &str) {
        *self.faults.entry(kind.to_owned()).or_default() += 1;
    }

    pub(crate) fn at(&mut self, what: String) {
        self.timeline
            .push(format!("{} {what}", crate::driver::utc_now()));
    }
}

/// Flags shared by the load and the injector.
#[derive(Clone, Default)]
pub(crate) struct Flags {
    faults_done: Arc<AtomicBool>,
    load_done: Arc<AtomicBool>,
}

impl Flags {
    fn load_running(&self) -> bool {
        !self.load_done.load(Ordering::SeqCst)
    }

    /// Lets the load end (once it ran its minimum) while the injector
    /// still tends the servers.
    pub(crate) fn schedule_over(&self) {
        self.faults_done.store(true, Ordering::SeqCst);
    }

    /// Sleeps up to `d`, returning early (false) once the load has ended.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if !self.load_running() {
                return false;
            }
            thread::sleep(Duration::from_millis(10).min(end - Instant::now()));
        }
        true
    }
}

/// Runs the load on `rt` while `inject` runs on another thread; the
/// injector must return once `flags.load_done` is set.
pub(crate) fn load_with<I>(
    rt: &tokio::runtime::Runtime,
    cfg: LoadConfig,
    bases: Vec<String>,
    incarnations: Arc<Vec<std::sync::atomic::AtomicU32>>,
    accounts: Vec<Account>,
    inject: I,
) -> (History, Tally)
where
    I: FnOnce(&Flags) -> Tally + Send,
{
    let flags = Flags::default();
    thread::scope(|scope| {
        let injector = {
            let flags = flags.clone();
            scope.spawn(move || {
                let tally = inject(&flags);
                flags.faults_done.store(true, Ordering::SeqCst);
                tally
            })
        };
        let history = rt.block_on(run_load(
            cfg,
            bases,
            incarnations,
            accounts,
            Arc::clone(&flags.faults_done),
        ));
        let cut_short = !flags.faults_done.load(Ordering::SeqCst);
        flags.load_done.store(true, Ordering::SeqCst);
        let mut tally = injector.join().unwrap_or_else(|_| {
            let mut t = Tally::default();
            t.violations.push("the fault injector panicked".into());
            t
        });
        if cut_short {
            tally.violations.push(format!(
                "the load reached its cap of {} operations before the fault schedule \
                 ended: the scenario did not run as written (raise max_ops)",
                history.ops.len()
            ));
        }
        (history, tally)
    })
}

pub(crate) fn finish(history: &History, facts: Result<DbFacts, String>, tally: Tally) -> Report {
    let mut report = match facts {
        Ok(facts) => check("", 0, history, &facts),
        Err(err) => {
            let mut r = check("", 0, history, &DbFacts::default());
            r.violations
                .insert(0, format!("cannot read the database: {err}"));
            r
        }
    };
    for (kind, n) in tally.faults {
        report.fault(&kind, n);
    }
    report.notes.extend(tally.notes);
    report.violations.extend(tally.violations);
    require_faults(&mut report);
    if !report.ok() {
        report.notes.extend(tally.timeline);
    }
    report
}

/// A run in which no fault happened proved nothing: a violation.
pub(crate) fn require_faults(report: &mut Report) {
    if report.total_faults() == 0 {
        report
            .violations
            .push("no fault was injected: the scenario proved nothing".into());
    }
}

pub(crate) fn load_config(size: Size, seed: u64) -> LoadConfig {
    LoadConfig {
        clients: size.pick(6, 24),
        min_ops: size.pick(60, 3_000),
        // A cap far past what the fault schedules need (seconds of load at
        // a few thousand operations a second), so a fast machine cannot end
        // the load before the faults; the load ends when they do.
        max_ops: size.pick(100_000, 2_000_000),
        seed,
        ..LoadConfig::default()
    }
}

/// Waits until the servers answer `/readyz` (bounded; `/healthz` does not
/// ask the database), so that a scenario starts its faults on a working
/// system.
pub(crate) fn wait_healthy(rt: &tokio::runtime::Runtime, bases: &[String]) {
    rt.block_on(async {
        let client = reqwest::Client::new();
        for base in bases {
            for _ in 0..100 {
                let ok = client
                    .get(format!("{base}/readyz"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    });
}
