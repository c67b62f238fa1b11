//! `idemkey-chaos [--size small|large] [--seed N] SCENARIO... | all`

use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use idemkey_chaos::{ALL, Size, rng::Rng, run};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SizeArg {
    Small,
    Large,
}

/// Fault and load scenarios against real idemkey-server processes.
#[derive(Debug, Parser)]
#[command(name = "idemkey-chaos")]
struct Cli {
    /// small: seconds per scenario (CI); large: minutes (by hand).
    #[arg(long, value_enum, default_value = "small")]
    size: SizeArg,
    /// Seed of the random choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Scenarios to run, or `all`: kill9, pg-immediate, proxy-cut, slow-db,
    /// failover, hostile, sqlite-kill, clock-skew, payments, multi-step.
    #[arg(required = true)]
    scenarios: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let size = match cli.size {
        SizeArg::Small => Size::Small,
        SizeArg::Large => Size::Large,
    };
    let names: Vec<String> = if cli.scenarios.iter().any(|s| s == "all") {
        ALL.iter().map(|s| (*s).to_owned()).collect()
    } else {
        cli.scenarios.clone()
    };
    if let Err(err) = build_server() {
        eprintln!("idemkey-chaos: {err}");
        return ExitCode::FAILURE;
    }
    let seed = cli.seed.unwrap_or_else(Rng::fresh_seed);
    let mut failed = Vec::new();
    let mut summary = Vec::new();
    for name in &names {
        eprintln!("idemkey-chaos: running {name} ({size:?}, seed {seed})");
        match run(name, size, seed) {
            Ok(report) => {
                println!("{}", report.table());
                let verdict = if report.pending.is_some() {
                    "PENDING"
                } else if report.ok() {
                    "PASS"
                } else {
                    failed.push(name.clone());
                    "FAIL"
                };
                summary.push(format!(
                    "{name:<13} {verdict:<8} ops={:<6} attempts={:<7} faults={:<5} duplicates={} lost={}",
                    report.ops,
                    report.attempts,
                    report.total_faults(),
                    report.duplicates,
                    report.lost_acks
                ));
            }
            Err(err) => {
                println!("== {name}: ERROR {err}\n");
                summary.push(format!("{name:<13} ERROR    {err}"));
                failed.push(name.clone());
            }
        }
    }
    println!("== summary (size {size:?}, seed {seed})");
    for line in &summary {
        println!("  {line}");
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

/// Under `cargo run`, builds the server binary of the same profile first,
/// so the scenarios never run a stale one, with the `test-faults` feature
/// the scenarios' `--test-faults` servers need.
fn build_server() -> Result<(), String> {
    let (Some(cargo), Ok(exe)) = (std::env::var_os("CARGO"), std::env::current_exe()) else {
        return Ok(());
    };
    if std::env::var_os("IDEMKEY_SERVER_BIN").is_some() {
        return Ok(());
    }
    let release = exe
        .parent()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n == "release");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args([
        "build",
        "-q",
        "-p",
        "idemkey-server",
        "--bin",
        "idemkey-server",
        "--features",
        "test-faults",
    ]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().map_err(|e| format!("cargo build: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err("cargo build -p idemkey-server failed".into())
    }
}
