//! Checks the records protocol for larger bounds than CI does, and prints
//! the states explored, the time and any counterexample.
//!
//! `cargo run --release -p idemkey-model -- [--ticks N] [--sends N]
//! [--servers N] [--clients N] [--faults N] [--mode lease|transactional]
//! [--expiry reject|reexecute] [--stale-take-over]`

use std::time::Instant;

use idemkey_core::ExpiryPolicy;
use idemkey_model::{Bounds, Mode, Protocol};
use stateright::{Checker as _, Model as _};

fn main() {
    let mut args = std::env::args().skip(1);
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
            let started = Instant::now();
            let checker = Protocol::new(bounds)
                .checker()
                .threads(2)
                .spawn_bfs()
                .join();
            println!(
                "  {} states ({} unique), depth {}, {:.1} s",
                checker.state_count(),
                checker.unique_state_count(),
                checker.max_depth(),
                started.elapsed().as_secs_f64()
            );
            for property in checker.model().properties() {
                let found = checker.discovery(property.name);
                let broken = match property.expectation {
                    stateright::Expectation::Sometimes => {
                        found.is_none() && idemkey_model::properties::applies(mode, property.name)
                    }
                    _ => found.is_some(),
                };
                if broken {
                    failed = true;
                    println!("  FAILS: {}", property.name);
                    if let Some(path) = found {
                        for action in path.into_actions() {
                            println!("    {action:?}");
                        }
                    }
                }
            }
        }
    }
    std::process::exit(i32::from(failed));
}

fn usage() -> ! {
    eprintln!(
        "usage: idemkey-model [--mode lease|transactional] [--expiry reject|reexecute] \
         [--ticks N] [--sends N] [--servers N] [--clients N] [--faults N] [--stale-take-over]"
    );
    std::process::exit(2)
}
