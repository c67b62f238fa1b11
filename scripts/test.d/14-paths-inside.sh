#!/usr/bin/env bash
# No script, test, hook or manifest names a path outside the repository
# (scripts/paths-inside.py: a folder beside it, the folder holding it, one
# machine's absolute paths, relative paths climbing out of it): the
# README's two commands must pass on a clone with nothing beside it.
# The checker is also shown to fail: on a copy of the repository
# (scripts/alone.sh) with such paths planted it must name each one, and on
# the unchanged copy (no .git: the walk instead of git's list) it must pass.
# The bench smokes (65, 66) run their scripts from such a copy, so a path
# the checker misses still fails there.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
STARTED=$SECONDS

fail() {
    echo "14-paths-inside.sh: FAILED: $*" >&2
    exit 1
}

python3 scripts/paths-inside.py

# shellcheck source=scripts/alone.sh
. scripts/alone.sh
COPY=$(alone_copy)
trap 'alone_remove "$COPY"' EXIT
python3 "$COPY/scripts/paths-inside.py" >/dev/null || fail "the checker fails on the unchanged copy"
# One of each kind, where the repository keeps its scripts and tests (the
# lines that plant them are marked as allowed for this file's own check).
printf '%s\n' '"$PEERDIR/start-pg.sh" # PEERDIR=$(cd "$ROOT/.." && pwd)/seed' >>"$COPY/bench/lib.sh" # outside-ok: planted
printf '%s\n' 'BASELINE=${BASELINE-/work/baseline/idemkey-server}' >>"$COPY/bench/ab.sh" # outside-ok: planted
printf '%s\n' '. ../shared/hooks/x.sh' >>"$COPY/scripts/test.d/57-scratch-app.sh" # outside-ok: planted
printf '%s\n' 'const X: &str = include_str!("../../../outside.json");' >>"$COPY/server/tests/compat.rs" # outside-ok: planted
if python3 "$COPY/scripts/paths-inside.py" >"$COPY/../planted.out" 2>&1; then
    fail "the checker passed with four paths leaving the repository planted"
fi
for planted in bench/lib.sh bench/ab.sh scripts/test.d/57-scratch-app.sh server/tests/compat.rs; do
    grep -q "^  $planted:" "$COPY/../planted.out" ||
        fail "the checker did not name the path planted in $planted: $(cat "$COPY/../planted.out")"
done
echo "14-paths-inside.sh: no path leaves the repository; the checker names each of 4 planted ones" \
    "($((SECONDS - STARTED))s)"
