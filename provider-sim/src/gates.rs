//! What every route of the simulator and of the memory sink passes through
//! or checks.

use std::collections::HashSet;
use std::sync::Arc;

use crate::faults::Faults;

/// What every route of the simulator and of the memory sink passes
/// through or checks: the callers' scopes, the fault draws, the declined
/// amounts.
pub(crate) struct Gates {
    pub(crate) scopes: Arc<HashSet<String>>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) declined: Arc<HashSet<i64>>,
}
