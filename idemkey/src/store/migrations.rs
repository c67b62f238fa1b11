//! Versioned migrations with their bookkeeping in `idemkey_migrations`:
//! one row per `(component, version)` applied.
//!
//! The library migrates only its own components: `records` (the records
//! table) and, with the `outbox` feature, `outbox`. An application may run
//! its own components through the same runner
//! ([`Db::migrate_with`](crate::Db::migrate_with)): they share the
//! bookkeeping, the lock that serialises processes starting at once, and
//! `/readyz`'s view of what is pending ([`Db::pending_migrations`](crate::Db::pending_migrations)).
//!
//! A table created before this bookkeeping existed (by an earlier version
//! that kept one `schema_migrations` list for everything) is **adopted**:
//! when a migration's [`Adopt`] table already exists with the shape the
//! migration would have made (a base table, not a view, with every column
//! [`Adopt::columns`] lists and the primary key [`Adopt::primary_key`]
//! names), the migration is recorded as applied without running. A
//! relation of that name of any other shape is someone else's, and opening
//! fails with [`StoreError::Corrupt`](super::StoreError::Corrupt) rather
//! than writing into it (choose a [`Tables`](super::Tables) prefix then).

use std::sync::Arc;

use parking_lot::Mutex;

/// A table whose presence means a migration's work is already done.
///
/// Only a base table of this shape is adopted: a view, or a table missing
/// a column or with another primary key, is someone else's (an
/// application's own `outbox`, say), and writing into it would hand its
/// rows to the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adopt {
    /// The table's default name (renamed by the store's prefix when it is
    /// one of the library's).
    pub table: &'static str,
    /// Every column the migration makes (later versions may add more).
    pub columns: &'static [&'static str],
    /// The primary key's columns in order; empty leaves the key unchecked.
    pub primary_key: &'static [&'static str],
}

/// The columns of the records table's first version, on both backends.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
const RECORDS_COLUMNS: &[&str] = &[
    "scope",
    "operation",
    "key",
    "fingerprint",
    "status",
    "response_status",
    "response_headers",
    "response_body",
    "created_at",
    "replay_until",
    "lease_until",
    "resource_id",
    "claim",
];

/// The columns of the outbox's first version, on both backends.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
const OUTBOX_COLUMNS: &[&str] = &[
    "id",
    "scope",
    "operation",
    "key",
    "effect",
    "resource_id",
    "payload",
    "status",
    "attempts",
    "available_at",
    "lease_until",
    "lease",
    "downstream_key",
    "result",
    "last_error",
    "created_at",
    "settled_at",
];

/// One migration of one component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// Whose tables these are (`records`, `outbox`, or an application's).
    pub component: &'static str,
    /// Applied in increasing order within the component, each once.
    pub version: i32,
    /// A short name, for logs and the bookkeeping row.
    pub name: &'static str,
    /// The statements, written with the default table names.
    pub sql: &'static str,
    /// Recorded as applied without running when this table exists.
    pub adopt: Option<Adopt>,
}

impl Migration {
    /// `component/version`, as `/readyz` lists pending migrations.
    pub fn label(&self) -> String {
        format!("{}/{}", self.component, self.version)
    }
}

/// Every migration a store was asked to apply, so that its readiness check
/// knows what this build needs.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
#[derive(Clone, Debug, Default)]
pub(crate) struct Known(Arc<Mutex<Vec<Migration>>>);

#[allow(dead_code)] // For the SQL backends: a build without one uses none.
impl Known {
    /// Remembers `list` (once per component and version).
    pub(crate) fn add(&self, list: &[Migration]) {
        let mut known = self.0.lock();
        for m in list {
            if !known
                .iter()
                .any(|k| k.component == m.component && k.version == m.version)
            {
                known.push(*m);
            }
        }
    }

    /// Every migration remembered.
    pub(crate) fn all(&self) -> Vec<Migration> {
        self.0.lock().clone()
    }
}

/// A backend's later migrations of one component, `(name, statements)` in
/// version order from 2: what a version changes differs by backend.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
pub(crate) type Later = &'static [(&'static str, &'static str)];

/// The library's own migrations, given a backend's statements for each
/// component's first version and its later ones (the outbox's only with
/// the `outbox` feature, the steps' only with `flow`), and the outbox's
/// primary key on that backend.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
pub(crate) fn library(
    records: (&'static str, Later),
    outbox: (&'static str, Later),
    steps: (&'static str, Later),
    outbox_key: &'static [&'static str],
) -> Vec<Migration> {
    let mut list = vec![Migration {
        component: "records",
        version: 1,
        name: "records",
        sql: records.0,
        adopt: Some(Adopt {
            table: "idempotency_records",
            columns: RECORDS_COLUMNS,
            primary_key: &["scope", "operation", "key"],
        }),
    }];
    list.extend(later("records", records.1));
    if cfg!(feature = "outbox") {
        list.push(Migration {
            component: "outbox",
            version: 1,
            name: "outbox",
            sql: outbox.0,
            adopt: Some(Adopt {
                table: "outbox",
                columns: OUTBOX_COLUMNS,
                primary_key: outbox_key,
            }),
        });
        list.extend(later("outbox", outbox.1));
    }
    if cfg!(feature = "flow") {
        list.push(Migration {
            component: "steps",
            version: 1,
            name: "step journal",
            sql: steps.0,
            adopt: None,
        });
        list.extend(later("steps", steps.1));
    }
    list
}

/// Why a relation found under `adopt`'s name is not the table its
/// migration makes, if it is not: not a base table, a missing column, or
/// another primary key. `columns` and `key` are the relation's.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
pub(crate) fn misfit(
    adopt: Adopt,
    base_table: bool,
    columns: &[String],
    key: &[String],
) -> Option<String> {
    if !base_table {
        return Some("not a base table".to_owned());
    }
    if let Some(missing) = adopt
        .columns
        .iter()
        .find(|c| !columns.iter().any(|have| have == *c))
    {
        return Some(format!("no column {missing}"));
    }
    if !adopt.primary_key.is_empty() && key != adopt.primary_key {
        return Some(format!(
            "primary key ({}), not ({})",
            key.join(", "),
            adopt.primary_key.join(", ")
        ));
    }
    None
}

/// `component`'s versions 2, 3, ... from `list`.
#[allow(dead_code)] // For the SQL backends: a build without one uses none.
fn later(component: &'static str, list: Later) -> impl Iterator<Item = Migration> {
    (2..)
        .zip(list)
        .map(move |(version, &(name, sql))| Migration {
            component,
            version,
            name,
            sql,
            adopt: None,
        })
}
