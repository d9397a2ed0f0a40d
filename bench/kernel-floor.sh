#!/usr/bin/env bash
# What the kernel alone costs per request on this machine, beside memcached and Shoal.
#
# Two measuring sticks (bench/kernel-floor/*.c, built here with gcc) answer every `get` with
# a fixed 100-byte value and store nothing: `epoll` does one epoll_wait, recv and send per
# request; `uring` submits its sends and receives through io_uring, one io_uring_enter per
# batch. memcached, `shoal server` (on epoll, and as `shoal_uring` with `-o io_uring`) and both
# sticks run at once, pinned to CPU 0, with `-t 1`;
# `shoal bench load` (pinned to CPU 1) drives each in turn: get of 100-byte values at 1 and 50
# connections, round after round. Server CPU per request comes from each server's `stats` rusage, as in
# bench/server-vs-memcached.sh. Prints a markdown table; JSON reports stay in target/bench/.
#
#   BENCH_SECS    seconds per row and server (default 5)
#   BENCH_ROUNDS  rounds, each running every row once; the table gives medians (default 3)
#   SHOAL         the shoal binary, used as it is (default: target/release/shoal, built first)
# Needs gcc, liburing-dev, memcached and jq (apt-get install gcc liburing-dev memcached jq).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${BENCH_SECS:-5}
rounds=${BENCH_ROUNDS:-3}
out=target/bench/kernel-floor-$(date -u +%Y%m%dT%H%M%SZ)
say() { printf '%s\n' "$*" >&2; }

[ -f /usr/include/liburing.h ] || { say "liburing is needed: apt-get install liburing-dev"; exit 1; }
command -v jq >/dev/null || { say "jq is needed: apt-get install jq"; exit 1; }
mkdir -p "$out"
gcc -O2 -Wall -o "$out/epoll" bench/kernel-floor/epoll.c
gcc -O2 -Wall -o "$out/uring" bench/kernel-floor/uring.c -luring
shoal=${SHOAL:-target/release/shoal}
[ -n "${SHOAL:-}" ] || cargo build --release --quiet -p shoal

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_root=(); [ "$(id -u)" = 0 ] && as_root=(-u root)
declare -A port
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
servers=(memcached shoal shoal_uring epoll uring)
for name in "${servers[@]}"; do
  port[$name]=$(free_port)
  case $name in
    memcached) command=(memcached -p "${port[$name]}" -U 0 -l 127.0.0.1 -t 1 -m 1024 "${as_root[@]}") ;;
    shoal) command=("$shoal" server -p "${port[$name]}" -U 0 -l 127.0.0.1 -t 1 -m 1024) ;;
    shoal_uring) command=("$shoal" server -p "${port[$name]}" -U 0 -l 127.0.0.1 -t 1 -m 1024 -o io_uring) ;;
    *) command=("$out/$name" "${port[$name]}") ;;
  esac
  taskset -c 0 "${command[@]}" >"$out/$name.log" 2>&1 &
  pids+=($!)
done
sleep 1

for round in $(seq "$rounds"); do
  for conns in 1 50; do
    for name in "${servers[@]}"; do
      prefill=(); [[ $round = 1 && ($name = memcached || $name = shoal*) ]] && prefill=(--prefill)
      say "round $round/$rounds, get, $conns connection(s): $name"
      taskset -c 1 "$shoal" bench load --server "127.0.0.1:${port[$name]}" "${prefill[@]}" \
        --get-ratio 1 --value-size 100 -c "$conns" --duration "$secs" --json \
        >"$out/$name-$conns-$round.json"
    done
  done
done

# The median of the rounds per server and connection count, as a markdown table.
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty), medians of $rounds rounds" \
  "of ${secs} s per row; load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo
echo "| connections | server | req/s | server CPU µs/req | ÷ memcached | of which user | of which system |"
echo "|---:|---|---:|---:|---:|---:|---:|"
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
for conns in 1 50; do
  base=
  for name in "${servers[@]}"; do
    rps=$(jq -r .requests_per_second "$out/$name-$conns"-*.json | median)
    cpu=$(jq -r .server_cpu_us_per_request "$out/$name-$conns"-*.json | median)
    user=$(jq -r .server_user_us_per_request "$out/$name-$conns"-*.json | median)
    system=$(jq -r .server_system_us_per_request "$out/$name-$conns"-*.json | median)
    base=${base:-$cpu}
    awk -v c="$conns" -v n="$name" -v r="$rps" -v u="$cpu" -v b="$base" -v us="$user" -v sy="$system" \
      'BEGIN { printf "| %s | %s | %.0f | %.2f | %.2f | %.2f | %.2f |\n", c, n, r, u, u / b, us, sy }'
  done
done
