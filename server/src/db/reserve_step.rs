//! A purchase's local step, `reserve`, on both backends: the stock taken
//! in the journal's transaction, given back by its compensation.

use idemkey::flow::Local;

/// The `reserve` step: stock taken in the journal's transaction, given
/// back by its compensation.
pub(crate) fn reserve_step() -> Local {
    Local::new()
        .postgres(super::postgres::purchases::reserve)
        .postgres_undo(super::postgres::purchases::release)
        .sqlite(super::sqlite::purchases::reserve)
        .sqlite_undo(super::sqlite::purchases::release)
}
