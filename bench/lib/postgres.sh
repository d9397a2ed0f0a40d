# Sourced by bench scripts: starts a private PostgreSQL on a free loopback port (installing
# Debian's package if missing), pinned to CPU 0, fsync off. Needs `$out` (a report directory),
# `pids` (an array the caller kills on exit) and `say`. Sets `pg_bin`, `pg_dir`, `pg_port` and
# `postgres` (a libpq connection string); the caller removes `$pg_dir` on exit.
#   PG_OPTIONS  more `-c name=value` settings (an array, e.g. PG_OPTIONS=(-c wal_level=logical))
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pg_bin" ]; then
  say "installing PostgreSQL (Debian's postgresql package)"
  apt-get install -y -q postgresql >&2
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
# PostgreSQL refuses to run as root: as root, run it as the postgres user the package made.
pg_dir=$(mktemp -d /tmp/shoal-bench-pg.XXXXXX)
as_pg=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system postgres
  chown postgres "$pg_dir"
  as_pg=(runuser -u postgres --)
fi
pg_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U postgres >"$out/initdb.log" 2>&1
taskset -c 0 "${as_pg[@]}" "$pg_bin/postgres" -D "$pg_dir/data" -k "$pg_dir" -h 127.0.0.1 -p "$pg_port" \
  -c fsync=off -c synchronous_commit=off -c shared_buffers=512MB "${PG_OPTIONS[@]}" >"$out/postgres.log" 2>&1 &
pids+=($!)
postgres="host=127.0.0.1 port=$pg_port user=postgres dbname=postgres"
for _ in $(seq 100); do "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done
