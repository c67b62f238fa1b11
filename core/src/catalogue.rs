//! The demo shop's product catalogue: which skus `POST /orders` sells and
//! at what unit price.
//!
//! The server keeps its catalogue in its database (seeded by a migration,
//! read in the order's transaction, so amounts are computed where the order
//! commits); these constants are the one statement of the seed that every
//! other place checks against: the migration's rows (a server test), the
//! `sku` enum of the published `/openapi.json` (a drift test), and the docs.
//! A schema that lists exactly the skus the server accepts is what lets a
//! contract fuzzer (Schemathesis) send only valid orders when it means to.

/// The currency of every price and amount (ISO 4217).
pub const CURRENCY: &str = "EUR";

/// The seed catalogue: (sku, unit price in cents of [`CURRENCY`]), in the
/// order the demo lists them. `DECLINE-TEST` costs 402 cents because the
/// demo payment provider declines 402-cent charges, so one order of it
/// shows a failed payment; `A` and `A-1` are the skus the test suites use.
pub const CATALOGUE: &[(&str, i64)] = &[
    ("LIBRO-TS", 2990),
    ("CAFE-1KG", 1850),
    ("TAZA-01", 990),
    ("TAZA-02", 1090),
    ("LAMPARA-9", 4500),
    ("CAMISETA-M", 1500),
    ("DECLINE-TEST", 402),
    ("A", 100),
    ("A-1", 100),
];

/// The seed catalogue's unit price of `sku` in cents, `None` for a sku it
/// does not sell. (The server asks its database; this is for clients,
/// tests and docs.)
///
/// ```
/// assert_eq!(idemkey_core::unit_price("LIBRO-TS"), Some(2990));
/// assert_eq!(idemkey_core::unit_price("NOPE"), None);
/// ```
pub fn unit_price(sku: &str) -> Option<i64> {
    CATALOGUE
        .iter()
        .find(|(s, _)| *s == sku)
        .map(|&(_, price)| price)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewOrder;

    #[test]
    fn every_sku_is_orderable_unique_and_priced() {
        let mut skus: Vec<&str> = CATALOGUE.iter().map(|(sku, _)| *sku).collect();
        for (sku, price) in CATALOGUE {
            let body = format!(r#"{{"sku":"{sku}","quantity":1}}"#);
            assert!(NewOrder::from_json(body.as_bytes()).is_ok(), "{sku}");
            assert!(*price > 0, "{sku}");
        }
        skus.sort_unstable();
        skus.dedup();
        assert_eq!(skus.len(), CATALOGUE.len());
    }
}
