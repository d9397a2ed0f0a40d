#!/usr/bin/env bash
# The overhead of elasticity (issue 18): every benchmarked app run by `shoal mr run` elastic,
# with fixed workers (the original Phoenix) and written directly with Rayon (no framework),
# same threads, interleaved rounds, medians and ratios. Prints a markdown table for
# docs/BENCHMARKS.md: bench/mr-overhead.sh | bench/rewrite-doc.sh mr-overhead
#   MR_SCALE (1; 14 for 10 s runs of word count and matmul, 64 with COLD=1 for histogram and linreg)
#   ROUNDS (3)  THREADS (2)  MR_APPS  COLD (1: the page cache dropped before every run)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "building target/release/shoal" >&2
cargo build --release --quiet -p shoal
exec python3 bench/mr-overhead.py
