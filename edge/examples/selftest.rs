//! The native side of the Worker's self-test: reads a batch (see
//! `idemkey_edge::selftest`) on stdin and prints the core's answers, so
//! `edge/test/edge.test.mjs` can compare them with the Worker's.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut batch = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut batch) {
        eprintln!("selftest: {e}");
        return ExitCode::FAILURE;
    }
    match idemkey_edge::selftest::answer(&batch) {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("selftest: {message}");
            ExitCode::FAILURE
        }
    }
}
