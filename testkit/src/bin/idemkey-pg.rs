//! `idemkey-pg`: starts and stops a local PostgreSQL cluster kept in a
//! directory, for scripts, benchmarks and humans.
//!
//! ```text
//! idemkey-pg start DIR [--port N] [--no-fsync] [--set NAME=VALUE]... [--db NAME]
//! idemkey-pg stop DIR
//! idemkey-pg status DIR
//! ```
//!
//! `start` initialises `DIR` if needed, starts the server (or finds it
//! running), creates database `--db` if it is missing, and prints
//! `DATABASE_URL=postgres://postgres@127.0.0.1:PORT/DB` (DB defaults to
//! `postgres`). The server keeps running after the command exits. Unlike the
//! test clusters, `fsync` stays on unless `--no-fsync` is given. `stop` stops
//! it (fast mode); `status` prints the URL and exits 0 if it runs, 3 if not.

use std::path::PathBuf;
use std::process::ExitCode;

use idemkey_testkit::{PgCluster, PgOptions, running_port, stop_dir};

const USAGE: &str = "usage:
  idemkey-pg start DIR [--port N] [--no-fsync] [--set NAME=VALUE]... [--db NAME]
  idemkey-pg stop DIR
  idemkey-pg status DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("idemkey-pg: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let Some((command, rest)) = args.split_first() else {
        return Err(format!("missing command\n{USAGE}"));
    };
    if command == "-h" || command == "--help" {
        println!("{USAGE}");
        return Ok(ExitCode::SUCCESS);
    }
    // Options may come before or after DIR.
    let mut dir = None;
    let mut options = Vec::new();
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        if arg == "--no-fsync" {
            options.push((arg.as_str(), String::new()));
        } else if arg.starts_with('-') {
            let value = rest
                .next()
                .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
            options.push((arg.as_str(), value.clone()));
        } else if dir.replace(PathBuf::from(arg)).is_some() {
            return Err(format!("unexpected argument {arg:?}\n{USAGE}"));
        }
    }
    let dir = dir.ok_or_else(|| format!("missing directory\n{USAGE}"))?;
    if command != "start"
        && let Some((option, _)) = options.first()
    {
        return Err(format!("{command} takes no option {option:?}\n{USAGE}"));
    }
    match command.as_str() {
        "start" => start(dir, &options),
        "stop" => {
            let was_running = stop_dir(&dir).map_err(|e| e.to_string())?;
            if !was_running {
                eprintln!("idemkey-pg: no server running in {}", dir.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        "status" => status(dir),
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}

fn start(dir: PathBuf, args: &[(&str, String)]) -> Result<ExitCode, String> {
    let mut options = PgOptions::new().fsync(true).dir(dir);
    let mut db = String::from("postgres");
    for (option, value) in args {
        match *option {
            "--port" => {
                options = options.port(value.parse().map_err(|_| format!("bad port {value:?}"))?);
            }
            "--no-fsync" => options = options.fsync(false),
            "--set" => {
                let (name, value) = value
                    .split_once('=')
                    .ok_or_else(|| format!("--set wants NAME=VALUE, got {value:?}"))?;
                options = options.setting(name, value);
            }
            "--db" => db = value.clone(),
            other => return Err(format!("unknown option {other:?}\n{USAGE}")),
        }
    }
    let cluster = PgCluster::start_with(options).map_err(|e| e.to_string())?;
    let exists = cluster
        .psql(
            "postgres",
            &format!(
                "SELECT 1 FROM pg_database WHERE datname = '{}'",
                db.replace('\'', "''")
            ),
        )
        .map_err(|e| e.to_string())?;
    if exists.is_empty() {
        cluster.create_database(&db).map_err(|e| e.to_string())?;
    }
    println!("DATABASE_URL={}", cluster.url(&db));
    cluster.detach();
    Ok(ExitCode::SUCCESS)
}

fn status(dir: PathBuf) -> Result<ExitCode, String> {
    match running_port(&dir).map_err(|e| e.to_string())? {
        Some(port) => {
            println!("DATABASE_URL=postgres://postgres@127.0.0.1:{port}/postgres");
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("idemkey-pg: stopped");
            Ok(ExitCode::from(3))
        }
    }
}
