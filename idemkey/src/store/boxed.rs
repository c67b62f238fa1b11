//! The boxed future of the store's object-safe traits.

use std::future::Future;
use std::pin::Pin;

/// A boxed future that may borrow for `'a`: what the type-erased store
/// returns (one allocation per call).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
