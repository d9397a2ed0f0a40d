#!/usr/bin/env bash
# Shoal vs memcached, side by side in one run on this machine (DESIGN §9, issue #3's table).
#
# Both servers get the same flags (-t 1 -m 1024 -U 0, loopback, a free port) and run pinned
# to CPU 0, at the same time but loaded one after the other, row by row; the load generator
# (`shoal bench load`) is pinned to CPU 1. Rows: get, set, 10-key multiget and pipelined get
# (depth 8), each at 1 and 50 connections, 100 000 keys of 16 bytes, 100-byte values; then
# the items that fit at -m 1024 (`shoal bench fill`, on freshly started servers).
# Prints markdown tables on stdout (`| bench/rewrite-doc.sh server-vs-memcached` puts them into
# docs/BENCHMARKS.md); every run's JSON and the servers' logs are kept in
# target/bench/server-vs-memcached-<time>/.
#
# Without a `shoal server` to run it says so and measures memcached alone.
#
#   BENCH_SECS       seconds per row and server (default 5)
#   BENCH_MEMORY_MB  -m of both servers (default 1024)
#   SERVER_CPU       CPU the servers are pinned to (default 0)
#   LOAD_CPU         CPU the load generator is pinned to (default 1)
#   MEMCACHED        the memcached binary (default /usr/bin/memcached)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${BENCH_SECS:-5}
memory_mb=${BENCH_MEMORY_MB:-1024}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
memcached=${MEMCACHED:-/usr/bin/memcached}
shoal=target/release/shoal
out=target/bench/server-vs-memcached-$(date -u +%Y%m%dT%H%M%SZ)

say() { printf '%s\n' "$*" >&2; }

[ -x "$memcached" ] || { say "no memcached at $memcached (apt-get install memcached)"; exit 1; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
say "building target/release/shoal"
cargo build --release --quiet -p shoal
mkdir -p "$out"

servers=(memcached)
if "$shoal" server -V >/dev/null 2>&1; then
  servers+=(shoal)
else
  say "NOTE: \`shoal server\` is not available in this build: measuring memcached alone"
fi

server_flags=()
source bench/lib/servers.sh

rows=(
  "get, 1 connection|--get-ratio 1 --prefill --connections 1"
  "get, 50 connections|--get-ratio 1 --prefill --connections 50"
  "set, 1 connection|--get-ratio 0 --connections 1"
  "set, 50 connections|--get-ratio 0 --connections 50"
  "10-key multiget, 1 connection|--get-ratio 1 --prefill --multiget 10 --connections 1"
  "10-key multiget, 50 connections|--get-ratio 1 --prefill --multiget 10 --connections 50"
  "pipelined get (depth 8), 1 connection|--get-ratio 1 --prefill --pipeline 8 --connections 1"
  "pipelined get (depth 8), 50 connections|--get-ratio 1 --prefill --pipeline 8 --connections 50"
  "get of 16 KiB values, 1 connection|--get-ratio 1 --prefill --connections 1 --keys 10000 --value-size 16384"
  "10-key multiget of 16 KiB values, 1 connection|--get-ratio 1 --prefill --multiget 10 --connections 1 --keys 10000 --value-size 16384"
)
common=(--key-size 16 --duration "$secs")
# Rows that name no data size get 100 000 keys with 100-byte values.
small_values=(--keys 100000 --value-size 100)

for name in "${servers[@]}"; do start "$name"; done
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty)," \
  "\`bench/server-vs-memcached.sh\` (BENCH_SECS=$secs): servers \`-t 1 -m $memory_mb -U 0\` on CPU $server_cpu," \
  "\`shoal bench load ${common[*]}\` (and \`${small_values[*]}\` unless the row says otherwise) on CPU $load_cpu; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo "memcached: $("$memcached" -V)."
echo
echo "| row | memcached req/s | shoal req/s | ratio | memcached CPU µs/req | shoal CPU µs/req | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for row in "${rows[@]}"; do
  label=${row%%|*}
  read -ra flags <<<"${row#*|}"
  [[ " ${flags[*]} " = *" --value-size "* ]] || flags+=("${small_values[@]}")
  slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
  for name in "${servers[@]}"; do
    say "$label: $name"
    bench load "$name" "$out/$slug-$name.json" "${common[@]}" "${flags[@]}"
  done
  mc_json="$out/$slug-memcached.json" sh_json="$out/$slug-shoal.json"
  mc_rps=$(cell "$mc_json" .requests_per_second %.0f) sh_rps=$(cell "$sh_json" .requests_per_second %.0f)
  mc_cpu=$(cell "$mc_json" .server_cpu_us_per_request %.2f)
  sh_cpu=$(cell "$sh_json" .server_cpu_us_per_request %.2f)
  echo "| $label | $mc_rps | $sh_rps | $(ratio "$sh_rps" "$mc_rps") | $mc_cpu | $sh_cpu | $(ratio "$sh_cpu" "$mc_cpu") |"
done
stop_all

echo
echo "Items that fit at \`-m $memory_mb\`, 16-byte keys and 100-byte values (\`shoal bench fill\` on a fresh server," \
  "until evictions start or \`curr_items\` stops growing):"
echo
echo "| | memcached | shoal | ratio |"
echo "|---|---:|---:|---:|"
for name in "${servers[@]}"; do
  say "items that fit: $name"
  start "$name"
  bench fill "$name" "$out/fill-$name.json" --key-size 16 --value-size 100
  stop "$name"
done
mc_items=$(cell "$out/fill-memcached.json" .items %d) sh_items=$(cell "$out/fill-shoal.json" .items %d)
echo "| items | $mc_items | $sh_items | $(ratio "$sh_items" "$mc_items") |"
echo
echo "Reports: \`$out/\`"
