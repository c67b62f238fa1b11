#!/usr/bin/env bash
# No module import cycles in any crate of the workspace:
# scripts/module-cycles.py (python3, standard library only; the rule it
# checks is in its header) first on its own scratch crates (--self-test, a
# checker that cannot fail proves nothing), then on the src/ of every member
# of the root Cargo.toml's [workspace] members (globs expanded), each crate
# of it: lib.rs, main.rs, bin/*. A member without src/ fails the step, as
# does any cycle; every member is checked before the step fails, and the
# last line names the members with cycles.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
command -v python3 >/dev/null || { echo "15-module-cycles.sh: python3 is required" >&2; exit 1; }

python3 scripts/module-cycles.py --self-test

members=$(python3 -c 'import glob, tomllib
members = tomllib.load(open("Cargo.toml", "rb"))["workspace"]["members"]
for pattern in members:
    for path in sorted(glob.glob(pattern)) or [pattern]:
        print(path)')
[[ -n $members ]] || { echo "15-module-cycles.sh: no workspace members in Cargo.toml" >&2; exit 1; }

clean=()
cycles=()
for member in $members; do
    echo
    echo "---- $member"
    if [[ ! -d $member/src ]]; then
        echo "15-module-cycles.sh: workspace member $member has no src/" >&2
        cycles+=("$member(no src/)")
        continue
    fi
    status=0
    python3 scripts/module-cycles.py "$member/src" || status=$?
    if [[ $status -eq 0 ]]; then
        clean+=("$member")
    else
        cycles+=("$member")
    fi
done
echo
echo "module cycles: none in ${clean[*]:-no member}; cycles in ${cycles[*]:-no member}"
[[ ${#cycles[@]} -eq 0 ]]
