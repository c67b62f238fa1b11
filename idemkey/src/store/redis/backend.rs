//! Redis behind the store's seam: records of the idempotency layer (lease
//! mode) only, and the line that registers it with [`Db`](crate::store::Db).

use super::{RedisDb, is_redis_url};
use crate::error::StoreError;
use crate::store::backend::{Backend, BoxFuture, Opener};
use crate::store::pool::PoolStatus;
use crate::store::{Db, StoreSettings};

/// How [`Db`] recognises and opens a Redis node or cluster's URL.
pub(crate) const OPENER: Opener = Opener {
    name: RedisDb::NAME,
    accepts: is_redis_url,
    connect,
};

fn connect<'a>(url: &'a str, settings: &'a StoreSettings) -> BoxFuture<'a, Result<Db, StoreError>> {
    Box::pin(async move { Ok(Db::new(RedisDb::connect(url, &settings.redis).await?)) })
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
