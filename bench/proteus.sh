#!/usr/bin/env bash
# Proteus's Fig. 9 on loopback: a look-aside workload (`shoal bench ycsb`, read-heavy, over
# PostgreSQL) whose rate rises and falls like a day compressed into minutes, through
# `shoal router` to 8 `shoal server`s with a small -m that `shoal provision` turns on and off
# one at a time as the load needs. Each run from empty servers on the same schedule:
#   modulo            the router's pool cut to the servers on (the state file), modulo hashing
#   ketama            the same with libmemcached's weighted ketama
#   proteus           Proteus placement, servers turned on and off without smooth transitions
#   proteus-digests   Proteus with its transitions: old owners asked (through their digests)
# and with `--hot-replicas R` (R a count, or `all`; issue #28) two more, without the router:
#   proteus-pool      Proteus with its transitions in the pool client (`shoal bench ycsb --cache
#                     pool`: each YCSB client a shoal_client::Pool following the state file)
#   proteus-hot       the same with hot keys read from R replicas (`--hot-replicas`), servers
#                     sampling one read in 4 for `stats hotkeys` (at a few hundred reads a
#                     second the default 1 in 64 sees the 64th hottest key once in ~30 s)
# (the router spreads only `get`, and YCSB's client reads with `gets`, so the hot-key runs use
# the pool client). Every run records each server's `cmd_get` each second
# (`<variant>.servers.txt`) for the table's request balance.
# Prints a table (database reads/s during each transition ÷ right after it at the same load,
# p99.9 read latency, server-seconds against always-on, busiest server ÷ mean of those on) and
# draws the plot (`bench/proteus.sh | bench/rewrite-doc.sh proteus` puts the table into
# docs/BENCHMARKS.md).
#   STEP     seconds per load level (default 12); a transition's drain is half of it
#   TARGET   requests per second per server (default 300)
#   MEM      -m of each server, MB (default 16)
#   VARIANTS the runs, in order (default: the four, and the two with --hot-replicas)
#   SHOAL    the binary (default: target/release/shoal, built first)
#   PLOT     the plot (default docs/proteus.png)
# `bench/proteus.sh --report <run directory>` prints a run's table again.
set -euo pipefail
cd "$(dirname "$0")/.."

step=${STEP:-12} target=${TARGET:-300} mem=${MEM:-16}
drain=$((step / 2))
records=100000 servers=8
hot=
variants=(modulo ketama proteus proteus-digests)
say() { printf '%s\n' "$*" >&2; }
if [ "${1:-}" = --hot-replicas ]; then
  [[ "${2:-}" =~ ^([1-9][0-9]*|all)$ ]] || { say "--hot-replicas takes a count of at least 1, or all"; exit 2; }
  hot=$2; variants+=(proteus-pool proteus-hot); shift 2
fi
[ -z "${VARIANTS:-}" ] || read -ra variants <<<"$VARIANTS"
for v in "${variants[@]}"; do
  case $v in modulo|ketama|proteus|proteus-digests|proteus-pool) ;;
    proteus-hot) [ -n "$hot" ] || { say "proteus-hot needs --hot-replicas R"; exit 2; } ;;
    *) say "unknown variant $v (modulo, ketama, proteus, proteus-digests, proteus-pool, proteus-hot)"; exit 2 ;;
  esac
done
shoal=${SHOAL:-target/release/shoal} plot=${PLOT:-docs/proteus.png}

if [ "${1:-}" = --report ]; then
  python3 bench/proteus-plot.py "$2" "$plot" "$servers" "$drain"
  exit
fi
out=target/bench/proteus-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
source bench/lib/matplotlib.sh
source bench/lib/processes.sh
PG_OPTIONS=()
source bench/lib/postgres.sh

# The day: a warm-up at the night's load, then one level per step, each needing one server
# more (target × n − 50) up to all 8, then one fewer (under the hysteresis of 20 %) back down.
{
  echo "# bench/proteus.sh: total operations per second, $step s per level"
  t=0
  echo "$t $((target - 50))"; t=$((t + 2 * step))
  for n in 2 3 4 5 6 7 8; do echo "$t $((target * n - 50))"; t=$((t + step)); done
  for n in 7 6 5 4 3 2 1; do echo "$t $((target * n * 8 / 10 - 20))"; t=$((t + step)); done
  echo "$t 0"
} >"$out/schedule.txt"
seconds=$(tail -1 "$out/schedule.txt" | cut -d' ' -f1)

ycsb() { taskset -c 1 "$shoal" bench ycsb --postgres "$postgres" --records "$records" --json "$@"; }
say "loading $records records into PostgreSQL"
ycsb --load --cache none --operations 1 >/dev/null

# Distinct ports: the OS may hand the same free port out twice (each probe closes its socket).
addresses=()
for _ in $(seq 100); do
  [ "${#addresses[@]}" -lt "$servers" ] || break
  address="127.0.0.1:$(free_port)"
  [[ " ${addresses[*]} " == *" $address "* ]] || addresses+=("$address")
done
[ "${#addresses[@]}" -eq "$servers" ] || { say "found no $servers distinct free ports"; exit 1; }
list=$(printf '"%s",' "${addresses[@]}"); list=${list%,}
for variant in "${variants[@]}"; do
  case $variant in
    modulo) hash=modulo announce=active ;;
    ketama) hash=ketama_weighted announce=active ;;
    proteus) hash=proteus announce=active ;;
    proteus-digests|proteus-pool|proteus-hot) hash=proteus announce=transition ;;
  esac
  server_args="-U 0 -t 1 -m $mem"
  [ "$announce" = transition ] && server_args="$server_args --digest-keys 50000"
  [ "$variant" = proteus-hot ] && server_args="$server_args -o hotkeys_sample=4"
  say "$variant: ${seconds} s on the schedule"
  provision_args=(--servers "$(IFS=,; echo "${addresses[*]}")" --announce "$announce" --spawn
    --server-args="$server_args" --schedule "$out/schedule.txt" --target-rps "$target" --hysteresis 0.2
    --drain "$drain" --interval 0.5 --initial-active 1 --duration "$((seconds + 1))" --json)
  case $variant in
    proteus-pool|proteus-hot)
      # The pool client in each YCSB client follows the provisioner's state file itself.
      cache=(--cache pool --cache-server "$(IFS=,; echo "${addresses[*]}")"
        --provisioning "$out/$variant.provision.json")
      [ "$variant" = proteus-hot ] && cache+=(--hot-replicas "$([ "$hot" = all ] && echo 0 || echo "$hot")")
      provision_args+=(--state "$out/$variant.provision.json")
      router= ;;
    *)
      echo "{ \"pools\": { \"A\": { \"servers\": [$list], \"server_timeout\": 500, \"provisioning\": \"$variant.provision.json\" } },
    \"route\": { \"type\": \"PoolRoute\", \"pool\": \"A\", \"hash\": \"$hash\" } }" >"$out/$variant.router.json"
      port=$(free_port)
      taskset -c 0 "$shoal" router -f "$out/$variant.router.json" -p "$port" -l 127.0.0.1 -t 1 \
        --spool-dir "$out/spool-$variant" >"$out/$variant.router.log" 2>&1 &
      router=$!; pids+=($router)
      for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
      cache=(--cache tcp --cache-server "127.0.0.1:$port")
      provision_args+=(--router-config "$out/$variant.router.json") ;;
  esac
  taskset -c 0 "$shoal" provision "${provision_args[@]}" \
    >"$out/$variant.provision.jsonl" 2>"$out/$variant.provision.log" &
  provision=$!; pids+=($provision)
  for _ in $(seq 100); do [ -s "$out/$variant.provision.json" ] && break; sleep 0.05; done
  python3 bench/proteus-servers.py "${addresses[@]}" >"$out/$variant.servers.txt" &
  sampler=$!; pids+=($sampler)
  ycsb --workload read-heavy "${cache[@]}" --clients 3 \
    --rate-schedule "$out/schedule.txt" --keep-cache --label "$variant" >"$out/$variant.ycsb.json"
  wait "$provision" || true
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  [ -z "$router" ] || { kill "$router"; wait "$router" 2>/dev/null || true; }
done

{
  echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git describe --always --dirty): read-heavy YCSB over PostgreSQL,"
  echo "$records records, through \`shoal router -t 1\` (proteus-pool, proteus-hot: pool clients) to $servers \`shoal server -m $mem\`s turned on and off by"
  echo "\`shoal provision\` (target $target requests/s per server, drain $drain s, levels of $step s);"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  python3 bench/proteus-plot.py "$out" "$plot" "$servers" "$drain"
  echo
  echo "Reports, provisioner logs and the schedule: \`$out/\`"
} | tee "$out/table.md"
