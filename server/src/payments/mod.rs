//! TEMP (lead compile): replaced by provider12 merge
pub mod client;
