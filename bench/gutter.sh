#!/usr/bin/env bash
# Facebook's Gutter experiment (Scaling Memcache §3.3) through `shoal router`: a look-aside
# workload (`shoal bench ycsb`, read-heavy, over PostgreSQL: YCSB's workload B) reads through
# a router in front of 4 `shoal server`s; one of them is killed (-9) for KILL_SECS and then
# restarted empty. Run twice: with a 1-server Gutter pool (FailoverWithExptimeRoute,
# failover_exptime 10) and without one. Prints the database's read rate before and during the
# outage for both, and draws both timelines into docs/gutter.png (bench/gutter-plot.py).
#   KILL_AT    seconds into the measured run when the server is killed (default 30)
#   KILL_SECS  how long it stays down (default 60)
#   AFTER      seconds measured after it returns (default 20)
#   RATE       operations per second per client, 3 clients (default 1000)
#   WARMUP     operations that warm the cache before each measured run (default 40000; a
#              higher RATE needs more, or the run's first seconds still fill the cache)
#   RECORDS    records in the table (default 1000, as YCSB's own workloads/workloadb sets)
#   PLOT       where the plot goes (default docs/gutter.png)
# `bench/gutter.sh --report <run directory>` prints a run's table again (same settings).
set -euo pipefail
cd "$(dirname "$0")/.."

kill_at=${KILL_AT:-30} kill_secs=${KILL_SECS:-60} after=${AFTER:-20} rate=${RATE:-1000} warmup=${WARMUP:-40000}
records=${RECORDS:-1000} plot=${PLOT:-docs/gutter.png}
say() { printf '%s\n' "$*" >&2; }
# report: the table of a run in $out (kill_at, kill_secs, rate as the run had them).
report() {
{
  echo "Run of $(date -u -r "$out/with-gutter.ycsb.json" '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty): read-heavy YCSB over"
  echo "PostgreSQL, $records records, 3 clients × $rate ops/s through \`shoal router -t 1\` to 4 \`shoal server\`s;"
  echo "server 0 killed -9 at ${kill_at} s for ${kill_secs} s; load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "| run | hit rate | DB reads/s before | DB reads/s during outage | rise | rise ÷ killed server's former hits/s |"
  echo "|---|---:|---:|---:|---:|---:|"
  for run in with-gutter without-gutter; do
    jq -r --argjson at "$kill_at" --argjson secs "$kill_secs" --argjson rate "$rate" '
      .datastore_reads_per_second as $t
      | ($t[(if $at > 22 then $at - 20 else 2 end):($at - 1)] | add / length) as $before
      | ($t[($at + 5):($at + $secs - 2)] | add / length) as $during
      | ($rate * 3 * 0.95 - $before) as $hits | ($hits / 4) as $killed
      | "| \(.cache) | \(.hit_rate * 1000 | round / 1000) | \($before | round) | \($during | round) | \($during - $before | round) | \(($during - $before) / $killed * 100 | round) % |"' \
      "$out/$run.ycsb.json"
  done
  echo
  echo "The killed server's former hits/s are estimated as a quarter of all reads that hit before"
  echo "the outage (reads are 95 % of operations). Reports and the plot's data: \`$out/\`"
  local model
  model=$(python3 bench/gutter-model.py --records "$records" --ops-per-second $((rate * 3)) --ttl 10 --share)
  echo
  jq -r --argjson at "$kill_at" --argjson rate "$rate" --argjson model "$model" '
    .datastore_reads_per_second as $t
    | ($t[(if $at > 22 then $at - 20 else 2 end):($at - 1)] | add / length) as $before
    | ($before / ($rate * 3 * 0.95)) as $missed
    | "Model (`bench/gutter-model.py --records '"$records"' --ops-per-second \($rate * 3)`): \($model) % of the killed server'"'"'s reads miss in Gutter at this rate (10 s TTL, updates deleting), a rise of about \((($model / 100 - $missed) / (1 - $missed) * 100) | round) % of its former hits given the \(($missed * 100) | round) % of reads that missed before the outage."' \
    "$out/with-gutter.ycsb.json"
}
}

if [ "${1:-}" = --report ]; then
  out=$2
  report
  exit
fi
out=target/bench/gutter-$(date -u +%Y%m%dT%H%M%SZ)

mkdir -p "$out"
command -v jq >/dev/null || { say "jq is needed: apt-get install jq"; exit 1; }
source bench/lib/matplotlib.sh
source bench/lib/processes.sh
PG_OPTIONS=()
source bench/lib/postgres.sh

ports=() backends=()
start_backend() { # start_backend I: (re)starts backend I on its port, empty
  taskset -c 0 target/release/shoal server -p "${ports[$1]}" -U 0 -l 127.0.0.1 -t 1 -m 256 >>"$out/shoal-$1.log" 2>&1 &
  backend_pid[$1]=$!
  pids+=($!)
}
declare -a backend_pid
for i in 0 1 2 3; do ports+=("$(free_port)"); backends+=("\"127.0.0.1:${ports[$i]}\""); start_backend "$i"; done
gutter_port=$(free_port)
taskset -c 0 target/release/shoal server -p "$gutter_port" -U 0 -l 127.0.0.1 -t 1 -m 256 >"$out/gutter.log" 2>&1 &
pids+=($!)
list=$(IFS=,; echo "${backends[*]}")
main_pool="{ \"servers\": [$list], \"server_timeout\": 200, \"connect_timeout\": 200 }"
normal='{ "type": "PoolRoute", "pool": "main", "hash": "jump" }'
echo "{ \"pools\": { \"main\": $main_pool, \"gutter\": { \"servers\": [\"127.0.0.1:$gutter_port\"] } },
  \"route\": { \"type\": \"FailoverWithExptimeRoute\", \"normal\": $normal,
               \"failover\": { \"type\": \"PoolRoute\", \"pool\": \"gutter\", \"hash\": \"jump\" },
               \"failover_exptime\": 10 } }" >"$out/with-gutter.json"
echo "{ \"pools\": { \"main\": $main_pool }, \"route\": $normal }" >"$out/without-gutter.json"
sleep 1

ycsb() { taskset -c 1 target/release/shoal bench ycsb --postgres "$postgres" --records "$records" --json "$@"; }
say "loading $records records into PostgreSQL"
ycsb --load --cache none --operations 1 >/dev/null

operations=$(( (kill_at + kill_secs + after) * rate ))  # per client
for run in with-gutter without-gutter; do
  port=$(free_port)
  taskset -c 0 target/release/shoal router -f "$out/$run.json" -p "$port" -l 127.0.0.1 -t 1 \
    --spool-dir "$out/spool-$run" >"$out/router-$run.log" 2>&1 &
  router=$!; pids+=($router)
  sleep 0.5
  say "$run: warming the cache up, then $((operations / rate)) s measured; server 0 down from ${kill_at} s for ${kill_secs} s"
  ycsb --workload read-heavy --cache tcp --cache-server "127.0.0.1:$port" --clients 3 --rate 100000 \
    --operations "$warmup" --warmup 0 >/dev/null
  ycsb --workload read-heavy --cache tcp --cache-server "127.0.0.1:$port" --clients 3 --rate "$rate" \
    --operations "$operations" --warmup 0 --keep-cache --label "$run" >"$out/$run.ycsb.json" &
  load=$!
  sleep "$kill_at"
  kill -9 "${backend_pid[0]}"
  sleep "$kill_secs"
  start_backend 0
  wait "$load"
  kill "$router"
done

report | tee "$out/table.md"
python3 bench/gutter-plot.py "$out" "$plot" "$kill_at" "$kill_secs" >&2
