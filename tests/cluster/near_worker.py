"""A fault-harness host's workload with a near cache (tests/cluster/near.py): everything
worker.py runs on the host, plus a reader through the host's near cache, look-aside with leases
as an application reads: `get` through the client library (a hit in the near cache's region is
read from this host's shared memory; a local miss goes to the near cache over the network, which
fetches from the pool through the host's router), then on a miss `lease_get` through the near
cache (the pool's lease), the row from the region's database, `lease_set`; a `lease_get` that
fails (the pool out of reach) reads the row without filling. Logged in worker.py's format with
the sources of near.SOURCES (`c` a get's value, `C` a lease-get's value, `D` the row).

    python3 near_worker.py '<json settings>'      # worker.py's settings and "near": "<ip:port>"
"""

import json
import random
import sys
import threading
import time
from pathlib import Path

import psycopg
import shoal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worker import PACE, Worker  # noqa: E402

LETTER = {"h": "C", "d": "D"}


class NearWorker(Worker):
    COUNTS = Worker.COUNTS + ("near_reads", "near_values")

    def near_reader(self, rng, near):
        log = self.log("c")
        cache = shoal.Client(near, connect_timeout=2.0, timeout=2.0)
        for conn, k, key in self.keys_to_read(rng):
            start = time.time()
            try:
                value = cache.get(key)
                if value is not None:
                    line = f"R {k} {start:.6f} {int(value)} c\n"
                else:
                    line, _ = self.read_or_row(cache, conn, k, key, start)
                    line = line[:-2] + LETTER[line[-2]] + "\n"
                log.write(line)
                self.count(reads=1, answered=1, near_reads=1, near_values=int(value is not None))
                # Paced as the router readers (a local hit alone would allow 5× more, as the
                # pool's local reader does): most of its reads are misses, each some five
                # exchanges through the near cache, the router and the database.
                self.stop.wait(PACE)
            except shoal.Error:
                log.write(f"R {k} {start:.6f} E c\n")
                self.count(reads=1, near_reads=1)
                self.stop.wait(0.01)
            except psycopg.Error:
                conn.close()
        log.close()

    def threads(self, rng):
        threads = super().threads(rng)
        threads.append(threading.Thread(target=self.near_reader, args=(random.Random(rng.random()), self.s["near"])))
        return threads


if __name__ == "__main__":
    NearWorker(json.loads(sys.argv[1])).run()
