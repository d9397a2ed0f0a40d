#!/usr/bin/env bash
# Issue #29's local multiget rows: a 100-key get_many of 100-byte values read through the shared
# memory of 8 shoal servers on this host, from Python (`bench/local-get-many.py`, against
# CPython's own cost of building the same dict of bytes, in the same run, rows taking turns) and
# from Rust (`shoal bench pool`'s shared-memory row, jump placement).
# The servers run with `-t 1`, pinned to CPU 0; the clients pinned to CPU 1.
# Prints markdown.
#   BENCH_REQUESTS  timed calls per row (default 30000)
#   SHOAL           the shoal binary (default target/release/shoal, built if absent)
set -euo pipefail
cd "$(dirname "$0")/.."

requests=${BENCH_REQUESTS:-30000}
shoal=${SHOAL:-target/release/shoal}
say() { printf '%s\n' "$*" >&2; }
[ -x "$shoal" ] || cargo build --release --quiet -p shoal
python3 -c 'import shoal' 2>/dev/null || scripts/python-package.sh >&2

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=() servers=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for i in 0 1 2 3 4 5 6 7; do
  port=$(free_port)
  taskset -c 0 "$shoal" server -p "$port" -U 0 -l 127.0.0.1 -t 1 -m 64 >/dev/null 2>&1 &
  pids+=($!) servers+=("127.0.0.1:$port")
done
list=$(IFS=,; echo "${servers[*]}")
for s in "${servers[@]}"; do
  python3 -c 'import socket,sys,time
h,p=sys.argv[1].rsplit(":",1); d=time.time()+60
while True:
    try: socket.create_connection((h,int(p)),1).close(); break
    except OSError:
        if time.time()>d: sys.exit("server "+sys.argv[1]+" did not start")
        time.sleep(0.05)' "$s"
done

echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), $requests timed calls" \
  "per row; 8 servers on CPU 0, client on CPU 1; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "From Python (\`bench/local-get-many.py\`):"
echo
say "Python"
taskset -c 1 python3 bench/local-get-many.py --servers "$list" --requests "$requests"
echo
echo "From Rust (\`shoal bench pool --hashing jump\`, its shared-memory row):"
echo
say "Rust"
rust=$(taskset -c 1 "$shoal" bench pool --servers "$list" --requests "$((requests / 3))" --hashing jump --json)
echo "| path | p50 µs | p99 µs |"
echo "|---|---:|---:|"
jq -r '.rows[] | select(.path | test("shared memory")) | "| \(.path) | \(.latency_us.p50 * 100 | round / 100) | \(.latency_us.p99 * 10 | round / 10) |"' <<<"$rust"
