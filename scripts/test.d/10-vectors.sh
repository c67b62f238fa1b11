#!/usr/bin/env bash
# The shared test vectors (core/vectors/*.json) are what generate.py, an
# independent Python statement of the contract, writes, and no list in them
# is shorter than its minimum (minimums.json, which every runtime reading a
# file also checks). Needs python3 and nothing from PyPI.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
command -v python3 >/dev/null || { echo "10-vectors.sh: python3 is required" >&2; exit 1; }
python3 core/vectors/generate.py --check
echo "core/vectors: every file is what generate.py writes"
