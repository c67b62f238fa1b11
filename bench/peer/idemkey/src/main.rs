//! `peer-bench-idemkey`: the echo handler of `../common.rs` bare, behind
//! idemkey's tower `IdempotencyLayer`, or through idemkey's
//! `in_transaction` API, for `bench/layer-peer.sh`.
//!
//! | `--mode` | `--store` |
//! |---|---|
//! | `bare` | (none) |
//! | `layer` | `sqlite://…`, `postgres://…`, `redis://…` |
//! | `in-transaction` | `sqlite://…`, `postgres://…` |

#[path = "../../common.rs"]
mod common;
mod in_transaction;

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};
use idemkey_core::KeyProfile;
use idemkey::Db;
use idemkey::layer::IdempotencyLayer;
use idemkey::store::StoreSettings;

/// The one scope of every idempotency record this bench writes.
pub const BENCH_SCOPE: &str = "bench";

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    Bare,
    Layer,
    InTransaction,
}

#[derive(Parser, Debug)]
#[command(about = "The echo handler bare, behind idemkey's Layer, or in its in-transaction API")]
struct Args {
    /// What wraps the handler.
    #[arg(long, value_enum)]
    mode: Mode,
    /// The store's URL (layer and in-transaction modes).
    #[arg(long, default_value = "")]
    store: String,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:38300")]
    bind: SocketAddr,
}

async fn open(url: &str) -> Result<Db, String> {
    Db::open(url, &StoreSettings::default())
        .await
        .map_err(|e| format!("cannot open the store: {e}"))
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let runs = common::Runs::default();
    let measured = match args.mode {
        Mode::Bare => common::bare(runs.clone()),
        Mode::Layer => {
            let db = open(&args.store).await?;
            let layer = IdempotencyLayer::new(db, |_| Some(BENCH_SCOPE.to_owned()))
                .key_profile(KeyProfile::Lenient);
            common::bare(runs.clone()).route_layer(layer)
        }
        Mode::InTransaction => in_transaction::router(open(&args.store).await?, runs.clone())?,
    };
    let app = measured.merge(common::outside(runs, false));
    common::serve(args.bind, app, &format!("idemkey {:?}", args.mode)).await
}
