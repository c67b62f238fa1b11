#!/usr/bin/env bash
# The declared MSRV (the workspace's `rust-version`) builds the library: a
# scratch crate outside the repository depends on idemkey by path with every
# feature a user can ask for, resolves a fresh lockfile as a user on that
# toolchain would (resolver 3 prefers versions whose rust-version it meets)
# and builds it with `cargo +MSRV`.
#
# What it catches: code or a dependency that needs a newer compiler than the
# declared one (after rust-toolchain.toml moves ahead of `rust-version`, or a
# dependency's release raises its own); a `rust-version` newer than any
# installed toolchain. What it cannot: that an OLDER compiler would do (only
# the declared toolchain is built with, so the MSRV may be higher than it
# needs to be), and the dev-dependencies, tests and the order service
# (the library as a user compiles it, nothing else).
#
# It builds as scripts/test.d/57-scratch-app.sh's fresh-lockfile copy does
# (the same features, flags and target directory under IDEMKEY_CACHE): while
# the declared MSRV is the repository's toolchain, that build is already
# there and this step takes seconds; when they part, it builds the library
# once more with the older compiler.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
command -v python3 >/dev/null || { echo "59-msrv.sh: python3 is required" >&2; exit 1; }

MSRV=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["rust-version"])')
# rustup names a release by three numbers; "1.95" means its first, 1.95.0.
TOOLCHAIN=$MSRV
[[ $TOOLCHAIN =~ ^[0-9]+\.[0-9]+$ ]] && TOOLCHAIN=$TOOLCHAIN.0
if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$TOOLCHAIN" --profile minimal --no-self-update
fi

# Every user feature of idemkey, from its manifest (none starts with `_`).
FEATURES=$(python3 -c 'import tomllib; f = tomllib.load(open("idemkey/Cargo.toml", "rb"))["features"]; print(",".join(sorted(n for n in f if n != "default" and not n.startswith("_"))))')

SCRATCH=$(mktemp -d /tmp/idemkey-msrv.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/src"
echo 'fn main() {}' >"$SCRATCH/src/main.rs"
cat >"$SCRATCH/Cargo.toml" <<TOML
[package]
name = "idemkey-msrv-check"
version = "0.0.0"
edition = "2024"
rust-version = "$MSRV"
publish = false

[workspace]

[dependencies]
idemkey = { path = "$ROOT/idemkey", features = [$(sed 's/[^,]*/"&"/g; s/,/, /g' <<<"$FEATURES")] }
TOML

TARGET=${IDEMKEY_CACHE:-$HOME/.cache/idemkey}/scratch-fresh-target
t0=$SECONDS
(cd "$SCRATCH" && cargo "+$TOOLCHAIN" generate-lockfile -q)
(cd "$SCRATCH" && env -u RUSTUP_TOOLCHAIN -u CARGO_ENCODED_RUSTFLAGS RUSTFLAGS="${RUSTFLAGS:-} -D warnings" \
    CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$TARGET" cargo "+$TOOLCHAIN" build -q)
echo "59-msrv: idemkey with [$FEATURES] builds on Rust $TOOLCHAIN (rust-version $MSRV)" \
    "on a fresh lockfile ($((SECONDS - t0))s)"
