//! What the `multi-step` checker reads, each from the system that holds
//! it: the order service's journal (`idemkey_flows`, `idemkey_steps`), the
//! purchase keys' records, the reservations, the stock and the step
//! messages of its outbox (SQL on its database); and the provider's
//! charges, confirmations, refunds and request log (its own API over its
//! own database). Plus the scenario's one instrument: a trigger that
//! counts take-overs, claims of a message whose earlier claim was never
//! settled (its lease ran out under a killed or stalled worker).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use idemkey_core::PURCHASE_OPERATION;
use serde_json::Value;

use crate::checker::pg_connect;

/// One execution of the journal.
#[derive(Clone, Debug, Default)]
pub struct FlowRow {
    /// Its id (the reservation's and the poll's).
    pub id: String,
    /// The key's scope (the account id).
    pub scope: String,
    /// The key's operation.
    pub operation: String,
    /// The key.
    pub key: String,
    /// running, compensating, done or failed.
    pub state: String,
    /// The step that failed for good.
    pub failed_step: Option<String>,
    /// The final answer's status.
    pub response_status: Option<i32>,
    /// The final answer's body.
    pub response_body: Option<String>,
}

/// One step recorded in the journal.
#[derive(Clone, Debug, Default)]
pub struct StepRow {
    /// Its execution.
    pub flow_id: String,
    /// The step's name.
    pub name: String,
    /// done, failed or compensated.
    pub state: String,
    /// The key it was sent under (external steps).
    pub downstream_key: Option<String>,
}

/// One purchase key's record.
#[derive(Clone, Debug, Default)]
pub struct RecordRow {
    /// Account id.
    pub scope: String,
    /// The key.
    pub key: String,
    /// completed, in_flight or tombstone.
    pub status: String,
    /// The stored answer's status.
    pub response_status: Option<i32>,
    /// The stored answer's body.
    pub response_body: Option<String>,
    /// The execution it started.
    pub resource_id: Option<String>,
}

/// One reservation of stock.
#[derive(Clone, Debug, Default)]
pub struct ReservationRow {
    /// Its id: the execution's.
    pub id: String,
    /// Account id.
    pub account: String,
    /// What it holds.
    pub sku: String,
    /// How many.
    pub quantity: i32,
    /// Its price.
    pub amount_cents: i64,
    /// reserved or released.
    pub state: String,
}

/// One step message (`flow-step`) of the outbox.
#[derive(Clone, Debug, Default)]
pub struct MessageRow {
    /// Its id.
    pub id: i64,
    /// The execution.
    pub resource_id: Option<String>,
    /// pending, delivered, failed or dead.
    pub status: String,
    /// Claims so far.
    pub attempts: i32,
    /// The last attempt's error.
    pub last_error: Option<String>,
}

/// One effect at the provider (a charge, a confirmation or a refund).
#[derive(Clone, Debug, Default)]
pub struct ProviderEffect {
    /// `ch_…`, `cf_…`, `re_…`.
    pub id: String,
    /// The key it was made under.
    pub key: String,
    /// The order (execution) it names.
    pub order_id: String,
    /// Its amount (charges, refunds).
    pub amount_cents: Option<i64>,
}

/// One row of the provider's request log (`GET /requests?effect=all`).
#[derive(Clone, Debug, Default)]
pub struct LogRow {
    /// Arrival order.
    pub seq: i64,
    /// request, lookup, or a run: charge, confirmation, refund.
    pub kind: String,
    /// charges, confirmations or refunds.
    pub effect: String,
    /// The key it named.
    pub key: String,
    /// The order of a run.
    pub order_id: Option<String>,
}

/// Everything the check reads.
#[derive(Clone, Debug, Default)]
pub struct StoreFacts {
    /// Every execution.
    pub flows: Vec<FlowRow>,
    /// Every step recorded.
    pub steps: Vec<StepRow>,
    /// Every purchase key's record.
    pub records: Vec<RecordRow>,
    /// Every reservation.
    pub reservations: Vec<ReservationRow>,
    /// Every step message.
    pub messages: Vec<MessageRow>,
    /// Stock by sku before the load.
    pub stock_before: BTreeMap<String, i64>,
    /// Stock by sku at the end.
    pub stock_after: BTreeMap<String, i64>,
    /// The provider's charges.
    pub charges: Vec<ProviderEffect>,
    /// The provider's confirmations.
    pub confirmations: Vec<ProviderEffect>,
    /// The provider's refunds.
    pub refunds: Vec<ProviderEffect>,
    /// The provider's request log, every effect.
    pub log: Vec<LogRow>,
    /// Take-overs counted by the trigger, by effect.
    pub takeovers: BTreeMap<String, i64>,
}

type Pg = tokio_postgres::Client;

fn query_err(e: tokio_postgres::Error) -> String {
    format!("check query: {e}")
}

/// Stock by sku.
pub async fn stock(url: &str) -> Result<BTreeMap<String, i64>, String> {
    let (client, conn) = pg_connect(url).await?;
    let stock = read_stock(&client).await;
    drop(client);
    let _ = conn.await;
    stock
}

async fn read_stock(client: &Pg) -> Result<BTreeMap<String, i64>, String> {
    Ok(client
        .query(
            "SELECT sku, sum(stock)::int8 FROM product_stock GROUP BY sku",
            &[],
        )
        .await
        .map_err(query_err)?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Installs the take-over counter: an `AFTER UPDATE` trigger on the
/// outbox that notes every claim made over an unsettled claim (settling
/// clears the lease; a claim sets a new one).
pub async fn install_takeover_counter(url: &str) -> Result<(), String> {
    let (client, conn) = pg_connect(url).await?;
    let done = client
        .batch_execute(
            "CREATE TABLE chaos_takeovers (id int8, effect text, attempts int4, \
                 at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE FUNCTION chaos_takeover() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF OLD.lease IS NOT NULL AND NEW.lease IS NOT NULL AND NEW.lease <> OLD.lease THEN
                     INSERT INTO chaos_takeovers (id, effect, attempts)
                     VALUES (NEW.id, NEW.effect, NEW.attempts);
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER chaos_takeover AFTER UPDATE OF lease ON outbox
                 FOR EACH ROW EXECUTE FUNCTION chaos_takeover();",
        )
        .await
        .map_err(|e| format!("take-over counter: {e}"));
    drop(client);
    let _ = conn.await;
    done
}

/// Waits until no execution runs or compensates and no step message is
/// pending; how long that took, or what was left after `limit`.
pub async fn settle(url: &str, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let (client, conn) = pg_connect(url).await?;
    let mut left = (-1i64, -1i64);
    while started.elapsed() < limit {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM idemkey_flows \
                         WHERE state IN ('running', 'compensating')), \
                        (SELECT count(*) FROM outbox \
                         WHERE effect = 'flow-step' AND status = 'pending')",
                &[],
            )
            .await
            .map_err(query_err)?;
        left = (row.get(0), row.get(1));
        if left == (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(client);
    let _ = conn.await;
    if left == (0, 0) {
        Ok(started.elapsed())
    } else {
        Err(format!(
            "{} executions still running or compensating and {} step messages pending \
             {} s after the load ended",
            left.0,
            left.1,
            limit.as_secs()
        ))
    }
}

/// The order service's side, by SQL on its database.
pub async fn order_side(url: &str, facts: &mut StoreFacts) -> Result<(), String> {
    let (client, conn) = pg_connect(url).await?;
    let read = read_order_side(&client, facts).await;
    drop(client);
    let _ = conn.await;
    read
}

async fn read_order_side(client: &Pg, facts: &mut StoreFacts) -> Result<(), String> {
    let body = |b: Option<Vec<u8>>| b.map(|b| String::from_utf8_lossy(&b).into_owned());
    for r in client
        .query(
            "SELECT id::text, scope, operation, key, state, failed_step, response_status, \
             response_body FROM idemkey_flows",
            &[],
        )
        .await
        .map_err(query_err)?
    {
        facts.flows.push(FlowRow {
            id: r.get(0),
            scope: r.get(1),
            operation: r.get(2),
            key: r.get(3),
            state: r.get(4),
            failed_step: r.get(5),
            response_status: r.get(6),
            response_body: body(r.get(7)),
        });
    }
    for r in client
        .query(
            "SELECT flow_id::text, name, state, downstream_key FROM idemkey_steps",
            &[],
        )
        .await
        .map_err(query_err)?
    {
        facts.steps.push(StepRow {
            flow_id: r.get(0),
            name: r.get(1),
            state: r.get(2),
            downstream_key: r.get(3),
        });
    }
    for r in client
        .query(
            "SELECT scope, key, status, response_status, response_body, resource_id \
             FROM idempotency_records WHERE operation = $1",
            &[&PURCHASE_OPERATION.as_str()],
        )
        .await
        .map_err(query_err)?
    {
        facts.records.push(RecordRow {
            scope: r.get(0),
            key: r.get(1),
            status: r.get(2),
            response_status: r.get(3),
            response_body: body(r.get(4)),
            resource_id: r.get(5),
        });
    }
    for r in client
        .query(
            "SELECT id::text, account_id::text, sku, quantity, amount_cents, state \
             FROM reservations",
            &[],
        )
        .await
        .map_err(query_err)?
    {
        facts.reservations.push(ReservationRow {
            id: r.get(0),
            account: r.get(1),
            sku: r.get(2),
            quantity: r.get(3),
            amount_cents: r.get(4),
            state: r.get(5),
        });
    }
    for r in client
        .query(
            "SELECT id, resource_id, status, attempts, last_error FROM outbox \
             WHERE effect = 'flow-step'",
            &[],
        )
        .await
        .map_err(query_err)?
    {
        facts.messages.push(MessageRow {
            id: r.get(0),
            resource_id: r.get(1),
            status: r.get(2),
            attempts: r.get(3),
            last_error: r.get(4),
        });
    }
    facts.stock_after = read_stock(client).await?;
    for r in client
        .query(
            "SELECT effect, count(*) FROM chaos_takeovers GROUP BY effect",
            &[],
        )
        .await
        .map_err(query_err)?
    {
        facts.takeovers.insert(r.get(0), r.get(1));
    }
    Ok(())
}

/// The provider's side, from its API: its effects and its request log.
pub async fn provider_side(
    provider: &str,
    secret: &str,
    facts: &mut StoreFacts,
) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let get = async |path: &str| -> Result<Value, String> {
        http.get(format!("{provider}{path}"))
            .bearer_auth(secret)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("GET {path}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("GET {path} body: {e}"))
    };
    let text = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let effects = |v: &Value, member: &str| -> Result<Vec<ProviderEffect>, String> {
        Ok(v[member]
            .as_array()
            .ok_or(format!("no {member} array"))?
            .iter()
            .map(|e| ProviderEffect {
                id: text(e, "id"),
                key: text(e, "idempotency_key"),
                order_id: text(e, "order_id"),
                amount_cents: e["amount_cents"].as_i64(),
            })
            .collect())
    };
    facts.charges = effects(&get("/charges").await?, "charges")?;
    facts.confirmations = effects(&get("/confirmations").await?, "confirmations")?;
    facts.refunds = effects(&get("/refunds").await?, "refunds")?;
    let log = get("/requests?effect=all").await?;
    facts.log = log["requests"]
        .as_array()
        .ok_or("GET /requests: no requests array")?
        .iter()
        .map(|r| LogRow {
            seq: r["seq"].as_i64().unwrap_or(-1),
            kind: text(r, "kind"),
            effect: text(r, "effect"),
            key: text(r, "idempotency_key"),
            order_id: r["order_id"].as_str().map(str::to_owned),
        })
        .collect();
    Ok(())
}
