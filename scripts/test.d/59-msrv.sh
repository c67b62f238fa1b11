#!/usr/bin/env bash
# The declared MSRV (the workspace's `rust-version`) builds the library: a
# scratch crate outside the repository depends on idemkey by path with every
# feature a user can ask for, resolves a fresh lockfile as a user on that
# toolchain would (resolver 3 prefers versions whose rust-version it meets)
# and runs `cargo +MSRV check`.
#
# What it catches: code or a dependency that needs a newer compiler than the
# declared one (after rust-toolchain.toml moves ahead of `rust-version`, or a
# dependency's release raises its own); a `rust-version` newer than any
# installed toolchain. What it cannot: that an OLDER compiler would do (only
# the declared toolchain is built with, so the MSRV may be higher than it
# needs to be), and the dev-dependencies, tests and the order service
# (the library as a user compiles it, nothing else).
#
# Its own target directory under IDEMKEY_CACHE (kept between runs: only
# versions released since are built again).
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

TARGET=${IDEMKEY_CACHE:-$HOME/.cache/idemkey}/msrv-target
t0=$SECONDS
(cd "$SCRATCH" && cargo "+$TOOLCHAIN" generate-lockfile -q)
(cd "$SCRATCH" && env -u RUSTUP_TOOLCHAIN CARGO_TARGET_DIR="$TARGET" CARGO_INCREMENTAL=0 \
    cargo "+$TOOLCHAIN" check -q)
echo "59-msrv: idemkey with [$FEATURES] checks on Rust $TOOLCHAIN (rust-version $MSRV)" \
    "on a fresh lockfile ($((SECONDS - t0))s)"
