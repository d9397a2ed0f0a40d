#!/usr/bin/env bash
# Issue #29's deterministic CPU benchmark: user-space instructions and system calls per request,
# Shoal against memcached (and `shoal router` against twemproxy), counts that do not move with
# the machine's load the way CPU time does.
#
# Instructions: each server runs under valgrind's callgrind (`-t 1 -m 1024 -U 0`, loopback);
# after a warm fill, every row's fixed stream (`shoal bench load --requests N`, the same seeds,
# so the same requests) runs between `callgrind_control --zero` and `--dump`, and a row's
# figure is the worker thread's Ir in that dump minus its idle Ir for as long (measured on the
# same process with no load), divided by the requests.
# Only the worker thread is counted, the one thread that serves the connections (`-t 1`; the
# busiest thread of the row), the same for all four servers: memcached's LRU maintainer, item
# crawler and hash-table expander run on timers and catch up on the fill at their own pace, so
# under valgrind what they count depends on the wall clock (5 % between two runs of the whole
# process). What those threads do later for a request (memcached moving a fetched item between
# its LRUs) is therefore not counted; Shoal's other threads (signals, clock, handoff) do none.
# System calls: a separate run of each row on the server started natively, `strace -c`
# attached to the worker thread (found by its name) for the row only, minus its idle rate,
# divided by the requests.
# The top five functions per row are callgrind's inclusive counts (`callgrind_annotate
# --inclusive=yes`), leaving out the frames that every request passes through (≥ 90 % of the
# row: thread start, the event loop).
#
# Rows: bench/server-vs-memcached.sh's get, set, 10-key multiget, pipelined get (depth 8),
# meta get and binary get, at 1 and 50 connections, 100 000 keys of 16 bytes, 100-byte values;
# then `shoal router` and twemproxy (Debian's nutcracker), each `-t 1`/one process, in front of
# the same 4 native `shoal server`s (each holding every key, so every get hits), on get, set and
# 10-key multiget at 1 connection and at 50 as bench/router-vs-twemproxy.sh runs them (where
# how answers batch, and so the proxies' instructions, depends on timing). A multiget is
# one request. Everything runs RUNS times; the tables give each run's figure and whether they
# agree within 1 %.
#
# Prints markdown on stdout (`| bench/rewrite-doc.sh instructions` puts it into
# docs/BENCHMARKS.md); callgrind dumps, strace summaries and load reports are kept in
# target/bench/instructions-<time>/.
#
#   SHOAL            the shoal binary (default target/release/shoal, built here)
#   REQUESTS         requests per row under callgrind (default 200000)
#   STRACE_REQUESTS  requests per row under strace (default 50000)
#   RUNS             runs of everything (default 2)
#   ROWS             an extended regex: only the rows whose label matches (default: all), e.g.
#                    ROWS='^get, 1 ' REQUESTS=20000 RUNS=1 for a short run
#   IDLE_SECS        seconds of each idle measurement (default 3)
#   MEMCACHED        the memcached binary (default /usr/bin/memcached)
#   SHOAL_FLAGS      more flags for every `shoal server` (e.g. '-o hotkeys=0', for an A/B)
# Needs valgrind, strace, memcached, nutcracker, jq and python3 (scripts/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case ${1:-} in
  -h | --help) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

shoal=${SHOAL:-target/release/shoal}
requests=${REQUESTS:-200000}
strace_requests=${STRACE_REQUESTS:-50000}
runs=${RUNS:-2}
row_filter=${ROWS:-}
idle_secs=${IDLE_SECS:-3}
memcached=${MEMCACHED:-/usr/bin/memcached}
memory_mb=1024
out=target/bench/instructions-$(date -u +%Y%m%dT%H%M%SZ)

say() { printf '%s\n' "$*" >&2; }
for tool in valgrind callgrind_control callgrind_annotate strace nutcracker jq python3; do
  command -v "$tool" >/dev/null || { say "$tool is needed (scripts/test.sh installs it)"; exit 1; }
done
[ -x "$memcached" ] || { say "no memcached at $memcached (apt-get install memcached)"; exit 1; }
if [ -z "${SHOAL:-}" ]; then
  say "building target/release/shoal"
  cargo build --release --quiet -p shoal
fi
mkdir -p "$out"

# group|label|load flags. Groups: `server` (memcached and shoal server), `router` (twemproxy
# and shoal router).
all_rows=(
  "server|get, 1 connection|--get-ratio 1 --connections 1"
  "server|get, 50 connections|--get-ratio 1 --connections 50"
  "server|set, 1 connection|--get-ratio 0 --connections 1"
  "server|set, 50 connections|--get-ratio 0 --connections 50"
  "server|10-key multiget, 1 connection|--get-ratio 1 --multiget 10 --connections 1"
  "server|10-key multiget, 50 connections|--get-ratio 1 --multiget 10 --connections 50"
  "server|pipelined get (depth 8), 1 connection|--get-ratio 1 --pipeline 8 --connections 1"
  "server|pipelined get (depth 8), 50 connections|--get-ratio 1 --pipeline 8 --connections 50"
  "server|meta get, 1 connection|--protocol meta --get-ratio 1 --connections 1"
  "server|meta get, 50 connections|--protocol meta --get-ratio 1 --connections 50"
  "server|binary get, 1 connection|--protocol binary --get-ratio 1 --connections 1"
  "server|binary get, 50 connections|--protocol binary --get-ratio 1 --connections 50"
  "router|router get, 1 connection|--get-ratio 1 --connections 1"
  "router|router set, 1 connection|--get-ratio 0 --connections 1"
  "router|router 10-key multiget, 1 connection|--get-ratio 1 --multiget 10 --connections 1"
  "router|router get, 50 connections|--get-ratio 1 --connections 50"
  "router|router set, 50 connections|--get-ratio 0 --connections 50"
  "router|router 10-key multiget, 50 connections|--get-ratio 1 --multiget 10 --connections 50"
)
data=(--keys 100000 --key-size 16 --value-size 100)
rows=()
for row in "${all_rows[@]}"; do
  IFS='|' read -r _ label _ <<<"$row"
  [[ -z $row_filter || $label =~ $row_filter ]] && rows+=("$row")
done
[ ${#rows[@]} -gt 0 ] || { say "ROWS='$row_filter' matches no row"; exit 2; }
printf '%s\n' "${rows[@]}" >"$out/rows.txt"
slug() { tr -c 'a-z0-9\n' '-' <<<"$1"; }

as_root=()
[ "$(id -u)" = 0 ] && as_root=(-u root)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

# listening PORT PID: waits until something accepts on PORT (valgrind starts slowly).
listening() {
  for _ in $(seq 600); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
    kill -0 "$2" 2>/dev/null || { say "process $2 exited at start (logs in $out)"; exit 1; }
    sleep 0.1
  done
  say "nothing listens on port $1 after 60 s"; exit 1
}

# answering PORT PID: waits until the server on PORT answers `version`: under valgrind on a
# loaded machine a server accepts connections (its listener is open) minutes before it serves
# them (it is still formatting its memory), and the warm fill's 10-second stall limit would fire.
answering() {
  local deadline=$((SECONDS + 600)) line
  while [ $SECONDS -lt $deadline ]; do
    if exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null; then
      line=
      printf 'version\r\n' >&3 && read -r -t 30 line <&3 || true
      exec 3>&-
      [[ $line == VERSION* ]] && return
    fi
    kill -0 "$2" 2>/dev/null || { say "process $2 exited at start (logs in $out)"; exit 1; }
    sleep 0.5
  done
  say "the server on port $1 did not answer version within 600 s"; exit 1
}

# launch NAME PORT LOG WRAPPER...: starts server NAME (memcached, shoal, twemproxy, router) on
# PORT under the wrapper command (valgrind's, or none); sets `launched` to its pid.
launch() {
  local name=$1 port=$2 log=$3; shift 3
  local -a command
  case $name in
    memcached) command=("$memcached" -p "$port" -U 0 -l 127.0.0.1 -t 1 -m "$memory_mb" "${as_root[@]}") ;;
    shoal) read -ra extra <<<"${SHOAL_FLAGS:-}"
      command=("$shoal" server -p "$port" -U 0 -l 127.0.0.1 -t 1 -m "$memory_mb" "${extra[@]}") ;;
    twemproxy)
      sed "s/@PORT@/$port/" "$out/nutcracker.yml.in" >"$out/nutcracker-$port.yml"
      command=(nutcracker -c "$out/nutcracker-$port.yml" -s "$(free_port)") ;;
    router)
      sed "s/@PORT@/$port/" "$out/router.json.in" >"$out/router-$port.json"
      command=("$shoal" router -f "$out/router-$port.json" -p "$port" -l 127.0.0.1 -t 1
        --spool-dir "$out/spool-$port") ;;
  esac
  "$@" "${command[@]}" >"$log" 2>&1 &
  launched=$!
  pids+=("$launched")
  listening "$port" "$launched"
  case $name in memcached | shoal) answering "$port" "$launched" ;; esac
}

finish() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# load PORT JSON ARGS...: one `shoal bench load` run; fails on any error answer.
load() {
  local port=$1 json=$2; shift 2
  "$shoal" bench load --server "127.0.0.1:$port" --json "${data[@]}" "$@" >"$json"
  [ "$(jq '.errors' "$json")" = 0 ] || { say "errors in $json"; exit 1; }
}

# warm GROUP PORT DIR: before measuring, every key set (servers) and one short get run.
warm() {
  local flags=(--get-ratio 1 --connections 1 --requests 1000)
  [ "$1" = server ] && flags+=(--prefill --pipeline 8)
  load "$2" "$3/warm.json" "${flags[@]}"
}

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }

# callgrind_row PID PORT DIR SLUG ARGS...: the row's stream between a zero and a dump, kept as
# DIR/SLUG.callgrind-T (the dump of valgrind's thread T), .json (the load report) and .secs
# (zero to dump).
callgrind_part=0
callgrind_row() {
  local vg=$1 port=$2 dir=$3 slug=$4; shift 4
  callgrind_control --zero "$vg" >/dev/null 2>&1
  local start; start=$(now)
  if [ $# -gt 0 ]; then load "$port" "$dir/$slug.json" "$@"; else sleep "$idle_secs"; fi
  callgrind_control --dump="$slug" "$vg" >/dev/null 2>&1
  elapsed "$start" "$(now)" >"$dir/$slug.secs"
  callgrind_part=$((callgrind_part + 1))
  local dump
  for dump in "$dir/callgrind.out.$callgrind_part"-*; do
    mv "$dump" "$dir/$slug.callgrind-${dump##*-}"
  done
}

# worker_thread NAME PID: the id of server NAME's worker thread, found by its name
# (twemproxy's event loop is its main thread).
worker_thread() {
  local want task
  case $1 in
    memcached) want=mc-worker ;;
    shoal) want=worker-0 ;;
    router) want="worker 0" ;;
    twemproxy) want=nutcracker ;;
  esac
  for task in /proc/"$2"/task/*; do
    [ "$(cat "$task/comm")" = "$want" ] && { echo "${task##*/}"; return; }
  done
  say "$1 (pid $2) has no thread named '$want'"; exit 1
}

# strace_row PID PORT DIR SLUG ARGS...: the row's stream with `strace -c` attached to the
# worker thread, kept as DIR/SLUG.strace (strace's summary), .json and .secs.
strace_row() {
  local server=$1 port=$2 dir=$3 slug=$4; shift 4
  local worker; worker=$(cat "$dir/worker-thread")
  strace -c -p "$worker" -o "$dir/$slug.strace" 2>"$dir/$slug.strace-log" &
  local tracer=$!
  for _ in $(seq 300); do grep -qs attached "$dir/$slug.strace-log" && break; sleep 0.1; done
  grep -q attached "$dir/$slug.strace-log" || { say "strace did not attach to $server"; exit 1; }
  local start; start=$(now)
  if [ $# -gt 0 ]; then load "$port" "$dir/$slug.json" "$@"; else sleep "$idle_secs"; fi
  elapsed "$start" "$(now)" >"$dir/$slug.secs"
  kill -INT "$tracer"
  wait "$tracer" || true
}

# measure RUN GROUP NAME: every row of GROUP on server NAME, under callgrind then strace.
measure() {
  local run=$1 group=$2 name=$3 port dir row label flag_words
  for tool in callgrind strace; do
    dir=$out/run$run/$tool/$name
    mkdir -p "$dir"
    port=$(free_port)
    if [ $tool = callgrind ]; then
      local wrapper=(valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$dir/callgrind.out")
      # memcached sets its open-file limits, soft and hard, to its 1024 connections; valgrind
      # keeps 12 descriptors for itself and refuses any hard limit but the one it left.
      [ "$name" = memcached ] && wrapper=(prlimit --nofile=1036:1036 "${wrapper[@]}")
      launch "$name" "$port" "$dir/server.log" "${wrapper[@]}"
      callgrind_part=0
    else
      launch "$name" "$port" "$dir/server.log"
    fi
    local server=$launched
    warm "$group" "$port" "$dir"
    if [ $tool = strace ]; then
      worker_thread "$name" "$server" >"$dir/worker-thread"
      cp "/proc/$server/task/$(cat "$dir/worker-thread")/comm" "$dir/worker-name"
    fi
    say "run $run, $name under $tool: idle"
    "${tool}_row" "$server" "$port" "$dir" idle
    for row in "${rows[@]}"; do
      IFS='|' read -r row_group label flag_words <<<"$row"
      [ "$row_group" = "$group" ] || continue
      read -ra flags <<<"$flag_words"
      local n=$requests
      [ $tool = strace ] && n=$strace_requests
      say "run $run, $name under $tool: $label"
      "${tool}_row" "$server" "$port" "$dir" "$(slug "$label")" --requests "$n" "${flags[@]}"
    done
    finish "$server"
  done
}

# The router rows' backends: 4 native `shoal server`s, each holding every key. The proxies wait
# up to a minute for an answer: under valgrind on a loaded machine a proxy can stall for more
# than the usual second, and its timeout would answer errors instead.
proxy_timeout_ms=60000
start_backends() {
  local backends=() port i memory_mb=256
  for i in 0 1 2 3; do
    port=$(free_port)
    launch shoal "$port" "$out/backend-$i.log"
    backends+=("127.0.0.1:$port")
    mkdir -p "$out/backend-$i"
    load "$port" "$out/backend-$i/fill.json" --prefill --get-ratio 1 --requests 1 --pipeline 8
  done
  {
    echo "pool:"
    echo "  listen: 127.0.0.1:@PORT@"
    echo "  hash: md5"
    echo "  distribution: ketama"
    echo "  timeout: $proxy_timeout_ms"
    echo "  servers:"
    for b in "${backends[@]}"; do echo "   - $b:1"; done
  } >"$out/nutcracker.yml.in"
  local servers; servers=$(printf '"%s",' "${backends[@]}")
  echo "{ \"pools\": { \"A\": { \"servers\": [${servers%,}], \"server_timeout\": $proxy_timeout_ms } }, \"route\": { \"type\": \"PoolRoute\", \"pool\": \"A\", \"hash\": \"ketama_weighted\" } }" \
    >"$out/router.json.in"
}

groups=$(cut -d'|' -f1 "$out/rows.txt" | sort -u)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for run in $(seq "$runs"); do
  if grep -qx server <<<"$groups"; then
    measure "$run" server memcached
    measure "$run" server shoal
  fi
  if grep -qx router <<<"$groups"; then
    [ -f "$out/router.json.in" ] || start_backends
    measure "$run" router twemproxy
    measure "$run" router router
  fi
done

command_line=
for var in SHOAL SHOAL_FLAGS REQUESTS STRACE_REQUESTS RUNS ROWS IDLE_SECS MEMCACHED; do
  [ -z "${!var:-}" ] || command_line+="$var='${!var}' "
done
command_line+=bench/instructions.sh
echo "Run of $started, commit $(git describe --always --dirty), \`$command_line\`:" \
  "\`$shoal\` ($("$shoal" -V 2>/dev/null || echo unknown version)) and $("$memcached" -V), $(nutcracker -V 2>&1 | sed -n "1s/^This is //p");" \
  "$requests requests per row under callgrind (valgrind $(valgrind --version | sed 's/valgrind-//')), $strace_requests under strace;" \
  "$runs runs; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (which does not change these counts)."
echo
python3 bench/instructions.py "$out" "$runs"
echo
echo "Reports: \`$out/\`"
