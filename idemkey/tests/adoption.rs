//! Adoption checks the shape: only a base table the migration would have
//! made is taken as the library's; a view, or an application's own table
//! that happens to share a name and a column, is refused with the advice
//! to choose a prefix. And a long prefix ends with the same constraints as
//! a short one, on a new database and on one migrated by the version
//! before explicit names.

use idemkey::Db;
use idemkey::StoreError;
use idemkey::store::migrations::Migration;
use idemkey::store::{StoreSettings, Tables};
use idemkey_testkit::PgCluster;

/// Longest prefix accepted: the generated name of the records' response
/// status check passes 63 bytes under it.
const LONG: &str = "a_very_long_prefix_of_24";

fn settings(tables: Tables) -> StoreSettings {
    StoreSettings {
        tables,
        ..StoreSettings::default()
    }
}

/// An application's own `outbox`: a view, a table with the library's
/// marker column but not its shape, and a table with every column but
/// another key. Each has a pending row the library must never claim.
const NOT_OURS: [&str; 3] = [
    "CREATE TABLE app_events (id bigint, status text, downstream_key text);
     INSERT INTO app_events VALUES (1, 'pending', 'k');
     CREATE VIEW outbox AS SELECT * FROM app_events;",
    "CREATE TABLE outbox (id bigint PRIMARY KEY, status text, downstream_key text);
     INSERT INTO outbox VALUES (1, 'pending', 'k');",
    "CREATE TABLE outbox (
         id bigint, scope text, operation text, key text, effect text,
         resource_id text, payload text, status text, attempts integer,
         available_at timestamptz, lease_until timestamptz, lease uuid,
         downstream_key text, result text, last_error text,
         created_at timestamptz, settled_at timestamptz, PRIMARY KEY (scope, key));
     INSERT INTO outbox (id, scope, key, status, downstream_key)
         VALUES (1, 's', 'k', 'pending', 'k');",
];

fn refused(opened: Result<Db, StoreError>, case: &str) {
    match opened {
        Err(StoreError::Corrupt(why)) => {
            assert!(why.contains("choose a table prefix"), "{case}: {why}");
        }
        Err(other) => panic!("{case}: another error: {other}"),
        Ok(_) => panic!("{case}: adopted as the library's outbox"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_adopts_only_the_table_its_migration_makes() {
    let cluster = PgCluster::shared().expect("postgres");
    for case in NOT_OURS {
        let db = cluster.fresh_database().expect("database");
        cluster
            .psql(&db.name, case)
            .expect("the application's table");
        refused(Db::open(&db.url, &settings(Tables::default())).await, case);
        // Beside it, under a prefix, the library has its own.
        Db::open(
            &db.url,
            &settings(Tables::with_prefix("idk_").expect("prefix")),
        )
        .await
        .expect("a prefixed store opens beside it");
        let rows = cluster
            .psql(
                &db.name,
                "SELECT count(*) FROM outbox WHERE status = 'pending'",
            )
            .expect("the application's rows");
        assert_eq!(rows, "1", "{case}");
    }

    // The tables an earlier version made (the first versions' statements,
    // no bookkeeping) are adopted, not made again.
    let db = cluster.fresh_database().expect("database");
    for m in idemkey::store::postgres::PgDb::library_migrations()
        .iter()
        .filter(|m| m.adopt.is_some())
    {
        cluster
            .psql(&db.name, m.sql)
            .expect("an earlier version's table");
    }
    Db::open(&db.url, &settings(Tables::default()))
        .await
        .expect("the earlier version's tables are adopted");
    let adopted = cluster
        .psql(
            &db.name,
            "SELECT string_agg(component, ',' ORDER BY component) FROM idemkey_migrations WHERE adopted",
        )
        .expect("bookkeeping");
    assert_eq!(adopted, "outbox,records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_adopts_only_the_table_its_migration_makes() {
    let dir = std::env::temp_dir().join(format!("idemkey-adoption-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    for (n, case) in NOT_OURS.iter().enumerate() {
        let path = dir.join(format!("app-{n}.db"));
        let case = case
            .replace("timestamptz", "INTEGER")
            .replace("uuid", "TEXT")
            .replace("bigint", "INTEGER");
        rusqlite::Connection::open(&path)
            .expect("file")
            .execute_batch(&case)
            .expect("the application's table");
        let url = format!("sqlite://{}", path.display());
        refused(Db::open(&url, &settings(Tables::default())).await, &case);
        Db::open(
            &url,
            &settings(Tables::with_prefix("idk_").expect("prefix")),
        )
        .await
        .expect("a prefixed store opens beside it");
        let rows: i64 = rusqlite::Connection::open(&path)
            .expect("file")
            .query_row(
                "SELECT count(*) FROM outbox WHERE status = 'pending'",
                [],
                |row| row.get(0),
            )
            .expect("the application's rows");
        assert_eq!(rows, 1, "{case}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The names of the constraints on the library's tables under `prefix`,
/// in the order of their names without it.
fn constraints(cluster: &PgCluster, db: &str, prefix: &str) -> Vec<String> {
    let text = cluster
        .psql(
            db,
            &format!(
                "SELECT con.conname FROM pg_constraint con
                 JOIN pg_class c ON c.oid = con.conrelid
                 WHERE c.relname IN ('{prefix}idempotency_records', '{prefix}outbox',
                                     '{prefix}idemkey_flows', '{prefix}idemkey_steps',
                                     '{prefix}idemkey_migrations')
                 ORDER BY substr(con.conname, {}) COLLATE \"C\"",
                prefix.len() + 1
            ),
        )
        .expect("constraints");
    text.lines().map(str::to_owned).collect()
}

/// The CHECK constraints left on the records table under `prefix`.
fn checks_left(cluster: &PgCluster, db: &str, prefix: &str) -> String {
    cluster
        .psql(
            db,
            &format!(
                "SELECT count(*) FROM pg_constraint
                 WHERE conrelid = '{prefix}idempotency_records'::regclass AND contype = 'c'"
            ),
        )
        .expect("constraints")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_prefix_drops_the_records_checks_as_a_short_one_does() {
    let cluster = PgCluster::shared().expect("postgres");
    let plain = cluster.fresh_database().expect("database");
    Db::open(&plain.url, &settings(Tables::default()))
        .await
        .expect("open");
    let names = constraints(cluster, &plain.name, "");
    assert!(names.len() >= 10, "{names:?}");
    for prefix in ["acme_", LONG] {
        let db = cluster.fresh_database().expect("database");
        Db::open(
            &db.url,
            &settings(Tables::with_prefix(prefix).expect("prefix")),
        )
        .await
        .expect("open");
        assert_eq!(checks_left(cluster, &db.name, prefix), "0", "{prefix}");
        // Every constraint is the default one's name under the prefix, cut
        // at 63 bytes as PostgreSQL cuts an identifier.
        let expected: Vec<String> = names
            .iter()
            .map(|n| format!("{prefix}{n}").chars().take(63).collect())
            .collect();
        assert_eq!(constraints(cluster, &db.name, prefix), expected, "{prefix}");
    }

    // A database the version before explicit names migrated (records/1 to
    // records/3 as they were) kept one CHECK under the long prefix; the
    // upgrade drops it.
    let db = cluster.fresh_database().expect("database");
    let tables = Tables::with_prefix(LONG).expect("prefix");
    let before = Db::connect(&db.url, &settings(tables.clone()))
        .await
        .expect("connect");
    let records = idemkey::store::postgres::PgDb::library_migrations();
    let old: Vec<Migration> = records
        .iter()
        .filter(|m| m.component == "records" && m.version <= 3)
        .map(|m| Migration {
            sql: if m.version == 1 {
                include_str!("legacy/postgres/records_0001.sql")
            } else {
                m.sql
            },
            ..*m
        })
        .collect();
    assert_eq!(old.len(), 3);
    before.migrate_with(&old).await.expect("the old migrations");
    assert_eq!(
        checks_left(cluster, &db.name, LONG),
        "1",
        "today's leftover"
    );
    before.close();
    Db::open(&db.url, &settings(tables))
        .await
        .expect("the upgrade");
    assert_eq!(checks_left(cluster, &db.name, LONG), "0");
}
