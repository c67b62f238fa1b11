//! The `multi-step` checker: what the clients saw against what each
//! system holds once the run settled. Pure: [`check`] takes the history
//! and the rows ([`StoreFacts`]).
//!
//! For every purchase a client sent: one execution and one record under
//! its key, ended, its final answer the one every client-seen final answer
//! equals; done purchases hold their reservation, have exactly one charge
//! (of the reserved amount) under the charge step's derived key and
//! exactly one confirmation under the confirm step's; declined ones
//! released their reservation and have neither; out-of-stock ones reserved,
//! asked and charged nothing. Across the run: no refund (no step after the
//! charge fails for good here), no effect under a key no purchase derives,
//! no execution or reservation without a client's purchase, stock exact
//! (`stock == before − Σ reserved`), no step message pending, failed or
//! dead, and the provider's request log shows a lookup before every resend
//! and at most one run of each effect's handler per purchase.

use std::collections::{BTreeMap, HashMap, HashSet};

use idemkey_core::{
    IdempotencyKey, KeyProfile, PURCHASE_OPERATION, StepAction, step_downstream_key_of,
};

use super::check_stores::{Index, Keys, across, clip, effects, json};
use super::facts::StoreFacts;
use super::load::{Ask, DECLINED_SKU, PurchaseHistory, PurchaseRun, SCARCE_SKU};
use crate::checker::push;

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct MultiCheck {
    /// Violations, with evidence (at most 50).
    pub violations: Vec<String>,
    /// Figures of the run, for the report's notes.
    pub figures: Vec<String>,
    /// Purchases by how they ended (done, declined, out-of-stock, …).
    pub outcomes: BTreeMap<String, u64>,
    /// Effects or executions beyond one per purchase and step.
    pub duplicates: usize,
    /// Client-seen final answers that differ from the stored one.
    pub mismatched: usize,
}

/// The key the provider must hold `step`'s effect under.
pub fn step_key(
    account: &str,
    key: &str,
    flow: &str,
    step: &str,
    action: StepAction,
) -> Result<String, String> {
    let parsed = IdempotencyKey::parse(key.as_bytes(), KeyProfile::Lenient)
        .map_err(|e| format!("key {key:?} does not parse: {e}"))?;
    Ok(step_downstream_key_of(
        account,
        PURCHASE_OPERATION.as_str(),
        parsed.as_str(),
        flow,
        step,
        action,
    )
    .to_string())
}

/// Checks a settled run.
pub fn check(history: &PurchaseHistory, facts: &StoreFacts) -> MultiCheck {
    let mut c = MultiCheck::default();
    let index = Index::of(facts);
    let mut expected_keys: HashMap<String, &'static str> = HashMap::new();
    let mut client_flows: HashSet<&str> = HashSet::new();
    for run in &history.purchases {
        let account = history.accounts[run.planned.account].id.as_str();
        let outcome = purchase(&mut c, &index, account, run, &mut expected_keys);
        for flow in index
            .flows
            .get(&(account, run.planned.key.as_str()))
            .into_iter()
            .flatten()
        {
            client_flows.insert(flow.id.as_str());
        }
        *c.outcomes.entry(outcome).or_default() += 1;
    }
    across(
        &mut c.violations,
        &mut c.duplicates,
        facts,
        &expected_keys,
        &client_flows,
    );
    c.figures = super::figures::figures(history, facts);
    c
}

/// The checks of one client's purchase; how it ended.
fn purchase(
    c: &mut MultiCheck,
    index: &Index<'_>,
    account: &str,
    run: &PurchaseRun,
    expected_keys: &mut HashMap<String, &'static str>,
) -> String {
    let v = &mut c.violations;
    let key = run.planned.key.as_str();
    if let Some(why) = &run.stopped {
        push(v, format!("key {key}: the client stopped: {why}"));
    }
    for a in run.answers.iter().filter(|a| a.timed_out) {
        push(
            v,
            format!(
                "key {key}: no answer from server {} in time (a hang)",
                a.server
            ),
        );
    }
    let flows = index
        .flows
        .get(&(account, key))
        .map_or(&[][..], Vec::as_slice);
    let flow = match flows {
        [flow] => *flow,
        [] => {
            push(v, format!("key {key}: no execution in the journal"));
            return "no-execution".into();
        }
        more => {
            c.duplicates += more.len() - 1;
            push(
                v,
                format!("key {key}: {} executions in the journal", more.len()),
            );
            return "duplicated".into();
        }
    };
    let id = flow.id.as_str();
    if flow.operation != PURCHASE_OPERATION.as_str() {
        push(v, format!("purchase {id}: operation {}", flow.operation));
    }
    match index.records.get(&(account, key)) {
        Some(r) if r.status == "completed" && r.resource_id.as_deref() == Some(id) => {
            if r.response_status != flow.response_status
                || json(r.response_body.as_deref()) != json(flow.response_body.as_deref())
            {
                push(
                    v,
                    format!(
                        "purchase {id}: the key's record answers {:?}, the execution {:?}",
                        r.response_status, flow.response_status
                    ),
                );
            }
        }
        Some(r) => push(
            v,
            format!(
                "purchase {id}: the key's record is {} and names {:?}",
                r.status, r.resource_id
            ),
        ),
        None => push(v, format!("purchase {id}: no record under key {key}")),
    }
    for named in run.answers.iter().filter_map(|a| a.flow_id()) {
        if named != id {
            push(
                v,
                format!("key {key}: an answer names purchase {named}, the journal {id}"),
            );
        }
    }
    let stored_status = flow.response_status.and_then(|s| u16::try_from(s).ok());
    let stored = json(flow.response_body.as_deref());
    for a in &run.answers {
        let Some((status, body)) = a.final_answer() else {
            continue;
        };
        // A send's final answer is the stored one byte for byte; a poll
        // shows it as a JSON member.
        let bytes_differ =
            a.ask == Ask::Post && Some(a.body.as_str()) != flow.response_body.as_deref();
        if Some(status) != stored_status || body != stored || bytes_differ {
            c.mismatched += 1;
            push(
                v,
                format!(
                    "purchase {id}: a client saw {status} {}, the journal holds {stored_status:?} {}",
                    clip(&body),
                    clip(&stored)
                ),
            );
        }
    }
    let outcome = match (
        flow.state.as_str(),
        flow.failed_step.as_deref(),
        stored_status,
    ) {
        ("done", _, Some(201)) => "done",
        ("failed", Some("charge"), Some(402)) => "declined",
        ("failed", Some("reserve"), Some(409)) => "out-of-stock",
        (state, step, status) => {
            push(
                v,
                format!("purchase {id}: ended {state} at {step:?} with {status:?}"),
            );
            return format!("{state}-{}", step.unwrap_or("-"));
        }
    };
    let sku = run.planned.sku;
    let allowed = match sku {
        DECLINED_SKU => outcome == "declined",
        SCARCE_SKU => outcome == "done" || outcome == "out-of-stock",
        _ => outcome == "done",
    };
    if !allowed {
        push(v, format!("purchase {id} of {sku}: {outcome}"));
    }
    let keys = match (
        step_key(account, key, id, "charge", StepAction::Run),
        step_key(account, key, id, "confirm", StepAction::Run),
        step_key(account, key, id, "charge", StepAction::Compensate),
    ) {
        (Ok(charge), Ok(confirm), Ok(refund)) => Keys {
            charge,
            confirm,
            refund,
        },
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            push(v, e);
            return outcome.into();
        }
    };
    journal(&mut c.violations, index, id, outcome, &keys);
    effects(
        &mut c.violations,
        &mut c.duplicates,
        index,
        run,
        flow,
        outcome,
        &keys,
    );
    if outcome == "done" {
        expected_keys.insert(keys.charge, "charge");
        expected_keys.insert(keys.confirm, "confirm");
    }
    outcome.into()
}

/// The steps one execution recorded: each in the state its outcome
/// implies, the external ones under their derived keys.
fn journal(v: &mut Vec<String>, index: &Index<'_>, id: &str, outcome: &str, keys: &Keys) {
    let step = |name: &str, state: &str, key: Option<&String>| {
        (name.to_owned(), state.to_owned(), key.cloned())
    };
    let mut expected = match outcome {
        "done" => vec![
            step("reserve", "done", None),
            step("charge", "done", Some(&keys.charge)),
            step("confirm", "done", Some(&keys.confirm)),
        ],
        "declined" => vec![
            step("reserve", "compensated", None),
            step("charge", "failed", Some(&keys.charge)),
        ],
        _ => vec![step("reserve", "failed", None)],
    };
    let mut recorded: Vec<_> = index
        .steps
        .get(id)
        .into_iter()
        .flatten()
        .map(|s| step(&s.name, &s.state, s.downstream_key.as_ref()))
        .collect();
    expected.sort();
    recorded.sort();
    if recorded != expected {
        push(
            v,
            format!(
                "purchase {id} ({outcome}): the journal records {recorded:?}, expected {expected:?}"
            ),
        );
    }
}
