//! `idemkey-server worker` and `idemkey-server outbox list|retry`.

use std::sync::Arc;

use idemkey::outbox::OutboxMetrics;
use idemkey_server::config::{OutboxCommand, WorkerArgs};
use idemkey_server::serve::shutdown_signal;
use tracing::info;

use crate::open::{cli_settings, open_store};

/// Delivers the outbox until SIGTERM or SIGINT.
pub(crate) async fn worker(args: WorkerArgs) -> Result<(), String> {
    args.outbox.validate()?;
    if args.outbox.payments_url.is_none() {
        return Err("a worker needs --payments-url (or IDEMKEY_PAYMENTS_URL)".into());
    }
    let store = open_store(&args.database, &cli_settings(&args.database)).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = args.outbox.start(
        &store,
        &Arc::new(OutboxMetrics::default()),
        &Arc::default(),
        &stop_rx,
    )?;
    info!("worker running; SIGTERM or SIGINT stops it");
    shutdown_signal().await;
    let _ = stop_tx.send(true);
    for worker in workers {
        let _ = worker.await;
    }
    store.close();
    info!("stopped");
    Ok(())
}

/// Lists messages or sends dead letters back.
pub(crate) async fn outbox(command: OutboxCommand) -> Result<(), String> {
    match command {
        OutboxCommand::List {
            status,
            limit,
            database,
        } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let entries = store
                .store()
                .outbox_list(status.as_deref(), limit)
                .await
                .map_err(|e| format!("cannot list the outbox: {e}"))?;
            println!("id\tstatus\tattempts\teffect\tresource\tdownstream_key\tresult_or_error");
            for e in entries {
                let detail = e.result.or(e.last_error).unwrap_or_default();
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                    e.id,
                    e.status,
                    e.attempts,
                    e.effect,
                    e.resource_id.unwrap_or_default(),
                    e.downstream_key.unwrap_or_default(),
                    detail.replace(['\t', '\n'], " ")
                );
            }
            Ok(())
        }
        OutboxCommand::Retry {
            id,
            all_dead: _,
            force,
            payments_key_retention,
            database,
        } => {
            let store = open_store(&database, &cli_settings(&database)).await?;
            let done = store
                .store()
                .outbox_retry(id, payments_key_retention, force)
                .await
                .map_err(|e| format!("cannot retry: {e}"))?;
            println!("{} message(s) sent back to pending", done.requeued);
            if !done.too_old.is_empty() {
                let ids: Vec<String> = done.too_old.iter().map(i64::to_string).collect();
                return Err(format!(
                    "message(s) {} are older than the provider's key retention ({}): the provider \
                     may have forgotten their keys, and a re-sent charge would be a second charge; \
                     check the provider for their charges, then retry with --force",
                    ids.join(", "),
                    humantime_secs(payments_key_retention)
                ));
            }
            if done.requeued == 0 && id.is_some() {
                return Err("no dead or failed message with that id".into());
            }
            Ok(())
        }
    }
}

/// A duration as the flags write it (`86400s`).
fn humantime_secs(d: std::time::Duration) -> String {
    format!("{}s", d.as_secs())
}
