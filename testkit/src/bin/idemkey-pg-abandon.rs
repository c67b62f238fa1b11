//! `idemkey-pg-abandon OUT`: starts the shared throwaway cluster, writes its
//! postmaster's pid and data directory to `OUT` (one per line) and exits
//! without stopping it, as a test process killed mid-run would. The
//! testkit's own test runs it to prove that the watchdog then stops the
//! cluster and removes its directory.

use std::process::ExitCode;

use idemkey_testkit::PgCluster;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: idemkey-pg-abandon OUT");
        return ExitCode::from(2);
    };
    let pg = match PgCluster::shared() {
        Ok(pg) => pg,
        Err(err) => {
            eprintln!("idemkey-pg-abandon: {err}");
            return ExitCode::FAILURE;
        }
    };
    let pid = std::fs::read_to_string(pg.data_dir().join("postmaster.pid"))
        .ok()
        .and_then(|text| text.lines().next().map(str::trim).map(str::to_owned));
    let Some(pid) = pid else {
        eprintln!("idemkey-pg-abandon: no postmaster.pid");
        return ExitCode::FAILURE;
    };
    let report = format!("{pid}\n{}\n", pg.data_dir().display());
    if let Err(err) = std::fs::write(&out, report) {
        eprintln!("idemkey-pg-abandon: {err}");
        return ExitCode::FAILURE;
    }
    // Exit without dropping the cluster: only the watchdog may stop it.
    std::process::exit(0);
}
