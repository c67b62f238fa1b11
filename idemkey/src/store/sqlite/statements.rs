//! The records statements with a store's table names, rendered once.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use crate::store::Tables;

const CLAIM: &str = include_str!("sql/claim.sql");
const READ: &str = include_str!("sql/read.sql");
const TAKE_OVER: &str = include_str!("sql/take_over.sql");
const COMPLETE: &str = include_str!("sql/complete.sql");
const RELEASE: &str = include_str!("sql/release.sql");
const TRIM: &str = include_str!("sql/trim.sql");
const PURGE: &str = include_str!("sql/purge.sql");

/// The records statements, with the store's table names.
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
            claim: tables.render_static(CLAIM),
            read: tables.render_static(READ),
            take_over: tables.render_static(TAKE_OVER),
            complete: tables.render_static(COMPLETE),
            release: tables.render_static(RELEASE),
            trim: tables.render_static(TRIM),
            purge: tables.render_static(PURGE),
        }
    }
}

/// The statements under the default table names.
pub(super) static DEFAULT: LazyLock<Arc<Statements>> =
    LazyLock::new(|| Arc::new(Statements::new(&Tables::default())));
