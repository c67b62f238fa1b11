#!/usr/bin/env bash
# The published crates' public API equals its committed listing
# (idemkey/public-api.txt, core/public-api.txt): a change to what users can
# name shows as a diff in the change that makes it. See scripts/public-api.sh.
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../public-api.sh"
