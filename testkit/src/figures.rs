//! Figures a test measured, for the test command's summary: one line each,
//! appended to the file `scripts/test.sh` names in `IDEMKEY_FIGURES` (it
//! prints them after its steps). Without the variable (a test run by hand)
//! nothing is written; the test prints its figures itself.

use std::fs::OpenOptions;
use std::io::{self, Write};

/// The environment variable naming the figures file.
pub const FIGURES_VAR: &str = "IDEMKEY_FIGURES";

/// Appends `line` (made one line) to the figures file, if there is one.
/// One `write` of an `O_APPEND` file: lines of tests running at once do not
/// interleave.
pub fn publish_figures(line: &str) -> io::Result<()> {
    let Some(path) = std::env::var_os(FIGURES_VAR).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let mut text = line.replace('\n', " ");
    text.push('\n');
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())
}
