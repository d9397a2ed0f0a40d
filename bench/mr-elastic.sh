#!/usr/bin/env bash
# The elasticity benchmark (issue 18; Elastic Phoenix's Fig. 3.12): alternating linreg and
# matmul jobs while the CPUs available change on a seeded random schedule; elastic workers vs
# jobs that keep the CPUs available when they start. Prints a markdown table for
# docs/BENCHMARKS.md (bench/mr-elastic.sh | bench/rewrite-doc.sh mr-elastic) and writes
# docs/mr-elastic.png. Settings: see bench/mr-elastic.py (SEED, JOBS, CPUS, MIN_SECS, …).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v taskset >/dev/null || { echo "taskset is needed (apt-get install util-linux)" >&2; exit 1; }
source bench/lib/matplotlib.sh
echo "building target/release/shoal" >&2
cargo build --release --quiet -p shoal
exec python3 bench/mr-elastic.py
