//! The repository's `docs/library-objects.md` lists every table, migration
//! and metric series the library owns, and this test keeps it true: the
//! page's lists must equal what the library actually has.
//!
//! - Tables: the ones a store opened with every feature makes, on SQLite
//!   and on PostgreSQL (a throwaway cluster), read back from the database.
//! - Migrations: `PgDb::library_migrations()` and
//!   `SqliteDb::library_migrations()`, by backend, label and name.
//! - Metric series: every `"idemkey_…"` string literal in the library's
//!   sources that is not one of the tables (the series names are such
//!   literals, e.g. `metrics::REQUESTS`), so a series added anywhere in
//!   `src/` without a line on the page fails here.
//!
//! Each list is compared both ways: a line for something the library no
//! longer has fails too.
// Every store, the outbox and the flows: the full lists.
#![cfg(all(
    feature = "postgres",
    feature = "sqlite",
    feature = "outbox",
    feature = "flow"
))]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use idemkey::Db;
use idemkey::store::StoreSettings;
use idemkey::store::postgres::PgDb;
use idemkey::store::sqlite::SqliteDb;
use idemkey_testkit::PgCluster;

/// The page, from the repository's root.
const PAGE: &str = "docs/library-objects.md";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the repository")
        .to_path_buf()
}

fn page() -> String {
    std::fs::read_to_string(root().join(PAGE)).expect("docs/library-objects.md")
}

/// The table rows (`| ... |` lines after the header and its rule) of the
/// page's section titled `## {title}`, as their cells without the
/// backticks.
fn rows(page: &str, title: &str) -> Vec<Vec<String>> {
    let heading = format!("## {title}");
    let section = page
        .split("\n## ")
        .map(|s| s.strip_prefix("## ").unwrap_or(s))
        .find(|s| s.lines().next().map(str::trim) == Some(&heading[3..]))
        .unwrap_or_else(|| panic!("{PAGE} has no section `{heading}`"));
    section
        .lines()
        .filter(|line| line.starts_with('|'))
        .skip(2)
        .map(|line| {
            line.trim_matches('|')
                .split('|')
                .map(|cell| cell.trim().trim_matches('`').to_owned())
                .collect()
        })
        .collect()
}

/// The first cells of a section's rows.
fn names(page: &str, title: &str) -> BTreeSet<String> {
    rows(page, title)
        .into_iter()
        .map(|r| r[0].clone())
        .collect()
}

/// Fails with what is missing on either side, one line each, so the fix
/// can be copied.
fn same(what: &str, on_page: &BTreeSet<String>, actual: &BTreeSet<String>) {
    let missing: Vec<_> = actual.difference(on_page).collect();
    let stale: Vec<_> = on_page.difference(actual).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{PAGE}, {what}:\n  not on the page: {missing:?}\n  on the page but not in the library: {stale:?}"
    );
}

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("idemkey-{name}-{}.db", std::process::id()))
}

fn remove(path: &Path) {
    for end in ["", "-wal", "-shm"] {
        let mut file = path.to_path_buf().into_os_string();
        file.push(end);
        std::fs::remove_file(file).ok();
    }
}

/// The tables an SQLite store with every feature makes, in a file of its
/// own (each test calls it).
async fn sqlite_tables() -> BTreeSet<String> {
    static FILES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = FILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = temp_file(&format!("library-objects-{n}"));
    remove(&path);
    let url = format!("sqlite://{}", path.display());
    let db = Db::open(&url, &StoreSettings::default())
        .await
        .expect("open");
    db.close();
    drop(db);
    let conn = rusqlite::Connection::open(&path).expect("the store's file");
    let tables = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<BTreeSet<_>, _>>()
        })
        .expect("the tables");
    drop(conn);
    remove(&path);
    tables
}

/// The tables a PostgreSQL store with every feature makes, in a fresh
/// database.
async fn postgres_tables() -> BTreeSet<String> {
    let cluster = PgCluster::shared().expect("postgres");
    let database = cluster.fresh_database().expect("database");
    let db = Db::open(&database.url, &StoreSettings::default())
        .await
        .expect("open");
    db.close();
    cluster
        .psql(
            &database.name,
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
        )
        .expect("the tables")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_every_table_the_stores_make() {
    let page = page();
    let listed = names(&page, "Tables");
    same("tables (SQLite)", &listed, &sqlite_tables().await);
    same("tables (PostgreSQL)", &listed, &postgres_tables().await);
}

#[test]
fn the_page_lists_every_migration_of_each_backend() {
    let listed: BTreeSet<String> = rows(&page(), "Migrations")
        .into_iter()
        .map(|r| format!("{} {} {}", r[0], r[1], r[2]))
        .collect();
    let actual: BTreeSet<String> = [
        ("PostgreSQL", PgDb::library_migrations()),
        ("SQLite", SqliteDb::library_migrations()),
    ]
    .into_iter()
    .flat_map(|(backend, list)| {
        list.into_iter()
            .map(move |m| format!("{backend} {} {}", m.label(), m.name))
    })
    .collect();
    assert!(actual.len() > 10, "the library's migrations: {actual:?}");
    same("migrations (backend, label, name)", &listed, &actual);
}

/// Every `"idemkey_…"` string literal in `dir`'s `.rs` files.
fn idemkey_literals(dir: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("the sources") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            idemkey_literals(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source");
            for (i, _) in text.match_indices("\"idemkey_") {
                let rest = &text[i + 1..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                // A whole literal, not a statement that starts so.
                if rest[end..].starts_with('"') {
                    found.insert(rest[..end].to_owned());
                }
            }
        }
    }
}

#[tokio::test]
async fn the_page_lists_every_metric_series() {
    let page = page();
    let tables = sqlite_tables().await;
    let mut literals = BTreeSet::new();
    idemkey_literals(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut literals,
    );
    let series: BTreeSet<String> = literals.difference(&tables).cloned().collect();
    // The two counters the metrics module and the outbox's send: if the
    // scan found neither, it scans the wrong place.
    assert!(
        series.contains("idemkey_requests_total"),
        "the scan of src/ found {literals:?}"
    );
    same("metric series", &names(&page, "Metric series"), &series);
}
