//! The `charge` effect of an order: a charge at the payment provider, sent
//! with the message's derived key, and looked up first whenever an earlier
//! attempt may have reached the provider. A charge found (or answered)
//! counts as this order's only if it names this order, amount and
//! currency.

use std::future::Future;
use std::sync::Arc;

use serde::Deserialize;
use tracing::warn;
use uuid::Uuid;

use crate::payments::client::{Attempt, FoundCharge, ProviderClient};
use idemkey::outbox::Delivery;
use idemkey::outbox::OutboxMessage;
use idemkey_core::{DownstreamKey, downstream_key_of};

/// The effect name of an order's payment.
pub const CHARGE: &str = "charge";

/// The payload an order puts in the outbox.
#[derive(Deserialize)]
struct Charge {
    order_id: String,
    amount_cents: i64,
    currency: String,
}

/// The delivery function of [`CHARGE`] messages, for
/// [`idemkey::outbox::Worker::handle`].
pub fn charge_delivery(
    client: Arc<ProviderClient>,
) -> impl Fn(OutboxMessage) -> std::pin::Pin<Box<dyn Future<Output = Delivery> + Send>>
+ Send
+ Sync
+ 'static {
    move |message| {
        let client = Arc::clone(&client);
        Box::pin(async move { deliver(&client, &message).await })
    }
}

/// The key versions before the per-instance one sent: derived from the key
/// tuple alone, so shared by every execution of one key.
fn legacy_downstream_key(message: &OutboxMessage) -> DownstreamKey {
    downstream_key_of(
        &message.scope,
        &message.operation,
        &message.key,
        &message.effect,
    )
}

/// Whether the provider may hold this charge under the tuple-only key: an
/// earlier attempt recorded it, or a worker claimed the message and never
/// settled it (it may have been an earlier version, which sent that key).
fn maybe_sent_legacy(message: &OutboxMessage) -> bool {
    match &message.sent_key {
        Some(sent) => sent == legacy_downstream_key(message).as_str(),
        None => message.attempts > 1,
    }
}

async fn deliver(client: &ProviderClient, message: &OutboxMessage) -> Delivery {
    let Some((charge, order_id)) = serde_json::from_str::<Charge>(&message.payload)
        .ok()
        .and_then(|c| Uuid::try_parse(&c.order_id).ok().map(|id| (c, id)))
    else {
        return Delivery::Refused("the charge's payload is malformed".into());
    };
    let ours = |found: &FoundCharge| found.is_for(order_id, charge.amount_cents, &charge.currency);
    let own = message.instance_downstream_key();
    let legacy = legacy_downstream_key(message);
    let mut key = message.downstream_key();
    if message.maybe_sent() {
        // An earlier attempt may have charged: never charge again blindly.
        // A message an earlier version may have sent under the tuple-only
        // key is looked up under that key too.
        let mut keys = vec![own];
        if maybe_sent_legacy(message) {
            keys.push(legacy);
        }
        for looked_up in keys {
            match client.lookup(looked_up.as_str()).await {
                Attempt::NotFound => {}
                Attempt::Charged(found) if ours(&found) => {
                    return Delivery::Delivered(found.charge_id);
                }
                Attempt::Charged(found) if looked_up == legacy => {
                    // The shared key's charge is another order's (the first
                    // execution of a re-executed key): this order was never
                    // charged under it, and is charged under its own key.
                    warn!(
                        id = message.id,
                        charge = %found.charge_id,
                        "the tuple-only key holds another order's charge; charging under the order's own key"
                    );
                    key = own;
                }
                Attempt::Charged(found) => return foreign(&found),
                other => return delivery_of(other),
            }
        }
    }
    match client
        .charge(
            key.as_str(),
            order_id,
            charge.amount_cents,
            &charge.currency,
        )
        .await
    {
        Attempt::Charged(found) if !ours(&found) => foreign(&found),
        answer => delivery_of(answer),
    }
}

/// A charge that names another order, amount or currency: never taken as
/// this order's.
fn foreign(found: &FoundCharge) -> Delivery {
    Delivery::Refused(format!(
        "the provider's charge {} under this order's key is not this order's (order {}, {} {})",
        found.charge_id,
        found.order_id.as_deref().unwrap_or("?"),
        found
            .amount_cents
            .map_or_else(|| "?".to_owned(), |a| a.to_string()),
        found.currency.as_deref().unwrap_or("?"),
    ))
}

fn delivery_of(attempt: Attempt) -> Delivery {
    match attempt {
        Attempt::Charged(found) => Delivery::Delivered(found.charge_id),
        Attempt::Declined { reason } => Delivery::Refused(reason),
        Attempt::Retry { after, reason } => Delivery::Retry { after, reason },
        Attempt::Uncertain { reason } => Delivery::Uncertain(reason),
        Attempt::NotFound => Delivery::Retry {
            after: None,
            reason: "the provider answered 404 to a charge".into(),
        },
    }
}
