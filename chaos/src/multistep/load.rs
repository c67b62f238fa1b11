//! The `multi-step` scenario's clients: C clients run M purchases each
//! (`POST /purchases`), one key per purchase, planned from the seed before
//! the run. A client sends its purchase again with the same key on no
//! answer, `202`, `409 idempotency-request-in-progress` and `503`, and
//! between sends polls `GET /purchases/{id}`, until a final answer: `201`,
//! `402 payment-declined` or `409 out-of-stock`. A poll that shows the
//! purchase ended is followed by one more send, whose replay is the answer
//! the client accepts. Every exchange is recorded for the checker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::driver::Account;
use crate::rng::Rng;

/// The sku whose charge the provider declines (402 cents, quantity 1).
pub const DECLINED_SKU: &str = "DECLINE-TEST";

/// The sku whose stock the scenario sets low, so a few purchases of it
/// end `409 out-of-stock`.
pub const SCARCE_SKU: &str = "TAZA-02";

/// The skus of ordinary purchases (no price times a quantity of 1 to 3 is
/// the declined amount).
const PLAIN_SKUS: [&str; 5] = ["LIBRO-TS", "CAFE-1KG", "TAZA-01", "LAMPARA-9", "CAMISETA-M"];

/// One purchase as planned.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Index into the accounts.
    pub account: usize,
    /// Its key (a UUID; sent as a structured-field string).
    pub key: String,
    /// What it buys.
    pub sku: &'static str,
    /// How many.
    pub quantity: u8,
}

impl Planned {
    /// The request body, the same for every send.
    pub fn body(&self) -> String {
        format!(r#"{{"sku":"{}","quantity":{}}}"#, self.sku, self.quantity)
    }
}

/// The purchases of `clients` clients, `per_client` each, over `accounts`
/// accounts: about one in eight declined, one in five of the scarce sku.
pub fn plan(clients: usize, per_client: usize, accounts: usize, seed: u64) -> Vec<Vec<Planned>> {
    let mut rng = Rng::new(seed ^ 0x7075_7263);
    (0..clients)
        .map(|_| {
            (0..per_client)
                .map(|_| {
                    let roll = rng.unit();
                    let (sku, quantity) = if roll < 0.12 {
                        (DECLINED_SKU, 1)
                    } else if roll < 0.32 {
                        (SCARCE_SKU, rng.range(1, 2))
                    } else {
                        let i = rng.range(0, PLAIN_SKUS.len() as u64 - 1) as usize;
                        (PLAIN_SKUS[i], rng.range(1, 3))
                    };
                    Planned {
                        account: rng.range(0, accounts as u64 - 1) as usize,
                        key: uuid::Uuid::from_u64_pair(rng.next_u64(), rng.next_u64()).to_string(),
                        sku,
                        quantity: quantity as u8,
                    }
                })
                .collect()
        })
        .collect()
}

/// What an exchange asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// `POST /purchases` with the purchase's key.
    Post,
    /// `GET /purchases/{id}`.
    Get,
}

/// One HTTP exchange.
#[derive(Clone, Debug)]
pub struct Answer {
    /// What was asked.
    pub ask: Ask,
    /// Which server slot.
    pub server: usize,
    /// The status, `None` for no answer.
    pub status: Option<u16>,
    /// The body as received.
    pub body: String,
    /// `Location`.
    pub location: Option<String>,
    /// `Retry-After`.
    pub retry_after: Option<String>,
    /// Why there was no answer.
    pub error: Option<String>,
    /// No answer within the client's timeout.
    pub timed_out: bool,
    /// Time to the answer (or the error).
    pub elapsed_ms: u64,
}

impl Answer {
    fn json(&self) -> Option<Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// The problem code of a problem answer.
    pub fn code(&self) -> Option<String> {
        self.json()?["code"].as_str().map(str::to_owned)
    }

    /// A final answer this exchange shows: a send's `201`, `402` or
    /// `409 out-of-stock` (status, body), or a poll's `result_status` and
    /// `result` once the purchase ended.
    pub fn final_answer(&self) -> Option<(u16, Value)> {
        let status = self.status?;
        match (self.ask, status) {
            (Ask::Post, 201 | 402) => Some((status, self.json().unwrap_or(Value::Null))),
            (Ask::Post, 409) if self.code().as_deref() == Some("out-of-stock") => {
                Some((status, self.json().unwrap_or(Value::Null)))
            }
            (Ask::Get, 200) => {
                let doc = self.json()?;
                let result = u16::try_from(doc["result_status"].as_u64()?).ok()?;
                Some((result, doc["result"].clone()))
            }
            _ => None,
        }
    }

    /// The purchase (execution) this answer names: the body's `id` (a
    /// state document, a purchase) or the `Location`'s last segment.
    pub fn flow_id(&self) -> Option<String> {
        let status = self.status?;
        let from_body = (200..=202)
            .contains(&status)
            .then(|| self.json())
            .flatten()
            .and_then(|v| v["id"].as_str().map(str::to_owned));
        from_body.or_else(|| {
            self.location
                .as_deref()
                .and_then(|l| l.strip_prefix("/purchases/"))
                .map(str::to_owned)
        })
    }
}

/// Everything one purchase did.
#[derive(Clone, Debug)]
pub struct PurchaseRun {
    /// What it was.
    pub planned: Planned,
    /// Every exchange, in order.
    pub answers: Vec<Answer>,
    /// The final answer of a send the client accepted (status, body).
    pub accepted: Option<(u16, String)>,
    /// Why the client stopped without one (an unexpected answer, or its
    /// deadline).
    pub stopped: Option<String>,
}

/// The whole run.
#[derive(Clone, Debug, Default)]
pub struct PurchaseHistory {
    /// The accounts, by index.
    pub accounts: Vec<Account>,
    /// Every purchase.
    pub purchases: Vec<PurchaseRun>,
    /// Wall time of the load.
    pub elapsed: Duration,
    /// Clients whose task ended without handing its purchases back (it
    /// panicked): their purchases are unchecked, so the run fails.
    pub lost_clients: Vec<String>,
}

/// How the clients run.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Longest wait for one answer.
    pub attempt_timeout: Duration,
    /// How long one purchase may take before its client gives up.
    pub deadline: Duration,
    /// Seed of the clients' choices (servers, pauses, poll or send).
    pub seed: u64,
}

struct Shared {
    cfg: ClientConfig,
    bases: Vec<String>,
    accounts: Vec<Account>,
    http: reqwest::Client,
}

/// Runs every client's planned purchases against `bases` (one task per
/// client, each purchase to its end); the history of all of them.
pub async fn run_clients(
    cfg: ClientConfig,
    bases: Vec<String>,
    accounts: Vec<Account>,
    plan: Vec<Vec<Planned>>,
) -> PurchaseHistory {
    let started = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(cfg.attempt_timeout)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(2))
        .build()
        .unwrap_or_else(|_| reqwest::Client::new());
    let mut rng = Rng::new(cfg.seed ^ 0x636c_6965);
    let shared = Arc::new(Shared {
        cfg,
        bases,
        accounts: accounts.clone(),
        http,
    });
    let mut tasks = Vec::new();
    for (c, purchases) in plan.into_iter().enumerate() {
        let shared = Arc::clone(&shared);
        let mut rng = rng.fork(c as u64);
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::new();
            for planned in purchases {
                done.push(purchase(&shared, &mut rng, planned).await);
            }
            done
        }));
    }
    let (purchases, lost_clients) = join_clients(tasks).await;
    PurchaseHistory {
        accounts,
        purchases,
        elapsed: started.elapsed(),
        lost_clients,
    }
}

/// Every client task's results, in order, and one line per task that
/// ended without them (it panicked or was cancelled).
async fn join_clients<T>(tasks: Vec<tokio::task::JoinHandle<Vec<T>>>) -> (Vec<T>, Vec<String>) {
    let (mut done, mut lost) = (Vec::new(), Vec::new());
    for (c, task) in tasks.into_iter().enumerate() {
        match task.await {
            Ok(mut results) => done.append(&mut results),
            Err(err) => lost.push(format!(
                "client {c} ended without its purchases ({err}): they went unchecked"
            )),
        }
    }
    (done, lost)
}

/// The wait a `Retry-After` asks for, at most a second (the clients are
/// impatient on purpose: their retries resume the purchase).
fn retry_after(answer: &Answer) -> Duration {
    let secs = answer
        .retry_after
        .as_deref()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Duration::from_secs(secs).min(Duration::from_secs(1))
}

async fn purchase(shared: &Shared, rng: &mut Rng, planned: Planned) -> PurchaseRun {
    let mut run = PurchaseRun {
        planned,
        answers: Vec::new(),
        accepted: None,
        stopped: None,
    };
    let deadline = Instant::now() + shared.cfg.deadline;
    let mut poll: Option<String> = None;
    let mut ended_seen = false;
    loop {
        if Instant::now() > deadline {
            run.stopped = Some(format!(
                "no final answer within {} s",
                shared.cfg.deadline.as_secs()
            ));
            break;
        }
        // Between sends, a purchase known to run is polled most of the time.
        let ask = match &poll {
            Some(_) if !ended_seen && rng.chance(0.6) => Ask::Get,
            _ => Ask::Post,
        };
        let answer = exchange(shared, rng, &run, ask, poll.as_deref()).await;
        let pause = match (ask, answer.status) {
            (_, None) => Duration::from_millis(rng.range(50, 300)),
            (Ask::Post, Some(201 | 402)) => {
                run.accepted = Some((answer.status.unwrap_or(0), answer.body.clone()));
                run.answers.push(answer);
                break;
            }
            (Ask::Post, Some(409)) if answer.code().as_deref() == Some("out-of-stock") => {
                run.accepted = Some((409, answer.body.clone()));
                run.answers.push(answer);
                break;
            }
            (Ask::Post, Some(202)) => {
                poll = answer.flow_id().or(poll);
                Duration::from_millis(rng.range(100, 400))
            }
            (Ask::Post, Some(409 | 503)) => {
                retry_after(&answer).max(Duration::from_millis(rng.range(50, 200)))
            }
            (Ask::Get, Some(200)) => {
                ended_seen = answer.final_answer().is_some();
                Duration::from_millis(if ended_seen { 0 } else { rng.range(100, 400) })
            }
            (Ask::Get, Some(503)) => {
                retry_after(&answer).max(Duration::from_millis(rng.range(50, 200)))
            }
            (_, Some(status)) => {
                run.stopped = Some(format!(
                    "unexpected {status} to {ask:?}: {}",
                    answer.body.chars().take(300).collect::<String>()
                ));
                run.answers.push(answer);
                break;
            }
        };
        run.answers.push(answer);
        tokio::time::sleep(pause).await;
    }
    run
}

async fn exchange(
    shared: &Shared,
    rng: &mut Rng,
    run: &PurchaseRun,
    ask: Ask,
    id: Option<&str>,
) -> Answer {
    let server = rng.range(0, shared.bases.len() as u64 - 1) as usize;
    let base = &shared.bases[server];
    let token = &shared.accounts[run.planned.account].token;
    let request = match (ask, id) {
        (Ask::Get, Some(id)) => shared.http.get(format!("{base}/purchases/{id}")),
        _ => shared
            .http
            .post(format!("{base}/purchases"))
            .header("idempotency-key", format!("\"{}\"", run.planned.key))
            .header("content-type", "application/json")
            .body(run.planned.body()),
    }
    .header("authorization", format!("Bearer {token}"));
    let mut answer = Answer {
        ask,
        server,
        status: None,
        body: String::new(),
        location: None,
        retry_after: None,
        error: None,
        timed_out: false,
        elapsed_ms: 0,
    };
    let started = Instant::now();
    match request.send().await {
        Ok(response) => {
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            answer.location = header("location");
            answer.retry_after = header("retry-after");
            let status = response.status().as_u16();
            match response.bytes().await {
                Ok(bytes) => {
                    answer.status = Some(status);
                    answer.body = String::from_utf8_lossy(&bytes).into_owned();
                }
                Err(err) => {
                    answer.timed_out = err.is_timeout();
                    answer.error = Some(format!("body: {err}"));
                }
            }
        }
        Err(err) => {
            answer.timed_out = err.is_timeout();
            answer.error = Some(err.to_string());
        }
    }
    answer.elapsed_ms = started.elapsed().as_millis() as u64;
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicked_client_is_reported_not_dropped() {
        let rt = crate::kit::runtime().expect("runtime");
        let (done, lost) = rt.block_on(async {
            let tasks = vec![
                tokio::spawn(async { vec![1, 2] }),
                tokio::spawn(async {
                    if true {
                        panic!("a client's bug");
                    }
                    vec![3]
                }),
                tokio::spawn(async { vec![4] }),
            ];
            join_clients(tasks).await
        });
        assert_eq!(done, [1, 2, 4]);
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(
            lost[0].starts_with("client 1 ended without its purchases"),
            "{lost:?}"
        );
    }

    fn answer(ask: Ask, status: u16, body: &str, location: Option<&str>) -> Answer {
        Answer {
            ask,
            server: 0,
            status: Some(status),
            body: body.into(),
            location: location.map(str::to_owned),
            retry_after: None,
            error: None,
            timed_out: false,
            elapsed_ms: 1,
        }
    }

    #[test]
    fn the_plan_is_the_seeds_and_mixes_declines_and_the_scarce_sku() {
        let a = plan(4, 50, 2, 7);
        assert_eq!(a.len(), 4);
        let b = plan(4, 50, 2, 7);
        assert_eq!(a[3][49].key, b[3][49].key);
        let all: Vec<&Planned> = a.iter().flatten().collect();
        assert!(all.iter().any(|p| p.sku == DECLINED_SKU && p.quantity == 1));
        assert!(all.iter().any(|p| p.sku == SCARCE_SKU));
        assert!(all.iter().all(|p| p.sku != DECLINED_SKU || p.quantity == 1));
        assert!(all.iter().all(|p| (1..=3).contains(&p.quantity)));
    }

    #[test]
    fn final_answers_and_ids_are_read_from_sends_and_polls() {
        let created = answer(Ask::Post, 201, r#"{"id":"f1","state":"done"}"#, None);
        assert_eq!(created.final_answer().unwrap().0, 201);
        assert_eq!(created.flow_id().as_deref(), Some("f1"));
        let stock = answer(
            Ask::Post,
            409,
            r#"{"code":"out-of-stock"}"#,
            Some("/purchases/f2"),
        );
        assert_eq!(stock.final_answer().unwrap().0, 409);
        assert_eq!(stock.flow_id().as_deref(), Some("f2"));
        let busy = answer(
            Ask::Post,
            409,
            r#"{"code":"idempotency-request-in-progress"}"#,
            None,
        );
        assert_eq!(busy.final_answer(), None);
        let running = answer(Ask::Get, 200, r#"{"id":"f3","state":"running"}"#, None);
        assert_eq!(running.final_answer(), None);
        let ended = answer(
            Ask::Get,
            200,
            r#"{"id":"f3","state":"failed","result_status":402,"result":{"code":"payment-declined"}}"#,
            None,
        );
        let (status, result) = ended.final_answer().unwrap();
        assert_eq!(
            (status, result["code"].as_str()),
            (402, Some("payment-declined"))
        );
    }
}
