#!/usr/bin/env bash
# Moirai on loopback (issues 16 and 27): tenants sharing one `shoal server`, sized by `shoal
# controller` from their measured hit-ratio curves, with LOCAL (default 0.9) of every tenant's
# reads served from its region through shared memory by shoal-client, as co-located clients
# read (the curves see them through the hints area). Each tenant has its own listener, so a
# client's connection names its tenant and its region. Workloads are `shoal bench tenants`
# streams shaped by the published statistics of Twitter's cache clusters (Yang et al., OSDI
# '20: Zipf-like popularity with exponents mostly 0.6–1.2, small values, and some clusters
# dominated by one-hit wonders):
#   timeline  400 000 keys, Zipf 1.0, 300-byte values, twice the others' requests
#   profile   150 000 keys, Zipf 0.8, 800-byte values
#   scan      2 000 000 keys read in turn, 400-byte values (one-hit wonders: an analytics job)
# `bench/tenants.sh` runs, each from an empty server with MEM MiB of item memory (RUN seconds
# each; hit ratios are those of each run's second half):
#   shared       one cache for all three (a single tenant)
#   equal        a third each, fixed
#   optimum      the offline optimum partition: the same streams replayed into exact LRU
#                simulations, sizes from shoal_curves::optimum (fixed for the run)
#   controller   starts as equal; `shoal controller --goal global` resizes every INTERVAL
#   alone        timeline alone with all the memory        } the Moirai prioritisation case:
#   protected    timeline (priority 10) next to the scan,   } how close the protected tenant
#                starting equal, `--goal priorities`        } stays to running alone
#   react        as controller, and at RUN/2 s profile's keys shrink to 20 000 (Zipf 1.1): the
#                sizes and hit ratios over time go to docs/tenants.png
# `bench/tenants.sh trial` (issue 27's trial): a scan tenant next to the two Zipf tenants, from
# the equal split, `--goal global`, TRIAL_RUN seconds (default 180) each:
#   trial-fits   the scan is 100 000 keys of 300 bytes (about 32 MiB: fitting it pays)
#   trial-big    the scan is 180 000 keys of 300 bytes (about 58 MiB: fitting it does not)
# and checks that no tenant ends on a cliff of its curve and that the scan either fits whole,
# hitting what its curve predicts (±0.02), or gets its minimum.
# Prints markdown (`bench/tenants.sh | bench/rewrite-doc.sh tenants` puts it in BENCHMARKS.md;
# `bench/tenants.sh trial | bench/rewrite-doc.sh tenants-trial`).
#   MEM (default 64)  RUN (default 120)  INTERVAL (default 15s)  ROUNDS_OFFLINE (default 20000)
#   LOCAL (default 0.9)  SHOAL (bench and controller binary; built if not given)
#   SERVER (the server's binary, default SHOAL)
# `bench/tenants.sh --report <run directory>` prints a run's tables and plot again.
set -euo pipefail
cd "$(dirname "$0")/.."

mem=${MEM:-64} run=${RUN:-120} interval=${INTERVAL:-15s} offline_rounds=${ROUNDS_OFFLINE:-20000}
local_share=${LOCAL:-0.9} trial_run=${TRIAL_RUN:-180}
say() { printf '%s\n' "$*" >&2; }
timeline=name=timeline,keys=400000,dist=zipf:1.0,value=300,share=2
profile=name=profile,keys=150000,dist=zipf:0.8,value=800
scan=name=scan,keys=2000000,dist=scan,value=400
changed=name=profile,keys=20000,dist=zipf:1.1,value=800
scan_fits=name=scan,keys=100000,dist=scan,value=300
scan_big=name=scan,keys=180000,dist=scan,value=300

if [ "${1:-}" = --report ]; then
  python3 bench/tenants-report.py "$2" docs/tenants.png
  exit
fi
mode=${1:-table}
case $mode in table | trial) ;; *) say "usage: bench/tenants.sh [table|trial] | --report <run directory>"; exit 2 ;; esac
out=target/bench/tenants-$mode-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
# shellcheck source=bench/lib/processes.sh
. bench/lib/processes.sh
# shellcheck source=bench/lib/matplotlib.sh
. bench/lib/matplotlib.sh
shoal=${SHOAL:-target/release/shoal}
server_bin=${SERVER:-$shoal}
printf '{"local": %s, "mem_mb": %s, "interval": "%s"}\n' "$local_share" "$mem" "$interval" >"$out/settings.json"

# tenants_file <file> <name:size_mb:priority:prefix>... (the first takes unclaimed keys). Each
# tenant gets a listener of its own; <file>.ports lists "<name> <port>", the first tenant first.
tenants_file() {
  local file=$1 first= port; shift
  : >"$file"
  : >"$file.ports"
  for t in "$@"; do
    IFS=: read -r name size priority prefix <<<"$t"
    [ -n "$first" ] || { first=$name; printf 'default = "%s"\n' "$name" >>"$file"; }
    port=$(free_port)
    printf '[[tenant]]\nname = "%s"\nsize_mb = %s\npriority = %s\nlisten = ["%s"]\n' \
      "$name" "$size" "$priority" "$port" >>"$file"
    [ -z "$prefix" ] || printf 'prefixes = ["%s:"]\n' "$prefix" >>"$file"
    printf '%s %s\n' "$name" "$port" >>"$file.ports"
  done
}

# routed <tenants file> <workload spec>: the spec with server= its tenant's listener (the
# tenant of its name, else the first tenant, which takes unclaimed keys).
routed() {
  local name port
  name=$(sed -n 's/^name=\([^,]*\).*/\1/p' <<<"$2")
  port=$(awk -v n="$name" '$1 == n { print $2 }' "$1.ports")
  [ -n "$port" ] || port=$(awk 'NR == 1 { print $2 }' "$1.ports")
  printf '%s,server=127.0.0.1:%s' "$2" "$port"
}

# fresh_ports <tenants file> <copy>: the file with a new free port for each listener.
fresh_ports() {
  local tenant old new
  cp "$1" "$2"
  : >"$2.ports"
  while read -r tenant old; do
    new=$(free_port)
    sed -i "s/^listen = \[\"$old\"\]/listen = [\"$new\"]/" "$2"
    printf '%s %s\n' "$tenant" "$new" >>"$2.ports"
  done <"$1.ports"
}

# one_run <name> <controller goal or -> <tenants file> <seconds> <workload spec>... [-- <more bench args>]
one_run() {
  local name=$1 goal=$2 file=$out/$1.run.toml seconds=$4 port http args=()
  fresh_ports "$3" "$file"
  shift 4
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=(--tenant "$(routed "$file" "$1")"); shift; done
  [ $# -eq 0 ] || shift
  port=$(free_port)
  "$server_bin" server -p "$port" -U 0 -l 127.0.0.1 -t 2 -m "$((mem + 8))" --tenants "$file" 2>>"$out/$name.log" &
  local server=$!
  pids+=("$server")
  for _ in $(seq 300); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  local controller=
  if [ "$goal" != - ]; then
    http=$(free_port)
    "$shoal" controller --server "127.0.0.1:$port" --interval "$interval" --goal "$goal" --json \
      --http "127.0.0.1:$http" >"$out/$name.decisions.jsonl" 2>>"$out/$name.log" &
    controller=$!
    pids+=("$controller")
  fi
  python3 bench/tenants-report.py --poll "127.0.0.1:$port" "$out/$name.sizes.jsonl" &
  local poller=$!
  say "run $name ($seconds s)"
  "$shoal" bench tenants --server "127.0.0.1:$port" --seconds "$seconds" --local "$local_share" --curves --json \
    --trace "$out/$name.trace.jsonl" "${args[@]}" "$@" >"$out/$name.json"
  kill "$poller" "$server" ${controller:+"$controller"} 2>/dev/null || true
  wait "$poller" "$server" ${controller:+"$controller"} 2>/dev/null || true
}

third=$((mem / 3))
tenants_file "$out/equal.toml" "timeline:$third:1:timeline" "profile:$third:1:profile" "scan:$third:1:scan"
if [ "$mode" = trial ]; then
  one_run trial-fits global "$out/equal.toml" "$trial_run" "$timeline" "$profile" "$scan_fits"
  one_run trial-big global "$out/equal.toml" "$trial_run" "$timeline" "$profile" "$scan_big"
  python3 bench/tenants-report.py "$out" docs/tenants.png
  exit
fi

workload=("$timeline" "$profile" "$scan")
say "offline: exact LRU curves of $offline_rounds rounds and the optimum partition of $((third * 3)) MiB"
"$shoal" bench tenants "${workload[@]/#/--tenant=}" --rounds "$offline_rounds" \
  --offline-memory-mb "$((third * 3))" --json >"$out/offline.json"
size_of() { jq -r --arg t "$1" '.tenants[] | select(.tenant == $t) | .optimum_mb' "$out/offline.json"; }

tenants_file "$out/shared.toml" "all:$((third * 3)):1:"
tenants_file "$out/optimum.toml" "timeline:$(size_of timeline):1:timeline" "profile:$(size_of profile):1:profile" \
  "scan:$(size_of scan):1:scan"
tenants_file "$out/alone.toml" "timeline:$((third * 3)):1:timeline"
tenants_file "$out/protected.toml" "timeline:$((third * 3 / 2)):10:timeline" "scan:$((third * 3 / 2)):1:scan"

one_run shared - "$out/shared.toml" "$run" "${workload[@]}"
one_run equal - "$out/equal.toml" "$run" "${workload[@]}"
one_run optimum - "$out/optimum.toml" "$run" "${workload[@]}"
one_run controller global "$out/equal.toml" "$run" "${workload[@]}"
one_run alone - "$out/alone.toml" "$run" "$timeline"
one_run shared-scan - "$out/shared.toml" "$run" "$timeline" "$scan"
one_run protected priorities "$out/protected.toml" "$run" "$timeline" "$scan"
one_run react global "$out/equal.toml" "$run" "${workload[@]}" -- --change "$((run / 2))@$changed"
python3 bench/tenants-report.py "$out" docs/tenants.png
