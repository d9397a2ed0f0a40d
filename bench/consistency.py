#!/usr/bin/env python3
"""The invalidation consistency checker (issue 15): writers and look-aside readers through the
whole stack — PostgreSQL, `shoal invalidator`, a `shoal router` per cluster, two `shoal
server`s behind each — while a killer sends kill -9 to each of these processes in turn (a
seeded shuffle), one every `--kill-every` seconds (each restarted at once; a server restarts
empty). The writes go on past `--writes` until every process has been killed once, so a fast
machine still kills each under load. After the writes, every process is brought back, the
invalidator is let catch up, and every cached key in every cluster is compared with the
database: a cached value that differs is stale.

Readers use leases (lease_get, read the database, lease_set), so a delete that lands while a
reader is filling voids the fill; what the checker counts is invalidation lost, not the
look-aside race leases exist for.

    bench/consistency.py --writes 100000 [--ack-rule off] [--json out.json]
"""

import argparse
import json
import random
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from harness import SHOAL, Postgres, free_port  # noqa: E402

import psycopg  # noqa: E402
import shoal  # noqa: E402


class Proc:
    """A restartable process (kill -9 and start again on the same port and files)."""

    def __init__(self, name, argv, port, log):
        self.name, self.argv, self.port, self.log = name, argv, port, log
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=open(self.log, "a"))
        wait_for(lambda: listening(self.port), 10, f"{self.name} listens")

    def kill(self):
        self.proc.kill()
        self.proc.wait()


def listening(port):
    import socket
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def wait_for(condition, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting: {what}")


def clusters(work, count, pin=()):
    """`count` clusters of a `shoal router` (PoolRoute, jump hash) over two `shoal server`s, as
    processes not yet started (`pin`: a `taskset -c N` prefix); returns them and the routers'
    ports."""
    procs, routers = [], []
    for cluster in range(count):
        servers = [free_port(), free_port()]
        for s, port in enumerate(servers):
            procs.append(Proc(f"server {cluster}.{s}", [*pin, str(SHOAL), "server", "-l", "127.0.0.1", "-p", str(port),
                              "-U", "0", "-m", "64", "-t", "1"], port, work / f"server-{cluster}-{s}.log"))
        config = work / f"router-{cluster}.json"
        config.write_text(json.dumps({
            "pools": {"main": {"servers": [f"127.0.0.1:{p}" for p in servers]}},
            "route": {"type": "PoolRoute", "pool": "main", "hash": "jump"}}))
        port = free_port()
        routers.append(port)
        procs.append(Proc(f"router {cluster}", [*pin, str(SHOAL), "router", "-l", "127.0.0.1", "-p", str(port), "-t", "1",
                          "-f", str(config), "--spool-dir", str(work / f"router-{cluster}-spool")],
                          port, work / f"router-{cluster}.log"))
    return procs, routers


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
        return json.load(r)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kill -9s (0: none)")
    parser.add_argument("--ack-rule", choices=["on", "off"], default="on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--dir", default="/tmp/shoal-consistency")
    args = parser.parse_args()
    random.seed(args.seed)
    work = Path(args.dir) / f"ack-{args.ack_rule}"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)

    with Postgres() as pg:
        db = psycopg.connect(pg.conninfo, autocommit=True)
        db.execute("CREATE TABLE kv (k int PRIMARY KEY, v bigint NOT NULL)")
        db.execute("INSERT INTO kv SELECT g, 0 FROM generate_series(0, %s) g", (args.keys - 1,))

        procs, routers = clusters(work, 2)
        metrics = free_port()
        invalidator = Proc("invalidator", [str(SHOAL), "invalidator", "--postgres", pg.conninfo,
                           *sum((["--destination", f"127.0.0.1:{p}"] for p in routers), []),
                           "--state-dir", str(work / "invalidator"), "--ack-rule", args.ack_rule,
                           "--metrics-listen", f"127.0.0.1:{metrics}"], metrics, work / "invalidator.log")
        procs.append(invalidator)
        for p in procs:
            p.start()
        slot = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'shoal_invalidator'"
        wait_for(lambda: db.execute(slot).fetchone()[0] == 1, 10, "the slot exists")

        done = threading.Event()
        every_process_killed = threading.Event()
        counts = {"reads": 0, "fills": 0, "kills": 0, "errors": 0}
        killed = {}

        def reader(router_port):
            cache = shoal.Client(f"127.0.0.1:{router_port}")
            rdb = psycopg.connect(pg.conninfo, autocommit=True)
            while not done.is_set():
                k = random.randrange(args.keys)
                try:
                    kind, _, token = cache.lease_get(f"k:{k}")
                    counts["reads"] += 1
                    if kind == "token":
                        v = rdb.execute("SELECT v FROM kv WHERE k = %s", (k,)).fetchone()[0]
                        cache.lease_set(f"k:{k}", token, str(v).encode())
                        counts["fills"] += 1
                except shoal.Error:
                    counts["errors"] += 1
                    time.sleep(0.01)

        def killer():
            # Every process in turn, in a shuffled order: each kind is killed within 7 kills.
            order = list(procs)
            random.Random(args.seed).shuffle(order)
            turn = 0
            while not done.wait(args.kill_every):
                victim = order[turn % len(order)]
                turn += 1
                victim.kill()
                counts["kills"] += 1
                kind = victim.name.split()[0]
                killed[kind] = killed.get(kind, 0) + 1
                time.sleep(0.2)
                victim.start()
                if turn == len(order):
                    every_process_killed.set()

        threads = [threading.Thread(target=reader, args=(r,)) for r in routers for _ in range(2)]
        if args.kill_every > 0:
            threads.append(threading.Thread(target=killer))
        else:
            every_process_killed.set()
        for t in threads:
            t.start()
        started = time.time()
        with db.cursor() as cur:
            i = 0
            while i < args.writes or not every_process_killed.is_set():
                k = random.randrange(args.keys)
                with db.transaction():
                    cur.execute("UPDATE kv SET v = v + 1 WHERE k = %s", (k,))
                    shoal.invalidate(cur, [f"k:{k}"])
                if i % 10000 == 0:
                    print(f"  {i} writes, {counts['kills']} kills, {time.time() - started:.0f} s", file=sys.stderr)
                i += 1
        write_secs = time.time() - started
        done.set()
        for t in threads:
            t.join()
        # Catch up: the slot confirmed past the last write and every spool empty.
        end = db.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        caught_up = ("SELECT confirmed_flush_lsn >= %s FROM pg_replication_slots "
                     "WHERE slot_name = 'shoal_invalidator'")
        wait_for(lambda: db.execute(caught_up, (end,)).fetchone()[0], 120, "the slot catches up")
        wait_for(lambda: all(d["backlog"] == 0 for d in status(metrics)["destinations"]), 120, "spools drain")
        time.sleep(1.0)  # the routers' own in-flight deletes

        truth = dict(db.execute("SELECT k, v FROM kv").fetchall())
        stale, cached = 0, 0
        for router_port in routers:
            cache = shoal.Client(f"127.0.0.1:{router_port}")
            for k, v in truth.items():
                got = cache.get(f"k:{k}")
                if got is not None:
                    cached += 1
                    stale += int(got) != v
        result = {"ack_rule": args.ack_rule, "writes": i, "keys": args.keys,
                  "write_seconds": round(write_secs, 1), "kills": counts["kills"], "killed": killed, "reads": counts["reads"],
                  "fills": counts["fills"], "read_errors": counts["errors"], "cached_keys_checked": cached,
                  "stale": stale, "invalidator": status(metrics)}
        for p in procs:
            p.kill()
    print(json.dumps({k: v for k, v in result.items() if k != "invalidator"}))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
