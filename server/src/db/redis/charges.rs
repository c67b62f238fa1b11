//! Redis holds no charges of the payment provider: every call is refused
//! with [`CHARGES_NEED_SQL`].

use super::RedisDb;
use uuid::Uuid;

use crate::db::{
    CHARGES_NEED_SQL, Charge, ChargeWrite, NewCharge, ProviderRequest, RequestKind, StoreError,
};

fn refused() -> StoreError {
    StoreError::Unavailable(CHARGES_NEED_SQL.into())
}

impl RedisDb {
    pub(in crate::db) async fn insert_charge(
        &self,
        _: &NewCharge,
    ) -> Result<ChargeWrite, StoreError> {
        Err(refused())
    }

    pub(in crate::db) async fn charge(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<Charge>, StoreError> {
        Err(refused())
    }

    pub(in crate::db) async fn charges(&self, _: &str) -> Result<Vec<Charge>, StoreError> {
        Err(refused())
    }

    pub(in crate::db) async fn log_provider_request(
        &self,
        _: &str,
        _: RequestKind,
        _: &str,
        _: Option<Uuid>,
    ) -> Result<(), StoreError> {
        Err(refused())
    }

    pub(in crate::db) async fn provider_requests(
        &self,
        _: &str,
    ) -> Result<Vec<ProviderRequest>, StoreError> {
        Err(refused())
    }
}
