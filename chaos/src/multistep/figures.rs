//! The `multi-step` run in figures, for the report: the clients'
//! exchanges, the provider's request log by effect (requests, resends,
//! lookups, handler runs, answers lost and found again by a lookup), the
//! step messages' attempts and the take-overs.

use std::collections::BTreeMap;

use super::facts::{LogRow, StoreFacts};
use super::load::{Ask, PurchaseHistory};

/// How one effect's calls went, from the provider's request log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EffectCalls {
    /// `POST`s received.
    pub requests: u64,
    /// `POST`s under a key already sent.
    pub resent: u64,
    /// Lookups (`GET /{effect}/{key}`).
    pub lookups: u64,
    /// Runs of the handler that reached the effect's write.
    pub runs: u64,
    /// Keys looked up after their effect was made: an answer lost (by the
    /// provider, a timeout, or a killed worker) and found again.
    pub found_by_lookup: u64,
}

/// The calls of each effect (`charges`, `confirmations`, `refunds`).
pub fn calls(log: &[LogRow]) -> BTreeMap<String, EffectCalls> {
    let mut rows: Vec<&LogRow> = log.iter().collect();
    rows.sort_by_key(|r| r.seq);
    // Per (effect, key): sent before, made, found after it was made.
    let mut keys: BTreeMap<(&str, &str), (bool, bool, bool)> = BTreeMap::new();
    let mut out: BTreeMap<String, EffectCalls> = BTreeMap::new();
    for r in rows {
        let calls = out.entry(r.effect.clone()).or_default();
        let (sent, made, found) = keys.entry((&r.effect, &r.key)).or_default();
        match r.kind.as_str() {
            "request" => {
                calls.requests += 1;
                calls.resent += u64::from(*sent);
                *sent = true;
            }
            "lookup" => {
                calls.lookups += 1;
                if *made && !*found {
                    *found = true;
                    calls.found_by_lookup += 1;
                }
            }
            _ => {
                calls.runs += 1;
                *made = true;
            }
        }
    }
    out
}

/// Take-overs in all.
pub fn takeovers(facts: &StoreFacts) -> i64 {
    facts.takeovers.values().sum()
}

/// The figures, one line each.
pub fn figures(history: &PurchaseHistory, facts: &StoreFacts) -> Vec<String> {
    let join = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (mut posts, mut polls) = (0, 0);
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for a in history.purchases.iter().flat_map(|p| &p.answers) {
        match a.ask {
            Ask::Post => posts += 1,
            Ask::Get => polls += 1,
        }
        let label = match (a.ask, a.status) {
            (Ask::Post, Some(s)) => s.to_string(),
            (Ask::Get, Some(s)) => format!("GET {s}"),
            (_, None) => "no answer".into(),
        };
        *statuses.entry(label).or_default() += 1;
    }
    let mut lines = vec![format!(
        "clients: {} purchases, {posts} sends and {polls} polls; answers {}",
        history.purchases.len(),
        join(&statuses)
    )];
    let calls = calls(&facts.log);
    let effects: Vec<String> = calls
        .iter()
        .map(|(effect, c)| {
            format!(
                "{effect}: {} requests ({} resent), {} lookups, {} runs, {} answers found by lookup",
                c.requests, c.resent, c.lookups, c.runs, c.found_by_lookup
            )
        })
        .collect();
    lines.push(format!(
        "provider: {} charges, {} confirmations, {} refunds; {}",
        facts.charges.len(),
        facts.confirmations.len(),
        facts.refunds.len(),
        effects.join("; ")
    ));
    let total: i64 = facts.messages.iter().map(|m| i64::from(m.attempts)).sum();
    let max = facts.messages.iter().map(|m| m.attempts).max().unwrap_or(0);
    let retried = facts.messages.iter().filter(|m| m.attempts > 1).count();
    lines.push(format!(
        "step messages: {} ({retried} claimed more than once, {total} claims, max {max}); \
         take-overs of an unsettled claim: {} ({})",
        facts.messages.len(),
        takeovers(facts),
        facts
            .takeovers
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, kind: &str, effect: &str, key: &str) -> LogRow {
        LogRow {
            seq,
            kind: kind.into(),
            effect: effect.into(),
            key: key.into(),
            order_id: None,
        }
    }

    #[test]
    fn a_lookup_after_the_run_is_an_answer_found_again() {
        let log = [
            row(1, "request", "charges", "k"),
            row(2, "charge", "charges", "k"),
            row(3, "lookup", "charges", "k"),
            row(4, "lookup", "charges", "k"),
            row(5, "request", "confirmations", "j"),
            row(6, "lookup", "confirmations", "j"),
            row(7, "request", "confirmations", "j"),
            row(8, "confirmation", "confirmations", "j"),
        ];
        let calls = calls(&log);
        assert_eq!(
            calls["charges"],
            EffectCalls {
                requests: 1,
                resent: 0,
                lookups: 2,
                runs: 1,
                found_by_lookup: 1
            }
        );
        assert_eq!(calls["confirmations"].resent, 1);
        assert_eq!(calls["confirmations"].found_by_lookup, 0);
    }
}
