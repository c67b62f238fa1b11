#!/usr/bin/env bash
# Usage: scripts/pg.sh start|stop|status [DIR] [idemkey-pg options...]
# Starts, stops or checks a local PostgreSQL cluster kept in DIR (default
# /tmp/idemkey-pg-dev) with the idemkey-pg command from idemkey-testkit.
# `start` prints DATABASE_URL=...; see `scripts/pg.sh --help` for options.
# DIR must be reachable by the `postgres` OS user when run as root, so
# prefer a directory under /tmp.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

command=${1:---help}
shift || true
if [[ $command != -* && ( $# -eq 0 || $1 == -* ) ]]; then
    set -- "/tmp/idemkey-pg-dev" "$@"
fi
exec cargo run -q -p idemkey-testkit --bin idemkey-pg -- "$command" "$@"
