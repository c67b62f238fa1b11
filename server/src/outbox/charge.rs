//! The `charge` effect of an order: a charge at the payment provider, sent
//! with the message's derived key, and looked up first whenever an earlier
//! attempt may have reached the provider.

use std::future::Future;
use std::sync::Arc;

use serde::Deserialize;
use uuid::Uuid;

use super::Delivery;
use crate::db::outbox::OutboxMessage;
use crate::payments::client::{Attempt, ProviderClient};

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
/// [`super::Worker::handle`].
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

async fn deliver(client: &ProviderClient, message: &OutboxMessage) -> Delivery {
    let Some((charge, order_id)) = serde_json::from_str::<Charge>(&message.payload)
        .ok()
        .and_then(|c| Uuid::try_parse(&c.order_id).ok().map(|id| (c, id)))
    else {
        return Delivery::Refused("the charge's payload is malformed".into());
    };
    let key = message.downstream_key();
    if message.maybe_sent() {
        // An earlier attempt may have charged: never charge again blindly.
        match client.lookup(key.as_str()).await {
            Attempt::NotFound => {}
            found => return delivery_of(found),
        }
    }
    delivery_of(
        client
            .charge(
                key.as_str(),
                order_id,
                charge.amount_cents,
                &charge.currency,
            )
            .await,
    )
}

fn delivery_of(attempt: Attempt) -> Delivery {
    match attempt {
        Attempt::Charged { charge_id } => Delivery::Delivered(charge_id),
        Attempt::Declined { reason } => Delivery::Refused(reason),
        Attempt::Retry { after, reason } => Delivery::Retry { after, reason },
        Attempt::Uncertain { reason } => Delivery::Uncertain(reason),
        Attempt::NotFound => Delivery::Retry {
            after: None,
            reason: "the provider answered 404 to a charge".into(),
        },
    }
}
