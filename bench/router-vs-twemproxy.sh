#!/usr/bin/env bash
# Issue #14's router table: `shoal router` vs twemproxy (Debian's `nutcracker`) in front of the
# same 4 `shoal server`s, side by side in one run. The backends and both proxies run pinned to
# CPU 0 (each proxy with one worker thread), the load generator (`shoal bench load`, 50
# connections) on CPU 1. Rows: get, set and a 10-key multiget, against each proxy and, for the
# added latency, against one backend directly. A proxy's CPU per request comes from its
# /proc/<pid>/stat (user + system ticks) around the row.
# Each row is run BENCH_REPEAT times, direct / twemproxy / router in turn each time, and the
# table gives the medians (a machine shared with other work drifts between runs; interleaving
# keeps both proxies under the same drift, the median drops the outliers).
# Prints markdown (`| bench/rewrite-doc.sh router` puts it into docs/BENCHMARKS.md).
#   BENCH_SECS   seconds per row (default 5)
#   BENCH_REPEAT runs of each row per proxy (default 3)
#   BENCH_HASHING  the router pool's hashing (default ketama_weighted, twemproxy's md5 ketama)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${BENCH_SECS:-5}
repeat=${BENCH_REPEAT:-3}
hashing=${BENCH_HASHING:-ketama_weighted}
out=target/bench/router-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }
command -v nutcracker >/dev/null || { say "nutcracker is needed (apt-get install nutcracker)"; exit 1; }
command -v jq >/dev/null || { say "jq is needed (apt-get install jq)"; exit 1; }
mkdir -p "$out"
cargo build --release --quiet -p shoal
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

backends=()
for i in 0 1 2 3; do
  port=$(free_port)
  taskset -c 0 target/release/shoal server -p "$port" -U 0 -l 127.0.0.1 -t 1 -m 256 >"$out/shoal-$i.log" 2>&1 &
  pids+=($!) backends+=("127.0.0.1:$port")
done

twemproxy_port=$(free_port)
{
  echo "pool:"
  echo "  listen: 127.0.0.1:$twemproxy_port"
  echo "  hash: md5"
  echo "  distribution: ketama"
  echo "  timeout: 1000"
  echo "  servers:"
  for b in "${backends[@]}"; do echo "   - $b:1"; done
} >"$out/nutcracker.yml"
taskset -c 0 nutcracker -c "$out/nutcracker.yml" -s "$(free_port)" >"$out/nutcracker.log" 2>&1 &
twemproxy_pid=$!; pids+=($twemproxy_pid)

router_port=$(free_port)
servers=$(printf '"%s",' "${backends[@]}")
echo "{ \"pools\": { \"A\": { \"servers\": [${servers%,}] } }, \"route\": { \"type\": \"PoolRoute\", \"pool\": \"A\", \"hash\": \"$hashing\" } }" >"$out/router.json"
taskset -c 0 target/release/shoal router -f "$out/router.json" -p "$router_port" -l 127.0.0.1 -t 1 \
  --spool-dir "$out/spool" >"$out/router.log" 2>&1 &
router_pid=$!; pids+=($router_pid)
sleep 1

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)

# row NAME PORT PID ARGS...: one load run; prints "p50 p99 requests cpu_us_per_request".
row() {
  local name=$1 port=$2 pid=$3; shift 3
  local before after
  [ -n "$pid" ] && before=$(ticks "$pid")
  taskset -c 1 target/release/shoal bench load -s "127.0.0.1:$port" -c 50 -d "$secs" --prefill --json "$@" \
    >"$out/$name.json" 2>>"$out/load.log"
  [ -n "$pid" ] && after=$(ticks "$pid")
  local cpu="-"
  if [ -n "$pid" ]; then
    cpu=$(jq -r --arg t "$((after - before))" --arg hz "$hz" '($t | tonumber) / ($hz | tonumber) * 1e6 / .requests' "$out/$name.json")
  fi
  jq -r --arg cpu "$cpu" '"\(.latency_us.p50) \(.latency_us.p99) \(.requests) \($cpu)"' "$out/$name.json"
}

# median N...: the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), $secs s per row, 50 connections;" \
  "4 backends and the proxies on CPU 0, load on CPU 1; medians of $repeat interleaved runs per row; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| row | proxy | CPU µs/request | ÷ twemproxy | p50 µs | p99 µs | added p99 µs (vs direct) | router ÷ twemproxy, each run |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for spec in "get:--get-ratio 1" "set:--get-ratio 0" "10-key multiget:--get-ratio 1 --multiget 10"; do
  name=${spec%%:*}; args=${spec#*:}
  d99s=() t50s=() t99s=() tcpus=() r50s=() r99s=() rcpus=() ratios=()
  for run in $(seq "$repeat"); do
    say "$name, run $run of $repeat"
    read -r _ d99 _ _ < <(row "direct-${name// /-}-$run" "${backends[0]#*:}" "" $args)
    read -r t50 t99 _ tcpu < <(row "twemproxy-${name// /-}-$run" "$twemproxy_port" "$twemproxy_pid" $args)
    read -r r50 r99 _ rcpu < <(row "router-${name// /-}-$run" "$router_port" "$router_pid" $args)
    d99s+=("$d99") t50s+=("$t50") t99s+=("$t99") tcpus+=("$tcpu") r50s+=("$r50") r99s+=("$r99") rcpus+=("$rcpu")
    ratios+=("$(awk -v r="$rcpu" -v t="$tcpu" 'BEGIN { printf "%.2f", r / t }')")
  done
  awk -v n="$name" -v tc="$(median "${tcpus[@]}")" -v rc="$(median "${rcpus[@]}")" \
    -v t50="$(median "${t50s[@]}")" -v t99="$(median "${t99s[@]}")" -v r50="$(median "${r50s[@]}")" \
    -v r99="$(median "${r99s[@]}")" -v d99="$(median "${d99s[@]}")" -v each="${ratios[*]}" 'BEGIN {
    printf "| %s | twemproxy | %.2f | 1 | %.0f | %.0f | %.0f | |\n", n, tc, t50, t99, t99 - d99
    printf "| %s | shoal router | %.2f | %.2f | %.0f | %.0f | %.0f | %s |\n", n, rc, rc / tc, r50, r99, r99 - d99, each }'
done
echo
echo "Reports: \`$out/\`"
