#!/usr/bin/env bash
# The library's feature sets as users pick them: each one alone must build
# without warnings (a Layer-on-Redis service, a PostgreSQL in_transaction
# service, an outbox on SQLite, flows on either store, none at all), so no
# code leans on a feature it does not declare.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"
for features in "" "axum" "metrics" "layer,redis" "postgres" "postgres-tls" "postgres,layer" "sqlite,outbox" "layer,serve,sqlite" "flow" "flow,postgres" "flow,sqlite"; do
    echo "idemkey --no-default-features --features [$features]"
    cargo clippy -q -p idemkey --no-default-features ${features:+--features "$features"} -- -D warnings
done
# PostgreSQL without TLS: a URL that asks for it is refused, naming the
# feature (the workspace's test run has postgres-tls on, through the order
# service, so these unit tests run only here).
echo "idemkey --no-default-features --features [postgres]: the TLS URL tests"
cargo test -q -p idemkey --no-default-features --features postgres --lib -- store::postgres::tls
# The order service's benchmark baseline (bench/payments.sh builds it in release, outside the
# tests): it must keep building.
echo "idemkey-server --features [without-payments]"
cargo clippy -q -p idemkey-server --features without-payments -- -D warnings
