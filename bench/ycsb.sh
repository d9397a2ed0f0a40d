#!/usr/bin/env bash
# The Nahanni paper's look-aside experiment (issue #5's table 2): YCSB's read-only, read-heavy
# and read-latest workloads × four caches (none, memcached over TCP, Shoal over TCP, Shoal
# through shared memory) in front of a real PostgreSQL, started here on a free local port.
#
#   bench/ycsb.sh [--full] | bench/rewrite-doc.sh ycsb
#   bench/ycsb.sh --report target/bench/ycsb-<time>/    # the table and plot of an earlier run
#
# Servers (memcached, shoal, postgres) are pinned to CPU 0, the clients (`shoal bench ycsb`)
# to CPU 1. Default size: 100 000 records of 1 KB, 3 clients × 20 000 operations at 2000 ops/s
# each after as many unmeasured ones (about 6 minutes). --full: the paper's million records and 3 × 100 000 operations.
# PostgreSQL runs with fsync off (a benchmark, not a database to keep). Prints markdown and
# draws docs/ycsb-atrl.png (bench/ycsb-plot.py, matplotlib); the JSON of every run stays in
# target/bench/ycsb-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."

records=100000 operations=20000
case "${1:-}" in
  --full) records=1000000 operations=100000 ;;
  --report) out=${2:?usage: $0 --report <directory of an earlier run>} ;;
  "") ;;
  *) echo "usage: $0 [--full | --report <dir>]" >&2; exit 2 ;;
esac
warmup=$operations  # unmeasured operations per client first: the cache reaches its steady state
say() { printf '%s\n' "$*" >&2; }

# report: the markdown table and the plot of the runs in $out (its `about` line says how
# they were made).
report() {
  cat "$out/about"
  echo
  echo "| workload | cache | hit rate | ATRL µs | datastore µs/read | cache read µs/read | cache write µs/read | read p50 µs | read p99 µs | ATRL ÷ memcached | cache read ÷ memcached |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for workload in read-only read-heavy read-latest; do
    for cache in none memcached shoal-tcp shoal-shm; do
      jq -r --slurpfile base "$out/$workload-memcached.json" '
        def r2: . * 100 | round / 100;
        def ratio(a; b): if b == 0 then "—" else (a / b * 1000 | round / 1000 | tostring) end;
        "| \(.workload) | \(.cache) | \(.hit_rate | r2) | \(.atrl_us | r2) | \(.per_read_us.datastore_read | r2) | \(.per_read_us.cache_read | r2) | \(.per_read_us.cache_write | r2) | \(.read_latency_us.p50 | r2) | \(.read_latency_us.p99 | r2) | \(ratio(.atrl_us; $base[0].atrl_us)) | \(ratio(.per_read_us.cache_read; $base[0].per_read_us.cache_read)) |"' \
        "$out/$workload-$cache.json"
    done
  done
  echo
  echo "Shoal through shared memory against memcached, beside the Nahanni paper's figures:"
  echo
  echo "| workload | cache read (ours) | cache read (Nahanni) | ATRL (ours) | ATRL (Nahanni) |"
  echo "|---|---:|---:|---:|---:|"
  for workload in read-only read-heavy read-latest; do
    jq -r -n --slurpfile shm "$out/$workload-shoal-shm.json" --slurpfile mc "$out/$workload-memcached.json" '
      def cut(a; b): ((1 - a / b) * 100 | round | tostring) + " % less";
      "| \($shm[0].workload) | \(cut($shm[0].per_read_us.cache_read; $mc[0].per_read_us.cache_read)) | 80–86 % less | \(cut($shm[0].atrl_us; $mc[0].atrl_us)) | 38–45 % less |"'
  done
  echo
  source bench/lib/matplotlib.sh
  python3 bench/ycsb-plot.py "$out" docs/ycsb-atrl.png
  echo "![ATRL breakdown per workload and cache](ycsb-atrl.png)"
  echo
  echo "Reports: \`$out/\`"
}

if [ "${1:-}" = --report ]; then
  report
  exit
fi
out=target/bench/ycsb-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

command -v jq >/dev/null || { say "jq is needed: apt-get install jq"; exit 1; }
source bench/lib/processes.sh
PG_OPTIONS=()
source bench/lib/postgres.sh
shoal_port=$(free_port) memcached_port=$(free_port)
as_root=(); [ "$(id -u)" = 0 ] && as_root=(-u root)
taskset -c 0 target/release/shoal server -p "$shoal_port" -U 0 -l 127.0.0.1 -t 1 -m 1024 >"$out/shoal.log" 2>&1 &
pids+=($!)
taskset -c 0 memcached -p "$memcached_port" -U 0 -l 127.0.0.1 -t 1 -m 1024 "${as_root[@]}" >"$out/memcached.log" 2>&1 &
pids+=($!)

ycsb() { taskset -c 1 target/release/shoal bench ycsb --postgres "$postgres" --records "$records" --json "$@"; }
say "loading $records records into PostgreSQL"
ycsb --load --cache none --operations 1 >/dev/null

caches=("none|none|--cache none" "memcached|memcached tcp|--cache tcp --cache-server 127.0.0.1:$memcached_port"
        "shoal-tcp|shoal tcp|--cache tcp --cache-server 127.0.0.1:$shoal_port"
        "shoal-shm|shoal shared memory|--cache shm --cache-server 127.0.0.1:$shoal_port")
for workload in read-only read-heavy read-latest; do
  for cache in "${caches[@]}"; do
    IFS='|' read -r name label flags <<<"$cache"
    say "$workload, cache $label"
    read -ra args <<<"$flags"
    ycsb --workload "$workload" --operations "$operations" --warmup "$warmup" --label "$label" "${args[@]}" \
      >"$out/$workload-$name.json"
  done
done
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty): PostgreSQL" \
  "$("$pg_bin/postgres" --version | awk '{print $3}') (fsync off), $records records of 1000 B, 3 clients ×" \
  "$operations measured operations at 2000 ops/s each after $warmup unmeasured ones each (caches flushed" \
  "before each run, -m 1024); servers on CPU 0, clients on CPU 1; load average $(cut -d' ' -f1-3 /proc/loadavg)." \
  >"$out/about"
report
