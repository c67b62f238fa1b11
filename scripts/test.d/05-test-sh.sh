#!/usr/bin/env bash
# The test command does not skip what it cannot run. Checks, each against a
# scratch copy of what it guards (nothing in the clone is touched):
#   - a hook without its executable bit fails test.sh's hook step (the
#     same hook with the bit passes);
#   - test.sh's nextest arguments fail a filter that matches no test, and
#     build every integration test target of every package;
#   - scripts/fuzz-targets.sh (used by the fuzz build step, 80-fuzz.sh and
#     scripts/fuzz.sh) fails on a fuzz project without targets, and
#     scripts/fuzz.sh on a target the project does not have.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export IDEMKEY_CACHE="${IDEMKEY_CACHE:-$HOME/.cache/idemkey}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$IDEMKEY_CACHE/target}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() {
    echo "05-test-sh.sh: $*" >&2
    exit 1
}

# run_hooks DIR in a shell of its own, as test.sh runs it (set -e on).
run_hooks_in() {
    bash -c 'source scripts/test.sh && run_hooks "$1"' run_hooks "$1"
}

# 1. Hooks.
mkdir "$scratch/hooks"
printf '#!/usr/bin/env bash\necho "hook ran"\n' >"$scratch/hooks/10-a.sh"
cp "$scratch/hooks/10-a.sh" "$scratch/hooks/20-b.sh"
chmod +x "$scratch/hooks/10-a.sh"
chmod -x "$scratch/hooks/20-b.sh"
if run_hooks_in "$scratch/hooks" >"$scratch/hooks.log" 2>&1; then
    cat "$scratch/hooks.log" >&2
    fail "a hook without its executable bit passed"
fi
grep -q "20-b.sh is not executable" "$scratch/hooks.log" ||
    fail "no word of the hook without its executable bit: $(cat "$scratch/hooks.log")"
chmod +x "$scratch/hooks/20-b.sh"
run_hooks_in "$scratch/hooks" >"$scratch/hooks.log" 2>&1 ||
    fail "executable hooks failed: $(cat "$scratch/hooks.log")"
[[ $(grep -c "hook ran" "$scratch/hooks.log") -eq 2 ]] || fail "not every hook ran"
echo "hooks: a lost executable bit fails the step"

# 2. A nextest filter that matches no test, with test.sh's own arguments.
# shellcheck source=../test.sh
nextest_args=$(bash -c 'source scripts/test.sh && printf "%s\n" "${NEXTEST_ARGS[@]}"')
mapfile -t nextest_args <<<"$nextest_args"
status=0
cargo nextest run "${nextest_args[@]}" -E 'test(=no_test_is_named_this)' \
    >"$scratch/nextest.log" 2>&1 || status=$?
# nextest's exit code for "no tests to run" is 4.
if [[ $status -ne 4 ]]; then
    tail -n 20 "$scratch/nextest.log" >&2
    fail "a filter matching no test gave exit $status (expected nextest's 4)"
fi
echo "nextest: a filter matching no test fails (exit $status)"

# 3. Every integration test target of every package builds under test.sh's
# arguments: a `[[test]]` whose `required-features` they do not turn on
# would be left out without a word (nextest lists what was built).
# The same arguments, less those only `run` takes.
list_args=()
for arg in "${nextest_args[@]}"; do
    case $arg in
        --no-fail-fast | --no-tests=*) ;;
        *) list_args+=("$arg") ;;
    esac
done
cargo nextest list "${list_args[@]}" --list-type binaries-only --message-format json \
    >"$scratch/binaries.json" 2>"$scratch/binaries.log" || {
    tail -n 20 "$scratch/binaries.log" >&2
    fail "nextest could not list the test binaries"
}
cargo metadata --no-deps --format-version 1 >"$scratch/metadata.json"
missing=$(python3 - "$scratch/metadata.json" "$scratch/binaries.json" <<'EOF'
import json
import sys

metadata = json.load(open(sys.argv[1]))
built = set(json.load(open(sys.argv[2]))["rust-binaries"])
for package in metadata["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"]:
            binary = f"{package['name']}::{target['name']}"
            if binary not in built:
                print(binary)
EOF
)
[[ -z $missing ]] || fail "test targets test.sh does not build (required features off?): $missing"
echo "nextest: every integration test target builds under test.sh's arguments"

# 4. Fuzz targets.
mkdir -p "$scratch/fuzz"
cat >"$scratch/fuzz/Cargo.toml" <<'TOML'
[package]
name = "no-targets-fuzz"
version = "0.0.0"
edition = "2024"
publish = false

[package.metadata]
cargo-fuzz = true

[workspace]
TOML
if scripts/fuzz-targets.sh "$scratch/fuzz" >"$scratch/fuzz.log" 2>&1; then
    fail "a fuzz project without targets passed"
fi
if scripts/fuzz-targets.sh "$scratch/no-such-dir" >"$scratch/fuzz.log" 2>&1; then
    fail "a missing fuzz project passed"
fi
[[ -n $(scripts/fuzz-targets.sh) ]] || fail "fuzz/ lists no target"
if IDEMKEY_CACHE="$scratch/cache" scripts/fuzz.sh no_such_target 1 >"$scratch/fuzz.log" 2>&1; then
    fail "scripts/fuzz.sh ran a target the project does not have"
fi
grep -q "no fuzz target named no_such_target" "$scratch/fuzz.log" ||
    fail "scripts/fuzz.sh failed for another reason: $(cat "$scratch/fuzz.log")"
echo "fuzz: no target, no project and an unknown target each fail"
