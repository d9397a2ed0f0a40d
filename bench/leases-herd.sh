#!/usr/bin/env bash
# The thundering herd with and without leases (issue #6): builds the release server and runs
# bench/leases_herd.py (its docstring says what is measured). Arguments go to the script:
#   bench/leases-herd.sh [--readers 200] [--processes 4] [--invalidations 10] [--rounds 2] ...
# The server is pinned to CPU 0 (--server-cpu), the Python readers run on the others.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p shoal
dirty=$(git status --porcelain --untracked-files=no | head -1)
echo "shoal $(git rev-parse --short HEAD)${dirty:+ (dirty tree)}, $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
exec python3 bench/leases_herd.py "$@"
