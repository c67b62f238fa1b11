//! The `idemkey-server` binary: `serve`, `migrate`, `account`, `token`, `fixture`.

use std::process::ExitCode;

mod admin;
mod fixture;
mod open;
mod outbox_cli;

use open::{cli_settings, database_url, open_store};

use clap::Parser as _;
use idemkey_server::config::{Cli, Command, LogFormat, ServeArgs};
use idemkey_server::db::PgSettings;
use idemkey_server::serve::shutdown_signal;
use idemkey_server::{AppState, Settings, app, maintenance, serve, telemetry, token_usage};
use tracing::{error, info};

/// mimalloc rather than glibc's allocator: a request allocates and frees
/// many small blocks across the runtime's threads, and glibc's malloc, free
/// and their consolidation were a sixth of a cached replay's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match &cli.command {
        Command::Serve(args) => args.log_format,
        _ => LogFormat::Text,
    };
    let _log = telemetry::init(format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            error!("{message}");
            eprintln!("idemkey-server: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve(args) => run_serve(*args).await,
        Command::Migrate(database) => {
            open_store(&database, &cli_settings(&database)).await?;
            info!("migrations are up to date");
            Ok(())
        }
        Command::Fixture(args) => fixture::run(args).await,
        Command::Worker(args) => outbox_cli::worker(args).await,
        Command::Outbox(command) => outbox_cli::outbox(command).await,
        Command::Account(command) => admin::account(command).await,
        Command::Token(command) => admin::token(command).await,
        #[cfg(feature = "provider-sim")]
        Command::Provider(args) => idemkey_provider_sim::run(args).await,
    }
}

async fn run_serve(args: ServeArgs) -> Result<(), String> {
    args.validate()?;
    let pg = PgSettings {
        pool_size: args.pool_size,
        pool_wait: args.pool_wait,
        sqlite_readers: args.sqlite_readers,
        lock_timeout: args.lock_timeout,
        statement_timeout: args.statement_timeout,
        pooler: args.database.pg_pooler,
        ..PgSettings::default()
    };
    match database_url(&args.database) {
        (url, true) => {
            let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
            info!(
                "no --database-url or DATABASE_URL: using {url} in {} (SQLite, created on first start)",
                cwd.display()
            );
        }
        (url, false) => {
            let backend = if url.starts_with("sqlite://") {
                "sqlite"
            } else {
                "postgres"
            };
            info!(backend, "starting idemkey-server");
        }
    }
    let store = open_store(&args.database, &pg).await?;
    #[cfg(feature = "without-payments")]
    tracing::warn!("built without payments (a benchmark's baseline): orders are never charged");
    #[cfg(feature = "test-faults")]
    if args.test_faults {
        info!("test fault injection is ON (x-idemkey-test-fault header)");
    }
    let demo_accounts = if args.demo {
        admin::start_demo(&store).await?
    } else {
        idemkey_server::routes::DemoAccounts::default()
    };
    let demo_token = demo_accounts.0.first().map(|(_, token)| token.clone());
    let settings = Settings {
        key_profile: args.key_profile,
        replay_ttl: args.replay_ttl,
        tombstone_ttl: args.tombstone_ttl,
        expiry_policy: args.expiry_policy,
        #[cfg(feature = "test-faults")]
        test_faults: args.test_faults,
        #[cfg(not(feature = "test-faults"))]
        test_faults: false,
        demo_dir: args.demo.then(|| args.demo_dir.clone()),
        demo_token,
        body_read_timeout: args.body_read_timeout,
        purchase_wait: args.purchase_wait,
        replay_cache: idemkey_server::replay_cache::ReplayCacheSettings {
            bytes: args.replay_cache_mib.saturating_mul(1024 * 1024),
            auth_ttl: args.auth_cache_ttl,
        },
    };
    let state = AppState::new(store.clone(), settings);
    // Read once before the first order, so that a burst of them does not
    // each ask for it.
    state
        .catalogue()
        .reload(&store)
        .await
        .map_err(|e| format!("cannot read the catalogue: {e}"))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_rx_workers = stop_rx.clone();
    let trimmer = tokio::spawn(maintenance::run(
        store.store(),
        args.tombstone_ttl,
        args.trim_interval,
        args.trim_batch,
        stop_rx.clone(),
    ));
    let usage = tokio::spawn(token_usage::run(
        state.token_usage().clone(),
        store.clone(),
        args.token_last_used_interval,
        stop_rx,
    ));
    let workers = args.outbox.start(
        &store,
        state.outbox_metrics(),
        state.outbox_wake(),
        &stop_rx_workers,
    )?;
    let (listener, local) = idemkey_server::serve::bind(args.bind).await?;
    info!(
        address = %local,
        key_profile = %args.key_profile,
        replay_ttl_s = args.replay_ttl.as_secs(),
        expiry_policy = args.expiry_policy.as_str(),
        "listening on http://{local}"
    );
    let mut router = app(state).layer(axum::Extension(demo_accounts));
    // Demo mode's switch on the provider forwards with the payments secret.
    if let (true, Some(url)) = (args.demo, &args.outbox.payments_url) {
        let token = args.outbox.payments_token.as_deref().unwrap_or_default();
        router = router.layer(axum::Extension(idemkey_server::routes::DemoProvider::new(
            url, token,
        )?));
    }
    let limits = args.limits();
    serve::serve_with(
        listener,
        router,
        shutdown_signal(),
        args.shutdown_grace,
        limits,
    )
    .await
    .map_err(|e| format!("server error: {e}"))?;
    let _ = stop_tx.send(true);
    let _ = trimmer.await;
    let _ = usage.await;
    for worker in workers {
        let _ = worker.await;
    }
    store.close();
    info!("stopped");
    Ok(())
}
