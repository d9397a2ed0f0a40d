"""One simulated host's part of the near cache's Zipf run (tests/near/near_zipf.py), run inside
the host's network and mount namespaces:

- `readers` (a client host): threads reading keys drawn from Zipf 0.99 (YCSB's skew), each
  read look-aside with leases. With a near cache: `get` through the client library (a hit in
  the near cache's region is read from this host's shared memory; a local miss goes to the near
  cache, which fetches from the pool), then on a miss `lease_get` through the near cache (the
  pool's lease), the row from PostgreSQL, `lease_set` (a `lease_get` that fails — the pool out
  of reach — reads the row without caching it). Without (`near` null): `lease_get`
  through the pool's router, as an application with no near cache reads.
- `writers` (the database's host): threads updating a row drawn from the same distribution and
  naming its key in the same transaction (`shoal.invalidate`), as tests/cluster/worker.py does.

Every thread logs in the checker's format (tests/cluster/checker.py, written by
tests/cluster/worker.py): `W <key> <version> <ack>` and `R <key> <start> <version|-1|E> <src>`
with src `l` for a value `get` returned (the near cache's region: shared memory, or the near
server when the local copy was missing), `h` a lease hit, `d` filled from the database. It runs
until the file `stop` appears in the output directory; `status-<host>.json` holds its counts.

    python3 near_zipf_worker.py '<json settings>'
"""

import bisect
import itertools
import json
import random
import sys
import threading
import time
from pathlib import Path

import psycopg
import shoal

# The fault harness's host worker: logs, counts, the writers and the look-aside read.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "cluster"))
from worker import Worker  # noqa: E402

SKEW = 0.99


class ZipfKeys:
    """Keys 0..n-1 drawn by Zipf's law over ranks; ranks are mapped to keys by a fixed seeded
    permutation (the same on every host), so the hottest keys land on different servers."""

    def __init__(self, n, skew=SKEW):
        weights = [(rank + 1) ** -skew for rank in range(n)]
        self.cdf = list(itertools.accumulate(weights))
        self.keys = list(range(n))
        random.Random(28).shuffle(self.keys)

    def draw(self, rng):
        rank = bisect.bisect_left(self.cdf, rng.random() * self.cdf[-1])
        return self.keys[min(rank, len(self.keys) - 1)]


class Paced:
    """Sleeps so that a loop runs at most `rate` times a second (catching up if behind, never
    bursting past one second's worth)."""

    def __init__(self, rate, stop):
        self.period, self.stop = 1.0 / rate, stop
        self.next = time.monotonic()

    def wait(self):
        self.next = max(self.next + self.period, time.monotonic() - 1.0)
        left = self.next - time.monotonic()
        if left > 0:
            self.stop.wait(left)


class ZipfWorker(Worker):
    COUNTS = ("reads", "errors", "get_values", "lease_hits", "fills", "lease_errors", "writes")

    def __init__(self, settings):
        super().__init__(settings)
        self.keys = ZipfKeys(settings["keys"])

    def draw_key(self, rng):
        return self.keys.draw(rng)

    def write_pacer(self):
        return Paced(self.s["write_rate"], self.stop).wait

    def reader(self, n, rng):
        log = self.log(f"r{n}")
        near = self.s["near"]
        if near:
            cache = shoal.Client(near, connect_timeout=5.0, timeout=10.0)
        else:
            cache = shoal.Client(self.s["router"], connect_timeout=5.0, timeout=10.0, local=False)
        pace = Paced(self.s["read_rate"], self.stop)
        for conn, k, key in self.keys_to_read(rng):
            start = time.time()
            try:
                value = cache.get(key) if near else None
                if value is not None:
                    log.write(f"R {k} {start:.6f} {int(value)} l\n")
                    self.count(reads=1, get_values=1)
                else:
                    line, leased = self.read_or_row(cache, conn, k, key, start)
                    if not leased:
                        self.count(reads=1, lease_errors=1)
                    else:
                        self.count(reads=1, **({"lease_hits": 1} if line.endswith(" h\n") else {"fills": 1}))
                    log.write(line)
            except shoal.Error:
                log.write(f"R {k} {start:.6f} E l\n")
                self.count(reads=1, errors=1)
                self.stop.wait(0.01)
            except psycopg.Error:
                conn.close()
            pace.wait()
        log.close()

    def threads(self, rng):
        s = self.s
        threads = [threading.Thread(target=self.writer, args=(n, random.Random(rng.random())))
                   for n in range(s.get("writers", 0))]
        threads += [threading.Thread(target=self.reader, args=(n, random.Random(rng.random())))
                    for n in range(s.get("readers", 0))]
        return threads


if __name__ == "__main__":
    ZipfWorker(json.loads(sys.argv[1])).run()
