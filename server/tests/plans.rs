//! The key lookups use the primary key whatever the tables' statistics say.
//! A new deployment, or a trim that emptied the table, leaves statistics
//! that describe empty tables; statements prepared then and cached with a
//! generic plan would scan `idempotency_records` sequentially for every
//! order until the next autoanalyze (quadratic in the table's size).

use std::sync::Arc;

mod common;
use common::{BODY, Backend, Env, eventually, new_key};

/// Orders sent after the tables were emptied and analyzed.
const ORDERS: usize = 3_000;
/// Concurrent clients (more than the pool's connections, so every
/// connection prepares and reuses its statements).
const CLIENTS: usize = 16;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_lookups_use_the_index_on_freshly_emptied_and_analyzed_tables() {
    let env = Env::new(Backend::Postgres);
    let token = env.account("plans");
    // What a new deployment or a trim that emptied the tables looks like.
    env.sql("TRUNCATE orders, idempotency_records; ANALYZE orders, idempotency_records;");
    let server = Arc::new(env.serve(&["--pool-size", "4"]));
    let (seq_before, idx_before) = scans(&env, "idempotency_records");

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let server = Arc::clone(&server);
        let token = token.clone();
        clients.push(tokio::spawn(async move {
            for _ in 0..ORDERS / CLIENTS {
                let reply = server.post_order(&token, &new_key(), BODY).await;
                assert_eq!(reply.status, 201, "{}", reply.body);
            }
        }));
    }
    for client in clients {
        client.await.expect("client");
    }
    let sent = (ORDERS / CLIENTS * CLIENTS) as i64;

    // Sessions report their statistics when they go idle: wait until every
    // order's lookup is counted, then read how they were done.
    eventually("the sessions' scan statistics", async || {
        let (seq, idx) = scans(&env, "idempotency_records");
        (seq - seq_before) + (idx - idx_before) >= sent
    })
    .await;
    let (seq, idx) = scans(&env, "idempotency_records");
    assert_eq!(
        seq - seq_before,
        0,
        "{} sequential scans of idempotency_records for {sent} orders ({} index scans)",
        seq - seq_before,
        idx - idx_before
    );
    // (Counted last: a count is a sequential scan of its own.)
    assert_eq!(env.count("idempotency_records"), sent as u64);
}
