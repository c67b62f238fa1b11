//! `in_transaction` behind PgBouncer in transaction pooling mode (Debian's
//! 1.18: no prepared-statement tracking, no startup `options`), through a
//! throwaway PgBouncer whose pool (2 server connections) is smaller than
//! the store's (6), so consecutive transactions of one client connection
//! land on different server connections. The role's `lock_timeout` and
//! `statement_timeout` are set on PostgreSQL, as docs/pgbouncer.md says.
//! The order service's binary behind PgBouncer is
//! `server/tests/pgbouncer.rs`.

use std::time::Duration;

use idemkey::Db;
use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
use idemkey::in_transaction::{Options, Outcome};
use idemkey::store::postgres::PgDb;
use idemkey::store::postgres::pg_in_transaction;
use idemkey::store::{PgPooler, StoreSettings as PgSettings};
use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
use idemkey_testkit::BouncedDb;

/// Server connections PgBouncer opens to the database.
const BOUNCER_POOL: u32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_transaction_through_pgbouncer() {
    let b = BouncedDb::start(BOUNCER_POOL, true);
    let settings = PgSettings {
        pooler: PgPooler::Transaction,
        pool_size: 6,
        ..PgSettings::default()
    };
    let db = Db::open(&b.db.url, &settings).await.expect("open");
    let account = uuid::Uuid::new_v4();
    let pg = db
        .backend_as::<PgDb>()
        .expect("a PostgreSQL URL opens PostgreSQL")
        .clone();
    pg.pool()
        .get()
        .await
        .expect("client")
        .batch_execute("CREATE TABLE payments (id bigserial PRIMARY KEY, key text NOT NULL)")
        .await
        .expect("payments");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24 {
        tasks.spawn(pay(PgDb::clone(&pg), account, format!("p-{}", i % 12)));
    }
    let outcomes = tasks.join_all().await;
    let executed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Executed(_)))
        .count();
    let replayed = outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Replayed(_)))
        .count();
    // Same-key calls that overlap wait on the row lock and replay, or get
    // 409 past the lock timeout; never a second payment.
    assert_eq!(executed, 12, "{outcomes:?}");
    assert_eq!(replayed + executed, 24, "{outcomes:?}");
    assert_eq!(b.db.count("payments"), 12);
}

/// One payment through `pg_in_transaction`: the caller's `INSERT` and the
/// key's record commit together.
async fn pay(pg: PgDb, account: uuid::Uuid, key: String) -> Outcome {
    let operation = OperationId::from_static("POST /payments:v1");
    let record = RecordKey {
        scope: Scope::account(account),
        operation: operation.clone(),
        key: IdempotencyKey::parse(format!("\"{key}\"").as_bytes(), KeyProfile::Lenient)
            .expect("key"),
    };
    let fingerprint = Fingerprint::of_json(&operation, r#"{"cents":5}"#).expect("json");
    let mut options = Options::new(Duration::from_secs(3600));
    // SET LOCAL: transaction-scoped, so fine behind the pooler.
    options.lock_timeout = Some(Duration::from_secs(2));
    pg_in_transaction(&pg, &record, fingerprint, &options, |tx| {
        Box::pin(async move {
            // The caller's own statement, unnamed (a named one could meet
            // another client's of the same name on the pooler's server
            // connection).
            tx.execute_typed(
                "INSERT INTO payments (key) VALUES ($1)",
                &[(&key, tokio_postgres::types::Type::TEXT)],
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok::<_, String>(StoredResponse::new(201, format!(r#"{{"key":"{key}"}}"#)))
        })
    })
    .await
    .expect("in_transaction")
}
