# Sourced by bench scripts that run memcached and `shoal server` side by side: starting and
# stopping them pinned, running the load generator pinned, and the table cells. Needs `$out`
# (a report directory), `$memcached`, `$shoal`, `$memory_mb`, `$server_cpu`, `$load_cpu`,
# `say`, and `server_flags` (an array of flags both servers get, possibly empty). Sets the
# associative arrays `pid` and `address` (host:port) per server name, and stops every server
# on exit.

as_root=()
[ "$(id -u)" = 0 ] && as_root=(-u root)

declare -A pid address

# start NAME: runs that server on a free loopback port, pinned; sets address[NAME].
start() {
  local name=$1 ports="$out/$1.ports" port=
  local -a command=("$memcached")
  [ "$name" = shoal ] && command=("$shoal" server)
  [ "$name" = shoal_before ] && command=("$shoal_before" server)
  rm -f "$ports"
  MEMCACHED_PORT_FILENAME=$ports taskset -c "$server_cpu" "${command[@]}" \
    -p -1 -U 0 -l 127.0.0.1 -t 1 -m "$memory_mb" "${as_root[@]}" "${server_flags[@]}" >>"$out/$name.log" 2>&1 &
  pid[$name]=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/^TCP INET: //p' "$ports" 2>/dev/null || true)
    if [ -n "$port" ]; then
      address[$name]=127.0.0.1:$port
      return
    fi
    kill -0 "${pid[$name]}" 2>/dev/null || { say "$name exited at start:"; cat "$out/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  say "$name did not start listening within 10 s"
  exit 1
}

stop() {
  kill "${pid[$1]}" 2>/dev/null || true
  wait "${pid[$1]}" 2>/dev/null || true
  unset "pid[$1]"
}

stop_all() {
  for name in "${!pid[@]}"; do stop "$name"; done
}
trap stop_all EXIT

# bench SUBCOMMAND NAME JSON ARGS...: runs the load generator pinned, against server NAME.
bench() {
  local subcommand=$1 name=$2 json=$3
  shift 3
  taskset -c "$load_cpu" "$shoal" bench "$subcommand" --server "${address[$name]}" --json "$@" >"$json"
  local errors
  errors=$(jq '.errors // 0' "$json")
  [ "$errors" = 0 ] || say "WARNING: $name answered $errors requests with errors ($json)"
}

# ratio A B: A/B to two decimals, or — when either is missing.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "—" || b == "—" || b == 0) print "—"; else printf "%.2f", a / b }'
}

# cell JSON FILTER FORMAT: a figure from a report, or — without one.
cell() {
  local value=—
  [ -s "$1" ] && value=$(jq -r "$2 // \"—\"" "$1")
  if [ "$value" = — ]; then printf '—'; else printf "$3" "$value"; fi
}

