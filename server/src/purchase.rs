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
use crate::payments::client::{
    Effect, FoundCharge, FoundConfirmation, FoundRefund, ProviderClient,
};

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
        .local("reserve", crate::db::reserve_step::reserve_step())
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
/// process's outbox worker) when one starts or resumes. A step's calls
/// (a lookup, then the effect) are cut off after `call_timeout` as
/// uncertain.
pub fn flows(
    db: &Db,
    client: Option<Arc<ProviderClient>>,
    wait: std::time::Duration,
    call_timeout: std::time::Duration,
    wake: Arc<Notify>,
) -> Result<Flows, StoreError> {
    let settings = FlowSettings {
        wait,
        call_timeout,
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

/// Charges the reserved amount under the step's key, looked up first when
/// an earlier attempt may have reached the provider; a charge found under
/// the key counts only if it is this purchase's (id, amount, currency).
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
    let send = client.charge_effect(key.as_str(), ctx.flow_id, amount_cents, &currency);
    let effect = if ctx.maybe_sent {
        client.lookup_charge(key.as_str()).await.or_send(send).await
    } else {
        send.await
    };
    attempt_of(effect, |found: &FoundCharge| {
        found
            .is_for(ctx.flow_id, amount_cents, &currency)
            .then(|| json!({ "charge_id": found.charge_id }))
    })
}

/// Refunds the charge (when a step after it failed for good), under the
/// compensation's own key.
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
        // Nothing was charged: nothing to give back.
        return Attempt::Done(Value::Null);
    };
    let key = ctx.downstream_key();
    let send = client.refund(key.as_str(), &charge, amount_cents);
    let effect = if ctx.maybe_sent {
        client.lookup_refund(key.as_str()).await.or_send(send).await
    } else {
        send.await
    };
    attempt_of(effect, |found: &FoundRefund| {
        found
            .is_for(&charge, amount_cents)
            .then(|| json!({ "refund_id": found.refund_id }))
    })
}

/// Sends the purchase's confirmation through the provider's mail sink.
async fn confirm_step(client: Option<Arc<ProviderClient>>, ctx: StepContext) -> Attempt {
    let Some(client) = client else {
        return no_provider();
    };
    let key = ctx.downstream_key();
    let text = format!(
        "Purchase {}: {} x {} is paid.",
        ctx.flow_id,
        ctx.input["quantity"],
        ctx.input["sku"].as_str().unwrap_or_default()
    );
    let recipient = format!("account-{}@example.invalid", ctx.scope);
    let send = client.confirm(key.as_str(), ctx.flow_id, &recipient, &text);
    let effect = if ctx.maybe_sent {
        client
            .lookup_confirmation(key.as_str())
            .await
            .or_send(send)
            .await
    } else {
        send.await
    };
    attempt_of(effect, |found: &FoundConfirmation| {
        found
            .is_for(ctx.flow_id, &recipient)
            .then(|| json!({ "confirmation_id": found.confirmation_id }))
    })
}

/// A step's attempt from the provider's answer: `ours` gives the output
/// of an effect that is this step's, and `None` for one that is not (a
/// key reused by mistake), which is refused rather than taken.
fn attempt_of<T>(effect: Effect<T>, ours: impl FnOnce(&T) -> Option<Value>) -> Attempt {
    match effect {
        Effect::Delivered(found) => match ours(&found) {
            Some(output) => Attempt::Done(output),
            None => {
                Attempt::Refused("the provider holds another effect under this step's key".into())
            }
        },
        Effect::Refused { reason, .. } => Attempt::Refused(reason),
        Effect::Retry { after, reason } => Attempt::Retry { after, reason },
        Effect::Uncertain { reason } => Attempt::Uncertain(reason),
        Effect::NotFound => Attempt::Retry {
            after: None,
            reason: "the provider answered 404".into(),
        },
    }
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
/// `402 payment-declined`, or the library's `409 operation-failed`. Each
/// carries the purchase's `Location`, as every answer that names a
/// purchase does: a client that lost the `202` (or never saw it) learns
/// from the final answer where the purchase is shown.
fn failed(ctx: &StepContext) -> StoredResponse {
    let response = match ctx.failure.as_ref().map(|f| f.step.as_str()) {
        Some("reserve") => problem_response(&Problem::out_of_stock(
            ctx.input["sku"].as_str().unwrap_or_default(),
        )),
        Some("charge") => {
            let reason = ctx.failure.as_ref().map_or("", |f| f.reason.as_str());
            problem_response(&Problem::payment_declined(reason))
        }
        _ => idemkey::flow::failed_problem(ctx),
    };
    response.with_header("location", &location(ctx.flow_id))
}

/// `problem` as a stored answer, with the core's headers.
fn problem_response(problem: &Problem) -> StoredResponse {
    let mut response = StoredResponse::new(problem.status(), problem.to_json());
    for (name, value) in problem.headers() {
        response = response.with_header(name, &value);
    }
    response
}

/// Where purchase `id` is polled.
pub fn location(id: Uuid) -> String {
    format!("{PURCHASES_PATH}{id}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use idemkey::flow::Failure;
    use idemkey_core::StepAction;

    use super::*;

    fn context(failure: Option<(&str, &str)>) -> StepContext {
        StepContext {
            flow_id: Uuid::from_u128(0x0123_4567_89ab_4def_8123_4567_89ab_cdef),
            scope: "1".into(),
            operation: "POST /purchases:v1".into(),
            key: "k".into(),
            step: "confirm",
            action: StepAction::Run,
            input: json!({ "sku": "LIBRO-TS", "quantity": 1 }),
            outputs: BTreeMap::new(),
            attempt: 1,
            maybe_sent: false,
            failure: failure.map(|(step, reason)| Failure {
                step: step.into(),
                reason: reason.into(),
            }),
        }
    }

    /// Every failed answer names the purchase: a client that did not see
    /// the 202 (a service worker's, a lost answer) shows it from here.
    #[test]
    fn every_failed_answer_carries_the_purchase_location() {
        let at = "/purchases/01234567-89ab-4def-8123-456789abcdef";
        for (failure, status, code) in [
            (Some(("reserve", "no stock")), 409, "out-of-stock"),
            (Some(("charge", "card declined")), 402, "payment-declined"),
            (
                Some(("confirm", "mailbox refused")),
                409,
                "operation-failed",
            ),
            (None, 409, "operation-failed"),
        ] {
            let response = failed(&context(failure));
            assert_eq!(response.status, status, "{failure:?}");
            let body: Value = serde_json::from_slice(response.body.as_deref().unwrap()).unwrap();
            assert_eq!(body["code"], code, "{failure:?}");
            let location: Vec<&str> = response
                .headers
                .iter()
                .filter(|(name, _)| name == "location")
                .map(|(_, value)| value.as_str())
                .collect();
            assert_eq!(location, [at], "{failure:?}");
        }
    }
}
