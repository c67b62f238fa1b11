//! What a purchase reserves, read from its stored input.

use idemkey::flow::{StepContext, StepError};
use serde::Deserialize;

/// The sku and quantity a purchase reserves.
#[derive(Debug, Deserialize)]
pub(crate) struct Reservation {
    pub(crate) sku: String,
    pub(crate) quantity: u8,
}

/// The reservation a purchase's input asks for (validated by the route
/// before the purchase started; a malformed one is a bug, retried).
pub(crate) fn reservation_of(ctx: &StepContext) -> Result<Reservation, StepError> {
    serde_json::from_value(ctx.input.clone())
        .map_err(|err| StepError::Retry(format!("the purchase's input: {err}")))
}

/// How many stripes a product's stock is split over (orders/4).
pub(crate) const STRIPES: u8 = 32;

/// The purchase's own stripe: where its reservation looks first and gives
/// back to. Spread by the purchase's random id.
pub(crate) fn stripe_of(flow_id: uuid::Uuid) -> u8 {
    flow_id.as_bytes()[15] % STRIPES
}
