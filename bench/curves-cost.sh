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
#   server, profiled (with `perf`, PROFILE=1 by default): after those rounds, ROUNDS more load
#           runs of the curves-on server alone, sampled (`perf record -e cpu-clock --call-graph
#           dwarf`); the row gives the share of its CPU samples with the curve's code on the
#           stack (`shoal_curves::`, `shoal_server::curve::`, the hints area's `SampleReader`):
#           the curve's cost as a share of server CPU. The profiled runs are kept out of the CPU
#           row: perf's own sampling (an interrupt and an 8 KiB stack copy per sample, 4 000 a
#           second) is charged to the process it samples, as system time, and read +1.2–2 µs a
#           request on whichever server it recorded (+49 % when it recorded only curves on).
# Prints a markdown table; the JSON reports are kept in target/bench/curves-cost-<time>/.
#   SHOAL (default target/release/shoal)  BENCH_SECS (5)  ROUNDS (5)  SERVER_CPU (0)  LOAD_CPU (1)
#   PROFILE (1: profile with perf when it is installed; 0: not)
#   LATENCY (1: the client rows too; 0: the server rows alone — the client's cost does not
#           depend on the sample's size, since its one key is always in the sample)
set -euo pipefail
cd "$(dirname "$0")/.."

shoal=${SHOAL:-target/release/shoal}
secs=${BENCH_SECS:-5} rounds=${ROUNDS:-5} server_cpu=${SERVER_CPU:-0} load_cpu=${LOAD_CPU:-1}
profile=${PROFILE:-1} latency=${LATENCY:-1}
out=target/bench/curves-cost-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
[ -x "$shoal" ] || { say "no $shoal: cargo build --release -p shoal, or SHOAL=<binary>"; exit 1; }
if [ "$profile" = 1 ] && ! command -v perf >/dev/null; then say "no perf: the profiled row is left out"; profile=0; fi
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
    if [ "$latency" = 1 ]; then
      taskset -c "$load_cpu" "$shoal" bench latency --server "${address[$name]}" --sizes 100 --requests 200000 \
        --json >"$out/latency-$name-$round.json"
    fi
    taskset -c "$load_cpu" "$shoal" bench load --server "${address[$name]}" --json "${load[@]}" \
      >"$out/load-$name-$round.json"
  done
done
if [ "$profile" = 1 ]; then
  for round in $(seq "$rounds"); do
    say "profiled round $round: curves on"
    perf record -q -e cpu-clock -F 4000 --call-graph dwarf,8192 -p "${pid[on]}" -o "$out/perf-$round.data" \
      >>"$out/perf.log" 2>&1 &
    recorder=$!
    taskset -c "$load_cpu" "$shoal" bench load --server "${address[on]}" --json "${load[@]}" \
      >"$out/profiled-on-$round.json"
    kill -INT "$recorder"; wait "$recorder" || true
  done
fi
# The curve's own line, over bash's /dev/tcp (no netcat needed).
curve=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/$0/$1"; printf "curve\r\nquit\r\n" >&3; cat <&3' \
  "${address[on]%:*}" "${address[on]#*:}" 2>/dev/null \
  | tr -d '\r' | grep -E '^STAT (rate|tracked|local_sampled|local_lost) ' | cut -d' ' -f2- | paste -sd' ' || true)
# share FILE: the percentage of the profile's samples with the curve's code on the stack.
share() {
  { perf script -i "$1" -F ip,sym 2>/dev/null || true; } | awk '
    /^[[:space:]]*$/ { if (frames) { total++; curve += hit } frames = 0; hit = 0; next }
    { frames++ }
    /shoal_curves::|shoal_server::curve::|SampleReader/ { hit = 1 }
    END { if (frames) { total++; curve += hit } if (total) printf "%.2f\n", 100 * curve / total }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
each() { for round in $(seq "$rounds"); do jq -r "$2" "$out/$1-$round.json"; done; }
rounded() { awk '{ printf "%s%.3f", (NR > 1 ? " " : ""), $1 } END { print "" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
row() {
  local label=$1 file=$2 query=$3 off on
  off=$(each "$file-off" "$query" | median) on=$(each "$file-on" "$query" | median)
  printf '| %s | %s | %s | %.3f | %.3f | %s |\n' "$label" "$(each "$file-off" "$query" | rounded)" \
    "$(each "$file-on" "$query" | rounded)" "$off" "$on" "$(ratio "$on" "$off")"
}
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`ROUNDS=$rounds BENCH_SECS=$secs bench/curves-cost.sh\`" \
  "($shoal, $(git describe --always --dirty)): servers on CPU $server_cpu, clients on CPU $load_cpu;" \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg); medians of $rounds interleaved rounds."
echo
echo "| measure | curves off (rounds) | curves on (rounds) | off median | on median | ratio |"
echo "|---|---|---|---:|---:|---:|"
sm='.rows[] | select(.path == "shared memory")'
if [ "$latency" = 1 ]; then
  row "local get, p50 µs" latency "$sm | select(.operation == \"get\") | .latency_us.p50"
  row "10-key local multiget, p50 µs" latency "$sm | select(.operation | endswith(\"multiget\")) | .latency_us.p50"
fi
row "server CPU µs per request, 90 % local gets" load '.server_cpu_us_per_request'
if [ "$profile" = 1 ]; then
  shares=$(for round in $(seq "$rounds"); do share "$out/perf-$round.data"; done)
  printf '| curve code, %% of the curves-on server CPU samples (perf) | — | %s | — | %s | — |\n' \
    "$(paste -sd' ' <<<"$shares")" "$(median <<<"$shares")"
fi
echo
echo "The curve's state at the end (curves on): ${curve:-not read}"
echo "Reports: \`$out/\`"
