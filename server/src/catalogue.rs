//! The catalogue's prices, kept in the process so that a new order's 201
//! (amount included) is written before its one statement runs. The store
//! checks the price against its catalogue inside the order's transaction,
//! so a stale copy can never store a wrong amount: it costs a reload and
//! one more attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use crate::db::{Db, Price, StoreError};

/// How fresh the copy must be for a sku it lacks to count as unknown
/// without asking the store: a product added to the catalogue is sold
/// within this long, and unknown skus cannot make every request a read.
const UNKNOWN_SKU_FRESHNESS: Duration = Duration::from_secs(1);

/// The prices last read from the store.
#[derive(Debug, Default)]
pub struct Catalogue {
    copy: RwLock<Copy>,
    /// One reload at a time: concurrent requests wait for it and share it.
    reloading: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Copy {
    prices: Arc<HashMap<String, Price>>,
    read_at: Option<Instant>,
}

impl Catalogue {
    /// The price of `sku` as last read, without asking the store.
    pub fn cached(&self, sku: &str) -> Option<Price> {
        self.copy.read().prices.get(sku).cloned()
    }

    /// Reads the whole catalogue again from `db`.
    pub async fn reload(&self, db: &Db) -> Result<(), StoreError> {
        let _one = self.reloading.lock().await;
        self.read(db).await
    }

    async fn read(&self, db: &Db) -> Result<(), StoreError> {
        let prices: HashMap<String, Price> = db.products().await?.into_iter().collect();
        *self.copy.write() = Copy {
            prices: Arc::new(prices),
            read_at: Some(Instant::now()),
        };
        Ok(())
    }

    /// The price of `sku`: the copy's; when the copy has none (a new
    /// product, or an unknown sku) and is older than a second, the store's.
    pub async fn price(&self, db: &Db, sku: &str) -> Result<Option<Price>, StoreError> {
        if let Some(price) = self.cached(sku) {
            return Ok(Some(price));
        }
        let _one = self.reloading.lock().await;
        // Another request may have read it while this one waited.
        let fresh = self
            .copy
            .read()
            .read_at
            .is_some_and(|at| at.elapsed() < UNKNOWN_SKU_FRESHNESS);
        if !fresh {
            self.read(db).await?;
        }
        Ok(self.cached(sku))
    }
}
