//! # idemkey
//!
//! `Idempotency-Key` for Rust HTTP services: a client keeps one key per
//! logical operation, and a retry of a request whose response was lost
//! replays the stored result instead of acting twice, across processes and
//! restarts. Every rule (key syntax, fingerprint, decision table, problem
//! documents) comes from [`idemkey_core`]; one engine ([`idempotency`])
//! applies it for every front end over any [`Records`](idempotency::Records)
//! store.
//!
//! Four ways in, each behind its features:
//!
//! | you want | use | features |
//! |---|---|---|
//! | effects outside your database (a call to another service), any axum/tower app | `layer::IdempotencyLayer` (lease mode) | `layer` + a store: `postgres`, `sqlx-postgres`, `sqlite` or `redis` |
//! | your effect and the key's result in **one** transaction of your database | `in_transaction` | `postgres`, `sqlx-postgres` or `sqlite` |
//! | an effect that leaves your database, delivered at least once and deduplicated downstream | `outbox` and its `Worker` | `outbox` + `postgres`, `sqlx-postgres` or `sqlite` |
//! | one key for an operation of several steps in several systems, each step once, retries resuming | `flow::Flows` | `flow` + `postgres`, `sqlx-postgres` or `sqlite` |
//!
//! Every item has one path. [`Db`] and [`StoreError`] sit at the root; the
//! rest lives in the module of its concept: [`store`] holds the settings,
//! the tables and the seam traits a custom backend implements, with one
//! submodule per backend for its store type, its transaction and its
//! functions (`store::postgres::{PgDb, PgTx, pg_in_transaction}`,
//! `store::sqlite`, `store::redis`, `store::sqlx_postgres`); [`idempotency`]
//! the engine and the records' types; `in_transaction`, `outbox`, `flow`
//! and `layer` their front ends.
//!
//! `serve` adds a connection-capped accept loop, `clap` the settings'
//! `ValueEnum`s. A user pays only for what they turn on: the engine, the
//! stores and `in_transaction` compile without axum, hyper and tower;
//! `axum` adds the `IntoResponse` conveniences and middleware (`layer`
//! turns it on); `metrics` sends the counters to the `metrics` facade;
//! `postgres-tls` adds TLS to PostgreSQL. TLS is opt-in, as in sqlx: it is
//! 17 crates a database on a private network or a socket does not need,
//! and a TLS URL (`sslmode=require` and up) on a build without it is
//! refused with an error that names the feature. The README's "What it
//! costs to add" counts the crates.
//!
//! The library migrates only its own tables (`idempotency_records`,
//! `outbox` and the step journal with those features), optionally under a prefix
//! ([`store::Tables`]); see [`store::migrations`]. Every table, migration
//! and metric series the library owns is listed in the repository's
//! `docs/library-objects.md`.
//!
//! # Examples
//!
//! Each runs as it is (`cargo test -p idemkey --all-features --doc`), on
//! an SQLite file of its own, removed at the end; PostgreSQL is the same
//! code with a `postgres://` URL (Redis serves the Layer only).
//!
//! ## The Layer
//!
//! A route whose effect is outside your database, guarded on a store: a
//! retry with the same key and body gets the stored response back, marked
//! `Idempotent-Replayed: true`, and the handler runs once. Features `layer`
//! and a store.
//!
//! ```
//! # #[cfg(all(feature = "layer", feature = "sqlite"))]
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! use axum::body::{Body, to_bytes};
//! use axum::{Router, http::Request, routing::post};
//! use idemkey::{Db, layer::IdempotencyLayer, store::StoreSettings};
//! use tower::ServiceExt as _;
//!
//! let path = std::env::temp_dir().join(format!("idemkey-doc-layer-{}.db", std::process::id()));
//! # struct Remove(std::path::PathBuf);
//! # impl Drop for Remove { fn drop(&mut self) { for end in ["", "-wal", "-shm"] {
//! #     let mut file = self.0.clone().into_os_string(); file.push(end); std::fs::remove_file(file).ok(); } } }
//! # let _remove = Remove(path.clone());
//! let db = Db::open(&format!("sqlite://{}", path.display()), &StoreSettings::default()).await?;
//! let charges = Arc::new(AtomicU32::new(0));
//! let charge = {
//!     let charges = Arc::clone(&charges);
//!     post(move || async move { format!("charge {}", charges.fetch_add(1, Ordering::SeqCst) + 1) })
//! };
//! // Keys are scoped by the caller your authentication found, never by a
//! // header the caller picks (here: one tenant).
//! let app = Router::new()
//!     .route("/payments", charge)
//!     .route_layer(IdempotencyLayer::new(db, |_parts| Some("tenant-1".to_owned())));
//!
//! let pay = || {
//!     Request::post("/payments")
//!         .header("idempotency-key", "\"pay-1\"")
//!         .header("content-type", "application/json")
//!         .body(Body::from(r#"{"cents":500}"#))
//! };
//! let first = app.clone().oneshot(pay()?).await?;
//! let retry = app.clone().oneshot(pay()?).await?; // the answer to `first` was lost
//! assert_eq!(retry.headers()["idempotent-replayed"], "true");
//! assert_eq!(to_bytes(retry.into_body(), 1 << 16).await?, "charge 1");
//! assert_eq!(to_bytes(first.into_body(), 1 << 16).await?, "charge 1");
//! assert_eq!(charges.load(Ordering::SeqCst), 1);
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "layer", feature = "sqlite")))]
//! # fn main() {}
//! ```
//!
//! ## In your transaction, with an outbox message
//!
//! Your row, the key's stored response and a message for the outside world
//! commit together; a retry replays the response and writes nothing, and a
//! worker delivers the message once the transaction has committed.
//! Features `outbox` and `sqlite` (or `postgres`: `store::postgres::pg_in_transaction`).
//!
//! ```
//! # #[cfg(all(feature = "sqlite", feature = "outbox"))]
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//!
//! use idemkey::idempotency::{RecordKey, Scope, StoredResponse};
//! use idemkey::in_transaction::{Options, Outcome};
//! use idemkey::outbox::{Delivery, Worker, WorkerSettings};
//! use idemkey::Db;
//! use idemkey::store::sqlite::{SqliteDb, sqlite_in_transaction_async};
//! use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
//!
//! let path = std::env::temp_dir().join(format!("idemkey-doc-tx-{}.db", std::process::id()));
//! # struct Remove(std::path::PathBuf);
//! # impl Drop for Remove { fn drop(&mut self) { for end in ["", "-wal", "-shm"] {
//! #     let mut file = self.0.clone().into_os_string(); file.push(end); std::fs::remove_file(file).ok(); } } }
//! # let _remove = Remove(path.clone());
//! let store = SqliteDb::open(&path).await?;
//! store.with_conn(|c| Ok(c.execute_batch("CREATE TABLE users (email TEXT)"))).await??;
//!
//! let operation = OperationId::from_static("POST /users:v1");
//! let body = r#"{"email":"ana@example.com"}"#;
//! let key = RecordKey {
//!     scope: Scope::new("tenant-1").ok_or("scope")?,
//!     operation: operation.clone(),
//!     key: IdempotencyKey::parse(b"\"signup-1\"", KeyProfile::Lenient)?,
//! };
//! let fingerprint = Fingerprint::of_json(&operation, body)?;
//! let sign_up = || {
//!     let options = Options::new(Duration::from_secs(86_400));
//!     sqlite_in_transaction_async(&store, store.connection(), key.clone(), fingerprint, options, {
//!         let key = key.clone();
//!         move |tx| {
//!             tx.execute("INSERT INTO users (email) VALUES ('ana@example.com')", [])?;
//!             // Delivered only if this transaction commits.
//!             tx.enqueue(&key, "welcome-mail", None, body)?;
//!             Ok::<_, Box<dyn std::error::Error + Send + Sync>>(StoredResponse::new(201, "{}"))
//!         }
//!     })
//! };
//! assert!(matches!(sign_up().await?, Outcome::Executed(r) if r.status == 201));
//! assert!(matches!(sign_up().await?, Outcome::Replayed(r) if r.status == 201));
//! let users: i64 = store.with_conn(|c| Ok(c.query_row("SELECT count(*) FROM users", [], |r| r.get(0)))).await??;
//! assert_eq!(users, 1);
//!
//! let worker = Worker::new(Db::new(store.clone()), WorkerSettings::default())
//!     .handle("welcome-mail", |message| async move {
//!         // Send with `message.downstream_key()` so the mailer drops repeats.
//!         assert_eq!(message.payload, r#"{"email":"ana@example.com"}"#);
//!         Delivery::Delivered("queued".into())
//!     });
//! assert_eq!(worker.run_once().await?, 1, "one message, for one sign-up");
//! assert_eq!(worker.run_once().await?, 0);
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "sqlite", feature = "outbox")))]
//! # fn main() {}
//! ```
//!
//! ## A flow of several steps
//!
//! One key for an operation of several steps: the first request runs the
//! local step in the key's transaction and answers `202`, the worker runs
//! the rest, and a retry gets the final answer; each step ran once.
//! Features `flow` and `sqlite` or `postgres`.
//!
//! ```
//! # #[cfg(all(feature = "flow", feature = "sqlite"))]
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! use idemkey::flow::{Attempt, External, Flow, FlowSettings, Flows, Local, StepError};
//! use idemkey::idempotency::{RecordKey, Scope};
//! use idemkey::in_transaction::{Options, Outcome};
//! use idemkey::outbox::{Worker, WorkerSettings};
//! use idemkey::Db;
//! use idemkey::store::StoreSettings;
//! use idemkey_core::{Fingerprint, IdempotencyKey, KeyProfile, OperationId};
//! use serde_json::json;
//!
//! let path = std::env::temp_dir().join(format!("idemkey-doc-flow-{}.db", std::process::id()));
//! # struct Remove(std::path::PathBuf);
//! # impl Drop for Remove { fn drop(&mut self) { for end in ["", "-wal", "-shm"] {
//! #     let mut file = self.0.clone().into_os_string(); file.push(end); std::fs::remove_file(file).ok(); } } }
//! # let _remove = Remove(path.clone());
//! let db = Db::open(&format!("sqlite://{}", path.display()), &StoreSettings::default()).await?;
//! # let lite = db.backend_as::<idemkey::store::sqlite::SqliteDb>().unwrap();
//! # lite.with_conn(|c| Ok(c.execute_batch("CREATE TABLE stock (sku TEXT, n INT); INSERT INTO stock VALUES ('tea', 5)"))).await??;
//! // `stock` is the application's table, in the same file; the charges are
//! // another system's, by the key each attempt sent.
//! let charged = Arc::new(Mutex::new(Vec::<String>::new()));
//! let reserve = Local::new().sqlite(|tx, _ctx| {
//!     tx.execute("UPDATE stock SET n = n - 1 WHERE sku = 'tea'", [])
//!         .map_err(|e| StepError::Retry(e.to_string()))?;
//!     Ok(json!("reserved"))
//! });
//! let charge = External::new({
//!     let charged = Arc::clone(&charged);
//!     move |ctx| {
//!         // The same derived key on every retry: the downstream deduplicates.
//!         charged.lock().unwrap().push(ctx.downstream_key().to_string());
//!         std::future::ready(Attempt::Done(json!("charged")))
//!     }
//! });
//! let purchase = Flow::new("purchase").local("reserve", reserve).external("charge", charge);
//! let settings = FlowSettings { wait: Duration::ZERO, ..FlowSettings::default() };
//! let flows = Flows::new(db.clone(), vec![purchase], settings)?;
//! let worker = flows.attach(Worker::new(db.clone(), WorkerSettings::default()));
//!
//! let operation = OperationId::from_static("POST /purchases:v1");
//! let key = RecordKey {
//!     scope: Scope::new("tenant-1").ok_or("scope")?,
//!     operation: operation.clone(),
//!     key: IdempotencyKey::parse(b"\"purchase-1\"", KeyProfile::Lenient)?,
//! };
//! let input = json!({ "sku": "tea" });
//! let fingerprint = Fingerprint::of_value(&operation, &input);
//! let options = Options::new(Duration::from_secs(86_400));
//! let buy = async || flows.start("purchase", &key, fingerprint, &input, &options).await;
//!
//! assert!(matches!(buy().await?, Outcome::Executed(r) if r.status == 202)); // reserved
//! while worker.run_once().await? > 0 {} // the charge, after the first transaction
//! assert!(matches!(buy().await?, Outcome::Replayed(r) if r.status == 200));
//! assert_eq!(charged.lock().unwrap().len(), 1);
//! # let stock = lite.with_conn(|c| Ok(c.query_row("SELECT n FROM stock", [], |r| r.get::<_, i64>(0)))).await??;
//! # assert_eq!(stock, 4, "reserved once");
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "flow", feature = "sqlite")))]
//! # fn main() {}
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub)]

pub mod duration;
mod error;
#[cfg(feature = "flow")]
pub mod flow;
pub mod idempotency;
pub mod in_transaction;
#[cfg(feature = "layer")]
pub mod layer;
#[cfg(feature = "serve")]
pub mod load_shed;
pub mod maintenance;
pub mod metrics;
#[cfg(feature = "outbox")]
pub mod outbox;
#[cfg(feature = "axum")]
pub mod problems;
#[cfg(feature = "axum")]
pub mod request_id;
#[cfg(feature = "axum")]
pub mod request_log;
#[cfg(feature = "serve")]
pub mod serve;
pub mod store;

pub use error::StoreError;
pub use store::db::Db;

/// The README's Rust snippets, compiled as doctests (and run where they
/// need no server), so the crate's front page cannot drift from its API.
#[cfg(all(
    doctest,
    feature = "layer",
    feature = "postgres",
    feature = "sqlite",
    feature = "flow"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
