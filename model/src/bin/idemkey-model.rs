//! Checks the records protocol (or, with `steps`, the step journal of a
//! multi-step operation) for larger bounds than CI does, and prints the
//! states explored, the time and any counterexample.
//!
//! `cargo run --release -p idemkey-model -- [--ticks N] [--sends N]
//! [--servers N] [--clients N] [--faults N] [--mode lease|transactional]
//! [--expiry reject|reexecute] [--stale-take-over]`
//!
//! `cargo run --release -p idemkey-model -- steps [--workers N] [--sends N]
//! [--faults N] [--confirm-never-refused]
//! [--defect no-fence|no-lookup-no-dedupe|no-dedupe|compensated-without-undo]`

use std::time::Instant;

use idemkey_core::ExpiryPolicy;
use idemkey_model::steps::{self, Defect, StepJournal};
use idemkey_model::{Bounds, Broken, Mode, Protocol};
use stateright::{Checker as _, Model};

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("steps") {
        args.next();
        check_steps(args);
    }
    let mut modes = vec![Mode::Lease, Mode::Transactional];
    let mut policies = vec![ExpiryPolicy::Reject, ExpiryPolicy::Reexecute];
    let mut change: Vec<(String, String)> = Vec::new();
    let mut stale = false;
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--stale-take-over" => stale = true,
            "--mode" => {
                modes = match args.next().as_deref() {
                    Some("lease") => vec![Mode::Lease],
                    Some("transactional") => vec![Mode::Transactional],
                    _ => usage(),
                }
            }
            "--expiry" => {
                policies = match args.next().as_deref() {
                    Some("reject") => vec![ExpiryPolicy::Reject],
                    Some("reexecute") => vec![ExpiryPolicy::Reexecute],
                    _ => usage(),
                }
            }
            "--ticks" | "--sends" | "--servers" | "--clients" | "--faults" => {
                change.push((flag.clone(), args.next().unwrap_or_else(|| usage())));
            }
            _ => usage(),
        }
    }
    let mut failed = false;
    for &mode in &modes {
        for &expiry in &policies {
            let mut bounds = Bounds::small(mode, expiry);
            bounds.stale_take_over = stale;
            for (flag, value) in &change {
                let n: u8 = value.parse().unwrap_or_else(|_| usage());
                match flag.as_str() {
                    "--ticks" => bounds.last_tick = n,
                    "--sends" => bounds.sends = n,
                    "--servers" => bounds.servers = n,
                    "--clients" => bounds.payloads = (0..n).map(|i| i % 2).collect(),
                    _ => bounds.faults = [n; 3],
                }
            }
            println!("{bounds:?}");
            let model = Protocol::new(bounds);
            failed |= run(model, |_, name| {
                idemkey_model::properties::applies(mode, name)
            });
        }
    }
    std::process::exit(i32::from(failed));
}

/// Checks the step journal within the bounds the flags give.
fn check_steps(mut args: impl Iterator<Item = String>) -> ! {
    let mut bounds = steps::Bounds::small();
    while let Some(flag) = args.next() {
        let mut number = || -> u8 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match flag.as_str() {
            "--workers" => bounds.workers = number(),
            "--sends" => bounds.sends = number(),
            "--faults" => bounds.faults = [number(); 3],
            "--confirm-never-refused" => bounds.confirm_refusable = false,
            "--defect" => {
                bounds.defect = match args.next().as_deref() {
                    Some("no-fence") => Defect::NoFence,
                    Some("no-lookup-no-dedupe") => Defect::NoLookupNoDedupe,
                    Some("no-dedupe") => Defect::NoDedupe,
                    Some("compensated-without-undo") => Defect::CompensatedWithoutUndo,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    println!("{bounds:?}");
    let failed = run(StepJournal::new(bounds), |m, name| {
        steps::properties::applies(m, name)
    });
    std::process::exit(i32::from(failed));
}

/// Explores `model` with two threads, prints the figures and each property
/// that fails ([`idemkey_model::broken`], with its path). True when one
/// failed.
fn run<M>(model: M, applies: impl Fn(&M, &str) -> bool) -> bool
where
    M: Model + Send + Sync + 'static,
    M::State: std::hash::Hash + std::fmt::Debug + Clone + PartialEq + Send + Sync,
    M::Action: std::fmt::Debug + Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model.checker().threads(2).spawn_bfs().join();
    println!(
        "  {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    let broken = idemkey_model::broken(&checker, applies);
    for Broken { name, path } in &broken {
        println!("  FAILS: {name}");
        for action in path.iter().flatten() {
            println!("    {action:?}");
        }
    }
    !broken.is_empty()
}

fn usage() -> ! {
    eprintln!(
        "usage: idemkey-model [--mode lease|transactional] [--expiry reject|reexecute] \
         [--ticks N] [--sends N] [--servers N] [--clients N] [--faults N] [--stale-take-over]\n       \
         idemkey-model steps [--workers N] [--sends N] [--faults N] [--confirm-never-refused] \
         [--defect no-fence|no-lookup-no-dedupe|no-dedupe|compensated-without-undo]"
    );
    std::process::exit(2)
}
