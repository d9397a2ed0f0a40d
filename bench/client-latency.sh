#!/usr/bin/env bash
# Client read latency, issue #4's table: one get of 100 B, 1 KiB and 16 KiB values and a
# 10-key multiget, through Shoal's shared memory, over TCP loopback to the same Shoal server,
# and over TCP loopback to memcached, from Rust (`shoal bench latency`, shoal-client) and
# from Python (bench/client-latency.py: the shoal package, and pymemcache for reference).
# Both servers run with `-t 1`, pinned to CPU 0; the clients run pinned to CPU 1.
# Prints markdown (`| bench/rewrite-doc.sh client-latency` puts it into docs/BENCHMARKS.md).
#   BENCH_REQUESTS  timed calls per row (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${BENCH_REQUESTS:-20000}
out=target/bench/client-latency-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
mkdir -p "$out"
cargo build --release --quiet -p shoal
python3 -c 'import shoal' 2>/dev/null || scripts/python-package.sh >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_root=(); [ "$(id -u)" = 0 ] && as_root=(-u root)
shoal_port=$(free_port) memcached_port=$(free_port)
taskset -c 0 target/release/shoal server -p "$shoal_port" -U 0 -l 127.0.0.1 -t 1 >"$out/shoal.log" 2>&1 &
shoal_pid=$!
taskset -c 0 memcached -p "$memcached_port" -U 0 -l 127.0.0.1 -t 1 "${as_root[@]}" >"$out/memcached.log" 2>&1 &
memcached_pid=$!
trap 'kill $shoal_pid $memcached_pid 2>/dev/null || true' EXIT
sleep 1

echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), $requests timed calls" \
  "per row, one at a time; servers on CPU 0, client on CPU 1; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "From Rust (\`shoal bench latency\`, shoal-client for every path):"
echo
say "Rust client"
taskset -c 1 target/release/shoal bench latency --server "127.0.0.1:$shoal_port" \
  --memcached "127.0.0.1:$memcached_port" --requests "$requests" --json >"$out/rust.json"
echo "| path | operation | bytes | p50 µs | p99 µs | p50 ÷ memcached tcp |"
echo "|---|---|---:|---:|---:|---:|"
jq -r '.rows as $rows | $rows[] | . as $r
  | ($rows[] | select(.path == "memcached tcp" and .operation == $r.operation and .size == $r.size)
  | .latency_us.p50) as $base
  | "| \($r.path) | \($r.operation) | \($r.size) | \($r.latency_us.p50 * 1000 | round / 1000) | \($r.latency_us.p99 * 1000 | round / 1000) | \($r.latency_us.p50 / $base * 1000 | round / 1000) |"' "$out/rust.json"
echo
echo "From Python (\`bench/client-latency.py\`: the shoal package, and pymemcache for reference):"
echo
say "Python client"
taskset -c 1 python3 bench/client-latency.py --server "127.0.0.1:$shoal_port" \
  --memcached "127.0.0.1:$memcached_port" --requests "$requests" 2>/dev/null
echo
echo "Reports: \`$out/\`"
