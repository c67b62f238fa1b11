#!/usr/bin/env bash
# Prints the cargo-fuzz targets of a fuzz project (fuzz/ by default, or the
# directory given), one a line. Fails when there is no project or no
# target in it, so that no fuzz step passes by running nothing.
set -euo pipefail
dir=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/fuzz}
[[ -f $dir/Cargo.toml ]] || { echo "fuzz-targets.sh: no fuzz project at $dir" >&2; exit 1; }
list=$(cargo +nightly fuzz list --fuzz-dir "$dir")
if [[ -z ${list//[[:space:]]/} ]]; then
    echo "fuzz-targets.sh: no fuzz target in $dir" >&2
    exit 1
fi
printf '%s\n' "$list"
