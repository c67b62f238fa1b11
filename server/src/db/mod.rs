//! The order service's store: its accounts, tokens, orders and products,
//! next to the library's records and outbox in one PostgreSQL or SQLite
//! database ([`Db`]). Only those two can hold orders: the effect and its
//! key's record commit in one transaction, which Redis cannot join, so
//! there is no Redis variant to refuse calls.
//!
//! Every call that acts for a caller takes the caller's [`TokenHash`] and
//! resolves the account in the same statement (or transaction) as the work
//! itself, so authentication costs no extra round trip.
//!
//! Migrations: the library migrates its own tables; this module adds the
//! order service's component (`orders`) through the same runner, and brings
//! a database of an earlier version (one `schema_migrations` list for
//! everything) up to that list's last version first ([`legacy`]).

mod accounts;
mod admin;
mod caller;
pub mod legacy;
mod order;
mod postgres;
pub(crate) mod reservation;
pub(crate) mod reserve_step;
mod sqlite;
mod store;
mod without_payments;

pub use accounts::{AccountSummary, DemoAccount, Revocation, TokenId, TokenSummary};
pub use caller::{AccountId, Authed, TokenHash};
pub use idemkey::StoreError;
pub use idemkey::duration::{from_system_time, to_system_time};
pub use idemkey::store::{PgPooler, StoreSettings as PgSettings};
pub(crate) use order::OrderEffectError;
pub use order::{
    Order, OrderAnswer, OrderAttempt, OrderDraft, Payment, PaymentState, Price, Refusal,
};
pub use postgres::PgOrders;
pub use sqlite::SqliteOrders;
pub use store::{DEFAULT_DATABASE_URL, Db};
