//! The records statements on SQLite, rendered once per store.

crate::store::statements::statements! {
    claim = include_str!("sql/claim.sql"),
    read = include_str!("sql/read.sql"),
    take_over = include_str!("sql/take_over.sql"),
    complete = include_str!("sql/complete.sql"),
    release = include_str!("sql/release.sql"),
    trim = include_str!("sql/trim.sql"),
    purge = include_str!("sql/purge.sql"),
}
