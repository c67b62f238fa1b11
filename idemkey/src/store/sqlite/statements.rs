//! The records statements on SQLite, rendered once per store with its
//! table names ([`Tables::render_static`]: borrowed as written under the
//! default names).

use std::borrow::Cow;

use crate::store::Tables;

/// The records statements, with a store's table names.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(super) claim: Cow<'static, str>,
    pub(super) read: Cow<'static, str>,
    pub(super) take_over: Cow<'static, str>,
    pub(super) complete: Cow<'static, str>,
    pub(super) release: Cow<'static, str>,
    pub(super) trim: Cow<'static, str>,
    pub(super) purge: Cow<'static, str>,
}

impl Statements {
    pub(crate) fn new(tables: &Tables) -> Self {
        Self {
            claim: tables.render_static(include_str!("sql/claim.sql")),
            read: tables.render_static(include_str!("sql/read.sql")),
            take_over: tables.render_static(include_str!("sql/take_over.sql")),
            complete: tables.render_static(include_str!("sql/complete.sql")),
            release: tables.render_static(include_str!("sql/release.sql")),
            trim: tables.render_static(include_str!("sql/trim.sql")),
            purge: tables.render_static(include_str!("sql/purge.sql")),
        }
    }
}
