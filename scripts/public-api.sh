#!/usr/bin/env bash
# The public API of the two published crates, as committed listings:
#   idemkey/public-api.txt and core/public-api.txt
# (`cargo public-api -ss`: every public item and impl a user can name, one
# per line, without blanket and auto-trait impls; all features on).
#
#   scripts/public-api.sh          fails when a listing differs from the code,
#                                  printing the diff
#   scripts/public-api.sh --bless  rewrites the listings from the code
#
# So every change to what users can name is a visible diff in review.
# Needs the nightly toolchain (rustdoc JSON) and cargo-public-api, installed
# here when missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

rustup toolchain list | grep -q '^nightly' ||
    rustup toolchain install nightly --profile minimal --no-self-update
if ! cargo public-api --version >/dev/null 2>&1; then
    cargo install cargo-public-api --version 0.52.0 --locked ||
        cargo install cargo-public-api --version 0.52.0
fi

bless=false
[[ ${1:-} == "--bless" ]] && bless=true

status=0
for crate in idemkey-core:core idemkey:idemkey; do
    name=${crate%%:*}
    dir=${crate#*:}
    listing="$dir/public-api.txt"
    current=$(mktemp)
    cargo public-api -p "$name" --all-features -ss >"$current"
    if $bless; then
        mv "$current" "$listing"
        echo "public-api: wrote $listing ($(grep -vc '^impl' "$listing") items, $(wc -l <"$listing") lines)"
    elif ! diff -u "$listing" "$current"; then
        echo "public-api: $name's public API differs from $listing (above: - listed, + in the code)." >&2
        echo "public-api: if the change is meant, run scripts/public-api.sh --bless and commit the listing." >&2
        status=1
        rm -f "$current"
    else
        echo "public-api: $name matches $listing ($(grep -vc '^impl' "$listing") items, $(wc -l <"$listing") lines)"
        rm -f "$current"
    fi
done
exit $status
