//! The problems of the order's business rules, beyond the shape of its
//! body: an unknown sku, a purchase reference already used, a charge the
//! payment provider declined, and a purchase short of stock. Built here, like every problem, so the
//! server, the provider and their tests never write these texts themselves.

use uuid::Uuid;

use crate::order::invalid;
use crate::problem::{FieldError, Problem, ProblemCode};

impl Problem {
    /// 400 `request-invalid`, pointer `/sku`: the body is well formed but
    /// the catalogue does not sell this sku. Nothing was stored.
    ///
    /// ```
    /// let p = idemkey_core::Problem::sku_not_in_catalogue();
    /// assert_eq!((p.status(), p.errors()[0].pointer.as_str()), (400, "/sku"));
    /// ```
    pub fn sku_not_in_catalogue() -> Self {
        invalid(vec![FieldError::new("/sku", "is not in the catalogue")])
    }

    /// 409 `order-reference-exists`: the account already has `order` with
    /// this purchase reference, created under another key. Nothing was
    /// created and the key stays unused; the `order` member names the
    /// existing order, so the client can look it up instead.
    ///
    /// ```
    /// # use idemkey_core::Problem;
    /// let id = uuid::Uuid::nil();
    /// let p = Problem::order_reference_exists(id);
    /// assert_eq!((p.status(), p.order()), (409, Some("00000000-0000-0000-0000-000000000000")));
    /// ```
    pub fn order_reference_exists(order: Uuid) -> Self {
        Self::new(
            ProblemCode::OrderReferenceExists,
            "This account already has an order with this reference; its id is in the order member. Nothing was created: look that order up instead of sending the reference again.",
        )
        .with_order(order.hyphenated().to_string())
    }

    /// 402 `payment-declined`: the payment provider refused the charge for
    /// `reason`; sending the same charge again would be refused again.
    ///
    /// ```
    /// let p = idemkey_core::Problem::payment_declined("amount 402 is declined");
    /// assert_eq!(p.detail(), "The charge was declined: amount 402 is declined");
    /// ```
    pub fn payment_declined(reason: &str) -> Self {
        Self::new(
            ProblemCode::PaymentDeclined,
            format!("The charge was declined: {reason}"),
        )
    }

    /// 409 `out-of-stock`: a purchase (`POST /purchases`) could not reserve
    /// enough of `sku`. Final: nothing was reserved or charged, and the
    /// answer is stored under the key, so a resend with the same key replays
    /// this 409; a client stops (`ProblemCode::is_final`). A later purchase
    /// is a new operation with a new key.
    ///
    /// ```
    /// let p = idemkey_core::Problem::out_of_stock("LIBRO-TS");
    /// assert_eq!((p.status(), p.code().as_str()), (409, "out-of-stock"));
    /// assert!(p.code().is_final());
    /// ```
    pub fn out_of_stock(sku: &str) -> Self {
        Self::new(
            ProblemCode::OutOfStock,
            format!(
                "There is not enough stock of {sku} for this purchase. Nothing was charged: the reservation was not made. Sending it again with the same Idempotency-Key gets this answer again; a new purchase needs a new key."
            ),
        )
    }
}
