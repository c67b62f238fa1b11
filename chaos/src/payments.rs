//! The `payments` scenario (issue 12): orders placed with client retries
//! on two servers (`--outbox-workers 0`), their charges delivered by two
//! `idemkey-server worker` processes to the payment provider simulator,
//! which fails 10 % of calls with 503 and loses 20 % of its successful
//! charges' responses. During the load the workers are killed with SIGKILL
//! and restarted at seeded random times, and the provider is killed and
//! restarted once. Once the outbox settles, [`check_payments`] holds the
//! run to the promise: every order exactly one charge, with its amount,
//! under its derived key; no charge without an order; nothing pending,
//! failed or dead; and, from the provider's request log, at most one run
//! of the charge handler per order and a lookup before every resend.

use std::collections::HashMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use idemkey_testkit::{PgCluster, parse_request_log};

use crate::checker::{Report, pg_connect};
use crate::driver::Account;
use crate::kit::{
    Size, Tally, accounts, e, finish, load_config, load_with, runtime, string_args, wait_healthy,
};
use crate::payments_check::{
    CHARGE, OrderKey, OutboxRow, PaidOrder, PaymentFacts, ProviderCharge, ShownPayment,
    check_payments, provider_log_counts,
};
use crate::rng::Rng;
use crate::servers::{Role, ServerSet, server_bin, tail};

/// The provider's fault rates the issue asks for.
const FAIL_RATE: &str = "0.1";
const LOSE_RATE: &str = "0.2";

/// Runs the scenario; `dir` keeps the processes' logs.
pub fn run(size: Size, seed: u64, dir: &Path) -> Result<Report, String> {
    let bin = server_bin().map_err(e("server binary"))?;
    let pg = PgCluster::start().map_err(e("PostgreSQL"))?;
    let url = pg.create_database("chaos").map_err(e("createdb"))?;
    let provider_url = pg.create_database("provider").map_err(e("createdb"))?;
    let accounts = accounts(&bin, &url, 2)?;
    let mut rng = Rng::new(seed ^ 0x7061_796d);
    let secret = format!("chaos-payments-{:016x}", rng.next_u64());
    let provider_env = |incarnation: u64| {
        vec![
            ("RUST_LOG".to_owned(), "info".to_owned()),
            (
                "IDEMKEY_PROVIDER_FAULT_SEED".to_owned(),
                (seed ^ incarnation).to_string(),
            ),
        ]
    };
    let provider_args = string_args(&[
        "--token",
        &secret,
        "--fail-rate",
        FAIL_RATE,
        "--lose-rate",
        LOSE_RATE,
    ]);
    let mut provider = ServerSet::start_role(
        Role::Provider,
        &bin,
        &provider_url,
        1,
        &provider_args,
        dir,
        vec![provider_env(0)],
    )
    .map_err(e("provider"))?;
    let payments_url = provider.bases().remove(0);
    // Short leases and timeouts, so a killed worker's messages and the
    // provider's restart settle within seconds. The budget outlasts the
    // provider's own claim on a key (its idempotency layer's 30 s lease):
    // a charge whose call the worker gave up on (1 s) or that the
    // provider's kill interrupted answers 409 in progress until that lease
    // ends, and each attempt waits about a second (Retry-After 1, jitter
    // up to 2 s), so 30 attempts could run out (26 were seen).
    let worker_args = string_args(&[
        "--payments-url",
        &payments_url,
        "--payments-token",
        &secret,
        "--payments-timeout",
        "1s",
        "--outbox-lease",
        "4s",
        "--outbox-retry-base",
        "100ms",
        "--outbox-retry-cap",
        "2s",
        "--outbox-max-attempts",
        "60",
        "--outbox-poll",
        "100ms",
    ]);
    let info = vec![("RUST_LOG".to_owned(), "info".to_owned())];
    let mut workers = ServerSet::start_role(
        Role::Worker,
        &bin,
        &url,
        2,
        &worker_args,
        dir,
        vec![info.clone(), info],
    )
    .map_err(e("workers"))?;
    let server_args = string_args(&["--test-faults", "--outbox-workers", "0"]);
    let mut servers = ServerSet::start(&bin, &url, 2, &server_args, dir).map_err(e("servers"))?;
    let rt = runtime()?;
    let bases = servers.bases();
    wait_healthy(&rt, &bases);
    let mut cfg = load_config(size, seed);
    // A paced load (a few hundred orders in the small size, thousands in
    // the large) over the fault schedule: the outbox drains slower than a
    // free-running load places orders, which would only lengthen settling.
    cfg.clients = size.pick(2, 4);
    cfg.op_pause = Duration::from_millis(size.pick(25, 20));
    cfg.min_ops = size.pick(300, 5_000);
    cfg.lose_response_rate = 0.03;
    let kills = size.pick(5, 40);
    let provider_round = rng.range(1, kills - 2);
    let (history, mut tally) = load_with(
        &rt,
        cfg,
        bases.clone(),
        servers.incarnations(),
        accounts.clone(),
        |flags| {
            let mut t = Tally::default();
            for round in 0..kills {
                if !flags.sleep(Duration::from_millis(rng.range(300, 1_200))) {
                    break;
                }
                // Now and then both workers at once: nobody delivers until
                // one is back, and both leases must run out.
                let victims = if rng.chance(0.2) {
                    vec![0, 1]
                } else {
                    vec![rng.range(0, 1) as usize]
                };
                for &w in &victims {
                    match workers.kill9(w) {
                        Ok(true) => {
                            t.add("worker-kill-9");
                            t.at(format!("kill -9 of worker {w}"));
                        }
                        Ok(false) => {}
                        Err(err) => t.violations.push(format!("kill -9 failed: {err}")),
                    }
                }
                if round == provider_round {
                    restart_provider(&mut provider, &mut t, &mut rng, provider_env(1));
                }
                thread::sleep(Duration::from_millis(rng.range(0, 600)));
                for &w in &victims {
                    match workers.spawn(w) {
                        Ok(()) => t.at(format!("worker {w} started again")),
                        Err(err) => t.violations.push(format!("worker restart failed: {err}")),
                    }
                }
            }
            // The schedule is over: the load may end; until it does, the
            // servers that exit on their own (drop-after-commit) come back.
            flags.schedule_over();
            while flags.sleep(Duration::from_millis(50)) {
                servers.revive();
            }
            t
        },
    );
    // Every process the payments need runs while the outbox drains.
    servers.revive();
    let settle_limit = Duration::from_secs(size.pick(120, 600));
    let settled = rt.block_on(settle(&url, settle_limit));
    match &settled {
        Ok(waited) => tally.notes.push(format!(
            "the outbox settled {:.1} s after the load ended",
            waited.as_secs_f64()
        )),
        Err(err) => tally.violations.push(err.clone()),
    }
    let facts = rt.block_on(payment_facts(
        &url,
        &payments_url,
        &secret,
        &bases,
        &accounts,
    ));
    evidence(&mut tally, &workers, &provider);
    if workers.unexpected_exits > 0 || provider.unexpected_exits > 0 {
        tally.violations.push(format!(
            "{} worker and {} provider exits on their own (logs: {})",
            workers.unexpected_exits,
            provider.unexpected_exits,
            dir.display()
        ));
    }
    let order_facts = rt.block_on(crate::checker::pg_facts(&url));
    drop(servers);
    drop(workers);
    drop(provider);
    let mut report = finish(&history, order_facts, tally);
    match facts {
        Ok(facts) => {
            let checked = check_payments(&facts);
            report.notes.extend(checked.figures);
            if checked.by_status.keys().any(|s| s != "delivered") {
                report.notes.push(outbox_list(&bin, &url));
            }
            report.violations.extend(checked.violations);
        }
        Err(err) => report
            .violations
            .push(format!("cannot read the payments: {err}")),
    }
    Ok(report)
}

/// `kill -9` of the provider, and a start again (same port) after a pause
/// in which the workers' calls are refused.
fn restart_provider(
    provider: &mut ServerSet,
    t: &mut Tally,
    rng: &mut Rng,
    env: Vec<(String, String)>,
) {
    match provider.kill9(0) {
        Ok(true) => {
            t.add("provider-kill-9");
            t.at("kill -9 of the provider".into());
        }
        Ok(false) => t.violations.push("the provider was not running".into()),
        Err(err) => t.violations.push(format!("kill -9 of the provider: {err}")),
    }
    thread::sleep(Duration::from_millis(rng.range(200, 1_500)));
    provider.set_env(0, env);
    match provider.spawn(0) {
        Ok(()) => t.at("the provider listens again".into()),
        Err(err) => t.violations.push(format!("provider restart failed: {err}")),
    }
}

/// Waits until no outbox message is pending; how long that took, or why
/// it did not happen within `limit`.
async fn settle(url: &str, limit: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    let (client, conn) = pg_connect(url).await?;
    let mut pending = -1i64;
    while started.elapsed() < limit {
        pending = client
            .query_one("SELECT count(*) FROM outbox WHERE status = 'pending'", &[])
            .await
            .map_err(|e| format!("outbox count: {e}"))?
            .get(0);
        if pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(client);
    let _ = conn.await;
    if pending == 0 {
        Ok(started.elapsed())
    } else {
        Err(format!(
            "{pending} payments still pending {} s after the load ended",
            limit.as_secs()
        ))
    }
}

/// Reads the orders, keys and outbox (SQL), the provider's charges
/// (`GET /charges`) and request log (`GET /requests`), and each order's
/// payment (`GET /orders/{id}`).
async fn payment_facts(
    url: &str,
    provider: &str,
    secret: &str,
    bases: &[String],
    accounts: &[Account],
) -> Result<PaymentFacts, String> {
    let mut facts = order_side(url).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .map_err(|e| e.to_string())?;
    let get = async |path: &str| -> Result<serde_json::Value, String> {
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
    let listed = get("/charges").await?;
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    facts.charges = listed["charges"]
        .as_array()
        .ok_or("GET /charges: no charges array")?
        .iter()
        .map(|c| ProviderCharge {
            id: text(c, "id"),
            idempotency_key: text(c, "idempotency_key"),
            order_id: text(c, "order_id"),
            amount_cents: c["amount_cents"].as_i64().unwrap_or(-1),
            currency: text(c, "currency"),
        })
        .collect();
    facts.requests =
        parse_request_log(&get("/requests").await?).ok_or("GET /requests: not a request log")?;
    let tokens: HashMap<&str, &str> = accounts
        .iter()
        .map(|a| (a.id.as_str(), a.token.as_str()))
        .collect();
    let mut reads = tokio::task::JoinSet::new();
    for (i, chunk) in facts.orders.chunks(facts.orders.len() / 8 + 1).enumerate() {
        let wanted: Vec<(String, String)> = chunk
            .iter()
            .map(|o| {
                (
                    o.id.clone(),
                    tokens.get(o.account.as_str()).unwrap_or(&"").to_string(),
                )
            })
            .collect();
        let (http, base) = (http.clone(), bases[i % bases.len()].clone());
        reads.spawn(async move {
            let mut shown = Vec::new();
            for (id, token) in wanted {
                let payment = shown_payment(&http, &base, &id, &token).await;
                shown.push((id, payment));
            }
            shown
        });
    }
    while let Some(done) = reads.join_next().await {
        facts
            .shown
            .extend(done.map_err(|e| format!("order reads: {e}"))?);
    }
    Ok(facts)
}

async fn shown_payment(http: &reqwest::Client, base: &str, id: &str, token: &str) -> ShownPayment {
    let read = async {
        let response = http
            .get(format!("{base}/orders/{id}"))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{status}: {body}"));
        }
        Ok(ShownPayment {
            status: body["payment"]["status"]
                .as_str()
                .unwrap_or("(none)")
                .to_owned(),
            charge_id: body["payment"]["charge_id"].as_str().map(str::to_owned),
        })
    };
    read.await.unwrap_or_else(|err| ShownPayment {
        status: format!("unreadable ({err})"),
        charge_id: None,
    })
}

/// The order service's rows, by direct SQL.
async fn order_side(url: &str) -> Result<PaymentFacts, String> {
    let (client, conn) = pg_connect(url).await?;
    let err = |e: tokio_postgres::Error| format!("check query: {e}");
    let orders = client
        .query(
            "SELECT id::text, account_id::text, amount_cents, currency FROM orders",
            &[],
        )
        .await
        .map_err(err)?
        .iter()
        .map(|r| PaidOrder {
            id: r.get(0),
            account: r.get(1),
            amount_cents: r.get(2),
            currency: r.get(3),
        })
        .collect();
    let keys = client
        .query(
            "SELECT scope, key, resource_id FROM idempotency_records \
             WHERE operation = $1 AND resource_id IS NOT NULL",
            &[&idemkey_core::ORDER_OPERATION.as_str()],
        )
        .await
        .map_err(err)?
        .iter()
        .map(|r| OrderKey {
            account: r.get(0),
            key: r.get(1),
            order: r.get(2),
        })
        .collect();
    let outbox = client
        .query(
            "SELECT id, scope, operation, key, effect, resource_id, status, attempts, \
             downstream_key, result, last_error FROM outbox WHERE effect = $1",
            &[&CHARGE],
        )
        .await
        .map_err(err)?
        .iter()
        .map(|r| OutboxRow {
            id: r.get(0),
            scope: r.get(1),
            operation: r.get(2),
            key: r.get(3),
            effect: r.get(4),
            resource_id: r.get(5),
            status: r.get(6),
            attempts: r.get(7),
            downstream_key: r.get(8),
            result: r.get(9),
            last_error: r.get(10),
        })
        .collect();
    drop(client);
    let _ = conn.await;
    Ok(PaymentFacts {
        orders,
        keys,
        outbox,
        ..PaymentFacts::default()
    })
}

/// What the provider and the workers logged: lost responses, 503s, the
/// provider's answers by route and status, the workers' lost claims.
fn evidence(t: &mut Tally, workers: &ServerSet, provider: &ServerSet) {
    let log = std::fs::read_to_string(provider.log(0)).unwrap_or_default();
    let counts = provider_log_counts(&log);
    t.notes.push(format!(
        "provider: {}",
        counts
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut lost_claims = 0;
    for w in 0..workers.len() {
        let log = std::fs::read_to_string(workers.log(w)).unwrap_or_default();
        lost_claims += log.matches("outbox claim lost before settling").count();
    }
    t.notes.push(format!(
        "workers: {lost_claims} claims lost before settling (a lease ran out under a live worker)"
    ));
    if log.contains("panicked") {
        t.violations.push(format!(
            "the provider panicked:\n{}",
            tail(provider.log(0), 2_000)
        ));
    }
}

/// `idemkey-server outbox list` of the messages that did not settle as
/// delivered, for the report.
fn outbox_list(bin: &Path, url: &str) -> String {
    let mut out = String::from("outbox list (not delivered):");
    for status in ["pending", "failed", "dead"] {
        match std::process::Command::new(bin)
            .args(["outbox", "list", "--status", status, "--database-url", url])
            .env("RUST_LOG", "warn")
            .output()
        {
            Ok(o) => {
                out.push('\n');
                out.push_str(&String::from_utf8_lossy(&o.stdout));
                out.push_str(&String::from_utf8_lossy(&o.stderr));
            }
            Err(err) => out.push_str(&format!("\noutbox list --status {status}: {err}")),
        }
    }
    out
}
