#!/usr/bin/env bash
# Runs one cargo-fuzz target for a while: scripts/fuzz.sh TARGET [SECONDS]
# Seeds the corpus from the shared vectors and the committed seeds
# (fuzz/seeds/TARGET/, read only), keeps any crasher under
# fuzz/regressions/TARGET/ (the regression test replays them), and prints
# libFuzzer's final statistics (executions, corpus, crashes).
set -euo pipefail
target=${1:?usage: scripts/fuzz.sh parse_key|order_request [SECONDS]}
seconds=${2:-600}
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${IDEMKEY_CACHE:-$HOME/.cache/idemkey}
# A target the project does not have fails here, before anything runs.
if ! grep -qxF "$target" <<<"$("$root/scripts/fuzz-targets.sh")"; then
    echo "fuzz.sh: no fuzz target named $target" >&2
    exit 1
fi
export CARGO_TARGET_DIR="$cache/fuzz-target"
corpus="$cache/fuzz-corpus/$target"
artifacts="$cache/fuzz-artifacts/$target"
mkdir -p "$corpus" "$artifacts" "$root/fuzz/regressions/$target"
python3 - "$root/core/vectors" "$corpus" "$target" <<'PY'
import hashlib, json, pathlib, sys
vectors, corpus, target = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
seeds = []
for case in json.loads((vectors / "keys.json").read_text())["cases"]:
    for line in case["lines"]:
        seeds.append(line.encode())
if target == "order_request":
    bodies = [c["body"].encode() for c in json.loads((vectors / "orders.json").read_text())["cases"]]
    seeds = [bytes([i * 37 % 256]) + k + b"\n" + b for i, (k, b) in enumerate(zip(seeds * 2, bodies * 20))]
for seed in seeds:
    (corpus / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
PY
cd "$root/fuzz"
status=0
cargo +nightly fuzz run -O "$target" "$corpus" "$root/fuzz/seeds/$target" -- \
  -max_total_time="$seconds" -artifact_prefix="$artifacts/" -print_final_stats=1 2>&1 \
  | tee "$cache/fuzz-$target.log" | grep -E "^(stat::|#[0-9]+ +DONE|==|SUMMARY|Done)" || status=$?
shopt -s nullglob
crashers=("$artifacts"/crash-* "$artifacts"/oom-* "$artifacts"/timeout-*)
for f in "${crashers[@]}"; do cp "$f" "$root/fuzz/regressions/$target/"; done
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$cache/fuzz-$target.log" | tail -n 1)
echo "fuzz $target: ${seconds}s, ${runs:-0} executions, exit $status, crashers kept: ${#crashers[@]} (log: $cache/fuzz-$target.log)"
# A run that never started (no executions) is a failure, not a clean run.
[[ $status -eq 0 && ${runs:-0} -gt 0 && ${#crashers[@]} -eq 0 ]]
