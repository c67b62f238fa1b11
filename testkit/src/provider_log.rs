//! The payment provider simulator's request log (`GET /requests` of
//! `idemkey-server provider`) held to the delivery discipline: at most one
//! run of the charge handler per order, and a lookup of a key before every
//! charge request sent again under it. The provider's charges table keeps
//! one charge per key, so a client that sends a charge twice is invisible
//! there; the log shows it.

use std::collections::BTreeMap;

/// One row of the log, as `GET /requests` lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoggedRequest {
    /// Arrival order.
    pub seq: i64,
    /// `request` (a `POST /charges`), `lookup` (a `GET /charges/{key}`) or
    /// `charge` (a run of the charge handler).
    pub kind: String,
    /// The key it named.
    pub idempotency_key: String,
    /// The order of a `charge` run.
    pub order_id: Option<String>,
}

/// The rows of a `GET /requests` answer (`{"requests": [...]}`); `None`
/// if it is not such an answer.
pub fn parse_request_log(body: &serde_json::Value) -> Option<Vec<LoggedRequest>> {
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().map(str::to_owned);
    body["requests"]
        .as_array()?
        .iter()
        .map(|r| {
            Some(LoggedRequest {
                seq: r["seq"].as_i64()?,
                kind: text(r, "kind")?,
                idempotency_key: text(r, "idempotency_key")?,
                order_id: text(r, "order_id"),
            })
        })
        .collect()
}

/// The rows of a `GET /requests?effect=all` answer, by effect (`charges`,
/// `confirmations`, `refunds`): each effect's handler runs (`charge`,
/// `confirmation`, `refund`) are named `charge`, so that
/// [`request_log_violations`] and [`counts_by_key`] hold every effect to
/// the discipline they hold the charges to (the fault suite's checker
/// reads the log the same way). `None` if it is not such an answer.
pub fn request_log_by_effect(
    body: &serde_json::Value,
) -> Option<BTreeMap<String, Vec<LoggedRequest>>> {
    let mut by_effect: BTreeMap<String, Vec<LoggedRequest>> = BTreeMap::new();
    for r in body["requests"].as_array()? {
        let kind = match r["kind"].as_str()? {
            "request" => "request",
            "lookup" => "lookup",
            _ => "charge",
        };
        by_effect
            .entry(r["effect"].as_str()?.to_owned())
            .or_default()
            .push(LoggedRequest {
                seq: r["seq"].as_i64()?,
                kind: kind.to_owned(),
                idempotency_key: r["idempotency_key"].as_str()?.to_owned(),
                order_id: r["order_id"].as_str().map(str::to_owned),
            });
    }
    Some(by_effect)
}

/// How often each kind of row occurs for one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyCounts {
    /// Charge requests received.
    pub requests: u64,
    /// Lookups received.
    pub lookups: u64,
    /// Runs of the charge handler.
    pub charges: u64,
}

/// The counts of each key in `log`.
pub fn counts_by_key(log: &[LoggedRequest]) -> BTreeMap<&str, KeyCounts> {
    let mut counts: BTreeMap<&str, KeyCounts> = BTreeMap::new();
    for row in log {
        let c = counts.entry(row.idempotency_key.as_str()).or_default();
        match row.kind.as_str() {
            "request" => c.requests += 1,
            "lookup" => c.lookups += 1,
            _ => c.charges += 1,
        }
    }
    counts
}

/// Every breach of the discipline in `log` (in any order; sorted by `seq`
/// here), each with its evidence: an order whose charge handler ran more
/// than once, and a charge request sent again under a key without a lookup
/// of that key since the previous one.
pub fn request_log_violations(log: &[LoggedRequest]) -> Vec<String> {
    let mut rows: Vec<&LoggedRequest> = log.iter().collect();
    rows.sort_by_key(|r| r.seq);
    let mut violations = Vec::new();
    let mut runs: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    // Per key: whether a request was seen, and a lookup since the last one.
    let mut state: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for row in rows {
        match row.kind.as_str() {
            "charge" => runs
                .entry(row.order_id.as_deref().unwrap_or("(no order)"))
                .or_default()
                .push(row.seq),
            "lookup" => state.entry(&row.idempotency_key).or_default().1 = true,
            "request" => {
                let (sent, looked_up) = state.entry(&row.idempotency_key).or_default();
                if *sent && !*looked_up {
                    violations.push(format!(
                        "key {}: charge request #{} sent again without a lookup since the previous one",
                        row.idempotency_key, row.seq
                    ));
                }
                (*sent, *looked_up) = (true, false);
            }
            other => violations.push(format!("row #{}: unknown kind {other:?}", row.seq)),
        }
    }
    for (order, seqs) in runs {
        if seqs.len() > 1 {
            violations.push(format!(
                "order {order}: the provider's charge handler ran {} times (rows {seqs:?})",
                seqs.len()
            ));
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, kind: &str, key: &str, order: Option<&str>) -> LoggedRequest {
        LoggedRequest {
            seq,
            kind: kind.into(),
            idempotency_key: key.into(),
            order_id: order.map(str::to_owned),
        }
    }

    #[test]
    fn a_resend_after_a_lookup_and_one_run_per_order_pass() {
        let log = [
            row(1, "request", "k", None),
            row(2, "charge", "k", Some("o")),
            row(3, "lookup", "k", None),
            row(4, "request", "k", None),
            row(5, "request", "j", None),
        ];
        assert_eq!(request_log_violations(&log), Vec::<String>::new());
        let counts = counts_by_key(&log);
        assert_eq!(
            counts["k"],
            KeyCounts {
                requests: 2,
                lookups: 1,
                charges: 1
            }
        );
    }

    #[test]
    fn an_answer_is_parsed_and_a_malformed_one_refused() {
        let body = serde_json::json!({"requests": [
            {"seq": 1, "kind": "charge", "idempotency_key": "k", "order_id": "o"},
            {"seq": 2, "kind": "lookup", "idempotency_key": "k", "order_id": null},
        ]});
        assert_eq!(
            parse_request_log(&body),
            Some(vec![
                row(1, "charge", "k", Some("o")),
                row(2, "lookup", "k", None)
            ])
        );
        assert_eq!(parse_request_log(&serde_json::json!({"charges": []})), None);
        assert_eq!(
            parse_request_log(&serde_json::json!({"requests": [{"seq": 1}]})),
            None
        );
    }

    #[test]
    fn every_effect_is_read_with_its_runs_named_charge() {
        let body = serde_json::json!({"requests": [
            {"seq": 1, "kind": "request", "effect": "charges", "idempotency_key": "k", "order_id": null},
            {"seq": 2, "kind": "charge", "effect": "charges", "idempotency_key": "k", "order_id": "o"},
            {"seq": 3, "kind": "request", "effect": "confirmations", "idempotency_key": "j", "order_id": null},
            {"seq": 4, "kind": "confirmation", "effect": "confirmations", "idempotency_key": "j", "order_id": "o"},
            {"seq": 5, "kind": "request", "effect": "confirmations", "idempotency_key": "j", "order_id": null},
        ]});
        let by_effect = request_log_by_effect(&body).expect("a log");
        assert_eq!(
            by_effect["charges"],
            [
                row(1, "request", "k", None),
                row(2, "charge", "k", Some("o"))
            ]
        );
        let confirmations = &by_effect["confirmations"];
        assert_eq!(confirmations[1], row(4, "charge", "j", Some("o")));
        // The confirmation sent again without a lookup is caught.
        let v = request_log_violations(confirmations);
        assert!(v.len() == 1 && v[0].contains("#5"), "{v:?}");
        assert_eq!(
            request_log_by_effect(&serde_json::json!({"requests": [{"seq": 1, "kind": "lookup"}]})),
            None
        );
    }

    #[test]
    fn a_blind_resend_and_a_second_run_fail() {
        let log = [
            row(1, "request", "k", None),
            row(2, "charge", "k", Some("o")),
            row(3, "lookup", "k", None),
            row(4, "request", "k", None),
            row(5, "request", "k", None),
            row(6, "charge", "k", Some("o")),
        ];
        let v = request_log_violations(&log);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("#5"), "{v:?}");
        assert!(
            v[1].contains("order o") && v[1].contains("2 times"),
            "{v:?}"
        );
    }
}
