//! Redis behind the store's seam: records of the idempotency layer (lease
//! mode) only, and the line that registers it with [`Db`](crate::Db).

use super::{RedisDb, is_redis_url};
use crate::error::StoreError;
use std::sync::Arc;

use crate::store::backend::{Backend, BoxFuture, DynBackend, Opener};
use crate::store::pool::PoolStatus;
use crate::store::settings::StoreSettings;

/// How [`Db`](crate::Db) recognises and opens a Redis node or cluster's URL.
pub(crate) const OPENER: Opener = Opener {
    accepts: is_redis_url,
    connect,
};

fn connect<'a>(
    url: &'a str,
    settings: &'a StoreSettings,
) -> BoxFuture<'a, Result<Arc<dyn DynBackend>, StoreError>> {
    Box::pin(async move {
        Ok(Arc::new(RedisDb::connect(url, &settings.redis).await?) as Arc<dyn DynBackend>)
    })
}

impl Backend for RedisDb {
    const NAME: &'static str = "redis";

    async fn migrate(&self) -> Result<(), StoreError> {
        RedisDb::migrate(self).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        RedisDb::ping(self).await
    }

    async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        RedisDb::pending_migrations(self).await
    }

    fn pool_status(&self) -> PoolStatus {
        RedisDb::pool_status(self)
    }

    fn close(&self) {
        RedisDb::close(self);
    }

    fn lease_only(&self) -> bool {
        true
    }
}
