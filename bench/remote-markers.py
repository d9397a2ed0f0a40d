#!/usr/bin/env python3
"""Remote markers (Scaling Memcache §5.1, issue 15): stale reads in a replica region right
after its own writes, with and without markers. A PostgreSQL primary (the master region) and
a streaming replica that applies commits `--delay-ms` late (the replica region's database); the
replica region's cache is a `shoal server` whose invalidator follows the master's log, waits
for the replica (`--wait-for-replica`) and deletes markers with keys (`--remote-markers`).

For each of `--keys` keys a web server in the replica region writes a new value (with markers:
set the marker, write the master, delete the key; without: write the master, delete the key),
then reads it look-aside (a miss reads the master when the marker is there, else the replica,
and fills the cache); after all writes every key is read once more. A read that returns
anything but the value just written is stale.

    bench/remote-markers.py [--keys 200] [--delay-ms 2000] [--json out.json]
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from consistency import Proc, SHOAL, Postgres, Server, free_port, wait_for  # noqa: E402

import psycopg  # noqa: E402
import shoal  # noqa: E402


def run(master, replica, keys, markers, work):
    with Server.shoal() as server:
        cache = shoal.Client(f"127.0.0.1:{server.port}")
        metrics = free_port()
        slot = f"region_replica_{int(markers)}"
        inv = Proc("invalidator", [str(SHOAL), "invalidator", "--postgres", master.conninfo, "--slot", slot,
                                   "--wait-for-replica", replica.conninfo, "--remote-markers",
                                   "--destination", f"127.0.0.1:{server.port}", "--state-dir", str(work / slot),
                                   "--metrics-listen", f"127.0.0.1:{metrics}"], metrics, work / "invalidator.log")
        inv.start()
        mdb = psycopg.connect(master.conninfo, autocommit=True)
        rdb = psycopg.connect(replica.conninfo, autocommit=True)

        def read(key, k):
            got = cache.get(key)
            if got is not None:
                return got.decode()
            use_master = markers and cache.has_remote_marker(key)
            db = mdb if use_master else rdb
            value = db.execute("SELECT v FROM kv WHERE k = %s", (k,)).fetchone()[0]
            cache.set(key, value.encode())
            return value

        stale = reads = 0
        written = {}
        for k in range(keys):
            key, value = f"kv:{k}", f"v{int(markers)}-{k}"
            cache.set(key, b"old")
            if markers:
                cache.set_remote_marker(key, ttl=600)
            with mdb.transaction():
                mdb.execute("UPDATE kv SET v = %s WHERE k = %s", (value, k))
                shoal.invalidate(mdb.cursor(), [key])
            cache.delete(key)
            written[key] = (k, value)
            reads += 1
            stale += read(key, k) != value
        for key, (k, value) in written.items():
            reads += 1
            stale += read(key, k) != value
        inv.kill()
        return {"markers": markers, "reads": reads, "stale": stale}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--delay-ms", type=int, default=2000)
    parser.add_argument("--json")
    parser.add_argument("--dir", default="/tmp/shoal-remote-markers")
    args = parser.parse_args()
    work = Path(args.dir)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    rows = []
    with Postgres() as master:
        db = psycopg.connect(master.conninfo, autocommit=True)
        db.execute("CREATE TABLE kv (k int PRIMARY KEY, v text NOT NULL)")
        db.execute("INSERT INTO kv SELECT g, 'old' FROM generate_series(0, %s) g", (args.keys - 1,))
        with master.replica(args.delay_ms) as replica:
            rdb = psycopg.connect(replica.conninfo, autocommit=True)
            wait_for(lambda: rdb.execute("SELECT count(*) FROM kv").fetchone()[0] == args.keys, 30, "replica has the rows")
            for markers in (True, False):
                started = time.time()
                row = run(master, replica, args.keys, markers, work)
                row["seconds"] = round(time.time() - started, 1)
                row["replica_delay_ms"] = args.delay_ms
                print(json.dumps(row))
                rows.append(row)
                time.sleep(args.delay_ms / 1000 + 1)  # the replica catches up between runs
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
