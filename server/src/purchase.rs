//! A purchase: the order service's operation of several steps under one
//! key (`POST /purchases`), declared as a library [`Flow`]:
//!
//! 1. `reserve` (local): the stock, taken in the key's own transaction and
//!    given back if a later step fails for good;
//! 2. `charge` (external): the payment provider, with the step's derived
//!    key, looked up before any resend; refunded if a later step fails;
//! 3. `confirm` (external): a confirmation through the provider's mail
//!    sink, which deduplicates by the step's key too.
//!
//! A declined charge undoes the reservation and ends the purchase with the
//! core's `402 payment-declined`; missing stock ends it at once with
//! `409 out-of-stock`.

use std::sync::Arc;

use idemkey::StoreError;
use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, StepContext};
use idemkey::idempotency::StoredResponse;
use idemkey_core::Problem;
use serde_json::{Value, json};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::db::Db;
use crate::payments::client::{Attempt as Call, FoundCharge, ProviderClient};

/// The flow's name, stored in the journal.
pub const PURCHASE: &str = "purchase";

/// Where a purchase is polled.
pub const PURCHASES_PATH: &str = "/purchases/";

/// The purchase flow; its external steps call `client` (a process without
/// a provider declares them too, to start purchases and answer polls: only
/// a worker with a client runs them).
pub fn flow(client: Option<Arc<ProviderClient>>) -> Flow {
    let (charge, refund, confirm) = (client.clone(), client.clone(), client);
    Flow::new(PURCHASE)
        .local("reserve", crate::db::reservation::reserve_step())
        .external(
            "charge",
            External::new(move |ctx| charge_step(charge.clone(), ctx))
                .undo(move |ctx| refund_step(refund.clone(), ctx)),
        )
        .external(
            "confirm",
            External::new(move |ctx| confirm_step(confirm.clone(), ctx)),
        )
        .done(done)
        .failed(failed)
}

/// The purchases of `db`, answering within `wait`, waking `wake` (the
/// process's outbox worker) when one starts or resumes.
pub fn flows(
    db: &Db,
    client: Option<Arc<ProviderClient>>,
    wait: std::time::Duration,
    wake: Arc<Notify>,
) -> Result<Flows, StoreError> {
    let settings = FlowSettings {
        wait,
        location_prefix: PURCHASES_PATH.to_owned(),
        ..FlowSettings::default()
    };
    Ok(Flows::new(db.store(), vec![flow(client)], settings)?.with_waker(wake))
}

/// What the `reserve` step recorded: the amount to charge.
struct Priced {
    amount_cents: i64,
    currency: String,
}

fn priced(ctx: &StepContext) -> Option<Priced> {
    let reserve = ctx.output("reserve")?;
    Some(Priced {
        amount_cents: reserve["amount_cents"].as_i64()?,
        currency: reserve["currency"].as_str()?.to_owned(),
    })
}

fn no_provider() -> Attempt {
    Attempt::Retry {
        after: None,
        reason: "this process has no payment provider".into(),
    }
}

/// Charges the reserved amount under the step's key; a charge found under
/// it counts only if it is this purchase's (same id, amount, currency).
async fn charge_step(client: Option<Arc<ProviderClient>>, ctx: StepContext) -> Attempt {
    let Some(client) = client else {
        return no_provider();
    };
    let Some(Priced {
        amount_cents,
        currency,
    }) = priced(&ctx)
    else {
        return Attempt::Refused("the reservation recorded no amount".into());
    };
    let key = ctx.downstream_key();
    let ours = |found: &FoundCharge| found.is_for(ctx.flow_id, amount_cents, &currency);
    if ctx.maybe_sent {
        match client.lookup(key.as_str()).await {
            Call::NotFound => {}
            Call::Charged(found) if ours(&found) => return charged(&found),
            Call::Charged(found) => return foreign(&found),
            other => return attempt_of(other),
        }
    }
    match client
        .charge(key.as_str(), ctx.flow_id, amount_cents, &currency)
        .await
    {
        Call::Charged(found) if ours(&found) => charged(&found),
        Call::Charged(found) => foreign(&found),
        other => attempt_of(other),
    }
}

fn charged(found: &FoundCharge) -> Attempt {
    Attempt::Done(json!({ "charge_id": found.charge_id }))
}

fn foreign(found: &FoundCharge) -> Attempt {
    Attempt::Refused(format!(
        "the provider's charge {} under this purchase's key is not this purchase's",
        found.charge_id
    ))
}

fn attempt_of(call: Call) -> Attempt {
    match call {
        Call::Charged(found) => charged(&found),
        Call::Declined { reason } => Attempt::Refused(reason),
        Call::Retry { after, reason } => Attempt::Retry { after, reason },
        Call::Uncertain { reason } => Attempt::Uncertain(reason),
        Call::NotFound => Attempt::Retry {
            after: None,
            reason: "the provider answered 404".into(),
        },
    }
}

/// Refunds the charge (when a step after it failed for good).
async fn refund_step(client: Option<Arc<ProviderClient>>, ctx: StepContext) -> Attempt {
    let Some(client) = client else {
        return no_provider();
    };
    let (Some(charge), Some(Priced { amount_cents, .. })) = (
        ctx.output("charge")
            .and_then(|c| c["charge_id"].as_str())
            .map(str::to_owned),
        priced(&ctx),
    ) else {
        return Attempt::Done(Value::Null);
    };
    let key = ctx.downstream_key();
    if ctx.maybe_sent {
        match client.lookup_refund(key.as_str()).await {
            Call::NotFound => {}
            other => return attempt_of(other),
        }
    }
    attempt_of(client.refund(key.as_str(), &charge, amount_cents).await)
}

/// Sends the purchase's confirmation through the provider's mail sink.
async fn confirm_step(client: Option<Arc<ProviderClient>>, ctx: StepContext) -> Attempt {
    let Some(client) = client else {
        return no_provider();
    };
    let key = ctx.downstream_key();
    if ctx.maybe_sent {
        match client.lookup_confirmation(key.as_str()).await {
            Call::NotFound => {}
            other => return attempt_of(other),
        }
    }
    let text = format!(
        "Purchase {}: {} x {} is paid.",
        ctx.flow_id,
        ctx.input["quantity"],
        ctx.input["sku"].as_str().unwrap_or_default()
    );
    let recipient = format!("account-{}@example.invalid", ctx.scope);
    attempt_of(
        client
            .confirm(key.as_str(), ctx.flow_id, &recipient, &text)
            .await,
    )
}

/// `201 Created`: the purchase with what each step recorded.
fn done(ctx: &StepContext) -> StoredResponse {
    let reserve = ctx.output("reserve").cloned().unwrap_or(Value::Null);
    let body = json!({
        "id": ctx.flow_id,
        "state": "done",
        "sku": reserve["sku"],
        "quantity": reserve["quantity"],
        "amount_cents": reserve["amount_cents"],
        "currency": reserve["currency"],
        "charge_id": ctx.output("charge").map(|c| c["charge_id"].clone()),
        "confirmation_id": ctx.output("confirm").map(|c| c["confirmation_id"].clone()),
    });
    StoredResponse::new(201, body.to_string())
        .with_header("content-type", "application/json")
        .with_header("location", &location(ctx.flow_id))
}

/// The core's problem for the step that failed: `409 out-of-stock`,
/// `402 payment-declined`, or the library's `409 operation-failed`.
fn failed(ctx: &StepContext) -> StoredResponse {
    let Some(failure) = &ctx.failure else {
        return idemkey::flow::state::failed_problem(ctx);
    };
    let problem = match failure.step.as_str() {
        "reserve" => Problem::out_of_stock(ctx.input["sku"].as_str().unwrap_or_default()),
        "charge" => Problem::payment_declined(&failure.reason),
        _ => return idemkey::flow::state::failed_problem(ctx),
    };
    let mut response = StoredResponse::new(problem.status(), problem.to_json());
    for (name, value) in problem.headers() {
        response = response.with_header(name, &value);
    }
    response.with_header("location", &location(ctx.flow_id))
}

/// Where purchase `id` is polled.
pub fn location(id: Uuid) -> String {
    format!("{PURCHASES_PATH}{id}")
}
