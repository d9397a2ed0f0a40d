#!/usr/bin/env bash
# What Shoal's optional server features cost in server CPU per request: `shoal server` plain,
# with `--hit-curve` (SHARDS on every get; issue 16's target: < 5 %), and with
# `--digest-keys 200000` (the Proteus digest updated on every new or departing key; issue 17),
# and with `--tenants` (three tenants told apart by key prefix, the load's keys the default
# one's, every tenant's curve on; issue 16), side by side in one run. Servers `-t 1 -m 256 -U 0` pinned to SERVER_CPU, the load generator
# (`shoal bench load`) to LOAD_CPU; each row runs ROUNDS times per server, interleaved, and the
# median CPU µs/request is reported with its ratio to the plain server. Prints a markdown table;
# the JSON reports are kept in target/bench/feature-overhead-<time>/.
#   BENCH_SECS (default 5)  ROUNDS (default 3)  SERVER_CPU (0)  LOAD_CPU (1)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${BENCH_SECS:-5} rounds=${ROUNDS:-3} server_cpu=${SERVER_CPU:-0} load_cpu=${LOAD_CPU:-1}
shoal=target/release/shoal
out=target/bench/feature-overhead-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
say "building target/release/shoal"
cargo build --release --quiet -p shoal
mkdir -p "$out"

printf '%s\n' 'default = "main"' '[[tenant]]' 'name = "main"' 'size_mb = 160' \
  '[[tenant]]' 'name = "a"' 'prefixes = ["a:"]' 'size_mb = 32' '[[tenant]]' 'name = "b"' 'prefixes = ["b:"]' \
  'size_mb = 32' >"$out/tenants.toml"
declare -A flags=([plain]="" [hit-curve]="--hit-curve" [digest]="--digest-keys 200000"
  [tenants]="--tenants $out/tenants.toml")
variants=(plain hit-curve digest tenants)
declare -A pid address
start() {
  local name=$1 ports="$out/$1.ports" port=
  rm -f "$ports"
  # shellcheck disable=SC2086 # the variant's flags are words
  MEMCACHED_PORT_FILENAME=$ports taskset -c "$server_cpu" "$shoal" server -p -1 -U 0 -l 127.0.0.1 -t 1 -m 256 \
    ${flags[$name]} >>"$out/$name.log" 2>&1 &
  pid[$name]=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/^TCP INET: //p' "$ports" 2>/dev/null || true)
    [ -n "$port" ] && { address[$name]=127.0.0.1:$port; return; }
    sleep 0.1
  done
  say "$name did not start"; exit 1
}
stop_all() { for name in "${!pid[@]}"; do kill "${pid[$name]}" 2>/dev/null || true; wait "${pid[$name]}" 2>/dev/null || true; done; }
trap stop_all EXIT

rows=(
  "get, 50 connections|--get-ratio 1 --prefill --connections 50"
  "set, 50 connections|--get-ratio 0 --connections 50"
  "10-key multiget, 50 connections|--get-ratio 1 --prefill --multiget 10 --connections 50"
)
common=(--key-size 16 --value-size 100 --keys 100000 --duration "$secs")
for name in "${variants[@]}"; do start "$name"; done
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), \`bench/feature-overhead.sh\`" \
  "(BENCH_SECS=$secs ROUNDS=$rounds): servers \`-t 1 -m 256 -U 0\` on CPU $server_cpu, \`shoal bench load ${common[*]}\`" \
  "on CPU $load_cpu; load average $(cut -d' ' -f1-3 /proc/loadavg); medians of $rounds."
echo
echo "| row | plain CPU µs/req | --hit-curve | ratio | --digest-keys 200000 | ratio | --tenants (3) | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for row in "${rows[@]}"; do
  label=${row%%|*}
  read -ra row_flags <<<"${row#*|}"
  slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
  for round in $(seq "$rounds"); do
    for name in "${variants[@]}"; do
      say "$label: $name, round $round"
      taskset -c "$load_cpu" "$shoal" bench load --server "${address[$name]}" --json "${common[@]}" "${row_flags[@]}" \
        >"$out/$slug-$name-$round.json"
    done
  done
  declare -A cpu=()
  for name in "${variants[@]}"; do
    cpu[$name]=$(for round in $(seq "$rounds"); do jq '.server_cpu_us_per_request' "$out/$slug-$name-$round.json"; done | median)
  done
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
  printf '| %s | %.3f | %.3f | %s | %.3f | %s | %.3f | %s |\n' "$label" "${cpu[plain]}" "${cpu[hit-curve]}" \
    "$(ratio "${cpu[hit-curve]}" "${cpu[plain]}")" "${cpu[digest]}" "$(ratio "${cpu[digest]}" "${cpu[plain]}")" \
    "${cpu[tenants]}" "$(ratio "${cpu[tenants]}" "${cpu[plain]}")"
done
echo
echo "Reports: \`$out/\`"
