//! The schema invariant that lets idemkey's tables be distributed by
//! account (docs/operations.md, "Scaling beyond one machine"): every primary
//! key and unique index of a table that holds an account's data includes
//! the account column, so a distributed PostgreSQL (Citus, with the account
//! as distribution column) can enforce each of them on one node. Tables
//! without an account column must be named below as reference tables (small,
//! copied to every node), with the reason; a new table that is neither fails.

use std::collections::{BTreeMap, BTreeSet};

mod common;
use common::{Backend, Env};

/// The column that names the account, per table (the records table calls
/// it `scope`: an account id for the order route and `in_transaction`, the
/// Layer's tenant otherwise).
const ACCOUNT_COLUMNS: &[&str] = &["account_id", "scope"];

/// Tables read by every request before its account is known, or by the
/// migration runner: small, and replicated to every node in a distributed
/// setup (Citus reference tables).
const REFERENCE_TABLES: &[(&str, &str)] = &[
    ("accounts", "the accounts themselves: `id` is the account"),
    (
        "api_tokens",
        "a request's token is looked up before its account is known",
    ),
    ("idemkey_migrations", "the migration runner's own table"),
    (
        "products",
        "the catalogue: every order of every account reads its prices",
    ),
    (
        "product_stock",
        "a product's stock in stripes: every account's purchases take from it",
    ),
];

/// `table -> columns` of the schema's tables.
fn tables(env: &Env) -> BTreeMap<String, BTreeSet<String>> {
    let out = env.sql(
        "SELECT c.relname, a.attname
         FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
         ORDER BY 1, 2",
    );
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in out.lines() {
        let (table, column) = line.split_once('|').expect("table|column");
        tables
            .entry(table.to_owned())
            .or_default()
            .insert(column.to_owned());
    }
    tables
}

/// `(table, index, columns)` of every unique index (primary keys and
/// unique constraints included).
fn unique_indexes(env: &Env) -> Vec<(String, String, BTreeSet<String>)> {
    let out = env.sql(
        "SELECT t.relname, i.relname, string_agg(a.attname, ',' ORDER BY a.attname)
         FROM pg_index x
         JOIN pg_class t ON t.oid = x.indrelid
         JOIN pg_class i ON i.oid = x.indexrelid
         JOIN pg_namespace n ON n.oid = t.relnamespace
         LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = ANY (x.indkey)
         WHERE n.nspname = current_schema() AND x.indisunique
         GROUP BY 1, 2
         ORDER BY 1, 2",
    );
    out.lines()
        .map(|line| {
            let mut parts = line.splitn(3, '|');
            let table = parts.next().expect("table").to_owned();
            let index = parts.next().expect("index").to_owned();
            let columns = parts
                .next()
                .unwrap_or("")
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            (table, index, columns)
        })
        .collect()
}

/// What breaks the invariant in a schema, one line per fault.
fn faults(env: &Env) -> Vec<String> {
    let tables = tables(env);
    let reference: BTreeSet<&str> = REFERENCE_TABLES.iter().map(|(t, _)| *t).collect();
    let account_column = |table: &str| {
        tables
            .get(table)
            .and_then(|cols| ACCOUNT_COLUMNS.iter().find(|c| cols.contains(**c)))
    };
    let mut faults = Vec::new();
    for table in tables.keys() {
        if !reference.contains(table.as_str()) && account_column(table).is_none() {
            faults.push(format!(
                "table {table} has no account column and is not a reference table"
            ));
        }
    }
    for (table, index, columns) in unique_indexes(env) {
        if reference.contains(table.as_str()) {
            continue;
        }
        if let Some(column) = account_column(&table)
            && !columns.contains(*column)
        {
            faults.push(format!(
                "unique index {index} on {table} ({}) does not include {column}",
                columns.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    faults
}

#[test]
fn every_unique_key_of_an_accounts_table_includes_the_account() {
    let env = Env::new(Backend::Postgres);
    env.account("schema"); // applies every migration
    let tables = tables(&env);
    for table in ["orders", "idempotency_records"] {
        assert!(tables.contains_key(table), "no table {table}: {tables:?}");
    }
    for (table, _) in REFERENCE_TABLES {
        assert!(
            tables.contains_key(*table),
            "reference table {table} no longer exists: drop it from the list"
        );
    }
    let faults = faults(&env);
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn the_check_finds_a_key_without_the_account() {
    // The check itself can fail: a table with an account column whose
    // unique key leaves it out, and a table with no account column at all.
    let env = Env::new(Backend::Postgres);
    env.account("schema");
    env.sql(
        "CREATE TABLE payments (id uuid PRIMARY KEY, account_id uuid NOT NULL);
         CREATE TABLE settings (name text PRIMARY KEY);",
    );
    let faults = faults(&env);
    assert!(
        faults
            .iter()
            .any(|f| f.contains("payments_pkey") && f.contains("account_id")),
        "{faults:?}"
    );
    assert!(
        faults.iter().any(|f| f.contains("table settings")),
        "{faults:?}"
    );
    assert_eq!(faults.len(), 2, "{faults:?}");
}
