//! The key lookups use the whole primary key whatever the tables'
//! statistics say. A new deployment, or a trim that emptied the table,
//! leaves statistics that describe empty tables; a statement prepared then
//! keeps its generic plan until the next analyze. Such a plan must not scan
//! `idempotency_records` sequentially, nor walk a whole index: with the
//! caller's account as a join column, the planner put the empty table on the
//! outer side and scanned its primary key without the leading column, for
//! every order (quadratic in the table's size until autovacuum analyzed it
//! again). The outbox worker's claim likewise probes the outbox's primary
//! key once per message claimed, however many messages it holds, and the
//! trim changes the rows it locked without looking each up again by its key.

use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{Env, Server, eventually, new_key};
use idemkey_server::db::{Db, PgSettings, TokenHash};

/// Orders that prepare the statements on the emptied, analyzed tables.
const WARM_UP: usize = 64;
/// Rows added behind the planner's back once the plans are cached.
const FILLER: usize = 20_000;
/// Orders measured against the filled tables.
const ORDERS: usize = 1_600;
/// Concurrent clients (more than the pool's connections, so every
/// connection prepares and reuses its statements).
const CLIENTS: usize = 16;
/// Index blocks one order may touch in one index: a lookup and an insert
/// descend the tree a few times (5 blocks of the primary key, 3 of the
/// reference index, measured); the scans this guards against read 287 and 38.
const MAX_BLOCKS_PER_ORDER: f64 = 20.0;

/// `(seq_scan, idx_scan)` of a table, from the statistics the server's
/// sessions report.
fn scans(env: &Env, table: &str) -> (i64, i64) {
    let out = env.sql(&format!(
        "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = '{table}'"
    ));
    let (seq, idx) = out.split_once('|').expect("seq|idx");
    (
        seq.parse().expect("seq_scan"),
        idx.parse().expect("idx_scan"),
    )
}

/// Waits until no other session is connected to the test's database: a
/// session reports its statistics at most once a second, else ten seconds
/// after it went idle, and always when it ends, before it leaves
/// `pg_stat_activity`.
async fn sessions_ended(env: &Env) {
    eventually("the sessions' end", async || {
        env.sql(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()",
        ) == "0"
    })
    .await;
}

/// Blocks of `index` read or found in shared buffers so far.
fn blocks(env: &Env, index: &str) -> i64 {
    env.sql(&format!(
        "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes \
         WHERE indexrelname = '{index}'"
    ))
    .parse()
    .expect("blocks")
}

/// Sends `n` orders from `CLIENTS` clients, each with its own reference
/// (so the reference check looks one up), and returns how many were sent.
async fn orders(server: &Arc<Server>, token: &str, n: usize, tag: &str) -> i64 {
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let server = Arc::clone(server);
        let token = token.to_owned();
        let tag = tag.to_owned();
        clients.push(tokio::spawn(async move {
            for i in 0..n / CLIENTS {
                let body = format!(
                    r#"{{"sku":"LIBRO-TS","quantity":2,"reference":"{tag}-{client}-{i}"}}"#
                );
                let reply = server.post_order(&token, &new_key(), &body).await;
                assert_eq!(reply.status, 201, "{}", reply.body);
            }
        }));
    }
    for client in clients {
        client.await.expect("client");
    }
    (n / CLIENTS * CLIENTS) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_lookups_use_the_whole_key_on_freshly_emptied_and_analyzed_tables() {
    let env = Env::new(common::Backend::Postgres);
    let token = env.account("plans");
    // What a new deployment or a trim that emptied the tables looks like;
    // no autovacuum, so no analyze repairs a bad plan during the test.
    env.sql(
        "TRUNCATE orders, idempotency_records; ANALYZE orders, idempotency_records; \
         ALTER TABLE orders SET (autovacuum_enabled = off); \
         ALTER TABLE idempotency_records SET (autovacuum_enabled = off);",
    );
    let server = Arc::new(env.serve(&["--pool-size", "4"]));
    let (seq_before, _) = scans(&env, "idempotency_records");
    let warm = orders(&server, &token, WARM_UP, "warm").await;

    // The tables grow without a new analyze: another account's keys and
    // orders with references, so that a scan of either index shows.
    env.sql(&format!(
        "INSERT INTO accounts (id, name) VALUES ('00000000-0000-4000-8000-000000000001', 'filler'); \
         INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, \
           response_status, response_headers, response_body, created_at, replay_until, resource_id) \
         SELECT '00000000-0000-4000-8000-000000000001', 'POST /orders:v1', 'filler-' || g, \
           sha256(g::text::bytea), gen_random_uuid(), 'completed', 201, '[]', '\\x7b7d', now(), \
           now() + interval '1 day', gen_random_uuid()::text FROM generate_series(1, {FILLER}) g; \
         INSERT INTO orders (id, account_id, sku, quantity, created_at, amount_cents, currency, reference) \
         SELECT gen_random_uuid(), '00000000-0000-4000-8000-000000000001', 'LIBRO-TS', 1, now(), 2990, \
           'EUR', 'filler-' || g FROM generate_series(1, {FILLER}) g;"
    ));
    // The warm-up's statistics may still be pending (`sessions_ended`):
    // they count below with the measured orders' (a few blocks per order
    // at most, which can only make a scan look likelier).
    let (_, idx_before) = scans(&env, "idempotency_records");
    let keys_before = blocks(&env, "idempotency_records_pkey");
    let refs_before = blocks(&env, "orders_account_reference");

    let sent = orders(&server, &token, ORDERS, "measured").await;
    // The server's sessions end with it and report what they counted.
    let server = Arc::into_inner(server).expect("no client holds the server");
    assert!(server.terminate().success(), "the server's exit");
    sessions_ended(&env).await;
    let (seq, idx) = scans(&env, "idempotency_records");
    assert!(
        idx - idx_before >= sent,
        "{} index scans for {sent} orders",
        idx - idx_before
    );
    assert_eq!(
        seq - seq_before,
        0,
        "{} sequential scans of idempotency_records",
        seq - seq_before
    );
    let per_order = |before: i64, index: &str| (blocks(&env, index) - before) as f64 / sent as f64;
    let keys = per_order(keys_before, "idempotency_records_pkey");
    let refs = per_order(refs_before, "orders_account_reference");
    eprintln!("index blocks per order: {keys:.1} of the key, {refs:.1} of the reference");
    assert!(
        keys < MAX_BLOCKS_PER_ORDER,
        "{keys:.1} blocks of idempotency_records_pkey per order: its lookups scan the index"
    );
    assert!(
        refs < MAX_BLOCKS_PER_ORDER,
        "{refs:.1} blocks of orders_account_reference per order: the reference check scans it"
    );
    // (Counted last: a count is a sequential scan of its own.)
    assert_eq!(
        env.count("idempotency_records"),
        (warm + sent) as u64 + FILLER as u64
    );
}

/// Messages due: a backlog, as the planner's statistics know it.
const BACKLOG: usize = 50_000;
/// Claims measured, of `CLAIM` messages each.
const CLAIMS: usize = 4;
const CLAIM: u32 = 16;
/// Primary-key blocks one claimed message may touch: one descent of the
/// tree; a walk of the whole key reads about 25 per message here.
const MAX_BLOCKS_PER_MESSAGE: f64 = 10.0;

#[tokio::test]
async fn the_outbox_claim_probes_each_message_by_its_key_whatever_the_backlog() {
    let env = Env::new(common::Backend::Postgres);
    let db = Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    let account = db
        .create_account("claims", TokenHash([7; 32]))
        .await
        .expect("account");
    // A backlog the statistics know of: the generic plan of a claim must
    // still take only the messages it claims, not walk the outbox.
    env.sql(&format!(
        "ALTER TABLE outbox SET (autovacuum_enabled = off); \
         INSERT INTO outbox (scope, operation, key, effect, payload) \
         SELECT '{scope}', 'POST /signups:v1', 'due-' || g, 'mail', '{{}}' \
         FROM generate_series(1, {BACKLOG}) g; ANALYZE outbox;",
        scope = account.0
    ));
    let store = db.store();
    let effects = vec!["mail".to_owned()];
    let (_, idx_before) = scans(&env, "outbox");
    let blocks_before = blocks(&env, "outbox_pkey");
    let mut ids = std::collections::HashSet::new();
    for _ in 0..CLAIMS {
        let batch = store
            .claim_outbox(&effects, CLAIM, Duration::from_secs(60))
            .await
            .expect("claim");
        assert_eq!(batch.len(), CLAIM as usize);
        ids.extend(batch.iter().map(|m| m.id));
    }
    drop(store);
    db.close();
    sessions_ended(&env).await;
    assert_eq!(
        ids.len(),
        CLAIMS * CLAIM as usize,
        "each message claimed once"
    );
    // Either plan scans the outbox's indexes at least twice per claim.
    let scanned = scans(&env, "outbox").1 - idx_before;
    assert!(scanned >= 2 * CLAIMS as i64, "{scanned} index scans");
    let per_message = (blocks(&env, "outbox_pkey") - blocks_before) as f64 / ids.len() as f64;
    eprintln!("outbox_pkey blocks per claimed message: {per_message:.1}");
    assert!(
        per_message < MAX_BLOCKS_PER_MESSAGE,
        "{per_message:.1} blocks of outbox_pkey per claimed message: the claim walks the key"
    );
}

/// Due records of each kind the trim acts on: completed past their window
/// (to tombstone) and tombstones past the retention (to delete).
const DUE_EACH: usize = 2_000;
/// Primary-key blocks the trim may touch per row it acts on. It finds each
/// row by the address its lock holds, so only a tombstone's new index entry
/// descends the key (3 blocks here) and a deletion touches no index; finding
/// each row again by its key, once per kind of change, read 10.
const MAX_KEY_BLOCKS_PER_TRIMMED_ROW: f64 = 5.0;

#[tokio::test]
async fn the_trim_changes_each_due_row_without_looking_up_its_key() {
    let env = Env::new(common::Backend::Postgres);
    let db = idemkey::Db::open(&env.url, &PgSettings::default())
        .await
        .expect("open");
    let retention = Duration::from_secs(30 * 24 * 3600);
    // Live rows around the due ones, so the key's tree has its levels.
    env.sql(&format!(
        "ALTER TABLE idempotency_records SET (autovacuum_enabled = off); \
         INSERT INTO idempotency_records (scope, operation, key, fingerprint, claim, status, \
           response_status, response_headers, response_body, created_at, replay_until, check_at) \
         SELECT 's' || (g % 50), 'POST /orders:v1', 'k-' || g, sha256(g::text::bytea), \
           gen_random_uuid(), \
           CASE WHEN g <= {FILLER} THEN 'completed' WHEN g % 2 = 0 THEN 'completed' ELSE 'tombstone' END, \
           CASE WHEN g <= {FILLER} OR g % 2 = 0 THEN 201 END, '[]', \
           CASE WHEN g <= {FILLER} OR g % 2 = 0 THEN '\\x7b7d'::bytea END, \
           CASE WHEN g <= {FILLER} THEN now() WHEN g % 2 = 0 THEN now() - interval '2 days' \
             ELSE now() - interval '40 days' END, \
           CASE WHEN g <= {FILLER} THEN now() + interval '1 day' WHEN g % 2 = 0 THEN now() - interval '1 day' \
             ELSE now() - interval '39 days' END, \
           CASE WHEN g <= {FILLER} THEN now() + interval '1 day' ELSE now() - interval '1 hour' END \
         FROM generate_series(1, {total}) g; ANALYZE idempotency_records;",
        total = FILLER + 2 * DUE_EACH
    ));
    let keys_before = blocks(&env, "idempotency_records_pkey");
    let report = idemkey_server::maintenance::trim_round(&db, retention, 500, None)
        .await
        .expect("trim");
    db.close();
    sessions_ended(&env).await;
    assert_eq!(
        (report.trimmed, report.deleted, report.rescheduled),
        (DUE_EACH as u64, DUE_EACH as u64, 0)
    );
    assert_eq!(
        env.sql("SELECT count(*) FROM idempotency_records WHERE status = 'tombstone'"),
        DUE_EACH.to_string()
    );
    let per_row =
        (blocks(&env, "idempotency_records_pkey") - keys_before) as f64 / (2 * DUE_EACH) as f64;
    eprintln!("idempotency_records_pkey blocks per trimmed row: {per_row:.1}");
    assert!(
        per_row < MAX_KEY_BLOCKS_PER_TRIMMED_ROW,
        "{per_row:.1} blocks of idempotency_records_pkey per row: the trim looks each row up by its key"
    );
}
