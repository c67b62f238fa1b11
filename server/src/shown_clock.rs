//! The application server's clock, read only for what is shown (an order's
//! `created_at`, a `Retry-After` date turned into a wait): leases, windows,
//! take-overs, re-execution and trim are all decided at the database's
//! clock.

use std::time::SystemTime;

use idemkey_core::UnixMillis;

/// Now, by this process's clock: for display only (see the module docs).
pub fn display_now() -> UnixMillis {
    idemkey::duration::from_system_time(SystemTime::now())
}
