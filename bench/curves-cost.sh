#!/usr/bin/env bash
# What the hit-ratio curve costs with local reads (issue 27's targets: ≤ 3 % of the client's
# local get time, ≤ 5 % of server CPU with 90 % of reads local). Two servers, `-t 1 -U 0`
# pinned to SERVER_CPU, one plain and one with `--hit-curve`; every measurement pinned to
# LOAD_CPU, ROUNDS interleaved rounds (plain, then curves, each round), medians reported:
#   client: `shoal bench latency --sizes 100 --requests 200000`, the shared-memory rows (one
#           key read again and again, so with curves on every read is sampled: the worst case);
#   server: `shoal bench load --through shm --get-ratio 0.9 --keys 100000 --connections 1`,
#           gets through shared memory and sets over the network, the server's CPU divided by
#           every request, local ones included (server `-m 256`).
# Prints a markdown table; the JSON reports are kept in target/bench/curves-cost-<time>/.
#   SHOAL (default target/release/shoal)  BENCH_SECS (5)  ROUNDS (5)  SERVER_CPU (0)  LOAD_CPU (1)
set -euo pipefail
cd "$(dirname "$0")/.."

shoal=${SHOAL:-target/release/shoal}
secs=${BENCH_SECS:-5} rounds=${ROUNDS:-5} server_cpu=${SERVER_CPU:-0} load_cpu=${LOAD_CPU:-1}
out=target/bench/curves-cost-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
[ -x "$shoal" ] || { say "no $shoal: cargo build --release -p shoal, or SHOAL=<binary>"; exit 1; }
mkdir -p "$out"

declare -A flags=([off]="" [on]="--hit-curve") pid address
variants=(off on)
start() {
  local name=$1 ports="$out/$1.ports" port=
  rm -f "$ports"
  # shellcheck disable=SC2086 # the variant's flags are words
  MEMCACHED_PORT_FILENAME=$ports taskset -c "$server_cpu" "$shoal" server -p -1 -U 0 -l 127.0.0.1 -t 1 -m 256 \
    ${flags[$name]} >>"$out/$name.log" 2>&1 &
  pid[$name]=$!
  for _ in $(seq 300); do
    port=$(sed -n 's/^TCP INET: //p' "$ports" 2>/dev/null || true)
    [ -n "$port" ] && { address[$name]=127.0.0.1:$port; return; }
    sleep 0.1
  done
  say "$name did not start"; exit 1
}
stop_all() { for name in "${!pid[@]}"; do kill "${pid[$name]}" 2>/dev/null || true; wait "${pid[$name]}" 2>/dev/null || true; done; }
trap stop_all EXIT
for name in "${variants[@]}"; do start "$name"; done

load=(--through shm --get-ratio 0.9 --keys 100000 --key-size 16 --value-size 100 --connections 1
  --duration "$secs" --prefill)
for round in $(seq "$rounds"); do
  for name in "${variants[@]}"; do
    say "round $round: curves $name"
    taskset -c "$load_cpu" "$shoal" bench latency --server "${address[$name]}" --sizes 100 --requests 200000 \
      --json >"$out/latency-$name-$round.json"
    taskset -c "$load_cpu" "$shoal" bench load --server "${address[$name]}" --json "${load[@]}" \
      >"$out/load-$name-$round.json"
  done
done
curve=$(printf 'curve\r\nquit\r\n' | timeout 10 nc -q 2 "${address[on]%:*}" "${address[on]#*:}" 2>/dev/null \
  | tr -d '\r' | grep -E '^STAT (rate|tracked|local_sampled|local_lost) ' | cut -d' ' -f2- | paste -sd' ' || true)

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
each() { for round in $(seq "$rounds"); do jq -r "$2" "$out/$1-$round.json"; done; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
row() {
  local label=$1 file=$2 query=$3 off on
  off=$(each "$file-off" "$query" | median) on=$(each "$file-on" "$query" | median)
  printf '| %s | %s | %s | %.3f | %.3f | %s |\n' "$label" "$(each "$file-off" "$query" | paste -sd' ')" \
    "$(each "$file-on" "$query" | paste -sd' ')" "$off" "$on" "$(ratio "$on" "$off")"
}
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`ROUNDS=$rounds BENCH_SECS=$secs bench/curves-cost.sh\`" \
  "($shoal, $(git describe --always --dirty)): servers on CPU $server_cpu, clients on CPU $load_cpu;" \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); medians of $rounds interleaved rounds."
echo
echo "| measure | curves off (rounds) | curves on (rounds) | off median | on median | ratio |"
echo "|---|---|---|---:|---:|---:|"
sm='.rows[] | select(.path == "shared memory")'
row "local get, p50 µs" latency "$sm | select(.operation == \"get\") | .latency_us.p50"
row "10-key local multiget, p50 µs" latency "$sm | select(.operation | endswith(\"multiget\")) | .latency_us.p50"
row "server CPU µs per request, 90 % local gets" load '.server_cpu_us_per_request'
echo
echo "The curve's state at the end (curves on): ${curve:-not read}"
echo "Reports: \`$out/\`"
