#!/usr/bin/env bash
# Builds the edge Worker into edge/build/ (index.js + index_bg.wasm) with
# worker-build, offline: installs what is missing, then rebuilds only when a
# source is newer than the bundle (FORCE=1 rebuilds anyway).
#
#   edge/build.sh
#
# Installs when missing or at another version, and nothing else:
#   - npm packages from edge/package-lock.json (workerd, binaryen, esbuild);
#   - wasm-bindgen-cli at the wasm-bindgen version of Cargo.lock;
#   - worker-build 0.8.7.
# worker-build ignores PATH and would download wasm-bindgen, wasm-opt and
# esbuild from outside; WASM_BINDGEN_BIN, WASM_OPT_BIN and ESBUILD_BIN point
# it at the local ones.
set -euo pipefail

EDGE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$EDGE")"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"
WORKER_BUILD_VERSION=0.8.7
# The Cargo profile of the Worker's wasm: release (the brief's `--release`)
# unless EDGE_PROFILE names another (e.g. wasm-release, size-optimised).
EDGE_PROFILE="${EDGE_PROFILE:-release}"

log() { echo "edge/build.sh: $*" >&2; }

# ---- tools -------------------------------------------------------------------

npm_deps() {
    # npm ci when node_modules is missing or older than the lock file.
    if [[ ! -x "$EDGE/node_modules/.bin/wasm-opt" || ! -x "$EDGE/node_modules/@esbuild/linux-x64/bin/esbuild" ||
        ! -x "$EDGE/node_modules/@cloudflare/workerd-linux-64/bin/workerd" ||
        "$EDGE/package-lock.json" -nt "$EDGE/node_modules/.package-lock.json" ]]; then
        log "installing npm packages from package-lock.json"
        # The platform binaries come in as registry packages (optional
        # dependencies); no install script needs to run or download anything.
        (cd "$EDGE" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    fi
}

# cargo_tool BIN CRATE VERSION: `cargo install CRATE --version VERSION` unless
# BIN --version already says VERSION. Run from the repository so the pinned
# toolchain (rust-toolchain.toml) builds it.
cargo_tool() {
    local bin=$1 crate=$2 version=$3 have=""
    if command -v "$bin" >/dev/null 2>&1; then
        have=$("$bin" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n 1 || true)
    fi
    if [[ "$have" != "$version" ]]; then
        log "installing $crate $version (found: ${have:-none}); this takes several minutes"
        # No --locked: the registry mirror lacks some versions their lock files pin.
        (cd "$ROOT" && cargo install "$crate" --version "$version")
    fi
}

wasm_bindgen_version() {
    # The version of the `wasm-bindgen` package in the workspace's lock file.
    awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$ROOT/Cargo.lock"
}

install_tools() {
    export PATH="$HOME/.cargo/bin:$PATH"
    npm_deps
    local wb
    wb=$(wasm_bindgen_version)
    [[ -n "$wb" ]] || { log "no wasm-bindgen in Cargo.lock"; return 1; }
    cargo_tool wasm-bindgen wasm-bindgen-cli "$wb"
    cargo_tool worker-build worker-build "$WORKER_BUILD_VERSION"
    rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown ||
        (cd "$ROOT" && rustup target add wasm32-unknown-unknown)
}

# ---- build -------------------------------------------------------------------

up_to_date() {
    local out="$EDGE/build/index.js"
    [[ "${FORCE:-0}" != 1 && -f "$out" && -f "$EDGE/build/index_bg.wasm" ]] || return 1
    [[ "$(cat "$EDGE/build/.profile" 2>/dev/null)" == "$EDGE_PROFILE" ]] || return 1
    [[ -z "$(find "$EDGE/src" "$ROOT/core/src" "$EDGE/Cargo.toml" "$ROOT/core/Cargo.toml" \
        "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" -newer "$out" -print -quit)" ]]
}

build() {
    if up_to_date; then
        log "build/ is up to date"
        return 0
    fi
    local profile_flag=(--release)
    [[ "$EDGE_PROFILE" == release ]] || profile_flag=(--profile "$EDGE_PROFILE")
    log "worker-build ${profile_flag[*]}"
    (
        cd "$EDGE"
        WASM_BINDGEN_BIN="$(command -v wasm-bindgen)" \
            WASM_OPT_BIN="$EDGE/node_modules/.bin/wasm-opt" \
            ESBUILD_BIN="$EDGE/node_modules/@esbuild/linux-x64/bin/esbuild" \
            worker-build "${profile_flag[@]}"
    )
    echo "$EDGE_PROFILE" >"$EDGE/build/.profile"
    touch "$EDGE/build/index.js"
}

install_tools
build
