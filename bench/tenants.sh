#!/usr/bin/env bash
# Moirai on loopback (issue 16): tenants sharing one `shoal server`, sized by `shoal controller`
# from their measured hit-ratio curves. Workloads are `shoal bench tenants` streams shaped by the
# published statistics of Twitter's cache clusters (Yang et al., OSDI '20: Zipf-like popularity
# with exponents mostly 0.6–1.2, small values, and some clusters dominated by one-hit wonders):
#   timeline  400 000 keys, Zipf 1.0, 300-byte values, twice the others' requests
#   profile   150 000 keys, Zipf 0.8, 800-byte values
#   scan      2 000 000 keys read in turn, 400-byte values (one-hit wonders: an analytics job)
# Runs, each from an empty server with MEM MiB of item memory (RUN seconds each; hit ratios are
# those of each run's second half):
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
# Prints markdown (`bench/tenants.sh | bench/rewrite-doc.sh tenants` puts it in BENCHMARKS.md).
#   MEM (default 64)  RUN (default 120)  INTERVAL (default 15s)  ROUNDS_OFFLINE (default 20000)
# `bench/tenants.sh --report <run directory>` prints a run's tables and plot again.
set -euo pipefail
cd "$(dirname "$0")/.."

mem=${MEM:-64} run=${RUN:-120} interval=${INTERVAL:-15s} offline_rounds=${ROUNDS_OFFLINE:-20000}
say() { printf '%s\n' "$*" >&2; }
timeline=name=timeline,keys=400000,dist=zipf:1.0,value=300,share=2
profile=name=profile,keys=150000,dist=zipf:0.8,value=800
scan=name=scan,keys=2000000,dist=scan,value=400
changed=name=profile,keys=20000,dist=zipf:1.1,value=800

if [ "${1:-}" = --report ]; then
  python3 bench/tenants-report.py "$2" docs/tenants.png
  exit
fi
out=target/bench/tenants-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
# shellcheck source=bench/lib/processes.sh
. bench/lib/processes.sh
# shellcheck source=bench/lib/matplotlib.sh
. bench/lib/matplotlib.sh
shoal=target/release/shoal

# tenants_file <file> <name:size_mb:priority:prefix>... (the first takes unclaimed keys)
tenants_file() {
  local file=$1 first=; shift
  : >"$file"
  for t in "$@"; do
    IFS=: read -r name size priority prefix <<<"$t"
    [ -n "$first" ] || { first=$name; printf 'default = "%s"\n' "$name" >>"$file"; }
    printf '[[tenant]]\nname = "%s"\nsize_mb = %s\npriority = %s\n' "$name" "$size" "$priority" >>"$file"
    [ -z "$prefix" ] || printf 'prefixes = ["%s:"]\n' "$prefix" >>"$file"
  done
}

# one_run <name> <controller goal or -> <tenants file> <workload args…>
one_run() {
  local name=$1 goal=$2 file=$3; shift 3
  local port http
  port=$(free_port)
  "$shoal" server -p "$port" -U 0 -l 127.0.0.1 -t 2 -m "$((mem + 8))" --tenants "$file" 2>>"$out/$name.log" &
  local server=$!
  pids+=("$server")
  for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
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
  say "run $name ($run s)"
  "$shoal" bench tenants --server "127.0.0.1:$port" --seconds "$run" --json --trace "$out/$name.trace.jsonl" "$@" \
    >"$out/$name.json"
  kill "$poller" "$server" ${controller:+"$controller"} 2>/dev/null || true
  wait "$poller" "$server" ${controller:+"$controller"} 2>/dev/null || true
}

workload=(--tenant "$timeline" --tenant "$profile" --tenant "$scan")
third=$((mem / 3))
say "offline: exact LRU curves of $offline_rounds rounds and the optimum partition of $((third * 3)) MiB"
"$shoal" bench tenants "${workload[@]}" --rounds "$offline_rounds" --offline-memory-mb "$((third * 3))" --json \
  >"$out/offline.json"
size_of() { jq -r --arg t "$1" '.tenants[] | select(.tenant == $t) | .optimum_mb' "$out/offline.json"; }

tenants_file "$out/shared.toml" "all:$((third * 3)):1:"
tenants_file "$out/equal.toml" "timeline:$third:1:timeline" "profile:$third:1:profile" "scan:$third:1:scan"
tenants_file "$out/optimum.toml" "timeline:$(size_of timeline):1:timeline" "profile:$(size_of profile):1:profile" \
  "scan:$(size_of scan):1:scan"
tenants_file "$out/alone.toml" "timeline:$((third * 3)):1:timeline"
tenants_file "$out/protected.toml" "timeline:$((third * 3 / 2)):10:timeline" "scan:$((third * 3 / 2)):1:scan"

one_run shared - "$out/shared.toml" "${workload[@]}"
one_run equal - "$out/equal.toml" "${workload[@]}"
one_run optimum - "$out/optimum.toml" "${workload[@]}"
one_run controller global "$out/equal.toml" "${workload[@]}"
one_run alone - "$out/alone.toml" --tenant "$timeline"
one_run shared-scan - "$out/shared.toml" --tenant "$timeline" --tenant "$scan"
one_run protected priorities "$out/protected.toml" --tenant "$timeline" --tenant "$scan"
one_run react global "$out/equal.toml" "${workload[@]}" --change "$((run / 2))@$changed"
python3 bench/tenants-report.py "$out" docs/tenants.png
