//! The history checker: what the clients saw against what the database
//! holds. Pure: [`check`] takes the history and the database's rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use idemkey_core::{ORDER_OPERATION, Problem, ProblemCode};

use crate::driver::{AttemptKind, Final, History};

/// One idempotency record as stored.
#[derive(Clone, Debug)]
pub struct DbRecord {
    /// Account id.
    pub account: String,
    /// Operation id.
    pub operation: String,
    /// The key's characters.
    pub key: String,
    /// `completed`, `tombstone` or `in_flight`.
    pub status: String,
    /// The order it created.
    pub resource_id: Option<String>,
}

/// One order as stored.
#[derive(Clone, Debug)]
pub struct DbOrder {
    /// Order id.
    pub id: String,
    /// Account id.
    pub account: String,
}

/// The rows the checker needs.
#[derive(Clone, Debug, Default)]
pub struct DbFacts {
    /// Every idempotency record.
    pub records: Vec<DbRecord>,
    /// Every order.
    pub orders: Vec<DbOrder>,
}

/// A connection for the check's own queries; await the handle after
/// dropping the client.
pub(crate) async fn pg_connect(
    url: &str,
) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connect for the check: {e}"))?;
    let conn = tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok((client, conn))
}

/// Reads the facts from PostgreSQL.
pub async fn pg_facts(url: &str) -> Result<DbFacts, String> {
    let (client, conn) = pg_connect(url).await?;
    let err = |e: tokio_postgres::Error| format!("check query: {e}");
    let records = client
        .query(
            "SELECT scope, operation, key, status, resource_id FROM idempotency_records",
            &[],
        )
        .await
        .map_err(err)?
        .iter()
        .map(|r| DbRecord {
            account: r.get(0),
            operation: r.get(1),
            key: r.get(2),
            status: r.get(3),
            resource_id: r.get(4),
        })
        .collect();
    let orders = client
        .query("SELECT id::text, account_id::text FROM orders", &[])
        .await
        .map_err(err)?
        .iter()
        .map(|r| DbOrder {
            id: r.get(0),
            account: r.get(1),
        })
        .collect();
    drop(client);
    let _ = conn.await;
    Ok(DbFacts { records, orders })
}

/// Reads the facts from an SQLite file (same table and column names).
pub fn sqlite_facts(path: &std::path::Path) -> Result<DbFacts, String> {
    let err = |e: rusqlite::Error| format!("sqlite check: {e}");
    let db = rusqlite::Connection::open(path).map_err(err)?;
    let mut stmt = db
        .prepare("SELECT scope, operation, key, status, resource_id FROM idempotency_records")
        .map_err(err)?;
    let records = stmt
        .query_map([], |r| {
            Ok(DbRecord {
                account: text(r, 0)?,
                operation: r.get(1)?,
                key: r.get(2)?,
                status: r.get(3)?,
                resource_id: r.get(4)?,
            })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    let mut stmt = db
        .prepare("SELECT id, account_id FROM orders")
        .map_err(err)?;
    let orders = stmt
        .query_map([], |r| {
            Ok(DbOrder {
                id: text(r, 0)?,
                account: text(r, 1)?,
            })
        })
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    Ok(DbFacts { records, orders })
}

/// A text or blob column as text (ids may be stored either way).
fn text(row: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(i)? {
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Blob(b) if b.len() == 16 => uuid::Uuid::from_slice(b)
            .map(|u| u.to_string())
            .unwrap_or_default(),
        other => format!("{other:?}"),
    })
}

/// The checker's findings and the run's figures.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed of the run.
    pub seed: u64,
    /// Logical operations.
    pub ops: usize,
    /// HTTP exchanges, sends and lookups.
    pub attempts: usize,
    /// Lookups among them.
    pub lookups: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Faults asked for that did not apply (e.g. a drop-after-commit on a
    /// send answered 409, which committed nothing), by kind; not counted in
    /// [`Report::faults`].
    pub faults_not_applied: BTreeMap<String, u64>,
    /// Answers by status (`net` for none).
    pub statuses: BTreeMap<String, u64>,
    /// Final states of the operations.
    pub finals: BTreeMap<String, u64>,
    /// Orders no idempotency record points to (a second effect).
    pub duplicates: usize,
    /// Acknowledged orders missing from the database, or different from the
    /// one the key's record points to.
    pub lost_acks: usize,
    /// Operations that did not end with exactly one order.
    pub without_order: usize,
    /// Keys whose 2xx answers differ.
    pub divergent_2xx: usize,
    /// 5xx (or 409) answers that are not exactly a core problem document.
    pub leaked_5xx: usize,
    /// Answers that hit the client's timeout.
    pub timeouts: usize,
    /// Slowest answer.
    pub max_latency_ms: u64,
    /// Wall time of the load.
    pub elapsed: Duration,
    /// Every violation, with evidence (the first few of each kind).
    pub violations: Vec<String>,
    /// Remarks that are not violations.
    pub notes: Vec<String>,
    /// Set when the scenario could not run (e.g. missing backend).
    pub pending: Option<String>,
}

impl Report {
    /// No violation (and not pending).
    pub fn ok(&self) -> bool {
        self.violations.is_empty() && self.pending.is_none()
    }

    /// Adds to a fault counter.
    pub fn fault(&mut self, kind: &str, n: u64) {
        *self.faults.entry(kind.to_owned()).or_default() += n;
    }

    /// Total faults injected.
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// A human-readable table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let verdict = if let Some(reason) = &self.pending {
            format!("PENDING ({reason})")
        } else if self.ok() {
            "PASS".into()
        } else {
            format!("FAIL ({} violations)", self.violations.len())
        };
        let _ = writeln!(out, "== {} (seed {}): {verdict}", self.scenario, self.seed);
        if self.pending.is_some() {
            return out;
        }
        let join = |m: &BTreeMap<String, u64>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let rows = [
            ("operations", self.ops.to_string()),
            (
                "attempts",
                format!("{} ({} lookups)", self.attempts, self.lookups),
            ),
            (
                "faults injected",
                format!("{} ({})", self.total_faults(), join(&self.faults)),
            ),
            ("faults not applied", join(&self.faults_not_applied)),
            ("duplicates", self.duplicates.to_string()),
            ("lost acks", self.lost_acks.to_string()),
            ("ops without order", self.without_order.to_string()),
            ("divergent 2xx", self.divergent_2xx.to_string()),
            ("leaky 5xx/409", self.leaked_5xx.to_string()),
            (
                "timeouts (hangs)",
                format!("{} (slowest {} ms)", self.timeouts, self.max_latency_ms),
            ),
            ("final states", join(&self.finals)),
            ("answers", join(&self.statuses)),
            ("wall time", format!("{:.1} s", self.elapsed.as_secs_f64())),
        ];
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<18} {value}");
        }
        for note in &self.notes {
            let _ = writeln!(out, "  note: {note}");
        }
        for v in self.violations.iter().take(20) {
            let _ = writeln!(out, "  VIOLATION: {v}");
        }
        if self.violations.len() > 20 {
            let _ = writeln!(out, "  ... and {} more", self.violations.len() - 20);
        }
        out
    }
}

/// Whether `body` is exactly the core's problem document for its own code
/// and `Retry-After`: nothing from the server's internals can hide in it.
fn is_core_problem(body: &str, content_type: Option<&str>) -> bool {
    if content_type != Some(idemkey_core::PROBLEM_CONTENT_TYPE) {
        return false;
    }
    let Some(parsed) = Problem::from_json(body) else {
        return false;
    };
    let expected = match parsed.code.as_deref().and_then(ProblemCode::from_code) {
        Some(ProblemCode::ServiceUnavailable) => {
            Problem::service_unavailable(parsed.retry_after.unwrap_or(0))
        }
        Some(ProblemCode::IdempotencyRequestInProgress) => {
            Problem::in_progress(parsed.retry_after.unwrap_or(0))
        }
        _ => return false,
    };
    expected.to_json() == body
}

/// Checks `history` against `facts`. Statuses in `allowed` (besides 201)
/// are expected answers under the scenario's faults; `hangs_fail` makes
/// client timeouts violations.
pub fn check(scenario: &str, seed: u64, history: &History, facts: &DbFacts) -> Report {
    let mut r = Report {
        scenario: scenario.to_owned(),
        seed,
        ops: history.ops.len(),
        elapsed: history.elapsed,
        ..Report::default()
    };
    let order_operation = ORDER_OPERATION;
    let operation = order_operation.as_str();
    let records: HashMap<(&str, &str), &DbRecord> = facts
        .records
        .iter()
        .filter(|rec| rec.operation == operation)
        .map(|rec| ((rec.account.as_str(), rec.key.as_str()), rec))
        .collect();
    let orders: HashMap<&str, &DbOrder> = facts.orders.iter().map(|o| (o.id.as_str(), o)).collect();
    let referenced: HashSet<&str> = facts
        .records
        .iter()
        .filter_map(|rec| rec.resource_id.as_deref())
        .collect();

    // A second effect: an order no key's record points to.
    for order in &facts.orders {
        if !referenced.contains(order.id.as_str()) {
            r.duplicates += 1;
            push(
                &mut r.violations,
                format!(
                    "duplicate: order {} (account {}) has no idempotency record",
                    order.id, order.account
                ),
            );
        }
    }

    let mut keys_seen = HashSet::new();
    for op in &history.ops {
        let account = &history.accounts[op.account].id;
        keys_seen.insert((account.as_str(), op.key.as_str()));
        *r.finals.entry(op.final_state.label()).or_default() += 1;
        let mut bodies_2xx = HashSet::new();
        for a in &op.attempts {
            r.attempts += 1;
            if a.kind == AttemptKind::Lookup {
                r.lookups += 1;
            }
            if let Some(fault) = a.injected {
                match a.status {
                    // The response was lost: the fault happened.
                    None => r.fault(fault, 1),
                    // A first send of a fresh key answered 2xx: it committed
                    // and the answer that should have been lost arrived.
                    Some(s @ 200..=299) => push(
                        &mut r.violations,
                        format!(
                            "{fault} send for key {} answered {s}: the fault did not fire",
                            op.key
                        ),
                    ),
                    // Nothing committed (409, 503): nothing to lose.
                    Some(_) => *r.faults_not_applied.entry(fault.to_owned()).or_default() += 1,
                }
            }
            r.max_latency_ms = r.max_latency_ms.max(a.elapsed_ms);
            if a.timed_out {
                r.timeouts += 1;
                push(
                    &mut r.violations,
                    format!(
                        "hang: no answer within the client timeout ({} ms) from server {} \
                         (process {}) for key {}, sent at {} UTC{}",
                        a.elapsed_ms,
                        a.server,
                        a.incarnation,
                        op.key,
                        crate::driver::utc_time_of_day(a.sent_ms),
                        a.injected
                            .map(|f| format!(", a send that asked for {f}"))
                            .unwrap_or_default()
                    ),
                );
            }
            let label = a.status.map_or("net".to_owned(), |s| s.to_string());
            *r.statuses.entry(label).or_default() += 1;
            let Some(status) = a.status else { continue };
            if a.kind == AttemptKind::Lookup {
                continue;
            }
            match status {
                200..=299 => {
                    bodies_2xx.insert(a.body.as_str());
                }
                409 | 503 => {
                    if !is_core_problem(&a.body, a.content_type.as_deref()) {
                        r.leaked_5xx += 1;
                        push(
                            &mut r.violations,
                            format!("not a core problem ({status}): {:?}", clip(&a.body)),
                        );
                    } else if a.retry_after.is_none() {
                        push(
                            &mut r.violations,
                            format!("{status} without Retry-After for key {}", op.key),
                        );
                    }
                }
                s if s >= 500 => {
                    r.leaked_5xx += 1;
                    push(
                        &mut r.violations,
                        format!(
                            "unexpected {s} from server {}: {:?}",
                            a.server,
                            clip(&a.body)
                        ),
                    );
                }
                s => push(
                    &mut r.violations,
                    format!("unexpected {s} for key {}: {:?}", op.key, clip(&a.body)),
                ),
            }
        }
        if bodies_2xx.len() > 1 {
            r.divergent_2xx += 1;
            push(
                &mut r.violations,
                format!("key {}: {} different 2xx bodies", op.key, bodies_2xx.len()),
            );
        }

        let record = records.get(&(account.as_str(), op.key.as_str()));
        let stored_order = record
            .and_then(|rec| rec.resource_id.as_deref())
            .filter(|id| orders.get(id).is_some_and(|o| &o.account == account));
        match stored_order {
            Some(_) if record.is_some_and(|rec| rec.status == "in_flight") => {
                r.without_order += 1;
                push(
                    &mut r.violations,
                    format!("key {}: record still in flight", op.key),
                );
            }
            Some(_) => {}
            None => {
                r.without_order += 1;
                push(
                    &mut r.violations,
                    format!(
                        "key {} ({}): no order in the database (record: {})",
                        op.key,
                        op.final_state.label(),
                        record.map_or("none".to_owned(), |rec| rec.status.clone())
                    ),
                );
            }
        }
        for seen in [&op.acked_order, &op.reconciled_order]
            .into_iter()
            .flatten()
        {
            if stored_order != Some(seen.as_str()) {
                r.lost_acks += 1;
                push(
                    &mut r.violations,
                    format!(
                        "lost ack: key {} was answered with order {seen}, the database holds {:?}",
                        op.key, stored_order
                    ),
                );
            }
        }
        if matches!(op.final_state, Final::Stopped(_) | Final::Unfinished) {
            push(
                &mut r.violations,
                format!(
                    "key {} ended {} after {} attempts",
                    op.key,
                    op.final_state.label(),
                    op.attempts.len()
                ),
            );
        }
    }
    let foreign = records
        .keys()
        .filter(|(account, key)| !keys_seen.contains(&(*account, *key)))
        .count();
    if foreign > 0 {
        r.notes.push(format!(
            "{foreign} records for keys no client of this run sent"
        ));
    }
    r
}

fn clip(s: &str) -> String {
    s.chars().take(300).collect()
}

/// Keeps evidence short: at most 50 violations are stored.
pub(crate) fn push(v: &mut Vec<String>, message: String) {
    if v.len() < 50 {
        v.push(message);
    } else if v.len() == 50 {
        v.push("(further violations not listed)".into());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::driver::{Account, Attempt, OpHistory};

    pub(crate) fn attempt(status: u16, body: &str) -> Attempt {
        Attempt {
            kind: AttemptKind::Post,
            server: 0,
            incarnation: 1,
            status: Some(status),
            error: None,
            timed_out: false,
            body: body.into(),
            content_type: Some("application/json".into()),
            retry_after: None,
            replayed: false,
            elapsed_ms: 1,
            sent_ms: 0,
            injected: None,
        }
    }

    pub(crate) fn history(attempts: Vec<Attempt>, acked: &str) -> History {
        History {
            accounts: vec![Account {
                id: "a".into(),
                token: "t".into(),
            }],
            ops: vec![OpHistory {
                account: 0,
                key: "k".into(),
                body: String::new(),
                attempts,
                final_state: Final::Created,
                acked_order: Some(acked.into()),
                reconciled_order: None,
            }],
            elapsed: Duration::ZERO,
        }
    }

    pub(crate) fn facts(orders: &[&str], record_points_to: &str) -> DbFacts {
        DbFacts {
            records: vec![DbRecord {
                account: "a".into(),
                operation: ORDER_OPERATION.as_str().into(),
                key: "k".into(),
                status: "completed".into(),
                resource_id: Some(record_points_to.into()),
            }],
            orders: orders
                .iter()
                .map(|id| DbOrder {
                    id: (*id).into(),
                    account: "a".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_clean_history_passes() {
        let h = history(vec![attempt(201, r#"{"id":"o1"}"#)], "o1");
        let r = check("t", 0, &h, &facts(&["o1"], "o1"));
        assert!(r.ok(), "{:?}", r.violations);
    }

    #[test]
    fn a_second_order_is_a_duplicate() {
        let h = history(vec![attempt(201, r#"{"id":"o1"}"#)], "o1");
        let r = check("t", 0, &h, &facts(&["o1", "o2"], "o1"));
        assert_eq!(r.duplicates, 1);
        assert!(!r.ok());
    }

    #[test]
    fn an_acknowledged_order_missing_is_lost() {
        let h = history(vec![attempt(201, r#"{"id":"o1"}"#)], "o1");
        let r = check("t", 0, &h, &facts(&["o2"], "o2"));
        assert_eq!(r.lost_acks, 1);
    }

    #[test]
    fn a_lost_response_counts_only_when_no_answer_came() {
        let mut lost = attempt(0, "");
        lost.status = None;
        lost.error = Some("connection closed".into());
        lost.injected = Some("drop-after-commit");
        let mut busy = attempt(409, "");
        busy.injected = Some("drop-after-commit");
        let h = history(vec![lost, busy, attempt(201, r#"{"id":"o1"}"#)], "o1");
        let r = check("t", 0, &h, &facts(&["o1"], "o1"));
        assert_eq!(r.faults.get("drop-after-commit"), Some(&1));
        assert_eq!(r.faults_not_applied.get("drop-after-commit"), Some(&1));
    }

    #[test]
    fn a_2xx_to_a_drop_after_commit_send_is_a_violation() {
        let mut answered = attempt(201, r#"{"id":"o1"}"#);
        answered.injected = Some("drop-after-commit");
        let h = history(vec![answered], "o1");
        let r = check("t", 0, &h, &facts(&["o1"], "o1"));
        assert_eq!(r.total_faults(), 0);
        assert!(
            r.violations.iter().any(|v| v.contains("did not fire")),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn differing_2xx_bodies_and_leaky_503s_are_caught() {
        let mut leaky = attempt(503, r#"{"error":"connection refused at 10.0.0.1"}"#);
        leaky.retry_after = Some("1".into());
        let good = {
            let mut a = attempt(503, &Problem::service_unavailable(1).to_json());
            a.content_type = Some("application/problem+json".into());
            a.retry_after = Some("1".into());
            a
        };
        let h = history(
            vec![
                leaky,
                good,
                attempt(201, r#"{"id":"o1"}"#),
                attempt(201, r#"{"id":"o1","x":1}"#),
            ],
            "o1",
        );
        let r = check("t", 0, &h, &facts(&["o1"], "o1"));
        assert_eq!((r.leaked_5xx, r.divergent_2xx), (1, 1));
    }
}
