//! The step journal's bounded model check, as CI runs it: every property
//! holds in every reachable state and every run ends finished, the bounds
//! reach the paths the properties are about, the checker finds each defect
//! put back (so no property is vacuous), and the model's paths are
//! exported as event lists for a replay against the library.

use std::time::Instant;

use idemkey_model::steps::{
    Bounds, CHARGE, Defect, Event, RESERVE, StepAction, StepJournal, StepState, properties,
};
use idemkey_model::{Walk, cover, transitions, walks};
use stateright::{Checker, HasDiscoveries, Model as _};

/// Runs the checker on `bounds` and prints what it explored.
fn check(bounds: Bounds) -> impl Checker<StepJournal> {
    let label = format!("{:?}", bounds);
    let started = Instant::now();
    let checker = StepJournal::new(bounds)
        .checker()
        .threads(2)
        .spawn_bfs()
        .join();
    let line = format!(
        "step journal {label}: {} states ({} unique), depth {}, {:.1} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    println!("{line}");
    idemkey_testkit::publish_figures(&line).expect("write the figures file");
    checker
}

#[test]
fn the_step_journal_keeps_every_property() {
    let checker = check(Bounds::small());
    assert!(checker.is_done(), "the whole space was explored");
    let broken = idemkey_model::broken(&checker, properties::applies);
    assert!(broken.is_empty(), "{broken:#?}");
}

/// A path (breadth first, so a short one) that the checker finds to a
/// violation of `property` with `defect` put back.
fn counterexample(defect: Defect, property: &'static str) -> Vec<Event> {
    let mut bounds = Bounds::small();
    bounds.defect = defect;
    let checker = StepJournal::new(bounds)
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{defect:?} breaks {property}"))
        .into_actions();
    println!("{defect:?} breaks {property}: {path:#?}");
    path
}

/// A recording without its fence lets an owner whose lease was taken over
/// record the step; the designed protocol, on the same events, rolls that
/// recording back.
#[test]
fn a_recording_without_the_fence_is_caught() {
    let events = counterexample(Defect::NoFence, properties::NO_FENCED_OUT_RECORDING);
    assert!(events.contains(&Event::Expire), "a take-over: {events:?}");
    let fixed = Walk::follow(&StepJournal::new(Bounds::small()), &events);
    assert_eq!(
        fixed.actions, events,
        "the designed protocol allows each event"
    );
    let (before, after) = (&fixed.states[events.len() - 1], &fixed.states[events.len()]);
    assert!(matches!(events.last(), Some(Event::Commit(_))));
    assert_eq!(before.steps, after.steps, "fenced out: nothing recorded");
    assert!(after.ghost.fenced && !after.ghost.fenced_out_recorded);
}

/// Without the fence, a compensation's owner whose lease was taken over
/// records it too: the reservation is released twice.
#[test]
fn without_the_fence_a_compensation_applies_twice() {
    let events = counterexample(Defect::NoFence, properties::AT_MOST_ONCE);
    let mut bounds = Bounds::small();
    bounds.defect = Defect::NoFence;
    let walk = Walk::follow(&StepJournal::new(bounds), &events);
    let last = walk.states.last().expect("a state");
    assert_eq!(
        last.ghost.applied[usize::from(RESERVE)][StepAction::Compensate.index()],
        2
    );
}

/// Without the lookup, a retry after a lost answer calls again, and a
/// downstream that does not deduplicate applies the effect twice.
#[test]
fn a_retry_without_lookup_to_a_downstream_that_does_not_dedupe_is_caught() {
    let events = counterexample(Defect::NoLookupNoDedupe, properties::AT_MOST_ONCE);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Call { lost: true, .. })),
        "a lost answer: {events:?}"
    );
}

/// The step key's deduplication is what the protocol rests on: a worker
/// that took a message over looks up before the first owner's call
/// arrives, finds nothing and calls too.
#[test]
fn the_lookup_alone_does_not_protect_a_downstream_that_does_not_dedupe() {
    let events = counterexample(Defect::NoDedupe, properties::AT_MOST_ONCE);
    assert!(events.contains(&Event::Expire), "a take-over: {events:?}");
    let mut bounds = Bounds::small();
    bounds.defect = Defect::NoDedupe;
    let walk = Walk::follow(&StepJournal::new(bounds), &events);
    let last = walk.states.last().expect("a state");
    assert_eq!(
        last.ghost.applied[usize::from(CHARGE)][StepAction::Run.index()],
        2
    );
    // A deduplicating downstream answers the second call without applying.
    let fixed = Walk::follow(&StepJournal::new(Bounds::small()), &events);
    assert_eq!(fixed.actions, events);
    let last = fixed.states.last().expect("a state");
    assert_eq!(
        last.ghost.applied[usize::from(CHARGE)][StepAction::Run.index()],
        1
    );
}

/// Undoing the lowest step first breaks the reverse order (refund after
/// the release of the reservation).
#[test]
fn compensation_in_forward_order_is_caught() {
    counterexample(Defect::ForwardCompensation, properties::REVERSE_ORDER);
}

/// A flow whose message is dead-lettered after a lost answer never ends:
/// the liveness property sees runs that stop short of `done`/`failed`.
#[test]
fn a_stuck_flow_is_caught() {
    counterexample(Defect::DeadLetterOnLostAnswer, properties::FINISHES);
}

/// A local step recorded compensated without its undo having run (a
/// missing undo taken for done) ends a failed flow whose journal says the
/// reservation was released while the store still holds it: only the end
/// state's consistency sees it. The designed protocol, on the same events,
/// runs the undo.
#[test]
fn a_compensation_recorded_without_its_undo_is_caught() {
    let events = counterexample(Defect::CompensatedWithoutUndo, properties::ENDS_CONSISTENT);
    let mut bounds = Bounds::small();
    bounds.defect = Defect::CompensatedWithoutUndo;
    let walk = Walk::follow(&StepJournal::new(bounds), &events);
    let last = walk.states.last().expect("a state");
    assert!(properties::finished(last), "{last:?}");
    let reserve = usize::from(RESERVE);
    assert_eq!(last.steps[reserve], Some(StepState::Compensated));
    assert_eq!(
        last.ghost.applied[reserve][StepAction::Compensate.index()],
        0
    );
    let fixed = Walk::follow(&StepJournal::new(Bounds::small()), &events);
    assert_eq!(
        fixed.actions, events,
        "the designed protocol allows each event"
    );
    let last = fixed.states.last().expect("a state");
    assert_eq!(last.steps[reserve], Some(StepState::Compensated));
    assert_eq!(
        last.ghost.applied[reserve][StepAction::Compensate.index()],
        1
    );
}

/// The transitions a sample of the step journal's paths must make, for a
/// replay against the library to exercise each part of the protocol.
const EXPECTED_TRANSITIONS: [&str; 10] = [
    "send: none -> Running",
    "claim -> Calling",
    "claim -> Lookup (take-over)",
    "lookup -> Recording",
    "lookup -> Calling",
    "call charge run refused=true lost=false -> Recording",
    "call confirm run refused=false lost=true -> Uncertain",
    "commit charge run recorded: Running -> Running",
    "commit charge compensate recorded: Compensating -> Compensating",
    "commit reserve compensate recorded: Compensating -> Failed",
];

/// The paths are exported like the records protocol's: seeded random walks
/// (lists of events with the states between them), a sample chosen to
/// cover the transitions, and each path followed again from its events.
#[test]
fn the_step_journal_paths_are_exported_as_events() {
    let model = StepJournal::new(Bounds::small());
    let pool = walks(&model, 29, 400, 60);
    let sample = cover(pool, 12);
    let covered: std::collections::BTreeSet<String> = sample.iter().flat_map(transitions).collect();
    println!("transitions in the sample: {covered:#?}");
    for transition in EXPECTED_TRANSITIONS {
        assert!(
            covered.contains(transition),
            "the sample never makes {transition}"
        );
    }
    for walk in &sample {
        let again = Walk::follow(&model, &walk.actions);
        assert_eq!(again.states, walk.states, "a path is its events");
    }
}
