#!/usr/bin/env bash
# TLS: `shoal server -Z` vs memcached `-Z`, side by side in one run (issue #12's target: Shoal's
# server CPU per request ≤ 0.8× memcached's).
#
# A throwaway CA and server certificate are made with the openssl command; both servers get
# the same flags (-t 1 -m 1024 -U 0 -Z -o ssl_chain_cert=…,ssl_key=…, loopback, a free port)
# and run pinned to CPU 0, loaded one after the other row by row by `shoal bench load
# --tls-ca` (rustls's client, TLS 1.3) pinned to CPU 1. CPU per request is the servers' own
# rusage from `stats`, before and after each row; each row runs ROUNDS times per server,
# interleaved, and the medians are reported. Prints a markdown table on stdout
# (`| bench/rewrite-doc.sh tls-vs-memcached` puts it into docs/BENCHMARKS.md); the JSON
# reports, certificates and logs stay in target/bench/tls-vs-memcached-<time>/.
#
# No pipelined rows and no values over 16 KB: memcached 1.6.18 stalls when requests wait in
# OpenSSL's buffer behind a large one (docs/PROTOCOL.md).
#
#   BENCH_SECS       seconds per row, round and server (default 5)
#   ROUNDS           rounds per row, the servers taking turns; medians are reported (default 3)
#   BENCH_MEMORY_MB  -m of both servers (default 1024)
#   SERVER_CPU       CPU the servers are pinned to (default 0)
#   LOAD_CPU         CPU the load generator is pinned to (default 1)
#   MEMCACHED        the memcached binary (default /usr/bin/memcached)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${BENCH_SECS:-5}
rounds=${ROUNDS:-3}
memory_mb=${BENCH_MEMORY_MB:-1024}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
memcached=${MEMCACHED:-/usr/bin/memcached}
shoal=target/release/shoal
out=target/bench/tls-vs-memcached-$(date -u +%Y%m%dT%H%M%SZ)

say() { printf '%s\n' "$*" >&2; }

[ -x "$memcached" ] || { say "no memcached at $memcached (apt-get install memcached)"; exit 1; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
command -v openssl >/dev/null || { say "openssl makes the certificates (apt-get install openssl)"; exit 1; }
say "building target/release/shoal"
cargo build --release --quiet -p shoal
mkdir -p "$out"

say "making a throwaway CA and server certificate in $out"
(
  cd "$out"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench CA" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
  echo "subjectAltName=IP:127.0.0.1" >server.ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 \
    -extfile server.ext 2>/dev/null
)

server_flags=(-Z -o "ssl_chain_cert=$PWD/$out/server.pem,ssl_key=$PWD/$out/server.key")
source bench/lib/servers.sh
servers=(memcached shoal)

rows=(
  "get, 1 connection|--get-ratio 1 --prefill --connections 1"
  "get, 50 connections|--get-ratio 1 --prefill --connections 50"
  "set, 50 connections|--get-ratio 0 --connections 50"
  "10-key multiget, 50 connections|--get-ratio 1 --prefill --multiget 10 --connections 50"
  "get of 4 KiB values, 50 connections|--get-ratio 1 --prefill --connections 50 --keys 10000 --value-size 4096"
)
common=(--key-size 16 --duration "$secs" --tls-ca "$out/ca.pem")
small_values=(--keys 100000 --value-size 100)

for name in "${servers[@]}"; do start "$name"; done
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty)," \
  "\`bench/tls-vs-memcached.sh\` (BENCH_SECS=$secs ROUNDS=$rounds, medians): servers \`-t 1 -m $memory_mb -U 0 -Z\` (RSA-2048 certificate) on CPU $server_cpu," \
  "\`shoal bench load --key-size 16 --duration $secs --tls-ca <the CA>\` (and \`${small_values[*]}\` unless the row says otherwise) on CPU $load_cpu;" \
  "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo "memcached: $("$memcached" -V), $(openssl version | cut -d' ' -f1-2); Shoal: rustls on ring."
echo
echo "| row (TLS) | memcached req/s | shoal req/s | ratio | memcached CPU µs/req | shoal CPU µs/req | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|"
# medians NAME SLUG FILTER: the median of a figure over the rounds of one row, or —.
medians() {
  local values
  values=$(for round in $(seq "$rounds"); do cell "$out/$2-$1-$round.json" "$3" %s; echo; done | grep -v '^—$' || true)
  [ -n "$values" ] || { printf '—'; return; }
  sort -n <<<"$values" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
# figure FORMAT VALUE: the value formatted, or — without one.
figure() { if [ "$2" = — ]; then printf —; else printf "$1" "$2"; fi; }
for row in "${rows[@]}"; do
  label=${row%%|*}
  read -ra flags <<<"${row#*|}"
  [[ " ${flags[*]} " = *" --value-size "* ]] || flags+=("${small_values[@]}")
  slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
  for round in $(seq "$rounds"); do
    for name in "${servers[@]}"; do
      say "$label, round $round: $name"
      bench load "$name" "$out/$slug-$name-$round.json" "${common[@]}" "${flags[@]}"
    done
  done
  mc_rps=$(medians memcached "$slug" .requests_per_second) sh_rps=$(medians shoal "$slug" .requests_per_second)
  mc_cpu=$(medians memcached "$slug" .server_cpu_us_per_request)
  sh_cpu=$(medians shoal "$slug" .server_cpu_us_per_request)
  echo "| $label | $(figure %.0f "$mc_rps") | $(figure %.0f "$sh_rps") | $(ratio "$sh_rps" "$mc_rps")" \
    "| $(figure %.2f "$mc_cpu") | $(figure %.2f "$sh_cpu") | $(ratio "$sh_cpu" "$mc_cpu") |"
done
echo
echo "Reports: \`$out/\`"
