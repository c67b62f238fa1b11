#!/usr/bin/env bash
# Serves the edge Worker on 127.0.0.1:PORT with workerd (from npm), in front
# of ORIGIN_URL:
#
#   edge/serve.sh PORT ORIGIN_URL
#
# Builds first when needed (edge/build.sh). Plain `workerd serve` with a
# generated config: no wrangler, no telemetry, no update check, nothing
# fetched at run time. Runs in the foreground until killed (SIGTERM/SIGINT).
#
# Environment:
#   KEY_PROFILE          strict | lenient | uuid (default lenient, as the origin)
#   IDEMKEY_EDGE_SELFTEST=1  enables POST /__edge/selftest (tests only)
#   EDGE_NO_BUILD=1      serve edge/build/ as it is
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: edge/serve.sh PORT ORIGIN_URL" >&2
    exit 2
fi
PORT=$1
ORIGIN_URL=$2
EDGE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KEY_PROFILE="${KEY_PROFILE:-lenient}"
SELFTEST="${IDEMKEY_EDGE_SELFTEST:-0}"

[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "edge/serve.sh: PORT must be a number" >&2; exit 2; }
[[ "$ORIGIN_URL" =~ ^https?://[^\"\\]+$ ]] || { echo "edge/serve.sh: ORIGIN_URL must be an http(s) URL" >&2; exit 2; }
case $KEY_PROFILE in strict | lenient | uuid) ;; *)
    echo "edge/serve.sh: KEY_PROFILE must be strict, lenient or uuid" >&2
    exit 2
    ;;
esac

if [[ "${EDGE_NO_BUILD:-0}" != 1 ]]; then
    "$EDGE/build.sh"
fi
WORKERD="$EDGE/node_modules/@cloudflare/workerd-linux-64/bin/workerd"
[[ -x "$WORKERD" ]] || { echo "edge/serve.sh: workerd missing; run edge/build.sh" >&2; exit 1; }

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/idemkey-edge.XXXXXX")
trap 'rm -rf "$RUN_DIR"' EXIT
cp "$EDGE/build/index.js" "$EDGE/build/index_bg.wasm" "$RUN_DIR/"

# The origin is usually on loopback or a private address: the Worker's
# outbound service must allow them (workerd's default "internet" service
# allows only public addresses).
cat >"$RUN_DIR/edge.capnp" <<CAPNP
using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
    (name = "edge", worker = .edge),
    (name = "origin", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [
    (name = "http", address = "127.0.0.1:$PORT", http = (), service = "edge"),
  ],
);

const edge :Workerd.Worker = (
  modules = [
    (name = "index.js", esModule = embed "index.js"),
    (name = "index_bg.wasm", wasm = embed "index_bg.wasm"),
  ],
  compatibilityDate = "2025-09-01",
  bindings = [
    (name = "ORIGIN_URL", text = "$ORIGIN_URL"),
    (name = "KEY_PROFILE", text = "$KEY_PROFILE"),
    (name = "EDGE_SELFTEST", text = "$SELFTEST"),
  ],
  globalOutbound = "origin",
);
CAPNP

echo "edge/serve.sh: http://127.0.0.1:$PORT -> $ORIGIN_URL (key profile $KEY_PROFILE)" >&2
# Not exec: the EXIT trap removes the run directory when workerd stops.
"$WORKERD" serve "$RUN_DIR/edge.capnp" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; rm -rf "$RUN_DIR"' INT TERM
wait "$child"
