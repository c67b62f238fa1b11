#!/usr/bin/env bash
# A break of the published crates' API shows: cargo-semver-checks compares
# idemkey-core's and idemkey's public API (every feature) with the last
# release's, the git revision semver-baseline.toml names (0.1.0 was never
# on crates.io, so there is no registry baseline). A breaking change must
# bump the workspace version in the same change (0.x: 0.1 -> 0.2); with the
# bump the check passes, without it it fails and lists what broke.
# Also checked: the revision is in this clone (a shallow clone fails here,
# saying so) and its workspace version is the one the file records.
# Needs cargo-semver-checks (scripts/test.sh installs it). Builds rustdoc
# JSON of both revisions into $CARGO_TARGET_DIR/semver-checks (kept between
# runs, so a run after the first takes about a minute).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

fail() {
    echo "59-semver.sh: FAILED: $*" >&2
    exit 1
}

command -v python3 >/dev/null || fail "python3 is required"
cargo semver-checks --version >/dev/null 2>&1 ||
    fail "cargo-semver-checks not found: cargo install cargo-semver-checks --version '^0.51' --locked (scripts/test.sh does)"

read -r REV VERSION < <(python3 -c 'import tomllib; b = tomllib.load(open("semver-baseline.toml", "rb")); print(b["rev"], b["version"])')
git cat-file -e "$REV^{commit}" 2>/dev/null ||
    fail "the baseline revision $REV (semver-baseline.toml) is not in this clone: fetch the full history (git fetch --unshallow)"
AT_REV=$(git show "$REV:Cargo.toml" | python3 -c 'import sys, tomllib; print(tomllib.loads(sys.stdin.read())["workspace"]["package"]["version"])')
[[ $AT_REV == "$VERSION" ]] ||
    fail "semver-baseline.toml says version $VERSION, but $REV's workspace version is $AT_REV"
NOW=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')

t0=$SECONDS
LOG=$CARGO_TARGET_DIR/semver-checks.log
rc=0
cargo semver-checks --package idemkey-core --package idemkey --baseline-rev "$REV" \
    --all-features >"$LOG" 2>&1 || rc=$?
grep -E '^ *(Checked|Summary)|^error' "$LOG" || true
if ((rc != 0)); then
    grep -q -- '--- failure' "$LOG" || tail -n 40 "$LOG" >&2
    sed -n '/--- failure/,$p' "$LOG" | head -n 80 >&2
    fail "the public API breaks against $VERSION ($REV) without the version bump it needs (now $NOW): bump the workspace version, or keep the API (full output: $LOG)"
fi
echo "59-semver: idemkey-core and idemkey $NOW against $VERSION (${REV:0:7}): no break the version does not allow ($((SECONDS - t0))s)"
