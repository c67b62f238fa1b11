//! The `payments` scenario's checker: the orders, their keys' records and
//! outbox messages (from the order service's database), the provider's
//! charges (from its `GET /charges`) and each order's payment as
//! `GET /orders/{id}` shows it, against the promise of issue 12: once the
//! system settles, every order has exactly one charge with its amount,
//! under the key derived from the order's own key and id, no charge lacks
//! an order, and no order stays pending. The provider's request log
//! (`GET /requests`) shows what its charges table hides: the charge handler
//! ran at most once per order, and every charge request sent again under a
//! key came after a lookup of it. Pure: [`check_payments`] takes the rows.

use std::collections::{BTreeMap, HashMap};

use idemkey_core::{IdempotencyKey, KeyProfile, ORDER_OPERATION, instance_downstream_key_of};
use idemkey_testkit::{LoggedRequest, counts_by_key, request_log_violations};

use crate::checker::push;

/// The effect name of an order's charge in the outbox.
pub const CHARGE: &str = "charge";

/// One order as stored.
#[derive(Clone, Debug, Default)]
pub struct PaidOrder {
    /// Order id.
    pub id: String,
    /// Account id (the scope of its key).
    pub account: String,
    /// What it costs (`None` only for orders placed before prices).
    pub amount_cents: Option<i64>,
    /// Its currency.
    pub currency: Option<String>,
}

/// The order key of an order: an idempotency record of the order
/// operation pointing at it.
#[derive(Clone, Debug, Default)]
pub struct OrderKey {
    /// Account id.
    pub account: String,
    /// The key's characters.
    pub key: String,
    /// The order it created.
    pub order: String,
}

/// One outbox message as stored.
#[derive(Clone, Debug, Default)]
pub struct OutboxRow {
    /// Its id.
    pub id: i64,
    /// The key's scope (account id).
    pub scope: String,
    /// The key's operation.
    pub operation: String,
    /// The key.
    pub key: String,
    /// The effect (`charge`).
    pub effect: String,
    /// The order.
    pub resource_id: Option<String>,
    /// pending, delivered, failed or dead.
    pub status: String,
    /// Deliveries tried.
    pub attempts: i32,
    /// The downstream key its worker recorded.
    pub downstream_key: Option<String>,
    /// The provider's answer (the charge id) or the refusal.
    pub result: Option<String>,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

/// One charge as the provider lists it.
#[derive(Clone, Debug, Default)]
pub struct ProviderCharge {
    /// `ch_...`.
    pub id: String,
    /// The key it was made under.
    pub idempotency_key: String,
    /// The order it says it pays.
    pub order_id: String,
    /// Its amount.
    pub amount_cents: i64,
    /// Its currency.
    pub currency: String,
}

/// An order's payment as `GET /orders/{id}` shows it.
#[derive(Clone, Debug, Default)]
pub struct ShownPayment {
    /// pending, charged or failed; or why it could not be read.
    pub status: String,
    /// The provider's charge id, when charged.
    pub charge_id: Option<String>,
}

/// Everything the payments check reads.
#[derive(Clone, Debug, Default)]
pub struct PaymentFacts {
    /// Every order.
    pub orders: Vec<PaidOrder>,
    /// Every order key (records of the order operation with an order).
    pub keys: Vec<OrderKey>,
    /// Every outbox message.
    pub outbox: Vec<OutboxRow>,
    /// Every charge at the provider.
    pub charges: Vec<ProviderCharge>,
    /// Each order's payment as the API shows it, by order id.
    pub shown: HashMap<String, ShownPayment>,
    /// The provider's request log, in arrival order.
    pub requests: Vec<LoggedRequest>,
}

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct PaymentCheck {
    /// Violations, with evidence (at most 50).
    pub violations: Vec<String>,
    /// Figures of the run (notes).
    pub figures: Vec<String>,
    /// Outbox messages by status.
    pub by_status: BTreeMap<String, u64>,
}

/// The key the provider must have charged `order` under: derived by the
/// core from the order's own key and its id (so the second order of a
/// re-executed key has its own).
fn expected_key(key: &OrderKey) -> Result<String, String> {
    let parsed = IdempotencyKey::parse(key.key.as_bytes(), KeyProfile::Lenient).map_err(|e| {
        format!(
            "order {}: its key {:?} does not parse: {e}",
            key.order, key.key
        )
    })?;
    Ok(instance_downstream_key_of(
        &key.account,
        ORDER_OPERATION.as_str(),
        parsed.as_str(),
        CHARGE,
        &key.order,
    )
    .to_string())
}

/// Checks the payments of a settled run.
pub fn check_payments(facts: &PaymentFacts) -> PaymentCheck {
    let mut c = PaymentCheck::default();
    let v = &mut c.violations;
    let keys: HashMap<&str, &OrderKey> = facts.keys.iter().map(|k| (k.order.as_str(), k)).collect();
    let mut by_key: HashMap<&str, Vec<&ProviderCharge>> = HashMap::new();
    let mut by_order: HashMap<&str, Vec<&ProviderCharge>> = HashMap::new();
    for charge in &facts.charges {
        by_key
            .entry(&charge.idempotency_key)
            .or_default()
            .push(charge);
        by_order.entry(&charge.order_id).or_default().push(charge);
    }
    let mut messages: HashMap<(&str, &str), Vec<&OutboxRow>> = HashMap::new();
    for m in &facts.outbox {
        *c.by_status.entry(m.status.clone()).or_default() += 1;
        if let Some(order) = &m.resource_id {
            messages.entry((&m.scope, order)).or_default().push(m);
        }
    }
    let mut expected_keys: HashMap<String, &str> = HashMap::new();
    for order in &facts.orders {
        let id = order.id.as_str();
        let Some(key) = keys.get(id) else {
            // The history checker reports an order without a record.
            push(
                v,
                format!("order {id}: no key record, so no key to charge it under"),
            );
            continue;
        };
        let expected = match expected_key(key) {
            Ok(k) => k,
            Err(err) => {
                push(v, err);
                continue;
            }
        };
        expected_keys.insert(expected.clone(), id);
        let charges = by_key.get(expected.as_str()).map_or(&[][..], Vec::as_slice);
        let for_order = by_order.get(id).map_or(0, Vec::len);
        match charges {
            [charge] => {
                let (amount, currency) = (order.amount_cents, order.currency.as_deref());
                if charge.order_id != id
                    || Some(charge.amount_cents) != amount
                    || Some(charge.currency.as_str()) != currency
                {
                    push(
                        v,
                        format!(
                            "order {id} ({amount:?} {currency:?}): its charge {} says order {} {} {}",
                            charge.id, charge.order_id, charge.amount_cents, charge.currency
                        ),
                    );
                }
                if for_order != 1 {
                    push(v, format!("order {id}: {for_order} charges name it"));
                }
                shown_matches(v, id, facts.shown.get(id), &charge.id);
            }
            [] => push(
                v,
                format!("order {id}: no charge at the provider under key {expected}"),
            ),
            more => push(
                v,
                format!("order {id}: {} charges under key {expected}", more.len()),
            ),
        }
        let ms = messages
            .get(&(order.account.as_str(), id))
            .map_or(&[][..], Vec::as_slice);
        match ms {
            [m] => message_matches(v, id, m, key, &expected, charges),
            _ => push(v, format!("order {id}: {} outbox messages", ms.len())),
        }
    }
    for charge in &facts.charges {
        if !expected_keys.contains_key(&charge.idempotency_key) {
            push(
                v,
                format!(
                    "charge {} (key {}, order {}) lacks an order",
                    charge.id, charge.idempotency_key, charge.order_id
                ),
            );
        }
    }
    for m in &facts.outbox {
        if m.status != "delivered" {
            push(
                v,
                format!(
                    "outbox message {} (order {}) is {} after {} attempts: {}",
                    m.id,
                    m.resource_id.as_deref().unwrap_or("-"),
                    m.status,
                    m.attempts,
                    m.last_error
                        .as_deref()
                        .or(m.result.as_deref())
                        .unwrap_or("")
                ),
            );
        }
    }
    for violation in request_log_violations(&facts.requests) {
        push(v, format!("provider request log: {violation}"));
    }
    c.figures = figures(facts, &c.by_status);
    c
}

/// The API's view of order `id` agrees with the provider.
fn shown_matches(v: &mut Vec<String>, id: &str, shown: Option<&ShownPayment>, charge: &str) {
    match shown {
        Some(p) if p.status == "charged" && p.charge_id.as_deref() == Some(charge) => {}
        Some(p) => push(
            v,
            format!(
                "GET /orders/{id} shows payment {} {:?}; the provider's charge is {charge}",
                p.status, p.charge_id
            ),
        ),
        None => push(v, format!("GET /orders/{id} was not read")),
    }
}

/// An order's outbox message was written under its key and settled with
/// the provider's charge.
fn message_matches(
    v: &mut Vec<String>,
    id: &str,
    m: &OutboxRow,
    key: &OrderKey,
    expected: &str,
    charges: &[&ProviderCharge],
) {
    if m.effect != CHARGE || m.operation != ORDER_OPERATION.as_str() || m.key != key.key {
        push(
            v,
            format!(
                "order {id}: outbox message {} is {} of {} under key {}, the order's key is {}",
                m.id, m.effect, m.operation, m.key, key.key
            ),
        );
    }
    if m.downstream_key.as_deref().is_some_and(|k| k != expected) {
        push(
            v,
            format!(
                "order {id}: the worker sent key {:?}, the core derives {expected}",
                m.downstream_key
            ),
        );
    }
    if let [charge] = charges
        && m.status == "delivered"
        && m.result.as_deref() != Some(charge.id.as_str())
    {
        push(
            v,
            format!(
                "order {id}: outbox result {:?}, the provider's charge is {}",
                m.result, charge.id
            ),
        );
    }
}

fn figures(facts: &PaymentFacts, by_status: &BTreeMap<String, u64>) -> Vec<String> {
    let join = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut attempts: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0i64;
    let mut max = 0;
    for m in &facts.outbox {
        total += i64::from(m.attempts);
        max = max.max(m.attempts);
        let bucket = if m.attempts >= 5 {
            "5+".to_owned()
        } else {
            m.attempts.to_string()
        };
        *attempts.entry(bucket).or_default() += 1;
    }
    let (mut requests, mut lookups, mut runs, mut resent) = (0, 0, 0, 0);
    for counts in counts_by_key(&facts.requests).values() {
        requests += counts.requests;
        lookups += counts.lookups;
        runs += counts.charges;
        resent += counts.requests.saturating_sub(1);
    }
    vec![
        format!(
            "provider request log: {requests} charge requests ({resent} sent again under a key), \
             {lookups} lookups, {runs} runs of the charge handler"
        ),
        format!(
            "payments: {} orders, {} charges at the provider, outbox {}",
            facts.orders.len(),
            facts.charges.len(),
            join(by_status)
        ),
        format!(
            "deliveries: {total} attempts for {} messages (max {max}); messages by attempts: {}",
            facts.outbox.len(),
            join(&attempts)
        ),
    ]
}

/// Counts the provider's log lines that matter: fault lines and its
/// request lines by method, route, status and replay.
pub fn provider_log_counts(log: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in log.lines() {
        // `effect committed` since the simulator has several effects;
        // `charge committed` in its logs before.
        let label = if line.contains("fault: effect committed")
            || line.contains("fault: charge committed")
        {
            "lost responses (charge committed, connection closed)".to_owned()
        } else if line.contains("fault: 503 before any effect") {
            "503 before any effect".to_owned()
        } else if line.contains(" request ") || line.ends_with(" request") {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(name))
                    .map(|w| w.trim_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let replayed = if field("replayed=") == "true" {
                " replayed"
            } else {
                ""
            };
            format!(
                "{} {} {}{replayed}",
                field("method="),
                field("route="),
                field("status=")
            )
        } else {
            continue;
        };
        *counts.entry(label).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCOUNT: &str = "0b8e3d4c-1f2a-4b5c-8d6e-7f8091a2b3c4";
    const KEY: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

    /// One order, charged once under its derived key, shown charged.
    fn settled() -> PaymentFacts {
        let key = OrderKey {
            account: ACCOUNT.into(),
            key: KEY.into(),
            order: "o1".into(),
        };
        let derived = expected_key(&key).unwrap();
        PaymentFacts {
            orders: vec![PaidOrder {
                id: "o1".into(),
                account: ACCOUNT.into(),
                amount_cents: Some(5980),
                currency: Some("EUR".into()),
            }],
            outbox: vec![OutboxRow {
                id: 1,
                scope: ACCOUNT.into(),
                operation: ORDER_OPERATION.as_str().into(),
                key: KEY.into(),
                effect: CHARGE.into(),
                resource_id: Some("o1".into()),
                status: "delivered".into(),
                attempts: 2,
                downstream_key: Some(derived.clone()),
                result: Some("ch_1".into()),
                last_error: None,
            }],
            keys: vec![key],
            charges: vec![ProviderCharge {
                id: "ch_1".into(),
                idempotency_key: derived.clone(),
                order_id: "o1".into(),
                amount_cents: 5980,
                currency: "EUR".into(),
            }],
            shown: HashMap::from([(
                "o1".to_owned(),
                ShownPayment {
                    status: "charged".into(),
                    charge_id: Some("ch_1".into()),
                },
            )]),
            requests: vec![
                logged(1, "request", &derived, None),
                logged(2, "charge", &derived, Some("o1")),
                logged(3, "lookup", &derived, None),
            ],
        }
    }

    fn logged(seq: i64, kind: &str, key: &str, order: Option<&str>) -> LoggedRequest {
        LoggedRequest {
            seq,
            kind: kind.into(),
            idempotency_key: key.into(),
            order_id: order.map(str::to_owned),
        }
    }

    fn violations(facts: &PaymentFacts) -> Vec<String> {
        check_payments(facts).violations
    }

    #[test]
    fn a_settled_run_passes_and_the_key_is_the_cores() {
        let facts = settled();
        assert_eq!(violations(&facts), Vec::<String>::new());
        // The core's vector (core/src/downstream.rs, computed with Python).
        let key = OrderKey {
            account: ACCOUNT.into(),
            key: KEY.into(),
            order: "5b0c7f4e-2a53-4c1e-9d8b-0f6a4e2d1c3b".into(),
        };
        assert_eq!(
            expected_key(&key).unwrap(),
            "c46b6345-3b68-8f72-b27b-0caa623f7096"
        );
        assert!(
            check_payments(&facts).figures[0]
                .contains("1 charge requests (0 sent again under a key)"),
            "{:?}",
            check_payments(&facts).figures
        );
    }

    #[test]
    fn a_blind_resend_and_a_second_handler_run_fail() {
        let mut facts = settled();
        let key = facts.charges[0].idempotency_key.clone();
        facts.requests.push(logged(4, "request", &key, None));
        facts.requests.push(logged(5, "request", &key, None));
        facts.requests.push(logged(6, "charge", &key, Some("o1")));
        let v = violations(&facts);
        assert!(
            v.iter()
                .any(|m| m.contains("#5 sent again without a lookup")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.contains("order o1") && m.contains("ran 2 times")),
            "{v:?}"
        );
    }

    #[test]
    fn a_second_charge_under_another_key_fails() {
        let mut facts = settled();
        let mut twin = facts.charges[0].clone();
        twin.id = "ch_2".into();
        twin.idempotency_key = "another".into();
        facts.charges.push(twin);
        let v = violations(&facts);
        assert!(v.iter().any(|m| m.contains("2 charges name it")), "{v:?}");
        assert!(
            v.iter()
                .any(|m| m.contains("ch_2") && m.contains("lacks an order")),
            "{v:?}"
        );
    }

    #[test]
    fn a_missing_charge_a_wrong_amount_and_a_pending_message_fail() {
        let mut facts = settled();
        facts.charges[0].amount_cents = 5990;
        assert!(violations(&facts)[0].contains("its charge ch_1 says order o1 5990"));
        let mut facts = settled();
        facts.charges.clear();
        facts.outbox[0].status = "pending".into();
        facts.shown.clear();
        let v = violations(&facts);
        assert!(v[0].contains("no charge at the provider"), "{v:?}");
        assert!(v.iter().any(|m| m.contains("is pending")), "{v:?}");
    }

    #[test]
    fn a_charge_under_a_key_not_derived_from_the_orders_fails() {
        let mut facts = settled();
        facts.charges[0].idempotency_key = KEY.into();
        facts.outbox[0].downstream_key = Some(KEY.into());
        let v = violations(&facts);
        assert!(
            v.iter().any(|m| m.contains("no charge at the provider")),
            "{v:?}"
        );
        assert!(v.iter().any(|m| m.contains("the core derives")), "{v:?}");
        assert!(v.iter().any(|m| m.contains("lacks an order")), "{v:?}");
    }

    #[test]
    fn dead_messages_and_a_stale_api_view_fail() {
        let mut facts = settled();
        facts.outbox[0].status = "dead".into();
        facts.outbox[0].last_error = Some("503".into());
        facts.shown.get_mut("o1").unwrap().status = "pending".into();
        let v = violations(&facts);
        assert!(
            v.iter().any(|m| m.contains("shows payment pending")),
            "{v:?}"
        );
        assert!(
            v.iter()
                .any(|m| m.contains("is dead after 2 attempts: 503")),
            "{v:?}"
        );
    }

    #[test]
    fn provider_log_lines_are_counted() {
        let log = "\
2026-12-03T12:00:00Z  WARN idemkey_server::payments::faults: fault: 503 before any effect
2026-12-03T12:00:00Z  WARN idemkey_server::payments::faults: fault: charge committed, closing the connection without a response
2026-12-03T12:00:00Z  WARN idemkey_provider_sim::faults: fault: effect committed, closing the connection without a response
2026-12-03T12:00:01Z  INFO idemkey_server::telemetry: request method=POST route=\"/charges\" status=201 latency_ms=3.1 replayed=false
2026-12-03T12:00:01Z  INFO idemkey_server::telemetry: request method=GET route=\"/charges/{key}\" status=200 latency_ms=1.0 replayed=true
";
        let counts = provider_log_counts(log);
        assert_eq!(counts["503 before any effect"], 1);
        assert_eq!(
            counts["lost responses (charge committed, connection closed)"],
            2
        );
        assert_eq!(counts["POST /charges 201"], 1);
        assert_eq!(counts["GET /charges/{key} 200 replayed"], 1);
    }
}
