#!/usr/bin/env bash
# Issue #13's pool table: a 100-key get_many of 100-byte values spread over 8 shoal servers
# on loopback, from Python (shoal.Client(servers=...) over TCP and through shared memory,
# pymemcache's HashClient, pylibmc) and from Rust (`shoal bench pool`: the pool's parallel
# multiget vs one client per server asked in turn, and through shared memory).
# The servers run with `-t 1`, pinned to CPU 0; the clients pinned to CPU 1.
# Prints markdown (`| bench/rewrite-doc.sh pool` puts it into docs/BENCHMARKS.md).
#   BENCH_REQUESTS  timed calls per row (default 5000)
#   BENCH_HASHING   the shoal pool's hashing (default ketama_weighted)
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${BENCH_REQUESTS:-5000}
hashing=${BENCH_HASHING:-ketama_weighted}
out=target/bench/pool-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
mkdir -p "$out"
cargo build --release --quiet -p shoal
python3 -c 'import shoal' 2>/dev/null || scripts/python-package.sh >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=() servers=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for i in 0 1 2 3 4 5 6 7; do
  port=$(free_port)
  taskset -c 0 target/release/shoal server -p "$port" -U 0 -l 127.0.0.1 -t 1 -m 64 >"$out/shoal-$i.log" 2>&1 &
  pids+=($!) servers+=("127.0.0.1:$port")
done
list=$(IFS=,; echo "${servers[*]}")
sleep 1

echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), $requests timed calls" \
  "per row; 8 servers on CPU 0, client on CPU 1; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "From Python (\`bench/pool-get-many.py\`):"
echo
say "Python clients"
taskset -c 1 python3 bench/pool-get-many.py --servers "$list" --requests "$requests" --hashing "$hashing"
echo
echo "From Rust (\`shoal bench pool\`):"
echo
say "Rust pool"
taskset -c 1 target/release/shoal bench pool --servers "$list" --requests "$requests" --hashing "$hashing" --json >"$out/rust.json"
echo "| path | p50 µs | p99 µs |"
echo "|---|---:|---:|"
jq -r '.rows[] | "| \(.path) | \(.latency_us.p50 * 10 | round / 10) | \(.latency_us.p99 * 10 | round / 10) |"' "$out/rust.json"
echo
echo "Reports: \`$out/\`"
