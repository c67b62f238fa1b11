//! `idemkey-server fixture`: the conformance fixture's routes (shared with
//! the library's Layer tests, in `idemkey/tests/common/fixture.rs`) behind
//! a layer configured from the command line, served until SIGTERM or
//! SIGINT.
//!
//! Without `--database-url` the fixture opens a **new** SQLite file in the
//! system's temporary directory (its path is logged), so each run starts
//! with no keys; pass `--database-url sqlite://PATH` to keep records across
//! restarts, `postgres://…` for PostgreSQL, or `redis://…` /
//! `redis+cluster://host:port,…` for Redis (`--redis-wait-replicas N` makes
//! each claim and completion wait for N replicas).

use std::time::Duration;

use idemkey::Db;
use idemkey::store::{RedisSettings, StoreSettings};
use idemkey_core::KeyProfile;
use idemkey_server::config::FixtureArgs;
use idemkey_server::layer::IdempotencyLayer;
use idemkey_server::serve::{serve, shutdown_signal};
use tracing::info;

// The routes live once, with the library's tests that drive them.
#[path = "../../idemkey/tests/common/fixture.rs"]
mod routes;
use routes::{Counter, FIXTURE_SCOPE, router};

/// The layer as the fixture configures it from its flags.
pub fn layer(db: Db, args: &FixtureArgs) -> IdempotencyLayer {
    IdempotencyLayer::new(db, |_| Some(FIXTURE_SCOPE.to_owned()))
        .key_profile(KeyProfile::Lenient)
        .lease(args.lease)
        .replay_ttl(args.replay_ttl)
        .expiry_policy(args.expiry_policy)
        .max_request_body(args.max_body_bytes)
        .max_stored_response(args.max_response_bytes)
}

/// Runs the fixture until SIGTERM or SIGINT.
pub async fn run(args: FixtureArgs) -> Result<(), String> {
    args.validate()?;
    let temp_file = args.database_url.is_none().then(|| {
        std::env::temp_dir().join(format!(
            "idemkey-fixture-{}-{}.db",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ))
    });
    let url = match (&args.database_url, &temp_file) {
        (Some(url), _) => url.clone(),
        (None, Some(file)) => format!("sqlite://{}", file.display()),
        (None, None) => unreachable!("a temporary file is chosen when no URL is given"),
    };
    let redis = RedisSettings {
        wait_replicas: args.redis_wait_replicas,
        wait_timeout: args.redis_wait_timeout,
        retention: args.redis_retention,
        ca_file: args.redis_ca_file.clone(),
        ..RedisSettings::default()
    };
    let settings = StoreSettings {
        pooler: args.pg_pooler,
        application_name: "idemkey-server",
        redis,
        ..StoreSettings::default()
    };
    let store = Db::open(&url, &settings)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    let backend = store.backend();
    match &temp_file {
        Some(path) => info!(backend, path = %path.display(), "fixture database"),
        None => info!(backend, "fixture database"),
    }
    let app = router(layer(store, &args), Counter::default());
    let (listener, local) = idemkey_server::serve::bind(args.bind).await?;
    info!(
        address = %local,
        lease_ms = args.lease.as_millis() as u64,
        replay_ttl_s = args.replay_ttl.as_secs(),
        expiry_policy = args.expiry_policy.as_str(),
        "fixture listening on http://{local}"
    );
    let served = serve(listener, app, shutdown_signal(), Duration::from_secs(5))
        .await
        .map_err(|e| format!("server error: {e}"));
    // A temporary database is the fixture's alone: remove it on a clean stop.
    if let Some(file) = temp_file {
        for suffix in ["", "-wal", "-shm"] {
            let mut path = file.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
    served
}
