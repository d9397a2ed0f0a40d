# Sourced by bench scripts that start servers: builds the release `shoal`, gives `free_port`
# (a free loopback TCP port), and on exit kills every process whose pid was added to `pids`
# and removes PostgreSQL's directory if bench/lib/postgres.sh made one.
[ -n "${SHOAL:-}" ] || cargo build --release --quiet -p shoal  # SHOAL: a binary given, nothing built
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
pg_dir=
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; [ -z "$pg_dir" ] || rm -rf "$pg_dir"; }
trap cleanup EXIT
