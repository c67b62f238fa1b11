#!/usr/bin/env bash
# The one test command of idemkey: ./scripts/test.sh
#
# Installs what is missing (and nothing else), then runs, stopping at the
# first failure: rustfmt, clippy, the tests (nextest, plus doctests), rustdoc
# with warnings denied, the no-host-imports check of the core built for
# wasm32, the fuzz build, and every scripts/test.d/*.sh in name order. Nothing
# is skipped: a hook that lost its executable bit, a test filter that matches
# no test and a fuzz project without targets each fail the run. The summary
# ends with the figures tests published (see IDEMKEY_FIGURES) and a last line
# saying whether everything passed and how long it took.
#
# Builds go to a target directory outside the clone, shared by clones:
#   CARGO_TARGET_DIR  (default ~/.cache/idemkey/target)
#   IDEMKEY_CACHE     (default ~/.cache/idemkey; the wasm probe and the fuzz
#                      build use subdirectories of it)
# Hooks in scripts/test.d/ get this environment plus IDEMKEY_ROOT (the
# repository root). Tests and hooks append one-line figures to the file
# named by IDEMKEY_FIGURES (a fresh file per run), which the summary prints.
#
# Sourced (`source scripts/test.sh`), it only defines its functions: the
# hook scripts/test.d/05-test-sh.sh checks them that way.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export IDEMKEY_ROOT="$PWD"
export IDEMKEY_CACHE="${IDEMKEY_CACHE:-$HOME/.cache/idemkey}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$IDEMKEY_CACHE/target}"
if [[ "${CI:-}" == "true" ]]; then
    export CARGO_TERM_COLOR=never
fi

STARTED=$SECONDS
CURRENT="setup"
SUMMARY=()

finish() {
    local rc=$?
    local total=$((SECONDS - STARTED))
    echo
    echo "==== summary ===="
    local line
    for line in "${SUMMARY[@]}"; do
        echo "  $line"
    done
    if [[ -s ${IDEMKEY_FIGURES:-} ]]; then
        echo "  figures:"
        while IFS= read -r line; do
            echo "    $line"
        done <"$IDEMKEY_FIGURES"
    fi
    if [[ -n ${IDEMKEY_FIGURES:-} ]]; then
        rm -f "$IDEMKEY_FIGURES"
    fi
    if [[ $rc -eq 0 ]]; then
        echo "test.sh: PASSED, ${#SUMMARY[@]} steps in ${total}s"
    else
        echo "  $CURRENT: FAILED (exit $rc)"
        echo "test.sh: FAILED at '$CURRENT' after ${total}s"
    fi
}

# step NAME COMMAND...: runs one step under a header and records its time.
# Never call it in a condition (`if`, `||`, `&&`): bash turns `set -e` off
# inside those, and a failing command inside the step would go unnoticed.
step() {
    CURRENT=$1
    shift
    local t0=$SECONDS
    echo
    echo "==== $CURRENT ===="
    "$@"
    SUMMARY+=("$CURRENT: ok ($((SECONDS - t0))s)")
}

have() { command -v "$1" >/dev/null 2>&1; }

# ---- (a) tools ----------------------------------------------------------

install_tools() {
    have rustup || { echo "rustup is required (https://rustup.rs)" >&2; return 1; }
    have python3 || { echo "python3 is required (wasm import check)" >&2; return 1; }

    # The pinned toolchain with the components and targets that
    # rust-toolchain.toml lists; no download when they are all there.
    rustup toolchain install --no-self-update
    local spec installed item
    spec=$(python3 -c 'import tomllib; t = tomllib.load(open("rust-toolchain.toml", "rb"))["toolchain"]
print(" ".join(["component:" + c for c in t.get("components", [])] + ["target:" + x for x in t.get("targets", [])]))')
    installed=" $(rustup component list --installed | tr '\n' ' ') "
    for item in $spec; do
        case $item in
        component:*)
            [[ $installed == *" ${item#component:}-"* ]] || rustup component add "${item#component:}"
            ;;
        target:*)
            [[ $installed == *" rust-std-${item#target:} "* ]] || rustup target add "${item#target:}"
            ;;
        esac
    done
    rustc --version

    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest --version | head -n 1
    else
        echo "cargo-nextest not found: tests will run with cargo test"
    fi

    if [[ -d fuzz ]]; then
        rustup toolchain list | grep -q '^nightly' ||
            rustup toolchain install nightly --profile minimal --no-self-update
        if ! cargo fuzz --version >/dev/null 2>&1; then
            cargo install cargo-fuzz --locked || cargo install cargo-fuzz
        fi
        cargo fuzz --version
    fi

    # The semver check (scripts/test.d/59-semver.sh) against the last
    # release's revision (semver-baseline.toml). Installed once; a few
    # minutes to build, skipped when present.
    if [[ -f semver-baseline.toml ]]; then
        if ! cargo semver-checks --version >/dev/null 2>&1; then
            cargo install cargo-semver-checks --version '^0.51' --locked
        fi
        cargo semver-checks --version
    fi

    # libfaketime: the clock-skew tests run a server whose clock is off.
    if [[ ! -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]]; then
        if [[ $EUID -eq 0 ]] && have apt-get; then
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends faketime
        else
            echo "libfaketime not found: install Debian's faketime" >&2
            return 1
        fi
    fi

    # The PostgreSQL server binaries the integration tests start
    # (idemkey-testkit); Debian's package if none are on the machine.
    if [[ -z "${IDEMKEY_PG_BIN:-}" ]] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
        if [[ $EUID -eq 0 ]] && have apt-get; then
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends postgresql
        else
            echo "PostgreSQL server binaries not found: install postgresql or set IDEMKEY_PG_BIN" >&2
            return 1
        fi
    fi

    # redis-server and redis-cli: the Redis store's tests start nodes and
    # clusters of their own (idemkey-testkit); openssl makes the TLS node's
    # throwaway certificates.
    if ! have redis-server || ! have redis-cli || ! have openssl; then
        if [[ $EUID -eq 0 ]] && have apt-get; then
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends redis-server redis-tools openssl
        else
            echo "redis-server, redis-cli or openssl not found: install Debian's redis-server, redis-tools and openssl" >&2
            return 1
        fi
    fi
    redis-server --version

    # PgBouncer: the PgBouncer tests put a throwaway one (transaction
    # pooling) in front of a throwaway cluster (idemkey-testkit).
    if [[ ! -x /usr/sbin/pgbouncer ]]; then
        if [[ $EUID -eq 0 ]] && have apt-get; then
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends pgbouncer
        else
            echo "/usr/sbin/pgbouncer not found: install Debian's pgbouncer" >&2
            return 1
        fi
    fi
    /usr/sbin/pgbouncer --version | head -1
}

# ---- (b)-(e) the workspace ----------------------------------------------

check_fmt() {
    # rustfmt colours its diffs even into a pipe or file.
    local plain=()
    [[ -t 1 ]] || plain=(-- --color never)
    cargo fmt --all --check "${plain[@]}"
    # The crates outside the workspace.
    cargo fmt --manifest-path scripts/wasm-probe/Cargo.toml --check "${plain[@]}"
    if [[ -d fuzz ]]; then
        cargo fmt --manifest-path fuzz/Cargo.toml --all --check "${plain[@]}"
    fi
}

# The fault suite and the server's own tests inject faults, which only a
# build with this feature contains; release builds never do. The library's
# own tests (idemkey/tests, `cargo test -p idemkey --all-features`) need its
# stores and front ends: named here, not left to what the order service
# happens to turn on (scripts/test.d/05-test-sh.sh fails a test target
# these arguments do not build).
TEST_FEATURES=(
    --features idemkey-server/test-faults
    --features idemkey/postgres,idemkey/sqlite,idemkey/redis,idemkey/layer,idemkey/outbox,idemkey/flow,idemkey/serve,idemkey/clap,idemkey/sqlx-postgres,idemkey/postgres-tls,idemkey/axum,idemkey/metrics
)
# A filter (-E) that matches no test fails the run: a renamed package or
# test must not turn a step into one that runs nothing.
NEXTEST_ARGS=(--workspace "${TEST_FEATURES[@]}" --no-fail-fast --no-tests=fail)

clippy_both() {
    # The code as tests build it, and the server as it ships (no faults).
    cargo clippy --workspace --all-targets "${TEST_FEATURES[@]}" -- -D warnings
    cargo clippy -p idemkey-server --lib --bins -- -D warnings
}

run_tests() {
    local rc=0
    if cargo nextest --version >/dev/null 2>&1; then
        # The model's replays pace each walk in real ticks and mostly wait
        # (a tick that a busy machine overruns is replayed twice as long):
        # they run beside the fault suite, which takes one slot at a time,
        # rather than hold a slot the rest of the suite would keep busy.
        local paced='binary_id(idemkey-model::replay)'
        cargo nextest run "${NEXTEST_ARGS[@]}" -E "not package(idemkey-chaos) & not $paced" || rc=$?
        # The fault suite without the rest of the suite: its scenarios time
        # real processes (a 20 s answer is a hang), and the CPU-bound tests
        # on the same cores are load they were not written for.
        cargo nextest run "${NEXTEST_ARGS[@]}" -E "package(idemkey-chaos) | $paced" || rc=$?
    else
        cargo test --workspace "${TEST_FEATURES[@]}" --no-fail-fast --lib --bins --tests || rc=$?
    fi
    # nextest does not run doctests.
    cargo test --workspace "${TEST_FEATURES[@]}" --doc || rc=$?
    # The outbox example asserts its own walk-through (one mail for a lost
    # answer); it runs as a library user would run it.
    cargo run -q -p idemkey-server --example outbox || rc=$?
    # The library's three-step flow asserts each step ran once.
    cargo run -q -p idemkey --features flow,sqlite --example flow || rc=$?
    return "$rc"
}

build_docs() {
    RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps
}

# ---- (f) the core on wasm32: no host imports -----------------------------

check_wasm() {
    # A cdylib outside the workspace that links idemkey-core, resolved with
    # the workspace's own lock file.
    local probe=scripts/wasm-probe
    local target="$IDEMKEY_CACHE/wasm-probe"
    cp Cargo.lock "$probe/Cargo.lock"
    CARGO_TARGET_DIR="$target" cargo build --manifest-path "$probe/Cargo.toml" \
        --target wasm32-unknown-unknown --release
    scripts/check-wasm-imports.sh "$target/wasm32-unknown-unknown/release/idemkey_wasm_probe.wasm"
}

# ---- (g) fuzz targets ------------------------------------------------------

build_fuzz() {
    # No fuzz project, or one without targets, fails here rather than
    # building (and later running) nothing.
    scripts/fuzz-targets.sh
    # Same flags and target directory as scripts/fuzz.sh, which reuses it.
    (cd fuzz && CARGO_TARGET_DIR="$IDEMKEY_CACHE/fuzz-target" cargo +nightly fuzz build -O)
}

# ---- (h) hooks from later issues -------------------------------------------

# run_hooks DIR: every DIR/*.sh in name order, each its own step. A hook
# that is not executable (a mode bit lost in a copy or a patch) fails the
# run: skipping it would pass without running its tests.
run_hooks() {
    local hook hooks
    shopt -s nullglob
    hooks=("$1"/*.sh)
    shopt -u nullglob
    for hook in "${hooks[@]}"; do
        if [[ -x $hook ]]; then
            step "hook $(basename "$hook")" "$hook"
        else
            step "hook $(basename "$hook")" not_executable "$hook"
        fi
    done
}

not_executable() {
    echo "$1 is not executable: chmod +x it (git keeps the mode)" >&2
    return 1
}

# ---- run -------------------------------------------------------------------

main() {
    trap finish EXIT
    mkdir -p "$IDEMKEY_CACHE"
    IDEMKEY_FIGURES=$(mktemp "$IDEMKEY_CACHE/figures.XXXXXX")
    export IDEMKEY_FIGURES
    step "tools" install_tools
    step "rustfmt" check_fmt
    step "clippy" clippy_both
    step "tests" run_tests
    step "rustdoc" build_docs
    step "wasm32 core has no imports" check_wasm
    step "fuzz build" build_fuzz
    run_hooks scripts/test.d
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main "$@"
fi
