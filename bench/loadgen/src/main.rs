//! A closed-loop HTTP/1.1 load generator for the benchmark's cells, beside
//! wrk: each connection sends a request, waits for the whole answer, sends
//! the next, and every request is timed from its own send to its own
//! answer. Nothing is added afterwards: wrk corrects its histogram for
//! coordinated omission, inserting synthetic samples below every slow
//! answer, so one stall of a connection becomes hundreds of samples; this
//! tool keeps only what was measured, so its percentiles and mean can be
//! checked against Little's law (`mean = connections / rate`).
//!
//! Prints one `RESULT key=value ...` line (the fields of `bench/wrk`'s
//! scripts, plus `mean_ms`, `little_ms`, `p999_ms`), and with `--log` one
//! line per request: start (µs since the window opened), latency (µs),
//! status, connection.

mod connection;
mod summary;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::connection::{Plan, Recorder};

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "idemkey-loadgen",
    about = "Closed-loop HTTP/1.1 load, every request timed"
)]
struct Args {
    /// Ports on 127.0.0.1; connection i goes to port i mod their count.
    #[arg(long, value_delimiter = ',', required = true)]
    ports: Vec<u16>,
    /// Connections, each one request at a time.
    #[arg(short = 'c', long, default_value_t = 16)]
    connections: usize,
    /// OS threads, each a single-threaded runtime (as wrk's -t).
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// How long the measured window lasts, in seconds.
    #[arg(short = 'd', long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load before the window opens (not recorded).
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Method.
    #[arg(long, default_value = "POST")]
    method: String,
    /// Path of every request.
    #[arg(long, default_value = "/orders")]
    path: String,
    /// A header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// The body of every request.
    #[arg(long, default_value = "")]
    body: String,
    /// Send this `Idempotency-Key` (a replay) instead of a fresh one per request.
    #[arg(long)]
    key: Option<String>,
    /// Send no `Idempotency-Key` at all.
    #[arg(long, conflicts_with = "key")]
    no_key: bool,
    /// Write one line per request here.
    #[arg(long)]
    log: Option<std::path::PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("idemkey-loadgen: {err}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.connections == 0 || args.threads == 0 || args.ports.is_empty() {
        return Err("connections, threads and ports must not be empty".into());
    }
    if !(args.duration > 0.0 && args.duration.is_finite() && args.warmup >= 0.0) {
        return Err("duration must be positive and warmup not negative".into());
    }
    let plan = Arc::new(Plan::new(
        &args.method,
        &args.path,
        &args.headers,
        &args.body,
        args.key.as_deref(),
        args.no_key,
    )?);
    let start = Instant::now();
    let opens = start + Duration::from_secs_f64(args.warmup);
    let closes = opens + Duration::from_secs_f64(args.duration);
    let threads = args.threads.min(args.connections);
    let recorders: Vec<Recorder> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let plan = Arc::clone(&plan);
                let mine: Vec<(usize, u16)> = (0..args.connections)
                    .filter(|i| i % threads == t)
                    .map(|i| (i, args.ports[i % args.ports.len()]))
                    .collect();
                scope.spawn(move || connection::run_thread(&plan, &mine, opens, closes))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let summary = summary::Summary::of(&recorders, args.connections);
    if let Some(path) = &args.log {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = std::io::BufWriter::new(file);
        for r in &recorders {
            for s in &r.samples {
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}",
                    s.start_us, s.latency_us, s.status, r.connection
                )
                .map_err(|e| e.to_string())?;
            }
        }
        out.flush().map_err(|e| e.to_string())?;
    }
    println!("{}", summary.result_line());
    Ok(())
}
