//! The small size of every scenario that can run here, so the workspace's
//! test command covers the suite. Each test prints its seed first and its
//! table last; `IDEMKEY_CHAOS_SEED=N` runs every scenario with seed `N`
//! (as `idemkey-chaos --seed N SCENARIO` does), replaying the random choices
//! of a failed run. Nextest runs these one at a time and never retries them
//! (`.config/nextest.toml`): a retry would draw a new seed and could hide a
//! violation.

use idemkey_chaos::Size;
use idemkey_chaos::scenarios::run_skipping;

fn small(name: &str) {
    small_skipping(name, &[]);
}

fn small_skipping(name: &str, skip: &[&str]) {
    let seed = match std::env::var("IDEMKEY_CHAOS_SEED") {
        Ok(seed) => seed
            .parse()
            .unwrap_or_else(|_| panic!("IDEMKEY_CHAOS_SEED={seed:?} is not a u64")),
        Err(_) => idemkey_chaos::rng::Rng::fresh_seed(),
    };
    let replay = format!(
        "replay with IDEMKEY_CHAOS_SEED={seed} or `cargo run -p idemkey-chaos -- --seed {seed} {name}`"
    );
    eprintln!("{name}: seed {seed} ({replay})");
    let report = run_skipping(name, Size::Small, seed, skip)
        .unwrap_or_else(|e| panic!("{name} (seed {seed}) could not run: {e}\n{replay}"));
    println!("{}", report.table());
    assert!(
        report.pending.is_none(),
        "{name} is pending: {:?}",
        report.pending
    );
    assert!(
        report.ok(),
        "{name} failed (seed {seed}):\n{}\n{replay}",
        report.table()
    );
}

#[test]
fn kill9_loses_and_duplicates_nothing() {
    small("kill9");
}

#[test]
fn pg_immediate_loses_and_duplicates_nothing() {
    small("pg-immediate");
}

#[test]
fn proxy_cut_loses_and_duplicates_nothing() {
    small("proxy-cut");
}

#[test]
fn slow_db_answers_409_or_503_with_retry_after_and_recovers() {
    small("slow-db");
}

#[test]
fn failover_to_a_synchronous_standby_loses_no_acknowledged_order() {
    small("failover");
}

/// Every check of the sweep: each bad input gets its problem and stores
/// nothing, duplicate JSON members are refused at `/quantity`, and bodies
/// that stop half-way are answered 400 and closed at the body read deadline.
#[test]
fn hostile_input_all_checks() {
    small("hostile");
}

#[test]
fn sqlite_kill_loses_and_duplicates_nothing() {
    small("sqlite-kill");
}

/// Two servers whose clocks disagree by hours, one restarted with the
/// other offset, under `reexecute`: no duplicate, no lost acknowledgement.
#[test]
fn clock_skew_loses_and_duplicates_nothing() {
    small("clock-skew");
}

/// Orders paid through the outbox while the workers are killed and the
/// provider fails, loses responses and restarts: once settled, every order
/// has exactly one charge with its amount, none lacks an order, none pends.
#[test]
fn payments_charge_every_order_exactly_once() {
    small("payments");
}

/// Purchases of three steps under one key (reserve, charge, confirm) while
/// the workers are killed, a server restarts and the provider loses
/// answers: once settled, every step's effect once per purchase, declined
/// ones released, stock exact, every client-seen answer the stored one.
#[test]
fn multi_step_runs_every_step_once_per_purchase() {
    small("multi-step");
}
