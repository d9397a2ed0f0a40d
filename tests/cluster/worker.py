"""One simulated host's workload (run by tests/cluster/cluster.py inside the host's network and
mount namespaces): look-aside readers with leases, one per router of the region, each falling
back on the region's other router when its own does not answer; a reader of the host's own
server through shared memory; and (region A) writers that update PostgreSQL rows and name the
changed key in the same transaction.

Every thread appends its history to a file of its own under the output directory, one line an
operation, for the checker (tests/cluster/checker.py):

    W <key> <version> <ack time>                 a committed write (acknowledged at that time)
    R <key> <start time> <version|-1|E> <source>  a read: h hit through a router, d filled
                                                  from the database, l a local hit, m a miss
                                                  (local), E an error (not answered)

Times are wall-clock seconds (time.time(): one clock for every namespace of the machine). It
runs until the file `stop` appears in the output directory; `status-<host>.json` holds its
counts, rewritten every half second.

    python3 worker.py '<json settings>'
"""

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import psycopg
import shoal


# The pause after each read: the readers leave the machine's CPU to the system under test (a
# read unpaced takes a microsecond locally, and seven hosts of them would starve the invalidator).
PACE = 0.005
# The pause after each write: the invalidation pipeline's lag stays well under the bound.
WRITE_PACE = 0.01
# How long a reader passes over a router that failed to answer (then asks it first again).
DEAD_TIMEOUT = 1.0


def key_name(k):
    return f"k:{k}"


class Worker:
    """A host's threads, their logs and counts. Other workloads (tests/near/near_zipf_worker.py)
    extend it: they choose keys (`draw_key`), pace writes (`write_pacer`) and start their own
    readers (`threads`)."""

    COUNTS = ("reads", "answered", "writes", "local_reads", "router_failovers")

    def __init__(self, settings):
        self.s = settings
        self.out = Path(settings["out"])
        self.stop = threading.Event()
        self.counts = dict.fromkeys(self.COUNTS, 0)
        self.lock = threading.Lock()

    def draw_key(self, rng):
        return rng.randrange(self.s["keys"])

    def write_pacer(self):
        """What a writer calls after each write."""
        return lambda: self.stop.wait(WRITE_PACE)

    def count(self, **deltas):
        with self.lock:
            for name, delta in deltas.items():
                self.counts[name] += delta

    def log(self, name):
        return open(self.out / f"{self.s['host']}-{name}.log", "a", buffering=1 << 16)

    def db(self, dsn):
        while not self.stop.is_set():
            try:
                return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
            except psycopg.Error:
                time.sleep(0.2)
        return None

    def writer(self, n, rng):
        log, conn = self.log(f"w{n}"), None
        pause = self.write_pacer()
        while not self.stop.is_set():
            if conn is None or conn.closed:
                conn = self.db(self.s["write_dsn"])
                continue
            k = self.draw_key(rng)
            try:
                with conn.transaction():
                    cur = conn.cursor()
                    version = cur.execute("UPDATE kv SET v = v + 1 WHERE k = %s RETURNING v", (k,)).fetchone()[0]
                    shoal.invalidate(cur, [key_name(k)])
            except psycopg.Error:
                # A commit whose outcome is unknown is not recorded: a later read of its
                # version is then only newer than what the checker knows, never flagged.
                conn.close()
                continue
            log.write(f"W {k} {version} {time.time():.6f}\n")
            self.count(writes=1)
            pause()
        log.close()

    def router_reader(self, n, rng, routers):
        """Look-aside reads with leases through `routers[0]`; a read the router does not answer
        (refused, reset, timed out) is asked of the region's next router at once, as a client
        configured with several routers does, and a router that failed is passed over for
        DEAD_TIMEOUT (pymemcache's `dead_timeout`). A read's start is that of the attempt that
        answered it (the checker judges it from then)."""
        log = self.log(f"r{n}")
        caches = [shoal.Client(r, connect_timeout=2.0, timeout=2.0, local=False) for r in routers]
        dead_until = [0.0] * len(caches)
        for conn, k, key in self.keys_to_read(rng):
            now = time.time()
            order = sorted(range(len(caches)), key=lambda i: dead_until[i] > now)
            line, first_start = None, None
            try:
                for i in order:
                    start = time.time()
                    first_start = first_start or start
                    try:
                        line = self.lease_read(caches[i], conn, k, key, start)
                        break
                    except shoal.Error:
                        dead_until[i] = time.time() + DEAD_TIMEOUT
                        self.count(router_failovers=1)
            except psycopg.Error:
                conn.close()
                continue
            if line is None:
                log.write(f"R {k} {first_start:.6f} E h\n")
                self.count(reads=1)
                self.stop.wait(0.01)
            else:
                log.write(line)
                self.count(reads=1, answered=1)
                self.stop.wait(PACE)
        log.close()

    def keys_to_read(self, rng):
        """(database connection, key number, key name) for each read until the worker stops;
        the connection is opened again whenever it closed (a read's psycopg error closes it)."""
        conn = None
        while not self.stop.is_set():
            if conn is None or conn.closed:
                conn = self.db(self.s["read_dsn"])
                continue
            k = self.draw_key(rng)
            yield conn, k, key_name(k)

    def read_or_row(self, cache, conn, k, key, start):
        """`lease_read`, or when the cache cannot lease (out of reach) the database's row, not
        cached, as an application reads when its cache fails; (the log line, whether leased)."""
        try:
            return self.lease_read(cache, conn, k, key, start), True
        except shoal.Error:
            version = conn.execute("SELECT v FROM kv WHERE k = %s", (k,)).fetchone()[0]
            return f"R {k} {start:.6f} {version} d\n", False

    def lease_read(self, cache, conn, k, key, start):
        """One look-aside read: the cache's hit, or the database's row (filled under the lease
        when this read holds it); its log line. A fill that fails is only a fill lost."""
        kind, value, token = cache.lease_get(key)
        if kind == "hit":
            return f"R {k} {start:.6f} {int(value)} h\n"
        version = conn.execute("SELECT v FROM kv WHERE k = %s", (k,)).fetchone()[0]
        if kind == "token":
            try:
                cache.lease_set(key, token, str(version).encode())
            except shoal.Error:
                pass
        return f"R {k} {start:.6f} {version} d\n"

    def local_reader(self, rng, server):
        log = self.log("l")
        cache = shoal.Client(server, connect_timeout=2.0, timeout=2.0)
        while not self.stop.is_set():
            k = self.draw_key(rng)
            start = time.time()
            try:
                local = cache.is_local()
                value = cache.get(key_name(k))
                source = "l" if local else "n"
                log.write(f"R {k} {start:.6f} {-1 if value is None else int(value)} {source if value else 'm'}\n")
                self.count(reads=1, answered=1, local_reads=int(local))
                self.stop.wait(PACE / 5)
            except shoal.Error:
                log.write(f"R {k} {start:.6f} E l\n")
                self.count(reads=1)
                self.stop.wait(0.01)
        log.close()

    def threads(self, rng):
        """The host's threads, each with its own random stream drawn from `rng`."""
        s, threads = self.s, []
        for n in range(s.get("writers", 0)):
            threads.append(threading.Thread(target=self.writer, args=(n, random.Random(rng.random()))))
        routers = s["routers"]
        for n in range(len(routers)):
            # One reader per router of the region, each with the others to fall back on.
            mine = routers[n:] + routers[:n]
            threads.append(threading.Thread(target=self.router_reader, args=(n, random.Random(rng.random()), mine)))
        if s.get("local_server"):
            threads.append(threading.Thread(target=self.local_reader, args=(random.Random(rng.random()), s["local_server"])))
        return threads

    def run(self):
        threads = self.threads(random.Random(self.s["seed"]))
        for t in threads:
            t.start()
        status = self.out / f"status-{self.s['host']}.json"
        while not (self.out / "stop").exists():
            with self.lock:
                text = json.dumps(self.counts)
            status.with_suffix(".tmp").write_text(text)
            os.replace(status.with_suffix(".tmp"), status)
            time.sleep(0.5)
        self.stop.set()
        for t in threads:
            t.join()
        with self.lock:
            status.write_text(json.dumps({**self.counts, "done": True}))


if __name__ == "__main__":
    Worker(json.loads(sys.argv[1])).run()
