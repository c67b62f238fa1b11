//! The checks of what the stores hold besides the journal: one
//! purchase's reservation and its effects at the provider ([`effects`]),
//! and, across the run ([`across`]), executions and reservations without a
//! client's purchase, exact stock, effects under keys no purchase derives,
//! refunds, step messages left over, and the provider's request-log
//! discipline.

use std::collections::{BTreeMap, HashMap, HashSet};

use idemkey_testkit::{LoggedRequest, request_log_violations};
use serde_json::Value;

use super::facts::{FlowRow, ProviderEffect, StoreFacts};
use super::load::PurchaseRun;
use crate::checker::push;

/// The step keys of one execution: charge, confirm, and the charge's
/// refund.
pub(super) struct Keys {
    pub(super) charge: String,
    pub(super) confirm: String,
    pub(super) refund: String,
}

/// Indexes of the facts.
pub(super) struct Index<'a> {
    pub(super) flows: HashMap<(&'a str, &'a str), Vec<&'a FlowRow>>,
    pub(super) records: HashMap<(&'a str, &'a str), &'a super::facts::RecordRow>,
    pub(super) reservations: HashMap<&'a str, Vec<&'a super::facts::ReservationRow>>,
    pub(super) steps: HashMap<&'a str, Vec<&'a super::facts::StepRow>>,
    pub(super) charges: HashMap<&'a str, Vec<&'a ProviderEffect>>,
    pub(super) confirmations: HashMap<&'a str, Vec<&'a ProviderEffect>>,
    pub(super) logged: HashSet<&'a str>,
}

impl<'a> Index<'a> {
    pub(super) fn of(facts: &'a StoreFacts) -> Self {
        let by_key = |effects: &'a [ProviderEffect]| {
            let mut map: HashMap<&str, Vec<&ProviderEffect>> = HashMap::new();
            for e in effects {
                map.entry(e.key.as_str()).or_default().push(e);
            }
            map
        };
        let mut flows: HashMap<(&str, &str), Vec<&FlowRow>> = HashMap::new();
        for f in &facts.flows {
            flows.entry((&f.scope, &f.key)).or_default().push(f);
        }
        let mut steps: HashMap<&str, Vec<_>> = HashMap::new();
        for s in &facts.steps {
            steps.entry(s.flow_id.as_str()).or_default().push(s);
        }
        let mut reservations: HashMap<&str, Vec<_>> = HashMap::new();
        for r in &facts.reservations {
            reservations.entry(r.id.as_str()).or_default().push(r);
        }
        Self {
            flows,
            records: facts
                .records
                .iter()
                .map(|r| ((r.scope.as_str(), r.key.as_str()), r))
                .collect(),
            reservations,
            steps,
            charges: by_key(&facts.charges),
            confirmations: by_key(&facts.confirmations),
            logged: facts.log.iter().map(|r| r.key.as_str()).collect(),
        }
    }
}

/// One purchase's reservation and its effects at the provider.
pub(super) fn effects(
    v: &mut Vec<String>,
    duplicates: &mut usize,
    index: &Index<'_>,
    run: &PurchaseRun,
    flow: &FlowRow,
    outcome: &str,
    keys: &Keys,
) {
    let id = flow.id.as_str();
    let stored = &json(flow.response_body.as_deref());
    let reservations = index.reservations.get(id).map_or(&[][..], Vec::as_slice);
    let amount = reservations.first().map(|r| r.amount_cents);
    match (outcome, reservations) {
        ("out-of-stock", []) => {}
        ("done", [r]) | ("declined", [r]) => {
            let state = if outcome == "done" {
                "reserved"
            } else {
                "released"
            };
            if r.state != state
                || r.account != flow.scope
                || r.sku != run.planned.sku
                || r.quantity != i32::from(run.planned.quantity)
            {
                push(
                    v,
                    format!(
                        "purchase {id} ({outcome}, {} × {}): its reservation is {} {} × {}",
                        run.planned.quantity, run.planned.sku, r.state, r.quantity, r.sku
                    ),
                );
            }
        }
        (_, rs) => push(
            v,
            format!("purchase {id} ({outcome}): {} reservations", rs.len()),
        ),
    }
    let charges = index
        .charges
        .get(keys.charge.as_str())
        .map_or(&[][..], Vec::as_slice);
    let confirmations = index
        .confirmations
        .get(keys.confirm.as_str())
        .map_or(&[][..], Vec::as_slice);
    if outcome == "done" {
        match charges {
            [ch] if ch.order_id == id && ch.amount_cents == amount => {
                if stored["charge_id"].as_str() != Some(ch.id.as_str())
                    || stored["amount_cents"].as_i64() != amount
                {
                    push(
                        v,
                        format!(
                            "purchase {id}: answered {}, charged {}",
                            clip(stored),
                            ch.id
                        ),
                    );
                }
            }
            [ch] => push(
                v,
                format!(
                    "purchase {id} ({amount:?} cents): its charge {} names {} for {:?}",
                    ch.id, ch.order_id, ch.amount_cents
                ),
            ),
            more => {
                *duplicates += more.len().saturating_sub(1);
                push(
                    v,
                    format!(
                        "purchase {id}: {} charges under {}",
                        more.len(),
                        keys.charge
                    ),
                );
            }
        }
        match confirmations {
            [cf] if cf.order_id == id => {
                if stored["confirmation_id"].as_str() != Some(cf.id.as_str()) {
                    push(
                        v,
                        format!(
                            "purchase {id}: answered {}, confirmed {}",
                            clip(stored),
                            cf.id
                        ),
                    );
                }
            }
            [cf] => push(
                v,
                format!("purchase {id}: its confirmation names {}", cf.order_id),
            ),
            more => {
                *duplicates += more.len().saturating_sub(1);
                let n = more.len();
                push(
                    v,
                    format!("purchase {id}: {n} confirmations under {}", keys.confirm),
                );
            }
        }
    } else {
        // Counted as duplicates with the effects no purchase derives.
        if !charges.is_empty() || !confirmations.is_empty() {
            push(
                v,
                format!(
                    "purchase {id} ({outcome}): {} charges and {} confirmations",
                    charges.len(),
                    confirmations.len()
                ),
            );
        }
        let asked = index.logged.contains(keys.charge.as_str());
        if asked != (outcome == "declined") {
            push(
                v,
                format!("purchase {id} ({outcome}): charge asked at the provider: {asked}"),
            );
        }
        if index.logged.contains(keys.confirm.as_str()) {
            push(
                v,
                format!("purchase {id} ({outcome}): a confirmation was asked for"),
            );
        }
    }
    if index.logged.contains(keys.refund.as_str()) {
        push(
            v,
            format!("purchase {id} ({outcome}): a refund was asked for"),
        );
    }
}

/// The checks across the run.
pub(super) fn across(
    v: &mut Vec<String>,
    duplicates: &mut usize,
    facts: &StoreFacts,
    expected_keys: &HashMap<String, &'static str>,
    client_flows: &HashSet<&str>,
) {
    let flows: HashMap<&str, &FlowRow> = facts.flows.iter().map(|f| (f.id.as_str(), f)).collect();
    for f in &facts.flows {
        if !client_flows.contains(f.id.as_str()) {
            *duplicates += 1;
            push(
                v,
                format!(
                    "execution {} ({}, key {}) is no client's purchase",
                    f.id, f.state, f.key
                ),
            );
        }
        if f.state == "running" || f.state == "compensating" {
            push(v, format!("execution {} is still {}", f.id, f.state));
        }
    }
    let mut reserved: BTreeMap<&str, i64> = BTreeMap::new();
    for r in &facts.reservations {
        let state = flows.get(r.id.as_str()).map(|f| f.state.as_str());
        match (r.state.as_str(), state) {
            ("reserved", Some("done")) | ("released", Some("failed")) => {}
            (held, of) => push(
                v,
                format!("reservation {} is {held}, its purchase {of:?}", r.id),
            ),
        }
        if r.state == "reserved" {
            *reserved.entry(r.sku.as_str()).or_default() += i64::from(r.quantity);
        }
    }
    for (sku, before) in &facts.stock_before {
        let held = reserved.get(sku.as_str()).copied().unwrap_or(0);
        let after = facts.stock_after.get(sku).copied();
        if after != Some(before - held) {
            push(
                v,
                format!("stock of {sku}: {after:?}, {before} before and {held} reserved"),
            );
        }
    }
    for (what, list) in [
        ("charge", &facts.charges),
        ("confirmation", &facts.confirmations),
    ] {
        for e in list {
            if !expected_keys.contains_key(&e.key) {
                *duplicates += 1;
                push(
                    v,
                    format!(
                        "{what} {} (key {}, order {}) is no purchase's",
                        e.id, e.key, e.order_id
                    ),
                );
            }
        }
    }
    for r in &facts.refunds {
        *duplicates += 1;
        push(
            v,
            format!("refund {} of order {} (none was due)", r.id, r.order_id),
        );
    }
    for m in facts.messages.iter().filter(|m| m.status != "delivered") {
        push(
            v,
            format!(
                "step message {} (purchase {}) is {} after {} attempts: {}",
                m.id,
                m.resource_id.as_deref().unwrap_or("-"),
                m.status,
                m.attempts,
                m.last_error.as_deref().unwrap_or("")
            ),
        );
    }
    for violation in discipline(facts) {
        push(v, format!("provider request log: {violation}"));
    }
}

/// The request log's discipline, effect by effect: a lookup before every
/// resend under a key, and at most one run of the handler per purchase
/// (testkit's check, which names every run `charge`).
fn discipline(facts: &StoreFacts) -> Vec<String> {
    let mut by_effect: BTreeMap<&str, Vec<LoggedRequest>> = BTreeMap::new();
    for r in &facts.log {
        let kind = match r.kind.as_str() {
            "request" | "lookup" => r.kind.clone(),
            _ => "charge".to_owned(),
        };
        by_effect.entry(&r.effect).or_default().push(LoggedRequest {
            seq: r.seq,
            kind,
            idempotency_key: r.key.clone(),
            order_id: r.order_id.clone(),
        });
    }
    by_effect
        .into_iter()
        .flat_map(|(effect, rows)| {
            request_log_violations(&rows)
                .into_iter()
                .map(move |v| format!("{effect}: {}", v.replace("charge handler", "handler")))
        })
        .collect()
}

/// A stored body as JSON (`null` when it is none).
pub(super) fn json(body: Option<&str>) -> Value {
    body.and_then(|b| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null)
}

pub(super) fn clip(v: &Value) -> String {
    v.to_string().chars().take(200).collect()
}
