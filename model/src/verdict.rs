//! What a finished check says about a model's properties, read the same
//! way by the tests and the command line, for the records protocol and
//! the step journal alike.

use stateright::{Checker, Expectation, Model};

/// A property the check found broken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken<A> {
    /// The property's name.
    pub name: &'static str,
    /// The path to a state that breaks it; `None` for a reachability check
    /// that was never reached.
    pub path: Option<Vec<A>>,
}

/// The properties `checker` found broken: an `always` or `eventually`
/// property with a counterexample, or a reachability (`sometimes`) check
/// whose finding disagrees with `applies` (a check that applies must be
/// reached, one that does not must stay out of reach: both keep the
/// bounds honest).
pub fn broken<M, C>(checker: &C, applies: impl Fn(&M, &str) -> bool) -> Vec<Broken<M::Action>>
where
    M: Model,
    C: Checker<M>,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let model = checker.model();
    model
        .properties()
        .into_iter()
        .filter_map(|property| {
            let found = checker.discovery(property.name);
            let broken = match property.expectation {
                Expectation::Always | Expectation::Eventually => found.is_some(),
                Expectation::Sometimes => found.is_some() != applies(model, property.name),
            };
            broken.then(|| Broken {
                name: property.name,
                path: found
                    .filter(|_| property.expectation != Expectation::Sometimes)
                    .map(stateright::Path::into_actions),
            })
        })
        .collect()
}
