#!/usr/bin/env bash
# The two publishable crates' documentation, built the way docs.rs builds
# it: nightly rustdoc, every feature, `--cfg docsrs` (which turns on
# `doc_cfg` in idemkey), here with warnings denied. Then the pages must
# say which feature each gated item needs ("Available on crate feature
# ... only"): a lost `cfg_attr(docsrs, ...)` or a nightly that stopped
# labelling would otherwise pass unnoticed.
#
# This nightly's `doc_cfg` labels every `#[cfg(feature = ..)]` item on its
# own; `doc_auto_cfg`, which used to do it, is a removed feature (an error).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idemkey/target}"

fail() {
    echo "30-docs-rs.sh: FAILED: $*" >&2
    exit 1
}

# The fuzz build installs nightly too; this hook does not rely on it.
rustup toolchain list | grep -q '^nightly' ||
    rustup toolchain install nightly --profile minimal --no-self-update

RUSTDOCFLAGS="--cfg docsrs -D warnings" \
    cargo +nightly doc -p idemkey-core -p idemkey --all-features --no-deps

doc="$CARGO_TARGET_DIR/doc/idemkey"
# needs_feature PAGE FEATURE: PAGE (a path under the crate's docs, or a
# file name found anywhere under them) labels its item with FEATURE.
needs_feature() {
    local page=$1 feature=$2 file
    if [[ -f $doc/$page ]]; then
        file=$doc/$page
    else
        # The item's own page, not the redirects rustdoc leaves at the
        # private modules' paths.
        file=
        local candidate
        while IFS= read -r candidate; do
            if ! grep -q 'http-equiv="refresh"' "$candidate"; then
                file=$candidate
                break
            fi
        done < <(find "$doc" -name "$page")
    fi
    [[ -n $file && -f $file ]] || fail "no page $page under $doc"
    grep -q "Available on <strong>[^<]*crate features\? <code>$feature</code>" "$file" ||
        fail "$file does not say it needs the feature $feature"
}
needs_feature layer/index.html layer
needs_feature struct.PgDb.html postgres
needs_feature struct.SqliteDb.html sqlite
needs_feature struct.RedisDb.html redis
needs_feature outbox/index.html outbox
# And the crate's front page lists the gated modules with their features.
grep -q 'class="stab portability" title="Available on crate feature `layer` only"' "$doc/index.html" ||
    fail "the crate's index does not label the layer module with its feature"

echo "30-docs-rs: idemkey-core and idemkey document with nightly, --cfg docsrs and every feature," \
    "no warnings; gated items show their feature"
