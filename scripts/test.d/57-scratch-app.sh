#!/usr/bin/env bash
# The library as a stranger's application uses it: a scratch crate in a
# temporary directory outside the repository depends on `idemkey` by path
# with `features = ["postgres", "layer"]` and nothing else of the workspace,
# wraps one axum route in `IdempotencyLayer` over `Db::open(DATABASE_URL)`
# and runs against a throwaway PostgreSQL (scripts/pg.sh, the testkit's
# idemkey-pg). Checks:
#   - its normal dependency tree has no rusqlite, redis, clap or reqwest
#     (and does have tokio-postgres, so the check looks at the right tree);
#   - a URL with sslmode=require or verify-full is refused at Db::open
#     with an error naming the `postgres-tls` feature (the app has none);
#   - POST /things twice with one Idempotency-Key and one body: both 201,
#     the same body, the second with `Idempotent-Replayed: true`, and the
#     handler ran once (GET /runs, outside the layer); the same key with
#     another body is 422 and runs nothing;
#   - the database then holds exactly the library's tables,
#     idempotency_records and idemkey_migrations, and nothing of the order
#     service (accounts, api_tokens, orders, products, outbox,
#     schema_migrations, ...);
#   - the same crate resolved as a new user's would be (`cargo
#     generate-lockfile`: the newest versions the manifests allow, not the
#     repository's Cargo.lock) builds with warnings denied in our crates.
# Builds into the shared target directory, so third-party crates are not
# rebuilt; the scratch crate starts from the repository's Cargo.lock and
# rust-toolchain.toml. The fresh-lockfile build has a target directory of
# its own under IDEMKEY_CACHE. Needs python3 (the HTTP client) and PostgreSQL's
# server binaries (as the tests do).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"
STARTED=$SECONDS

command -v python3 >/dev/null || { echo "57-scratch-app.sh: python3 is required" >&2; exit 1; }

fail() {
    echo "57-scratch-app.sh: FAILED: $*" >&2
    exit 1
}

SCRATCH=$(mktemp -d /tmp/idemkey-scratch-app.XXXXXX)
# The cluster's directory must be reachable by the `postgres` OS user when
# the hook runs as root (idemkey-pg runs the server as that user).
PGDIR=$(mktemp -d /tmp/idemkey-scratch-pg.XXXXXX)
chmod 755 "$PGDIR"
SERVER_PID=
PG_STARTED=

cleanup() {
    local rc=$?
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ -n $PG_STARTED ]]; then
        scripts/pg.sh stop "$PGDIR" >/dev/null 2>&1 || true
    fi
    if [[ $rc -ne 0 && -s $SCRATCH/server.log ]]; then
        echo "---- scratch app output ----" >&2
        tail -n 40 "$SCRATCH/server.log" >&2 || true
    fi
    rm -rf "$SCRATCH" "$PGDIR"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the scratch crate -------------------------------------------------------

# The versions and features of the workspace's [workspace.dependencies].
dep_line() {
    python3 - "$ROOT/Cargo.toml" "$1" <<'EOF'
import sys, tomllib
spec = tomllib.load(open(sys.argv[1], "rb"))["workspace"]["dependencies"][sys.argv[2]]
if isinstance(spec, str):
    spec = {"version": spec}
parts = []
for key, value in spec.items():
    if isinstance(value, bool):
        parts.append(f"{key} = {str(value).lower()}")
    elif isinstance(value, list):
        parts.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
    else:
        parts.append(f'{key} = "{value}"')
print(f"{sys.argv[2]} = {{ " + ", ".join(parts) + " }")
EOF
}

mkdir -p "$SCRATCH/app/src"
cat >"$SCRATCH/app/Cargo.toml" <<EOF
[package]
name = "idemkey-scratch-app"
version = "0.0.0"
edition = "2024"
publish = false

# A workspace of its own: nothing above /tmp is consulted.
[workspace]

[dependencies]
idemkey = { path = "$ROOT/idemkey", default-features = false, features = ["postgres", "layer"] }
$(dep_line axum)
$(dep_line tokio)
$(dep_line serde_json)
EOF
cp Cargo.lock "$SCRATCH/app/Cargo.lock"
cp rust-toolchain.toml "$SCRATCH/app/rust-toolchain.toml"

cat >"$SCRATCH/app/src/main.rs" <<'EOF'
//! A stranger's application: one route behind idemkey's layer.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use idemkey::layer::IdempotencyLayer;
use idemkey::store::StoreSettings;
use serde_json::{Value, json};

type Runs = Arc<AtomicU64>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let db = idemkey::Db::open(&url, &StoreSettings::default()).await?;
    let runs = Runs::default();
    let app = Router::new()
        .route("/things", post(create))
        .route_layer(IdempotencyLayer::new(db, |_parts| {
            Some("scratch-tenant".into())
        }))
        .route("/runs", get(count))
        .with_state(runs);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on {}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

async fn create(State(runs): State<Runs>, Json(thing): Json<Value>) -> (StatusCode, Json<Value>) {
    let count = runs.fetch_add(1, Ordering::SeqCst) + 1;
    (
        StatusCode::CREATED,
        Json(json!({ "count": count, "thing": thing })),
    )
}

async fn count(State(runs): State<Runs>) -> Json<Value> {
    Json(json!({ "runs": runs.load(Ordering::SeqCst) }))
}
EOF

# cargo fmt keeps the heredoc honest (run from the scratch crate, whose
# rust-toolchain.toml names the repository's toolchain).
(cd "$SCRATCH/app" && cargo fmt --check) || fail "the scratch crate's main.rs is not rustfmt-clean"

t0=$SECONDS
(cd "$SCRATCH/app" && cargo build -q)
BUILD_SECONDS=$((SECONDS - t0))
BIN="$CARGO_TARGET_DIR/debug/idemkey-scratch-app"
[[ -x $BIN ]] || fail "no binary at $BIN"

# ---- the same crate, resolved as a new user's ---------------------------------

# A new user gets the newest versions the manifests allow, not our
# Cargo.lock: a dependency's newer release that deprecates what we call
# prints warnings in their build. Cargo passes `--cap-lints allow` to
# registry crates, so RUSTFLAGS' `-D warnings` reaches only the path
# packages: idemkey, idemkey-core and the app. Its own target directory
# (kept between runs, so only the versions released since are built again):
# other versions and other RUSTFLAGS in the shared one would evict the
# workspace's builds.
FRESH_TARGET=${IDEMKEY_CACHE:-$HOME/.cache/idemkey}/scratch-fresh-target
cp -r "$SCRATCH/app" "$SCRATCH/fresh"
rm -rf "$SCRATCH/fresh/Cargo.lock" "$SCRATCH/fresh/target"
# Every feature a user can ask for, not only the app's two: a deprecation
# in a store the app does not use (Redis's TLS, say) reaches another user.
# Read from idemkey's manifest (every feature but `default` and internal
# `_` ones), the same list scripts/test.d/59-msrv.sh builds with, which
# then finds this build in the same target directory.
ALL_FEATURES=$(python3 -c 'import tomllib; f = tomllib.load(open("idemkey/Cargo.toml", "rb"))["features"]; print(", ".join(f'"'"'"{n}"'"'"' for n in sorted(f) if n != "default" and not n.startswith("_")))')
sed -i "s/features = \\[\"postgres\", \"layer\"\\]/features = [$ALL_FEATURES]/" "$SCRATCH/fresh/Cargo.toml"
grep -q '"postgres-tls", "redis"' "$SCRATCH/fresh/Cargo.toml" || fail "could not widen the fresh copy's idemkey features"
t0=$SECONDS
(cd "$SCRATCH/fresh" && cargo generate-lockfile -q) || fail "cargo generate-lockfile failed for the scratch crate"
NEWER=$(python3 - "$ROOT/Cargo.lock" "$SCRATCH/fresh/Cargo.lock" <<'EOF'
import sys, tomllib
def versions(path):
    found = {}
    for p in tomllib.load(open(path, "rb"))["package"]:
        found.setdefault(p["name"], set()).add(p["version"])
    return found
ours, fresh = versions(sys.argv[1]), versions(sys.argv[2])
print(", ".join(f"{n} {'/'.join(sorted(ours[n]))} -> {'/'.join(sorted(v))}"
                for n, v in sorted(fresh.items()) if n in ours and v - ours[n]))
EOF
)
echo "fresh lockfile: newer than Cargo.lock: ${NEWER:-nothing}"
# No debuginfo and no incremental cache: the same warnings, half the disk
# and less time.
if ! (cd "$SCRATCH/fresh" && env -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="${RUSTFLAGS:-} -D warnings" \
    CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$FRESH_TARGET" \
    cargo build -q 2>"$SCRATCH/fresh.log"); then
    grep -E -A8 '^(error|warning)' "$SCRATCH/fresh.log" | head -n 60 >&2 || tail -n 40 "$SCRATCH/fresh.log" >&2
    fail "the scratch crate with a fresh lockfile does not build warning-free (newer than Cargo.lock: ${NEWER:-nothing})"
fi
FRESH_SECONDS=$((SECONDS - t0))

# ---- its dependency tree -----------------------------------------------------

TREE=$(cd "$SCRATCH/app" && cargo tree -q -e normal --prefix none --format '{p}' | awk '{print $1}' | sort -u)
for unwanted in rusqlite redis clap reqwest rustls; do
    if grep -qx "$unwanted" <<<"$TREE"; then
        (cd "$SCRATCH/app" && cargo tree -e normal -i "$unwanted") >&2 || true
        fail "the postgres+layer dependency tree contains $unwanted"
    fi
done
for wanted in idemkey idemkey-core tokio-postgres axum; do
    grep -qx "$wanted" <<<"$TREE" || fail "the dependency tree lacks $wanted: is the check looking at the right tree?"
done
echo "dependency tree: $(wc -l <<<"$TREE") packages; no rusqlite, redis, clap, reqwest or rustls"

# ---- a TLS URL on a build without TLS -----------------------------------------

# `postgres` without `postgres-tls` connects in plaintext only: a URL that
# asks for TLS is refused at Db::open, naming the feature to turn on (no
# database needed: the URL is refused before any connection).
for mode in require verify-full; do
    if TLS_OUT=$(DATABASE_URL="postgres://127.0.0.1:1/app?sslmode=$mode" timeout 30 "$BIN" 2>&1); then
        fail "sslmode=$mode on a build without postgres-tls started: $TLS_OUT"
    fi
    grep -q "enable idemkey's \`postgres-tls\` feature" <<<"$TLS_OUT" ||
        fail "sslmode=$mode on a build without postgres-tls: the error does not name the feature: $TLS_OUT"
done
echo "a TLS URL without postgres-tls: refused, naming the feature"

# ---- a throwaway PostgreSQL ----------------------------------------------------

PG_STARTED=1
PG_OUT=$(scripts/pg.sh start "$PGDIR" --no-fsync)
DATABASE_URL=$(sed -n 's/^DATABASE_URL=//p' <<<"$PG_OUT")
[[ -n $DATABASE_URL ]] || fail "scripts/pg.sh start printed no DATABASE_URL: $PG_OUT"
echo "database: $DATABASE_URL"

PSQL=
if [[ -n ${IDEMKEY_PG_BIN:-} && -x $IDEMKEY_PG_BIN/psql ]]; then
    PSQL=$IDEMKEY_PG_BIN/psql
else
    for candidate in /usr/lib/postgresql/*/bin/psql; do
        [[ -x $candidate ]] && PSQL=$candidate
    done
fi
[[ -n $PSQL ]] || PSQL=$(command -v psql) || fail "psql not found"

# ---- the application ---------------------------------------------------------

DATABASE_URL=$DATABASE_URL "$BIN" >"$SCRATCH/server.log" 2>&1 &
SERVER_PID=$!
PORT=
for _ in $(seq 1 300); do
    PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$SCRATCH/server.log")
    [[ -n $PORT ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "the scratch app exited before listening"
    sleep 0.1
done
[[ -n $PORT ]] || fail "the scratch app did not print its port within 30 s"

python3 - "$PORT" <<'EOF'
import json, sys, urllib.error, urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"

def call(method, path, body=None, key=None):
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key is not None:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()

def check(condition, message):
    if not condition:
        sys.exit(f"57-scratch-app.sh: FAILED: {message}")

body = b'{"name": "first thing", "size": 3}'
s1, h1, b1 = call("POST", "/things", body, '"k-1"')
s2, h2, b2 = call("POST", "/things", body, '"k-1"')
check(s1 == 201, f"first POST /things: {s1} {b1!r}, wanted 201")
check(s2 == 201, f"second POST /things: {s2} {b2!r}, wanted 201")
check(b1 == b2, f"the bodies differ: {b1!r} then {b2!r}")
check(json.loads(b1).get("count") == 1, f"first body {b1!r} does not say count 1")
check(h1.get("Idempotent-Replayed") is None,
      f"the first answer says Idempotent-Replayed: {h1.get('Idempotent-Replayed')}")
check(h2.get("Idempotent-Replayed") == "true",
      f"the second answer's Idempotent-Replayed is {h2.get('Idempotent-Replayed')!r}, wanted 'true'")
s3, _, b3 = call("POST", "/things", b'{"name": "another thing"}', '"k-1"')
check(s3 == 422, f"the same key with another body: {s3} {b3!r}, wanted 422")
s4, _, b4 = call("GET", "/runs")
check(s4 == 200, f"GET /runs: {s4} {b4!r}")
runs = json.loads(b4).get("runs")
check(runs == 1, f"the handler ran {runs} times, wanted 1")
print(f"POST /things twice with one key: 201 and 201 (replayed), same body, 1 handler run; another body: 422")
EOF

# ---- what the library created ------------------------------------------------

TABLES=$(env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE -u PGOPTIONS -u PGSERVICE \
    "$PSQL" "$DATABASE_URL" -X -q -A -t -v ON_ERROR_STOP=1 -c \
    "SELECT table_schema || '.' || table_name FROM information_schema.tables
     WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1")
EXPECTED=$'public.idemkey_migrations\npublic.idempotency_records'
if [[ $TABLES != "$EXPECTED" ]]; then
    fail "the database holds [$(tr '\n' ' ' <<<"$TABLES")], wanted exactly [$(tr '\n' ' ' <<<"$EXPECTED")]"
fi

echo "57-scratch-app: a path-dependent axum app (postgres+layer) replays one key once, refuses a TLS URL naming postgres-tls, creates only" \
    "idempotency_records + idemkey_migrations, tree without rusqlite/redis/clap/reqwest" \
    "and builds warning-free on a fresh lockfile" \
    "(build ${BUILD_SECONDS}s, fresh lockfile ${FRESH_SECONDS}s, total $((SECONDS - STARTED))s)"
