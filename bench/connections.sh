#!/usr/bin/env bash
# Issue #26's load target: 10 000 client connections through one `shoal router` and 10 000 on
# one `shoal server`, all open at once, each doing gets, with no errors, and the memory of the
# router and the server before, with every connection open, and after they closed.
#
# One `shoal server` (-c 20000: memcached's -c, the most connections it takes at once) behind one
# `shoal router` (a PoolRoute over it, one worker thread). bench/connections.py opens the
# connections (256 connects in flight at most), keeps all of them open while each does
# BENCH_GETS gets of keys it set first (one get per connection per round), checks every answer,
# then closes them; the server's and the router's VmRSS and RssAnon come from /proc. First
# through the router, then straight to the server. Prints markdown rows and the JSON lines.
#   BENCH_CONNECTIONS  connections per phase (default 10000)
#   BENCH_GETS         gets per connection (default 10)
#   BENCH_ROUNDS       rounds through the router, one after the other on the same router
#                      (default 1): its memory after each round says whether it keeps growing
#   SHOAL              a shoal binary to use (default: build target/release/shoal)
set -euo pipefail
cd "$(dirname "$0")/.."

connections=${BENCH_CONNECTIONS:-10000}
gets=${BENCH_GETS:-10}
rounds=${BENCH_ROUNDS:-1}
out=target/bench/connections-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
# Every process started below holds up to one descriptor per connection: raise the soft limit
# to the hard one (20 000 here is enough: 10 000 clients and the router's few upstreams).
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $((connections + 100)) ] || {
  echo "open files limited to $(ulimit -n): $((connections + 100)) are needed (raise the hard limit)" >&2
  exit 1
}
. bench/lib/processes.sh
shoal=${SHOAL:-target/release/shoal}

server_port=$(free_port)
"$shoal" server -p "$server_port" -U 0 -l 127.0.0.1 -t 2 -m 256 -c $((connections + 1000)) \
  >"$out/server.log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
router_port=$(free_port)
printf '{ "pools": { "A": { "servers": ["127.0.0.1:%s"] } }, "route": { "type": "PoolRoute", "pool": "A" } }\n' \
  "$server_port" >"$out/router.json"
"$shoal" router -f "$out/router.json" -p "$router_port" -l 127.0.0.1 -t 1 --spool-dir "$out/spool" \
  >"$out/router.log" 2>&1 &
router_pid=$!
pids+=("$router_pid")
for port in "$server_port" "$router_port"; do
  for _ in $(seq 600); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), timeout=1).close()" 2>/dev/null && break
    sleep 0.1
  done
done

run() { # name address connections-stat
  python3 bench/connections.py --address "$2" --connections "$connections" --gets "$gets" \
    --pid "server=$server_pid" --pid "router=$router_pid" --connections-stat "$3" | tee "$out/phase-$1.json"
}
say() { printf '%s\n' "$*" >&2; }
for round in $(seq "$rounds"); do
  say "through the router, round $round of $rounds: $connections connections, $gets gets each"
  # A round with errors is reported in the table (its errors column), not the end of the run.
  run "router-$round" "127.0.0.1:$router_port" curr_connections >&2 || say "round $round had errors"
done
cp "$out/phase-router-1.json" "$out/phase-router.json"
say "straight to the server: $connections connections, $gets gets each"
run server "127.0.0.1:$server_port" curr_connections >&2

python3 - "$out" "$rounds" <<'EOF'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| connections to | open at once | gets answered | errors | open s | gets/s | process | RSS before | RSS open | RSS after | anon before | anon open | anon after | anon per connection |")
print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
for phase in ("router", "server"):
    r = json.load(open(f"{out}/phase-{phase}.json"))
    for process in ("router", "server"):
        b, o, a = (r[m][process] for m in ("memory_before", "memory_open", "memory_after"))
        per = (o["RssAnon"] - b["RssAnon"]) * 1024 / r["opened"]
        print(f"| {phase} | {r['opened']} | {r['gets_answered']} | {r['errors']} | {r['open_seconds']} | "
              f"{r['gets_per_second']} | {process} | {b['VmRSS'] / 1024:.1f} MiB | {o['VmRSS'] / 1024:.1f} MiB | "
              f"{a['VmRSS'] / 1024:.1f} MiB | {b['RssAnon'] / 1024:.1f} MiB | {o['RssAnon'] / 1024:.1f} MiB | "
              f"{a['RssAnon'] / 1024:.1f} MiB | {per / 1024:.1f} KiB |")
if rounds > 1:
    print()
    print("| round through the router | errors | router RSS all open | router RSS after close | router anon after close |")
    print("|---:|---:|---:|---:|---:|")
    for n in range(1, rounds + 1):
        r = json.load(open(f"{out}/phase-router-{n}.json"))
        o, a = r["memory_open"]["router"], r["memory_after"]["router"]
        print(f"| {n} | {r['errors']} | {o['VmRSS'] / 1024:.1f} MiB | {a['VmRSS'] / 1024:.1f} MiB | "
              f"{a['RssAnon'] / 1024:.1f} MiB |")
EOF
