#!/usr/bin/env bash
# Shoal vs memcached, side by side in one run on this machine (docs/design/measurement.md;
# issue #3's table and issue #12's restated CPU target).
#
# Three servers run at once, pinned to CPU 0, loaded one after the other, row by row, by
# `shoal bench load` pinned to CPU 1: memcached and `shoal server` with the same flags
# (-t 1 -m 1024 -U 0, loopback, a free port), and the kernel's floor, the `epoll` stick of
# bench/kernel-floor.sh (bench/kernel-floor/epoll.c, built here with gcc: one epoll_wait, recv
# and send per request, nothing stored). Rows: get, set, 10-key multiget and pipelined get
# (depth 8), each at 1 and 50 connections, 100 000 keys of 16 bytes, 100-byte values; gets of
# 16 KiB values; binary-protocol gets (memcached's binary protocol; the stick does not speak it).
# Every row runs ROUNDS times, interleaved, and the tables give medians. Then the items that fit
# at -m 1024 (`shoal bench fill`, on freshly started servers).
#
# Issue #12's targets, judged per row: on an unpipelined row, Shoal's server CPU per request
# *above the floor* (minus the stick's, same row, same run) at most 0.5x memcached's above the
# floor; on a pipelined or multiget row, total CPU per request at most 0.7x memcached's; on a
# binary get row, total at most 0.9x memcached's binary get.
# Prints markdown tables on stdout (`| bench/rewrite-doc.sh server-vs-memcached` puts them into
# docs/BENCHMARKS.md); every run's JSON and the servers' logs are kept in
# target/bench/server-vs-memcached-<time>/.
#
# Without a `shoal server` to run it says so and measures memcached alone.
#
# `--io uring` (or BENCH_IO=uring) serves Shoal's connections with io_uring
# (SHOAL_SERVER_IO=uring; the run stops if the server falls back to epoll) and adds the `uring`
# stick of bench/kernel-floor.sh (bench/kernel-floor/uring.c: one io_uring_enter per batch of
# receives and sends, nothing stored) beside the epoll one, and a second table for issue #29's
# target: on io_uring, total CPU per request at most 0.7x memcached's on the get and set rows.
#
#   BENCH_IO         `epoll` (default) or `uring`: how Shoal serves (as --io)
#   ROWS             an extended regular expression: only the rows whose label matches run
#                    (e.g. ROWS='^(get|set), 50'; default: every row, then the items that
#                    fit, which a ROWS run leaves out)
#   BENCH_SECS       seconds per row, server and round (default 5)
#   ROUNDS           rounds; the tables give medians (default 3)
#   BENCH_MEMORY_MB  -m of both servers (default 1024)
#   SERVER_CPU       CPU the servers are pinned to (default 0)
#   LOAD_CPU         CPU the load generator is pinned to (default 1)
#   MEMCACHED        the memcached binary (default /usr/bin/memcached)
#   SHOAL            the shoal binary, used as it is (default: target/release/shoal, built first)
#   SHOAL_BEFORE     a second shoal binary (say the last commit's), run as a fourth server in
#                    the same rounds: the io_uring table gets a `shoal before` column, so a
#                    change is judged against its parent under the same load
# Needs memcached, gcc and jq (apt-get install memcached gcc jq); --io uring also liburing-dev.
set -euo pipefail
cd "$(dirname "$0")/.."

io=${BENCH_IO:-epoll}
while [ $# -gt 0 ]; do
  case $1 in
    --io) io=${2:-}; shift 2 || { echo "--io needs a value: epoll or uring" >&2; exit 2; } ;;
    --io=*) io=${1#--io=}; shift ;;
    *) echo "usage: $0 [--io epoll|uring]" >&2; exit 2 ;;
  esac
done
case $io in
  epoll) unset SHOAL_SERVER_IO ;;
  uring) export SHOAL_SERVER_IO=uring ;;
  *) echo "--io $io: epoll or uring" >&2; exit 2 ;;
esac

secs=${BENCH_SECS:-5}
rounds=${ROUNDS:-3}
memory_mb=${BENCH_MEMORY_MB:-1024}
server_cpu=${SERVER_CPU:-0}
load_cpu=${LOAD_CPU:-1}
memcached=${MEMCACHED:-/usr/bin/memcached}
shoal=${SHOAL:-target/release/shoal}
shoal_before=${SHOAL_BEFORE:-}
out=target/bench/server-vs-memcached-$(date -u +%Y%m%dT%H%M%SZ)

say() { printf '%s\n' "$*" >&2; }

[ -x "$memcached" ] || { say "no memcached at $memcached (apt-get install memcached)"; exit 1; }
command -v jq >/dev/null || { say "jq is needed to read the JSON reports (apt-get install jq)"; exit 1; }
command -v gcc >/dev/null || { say "gcc is needed to build the kernel-floor stick (apt-get install gcc)"; exit 1; }
if [ -z "${SHOAL:-}" ]; then
  say "building target/release/shoal"
  cargo build --release --quiet -p shoal
fi
mkdir -p "$out"
gcc -O2 -Wall -o "$out/floor" bench/kernel-floor/epoll.c
sticks=(floor)
if [ "$io" = uring ]; then
  [ -f /usr/include/liburing.h ] || { say "--io uring needs liburing (apt-get install liburing-dev)"; exit 1; }
  gcc -O2 -Wall -o "$out/uring_floor" bench/kernel-floor/uring.c -luring
  sticks+=(uring_floor)
fi

servers=(memcached)
if "$shoal" server -V >/dev/null 2>&1; then
  servers+=(shoal)
else
  say "NOTE: \`shoal server\` is not available in this build: measuring memcached alone"
fi
if [ -n "$shoal_before" ]; then
  "$shoal_before" server -V >/dev/null 2>&1 || { say "SHOAL_BEFORE=$shoal_before: no \`shoal server\` there"; exit 1; }
  servers+=(shoal_before)
fi

server_flags=()
source bench/lib/servers.sh

# label|target|load flags. target: `floor` (above the floor <= 0.5x), `total` (<= 0.7x),
# `binary` (total <= 0.9x, no floor).
rows=(
  "get, 1 connection|floor|--get-ratio 1 --prefill --connections 1"
  "get, 50 connections|floor|--get-ratio 1 --prefill --connections 50"
  "set, 1 connection|floor|--get-ratio 0 --connections 1"
  "set, 50 connections|floor|--get-ratio 0 --connections 50"
  "10-key multiget, 1 connection|total|--get-ratio 1 --prefill --multiget 10 --connections 1"
  "10-key multiget, 50 connections|total|--get-ratio 1 --prefill --multiget 10 --connections 50"
  "pipelined get (depth 8), 1 connection|total|--get-ratio 1 --prefill --pipeline 8 --connections 1"
  "pipelined get (depth 8), 50 connections|total|--get-ratio 1 --prefill --pipeline 8 --connections 50"
  "get of 16 KiB values, 1 connection|floor|--get-ratio 1 --prefill --connections 1 --keys 10000 --value-size 16384"
  "10-key multiget of 16 KiB values, 1 connection|total|--get-ratio 1 --prefill --multiget 10 --connections 1 --keys 10000 --value-size 16384"
  "binary get, 1 connection|binary|--protocol binary --get-ratio 1 --prefill --connections 1"
  "binary get, 50 connections|binary|--protocol binary --get-ratio 1 --prefill --connections 50"
)
if [ -n "${ROWS:-}" ]; then
  kept=()
  for row in "${rows[@]}"; do
    if grep -Eq -- "$ROWS" <<<"${row%%|*}"; then kept+=("$row"); fi
  done
  [ ${#kept[@]} -gt 0 ] || { say "ROWS='$ROWS' matches no row"; exit 2; }
  rows=("${kept[@]}")
fi
common=(--key-size 16 --duration "$secs")
# Rows that name no data size get 100 000 keys with 100-byte values.
small_values=(--keys 100000 --value-size 100)

# start_floor NAME: a stick ($out/NAME) on a free loopback port, pinned like the servers.
start_floor() {
  local name=$1 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  taskset -c "$server_cpu" "$out/$name" "$port" >"$out/$name.log" 2>&1 &
  pid[$name]=$!
  address[$name]=127.0.0.1:$port
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return
    sleep 0.1
  done
  say "the $name stick did not start listening within 10 s"; exit 1
}

# stat_of NAME STAT: one line of a server's `stats shoal`.
stat_of() {
  local host=${address[$1]%:*} port=${address[$1]##*:}
  exec 3<>"/dev/tcp/$host/$port"
  printf 'stats shoal\r\nquit\r\n' >&3
  sed -n "s/^STAT $2 \([0-9]*\).*/\1/p" <&3
  exec 3<&-
}

for name in "${servers[@]}"; do start "$name"; done
for name in shoal shoal_before; do
  if [ "$io" = uring ] && [[ " ${servers[*]} " = *" $name "* ]] && [ "$(stat_of $name io_uring)" != 1 ]; then
    say "$name server did not serve with io_uring (see $out/$name.log)"; exit 1
  fi
done
for stick in "${sticks[@]}"; do start_floor "$stick"; done
echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty)," \
  "\`bench/server-vs-memcached.sh --io $io\` (BENCH_SECS=$secs ROUNDS=$rounds${ROWS:+ ROWS='$ROWS'}): servers \`-t 1 -m $memory_mb -U 0\` (Shoal on $io) and the floor sticks (${sticks[*]}) on CPU $server_cpu," \
  "\`shoal bench load ${common[*]}\` (and \`${small_values[*]}\` unless the row says otherwise) on CPU $load_cpu;" \
  "medians of $rounds interleaved rounds; $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)."
echo "memcached: $("$memcached" -V)."
echo
for round in $(seq "$rounds"); do
  for row in "${rows[@]}"; do
    IFS='|' read -r label target flag_words <<<"$row"
    read -ra flags <<<"$flag_words"
    [[ " ${flags[*]} " = *" --value-size "* ]] || flags+=("${small_values[@]}")
    slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
    names=("${servers[@]}")
    [ "$target" = binary ] || names+=("${sticks[@]}")
    for name in "${names[@]}"; do
      say "round $round/$rounds, $label: $name"
      bench load "$name" "$out/$slug-$name-$round.json" "${common[@]}" "${flags[@]}"
    done
  done
done

# median NAME SLUG FILTER: the median over the rounds of one figure, or — without reports.
median() {
  local files=("$out/$2-$1"-*.json)
  [ -s "${files[0]}" ] || { printf '—'; return; }
  jq -r "$3" "${files[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# shown VALUE FORMAT: a figure, or — as it is.
shown() { if [ "$1" = — ]; then printf —; else printf "$2" "$1"; fi; }
# verdict RATIO LIMIT: whether a ratio meets its target.
verdict() { awk -v r="$1" -v l="$2" 'BEGIN { if (r == "—") print "—"; else print (r <= l) ? "met" : "**not met**" }'; }
echo "| row | memcached req/s | shoal req/s | ratio | memcached CPU µs/req | shoal CPU µs/req | floor CPU µs/req | compared | shoal ÷ memcached | target |"
echo "|---|---:|---:|---:|---:|---:|---:|---|---:|---|"
for row in "${rows[@]}"; do
  IFS='|' read -r label target _ <<<"$row"
  slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
  mc_rps=$(median memcached "$slug" .requests_per_second) sh_rps=$(median shoal "$slug" .requests_per_second)
  mc_cpu=$(median memcached "$slug" .server_cpu_us_per_request) sh_cpu=$(median shoal "$slug" .server_cpu_us_per_request)
  floor_cpu=$(median floor "$slug" .server_cpu_us_per_request)
  case $target in
    floor)
      compared="above the floor" limit=0.5
      cpu_ratio=$(awk -v s="$sh_cpu" -v m="$mc_cpu" -v f="$floor_cpu" \
        'BEGIN { if (s == "—" || m == "—" || f == "—" || m <= f) print "—"; else printf "%.2f", (s - f) / (m - f) }') ;;
    total) compared=total limit=0.7 cpu_ratio=$(ratio "$sh_cpu" "$mc_cpu") ;;
    binary) compared="total, binary" limit=0.9 cpu_ratio=$(ratio "$sh_cpu" "$mc_cpu") ;;
  esac
  echo "| $label | $(shown "$mc_rps" %.0f) | $(shown "$sh_rps" %.0f) | $(ratio "$sh_rps" "$mc_rps") |" \
    "$(shown "$mc_cpu" %.2f) | $(shown "$sh_cpu" %.2f) | $(shown "$floor_cpu" %.2f) | $compared | $cpu_ratio |" \
    "≤ $limit: $(verdict "$cpu_ratio" "$limit") |"
done

if [ "$io" = uring ]; then
  # Issue #29: on io_uring, total CPU per request at most 0.7x memcached's; the sticks, same
  # rows and run, say where the kernel alone puts a server that does nothing.
  echo
  echo "Total server CPU per request against memcached's, Shoal on io_uring (issue #29's target on the get and set rows at 50 connections: ≤ 0.7):"
  echo
  before_head="" before_rule=""
  [ -n "$shoal_before" ] && before_head=" shoal before | before ÷ memcached |" before_rule="---:|---:|"
  echo "| row | memcached CPU µs/req | shoal (io_uring) | epoll stick | uring stick | shoal ÷ memcached | epoll stick ÷ memcached | uring stick ÷ memcached |$before_head target |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|$before_rule---|"
  for row in "${rows[@]}"; do
    IFS='|' read -r label target _ <<<"$row"
    [ "$target" = binary ] && continue
    slug=$(tr -c 'a-z0-9\n' '-' <<<"$label")
    mc_cpu=$(median memcached "$slug" .server_cpu_us_per_request) sh_cpu=$(median shoal "$slug" .server_cpu_us_per_request)
    ep_cpu=$(median floor "$slug" .server_cpu_us_per_request) ur_cpu=$(median uring_floor "$slug" .server_cpu_us_per_request)
    total=$(ratio "$sh_cpu" "$mc_cpu")
    before=""
    if [ -n "$shoal_before" ]; then
      bf_cpu=$(median shoal_before "$slug" .server_cpu_us_per_request)
      before=" $(shown "$bf_cpu" %.2f) | $(ratio "$bf_cpu" "$mc_cpu") |"
    fi
    judged="—"
    [[ $label =~ ^(get|set),\ 50\ connections$ ]] && judged="≤ 0.7: $(verdict "$total" 0.7)"
    echo "| $label | $(shown "$mc_cpu" %.2f) | $(shown "$sh_cpu" %.2f) | $(shown "$ep_cpu" %.2f) | $(shown "$ur_cpu" %.2f) |" \
      "$total | $(ratio "$ep_cpu" "$mc_cpu") | $(ratio "$ur_cpu" "$mc_cpu") |$before $judged |"
  done
fi
stop_all

if [ -n "${ROWS:-}" ]; then
  echo
  echo "Reports: \`$out/\` (ROWS set: the items-that-fit table is left out)"
  exit 0
fi
echo
echo "Items that fit at \`-m $memory_mb\`, 16-byte keys and 100-byte values (\`shoal bench fill\` on a fresh server," \
  "until evictions start or \`curr_items\` stops growing):"
echo
echo "| | memcached | shoal | ratio |"
echo "|---|---:|---:|---:|"
for name in "${servers[@]}"; do
  [ "$name" = shoal_before ] && continue
  say "items that fit: $name"
  start "$name"
  bench fill "$name" "$out/fill-$name.json" --key-size 16 --value-size 100
  stop "$name"
done
mc_items=$(cell "$out/fill-memcached.json" .items %d) sh_items=$(cell "$out/fill-shoal.json" .items %d)
echo "| items | $mc_items | $sh_items | $(ratio "$sh_items" "$mc_items") |"
echo
echo "Reports: \`$out/\`"
