#!/usr/bin/env bash
# The library's feature sets as users pick them: each one alone must build
# without warnings (a Layer-on-Redis service, a PostgreSQL in_transaction
# service, an outbox on SQLite, flows on either store, none at all), so no
# code leans on a feature it does not declare.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"
for features in "" "axum" "metrics" "layer,redis" "postgres" "postgres-tls" "postgres,layer" "sqlite,outbox" "layer,serve,sqlite" "flow" "flow,postgres" "flow,sqlite" "sqlx-postgres" "sqlx-postgres,outbox" "flow,sqlx-postgres,layer"; do
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
# The order service's default build (its release binary) does not link the
# payment provider simulator: only the `provider-sim` feature (the demo,
# the tests, the fault suite) brings it.
if cargo tree -q -p idemkey-server -e normal --prefix none --format '{p}' | grep -q '^idemkey-provider-sim '; then
    echo "12-feature-sets.sh: FAILED: idemkey-server's default build depends on idemkey-provider-sim" >&2
    exit 1
fi
cargo tree -q -p idemkey-server -e normal --features provider-sim --prefix none --format '{p}' | grep -q '^idemkey-provider-sim ' ||
    { echo "12-feature-sets.sh: FAILED: the provider-sim feature does not bring the simulator: is the check looking at the right tree?" >&2; exit 1; }
echo "idemkey-server: the default build has no provider simulator"
