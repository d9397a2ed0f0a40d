#!/usr/bin/env bash
# An interleaved A/B of two `shoal` binaries: did a change (say, a behaviour-preserving
# redesign) move the server's, the router's or the pool client's cost? Both binaries run side
# by side in one run, in turns (A then B in odd rounds, B then A in even ones, so a drifting
# machine weighs on both alike); the table gives medians and B ÷ A.
#
#   bench/ab.sh BASELINE [CANDIDATE]
#     BASELINE   the `shoal` binary before the change (e.g. built from the old commit in a
#                `git worktree`, `cargo build --release -p shoal` there)
#     CANDIDATE  the binary after it (default target/release/shoal, built here)
#
# Rows, with the servers and routers pinned to SERVER_CPU and the load on LOAD_CPU:
# - server: `shoal server -t 1 -m 1024 -U 0` from each binary; get, set, 10-key multiget,
#   pipelined get (depth 8), meta get and binary get at 50 connections, and get at 1
#   (`shoal bench load`, the candidate's, against both; server CPU from its rusage).
# - router: `shoal router -t 1` from each binary in front of the same 4 candidate servers;
#   get, set and 10-key multiget at 50 connections (router CPU from /proc/<pid>/stat).
# - pool: each binary's own `shoal bench pool` (100-key get_many over 8 candidate servers,
#   over TCP and through shared memory): p50 µs.
# Prints markdown on stdout; every report is kept in target/bench/ab-<time>/.
#   BENCH_SECS      seconds per load row (default 3)
#   ROUNDS          rounds (default 3)
#   BENCH_REQUESTS  timed calls per pool row (default 3000)
#   SERVER_CPU, LOAD_CPU (default 0 and 1)
# Needs jq (apt-get install jq).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '%s\n' "$*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] && [ "$1" != -h ] && [ "$1" != --help ] || usage
baseline=$1
candidate=${2:-target/release/shoal}
secs=${BENCH_SECS:-3}
rounds=${ROUNDS:-3}
requests=${BENCH_REQUESTS:-3000}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
command -v jq >/dev/null || { say "jq is needed (apt-get install jq)"; exit 1; }
[ -x "$baseline" ] || { say "no shoal binary at $baseline (the baseline: build it first)"; exit 1; }
if [ $# -lt 2 ]; then
  say "building target/release/shoal"
  cargo build --release --quiet -p shoal
fi
[ -x "$candidate" ] || { say "no shoal binary at $candidate"; exit 1; }
declare -A binary=([A]="$baseline" [B]="$candidate")
out=target/bench/ab-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
# serve BINARY LOG ARGS...: a `shoal server` on a free loopback port, pinned; prints host:port.
serve() {
  local bin=$1 log=$2 port
  shift 2
  port=$(free_port)
  taskset -c "$server_cpu" "$bin" server -p "$port" -U 0 -l 127.0.0.1 -t 1 "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { echo "127.0.0.1:$port"; return; }
    sleep 0.1
  done
  say "a server did not start listening within 10 s ($log)"; exit 1
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# load NAME ADDRESS PID ARGS...: one candidate `shoal bench load`; prints CPU µs/request, from
# the server's rusage (PID empty) or from /proc/PID/stat.
load() {
  local name=$1 address=$2 pid=$3 before after
  shift 3
  [ -n "$pid" ] && before=$(ticks "$pid")
  taskset -c "$load_cpu" "$candidate" bench load -s "$address" -d "$secs" --key-size 16 --json "$@" \
    >"$out/$name.json" 2>>"$out/load.log"
  local errors
  errors=$(jq '.errors // 0' "$out/$name.json")
  [ "$errors" = 0 ] || say "WARNING: $name: $errors requests answered with errors ($out/$name.json)"
  if [ -n "$pid" ]; then
    after=$(ticks "$pid")
    jq -r --arg t "$((after - before))" --arg hz "$hz" '($t | tonumber) / ($hz | tonumber) * 1e6 / .requests' "$out/$name.json"
  else
    jq -r '.server_cpu_us_per_request' "$out/$name.json"
  fi
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# order ROUND: A B in odd rounds, B A in even ones.
order() { if [ $(($1 % 2)) = 1 ]; then echo A B; else echo B A; fi; }

declare -A server
for side in A B; do server[$side]=$(serve "${binary[$side]}" "$out/server-$side.log" -m 1024); done
backends=() pool=()
for i in 0 1 2 3 4 5 6 7; do
  address=$(serve "$candidate" "$out/backend-$i.log" -m 256)
  pool+=("$address")
  [ "$i" -lt 4 ] && backends+=("$address")
done
declare -A router router_pid
servers_json=$(printf '"%s",' "${backends[@]}")
echo "{ \"pools\": { \"A\": { \"servers\": [${servers_json%,}] } }, \"route\": { \"type\": \"PoolRoute\", \"pool\": \"A\" } }" >"$out/router.json"
for side in A B; do
  port=$(free_port)
  taskset -c "$server_cpu" "${binary[$side]}" router -f "$out/router.json" -p "$port" -l 127.0.0.1 -t 1 \
    --spool-dir "$out/spool-$side" >"$out/router-$side.log" 2>&1 &
  pids+=($!) router[$side]=127.0.0.1:$port router_pid[$side]=$!
done
sleep 1

server_rows=(
  "server get, 1 connection|--get-ratio 1 --prefill --connections 1"
  "server get, 50 connections|--get-ratio 1 --prefill --connections 50"
  "server set, 50 connections|--get-ratio 0 --connections 50"
  "server 10-key multiget, 50 connections|--get-ratio 1 --prefill --multiget 10 --connections 50"
  "server pipelined get (depth 8), 50 connections|--get-ratio 1 --prefill --pipeline 8 --connections 50"
  "server meta get, 50 connections|--protocol meta --get-ratio 1 --prefill --connections 50"
  "server binary get, 50 connections|--protocol binary --get-ratio 1 --prefill --connections 50"
)
router_rows=(
  "router get|--get-ratio 1 --prefill"
  "router set|--get-ratio 0"
  "router 10-key multiget|--get-ratio 1 --prefill --multiget 10"
)
declare -A cpu
for round in $(seq "$rounds"); do
  for row in "${server_rows[@]}"; do
    IFS='|' read -r label flag_words <<<"$row"
    read -ra flags <<<"$flag_words"
    for side in $(order "$round"); do
      say "round $round/$rounds, $label: $side"
      cpu[$label|$side]+="$(load "${label// /-}-$side-$round" "${server[$side]}" "" --keys 100000 --value-size 100 "${flags[@]}") "
    done
  done
  for row in "${router_rows[@]}"; do
    IFS='|' read -r label flag_words <<<"$row"
    read -ra flags <<<"$flag_words"
    for side in $(order "$round"); do
      say "round $round/$rounds, $label: $side"
      cpu[$label|$side]+="$(load "${label// /-}-$side-$round" "${router[$side]}" "${router_pid[$side]}" -c 50 "${flags[@]}") "
    done
  done
  list=$(IFS=,; echo "${pool[*]}")
  for side in $(order "$round"); do
    say "round $round/$rounds, pool: $side"
    taskset -c "$load_cpu" "${binary[$side]}" bench pool --servers "$list" --requests "$requests" --json \
      >"$out/pool-$side-$round.json"
  done
done

echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'): A = \`$baseline\`, B = \`$candidate\` (commit $(git describe --always --dirty));" \
  "\`bench/ab.sh\` (BENCH_SECS=$secs ROUNDS=$rounds BENCH_REQUESTS=$requests); servers and routers on CPU $server_cpu, load on CPU $load_cpu;" \
  "medians of $rounds interleaved rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| row | A | B | B ÷ A | B ÷ A, each round |"
echo "|---|---:|---:|---:|---|"
for row in "${server_rows[@]}" "${router_rows[@]}"; do
  label=${row%%|*}
  read -ra a <<<"${cpu[$label|A]}"
  read -ra b <<<"${cpu[$label|B]}"
  each=$(for i in "${!a[@]}"; do awk -v x="${b[$i]}" -v y="${a[$i]}" 'BEGIN { printf "%.2f ", x / y }'; done)
  awk -v l="$label, CPU µs/request" -v a="$(median "${a[@]}")" -v b="$(median "${b[@]}")" -v e="${each% }" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.2f | %s |\n", l, a, b, b / a, e }'
done
for path in $(jq -r '.rows[].path | @base64' "$out/pool-A-1.json"); do
  name=$(base64 -d <<<"$path")
  a=() b=()
  for round in $(seq "$rounds"); do
    a+=("$(jq -r --arg p "$name" '.rows[] | select(.path == $p) | .latency_us.p50' "$out/pool-A-$round.json")")
    b+=("$(jq -r --arg p "$name" '.rows[] | select(.path == $p) | .latency_us.p50' "$out/pool-B-$round.json")")
  done
  each=$(for i in "${!a[@]}"; do awk -v x="${b[$i]}" -v y="${a[$i]}" 'BEGIN { printf "%.2f ", x / y }'; done)
  awk -v l="pool: $name, p50 µs" -v a="$(median "${a[@]}")" -v b="$(median "${b[@]}")" -v e="${each% }" \
    'BEGIN { printf "| %s | %.1f | %.1f | %.2f | %s |\n", l, a, b, b / a, e }'
done
echo
echo "Reports: \`$out/\`"
