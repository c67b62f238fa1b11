//! `peer-bench-axum-idempotent`: the echo handler of `../common.rs` bare or
//! behind `axum-idempotent` (the peer), for `bench/layer-peer.sh`.
//!
//! | `--mode` | `--store` |
//! |---|---|
//! | `bare` | (none) |
//! | `peer` | `moka` (in-process, the README's example) or `postgres://…` (ruts' durable store) |

#[path = "../../common.rs"]
mod common;
mod peer;

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Bare,
    Peer,
}

#[derive(Parser, Debug)]
#[command(about = "The echo handler bare or behind axum-idempotent")]
struct Args {
    /// What wraps the handler.
    #[arg(long, value_enum)]
    mode: Mode,
    /// The session store (peer mode): `moka` or a PostgreSQL URL.
    #[arg(long, default_value = "moka")]
    store: String,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:38300")]
    bind: SocketAddr,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let runs = common::Runs::default();
    let app = match args.mode {
        Mode::Bare => common::bare(runs.clone()).merge(common::outside(runs, false)),
        Mode::Peer => peer::router(&args.store, runs.clone())
            .await?
            .merge(common::outside(runs, true)),
    };
    common::serve(args.bind, app, &format!("axum-idempotent {:?}", args.mode)).await
}
