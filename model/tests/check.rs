//! The bounded model check, as CI runs it: every property holds in every
//! reachable state of both modes under both expiry policies, the bounds
//! reach the situations the properties are about, and the checker finds
//! the stale take-over when it is put back.

use std::time::Instant;

use idemkey_core::ExpiryPolicy;
use idemkey_model::properties;
use idemkey_model::{Action, Bounds, Mode, Phase, Protocol, Status, Walk};
use stateright::{Checker, HasDiscoveries, Model as _};

/// Runs the checker on `bounds` and prints what it explored.
fn check(bounds: Bounds, threads: usize) -> impl Checker<Protocol> {
    let label = format!("{:?}/{:?}", bounds.mode, bounds.expiry);
    let started = Instant::now();
    let checker = Protocol::new(bounds)
        .checker()
        .threads(threads)
        .spawn_bfs()
        .join();
    println!(
        "{label}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    checker
}

/// Every `always` property holds; every reachability check applying to the
/// mode is reached.
fn holds(mode: Mode, expiry: ExpiryPolicy) {
    let checker = check(Bounds::small(mode, expiry), 2);
    assert!(checker.is_done(), "the whole space was explored");
    let broken = idemkey_model::broken(&checker, |_, name| properties::applies(mode, name));
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn lease_mode_under_reject_keeps_every_property() {
    holds(Mode::Lease, ExpiryPolicy::Reject);
}

#[test]
fn lease_mode_under_reexecute_keeps_every_property() {
    holds(Mode::Lease, ExpiryPolicy::Reexecute);
}

#[test]
fn transactional_mode_under_reject_keeps_every_property() {
    holds(Mode::Transactional, ExpiryPolicy::Reject);
}

#[test]
fn transactional_mode_under_reexecute_keeps_every_property() {
    holds(Mode::Transactional, ExpiryPolicy::Reexecute);
}

/// The shortest counterexample the checker finds for the stale take-over.
pub fn stale_take_over_counterexample() -> Vec<Action> {
    let mut bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    bounds.stale_take_over = true;
    let checker = Protocol::new(bounds)
        .checker()
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_bfs()
        .join();
    checker
        .discovery(properties::NEVER_OVERWRITTEN)
        .expect("the stale take-over overwrites a completed record")
        .into_actions()
}

/// A take-over that matches only the claim token (not the state it decided
/// on) replaces a record its owner completed meanwhile; the fixed protocol
/// refuses that take-over on the same steps.
#[test]
fn the_checker_finds_the_stale_take_over() {
    let actions = stale_take_over_counterexample();
    println!("counterexample ({} steps):", actions.len());
    for action in &actions {
        println!("  {action:?}");
    }
    let mut bounds = Bounds::small(Mode::Lease, ExpiryPolicy::Reexecute);
    bounds.stale_take_over = true;
    let buggy = Walk::follow(&Protocol::new(bounds.clone()), &actions);
    assert_eq!(buggy.actions.len(), actions.len(), "the path replays");
    let last = buggy.states.last().expect("a state");
    assert!(last.ghost.overwritten);

    // The fixed protocol on the same steps: the last step is a take-over
    // of a row that is no longer in flight, and it fails.
    bounds.stale_take_over = false;
    let fixed = Protocol::new(bounds);
    let walk = Walk::follow(&fixed, &actions);
    assert_eq!(walk.actions.len(), actions.len(), "every step is allowed");
    let before = &walk.states[walk.states.len() - 2];
    let after = walk.states.last().expect("a state");
    let Some(Action::Step(server)) = actions.last() else {
        panic!("the defect is a store call");
    };
    assert!(matches!(
        before.servers[usize::from(*server)],
        Phase::TakeOver { .. }
    ));
    assert!(matches!(
        after.row.map(|r| r.status),
        Some(Status::Completed { .. })
    ));
    assert!(!after.ghost.overwritten);
}
