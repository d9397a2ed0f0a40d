"""Times the near caches' invalidation paths (docs/design/near-cache.md, "Measured"):

1. 1 000 pipelined deletes to a near cache: on its own port (each forwarded to its router, which
   passes it to the pool, before it is answered) against its invalidation listener
   (`--invalidation-listen`: the near copy dropped, nothing forwarded);
2. 1 000 pipelined deletes through a router, without `"near_caches"` and with two near caches
   listed: the client's time, and the time until both near caches dropped every copy.

    python3 tests/near/near_invalidations.py [--rounds 5]

Prints one line per measure: the median of the rounds, in milliseconds. Not a test: figures go
to docs/BENCHMARKS.md with this command."""

import argparse
import contextlib
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import Server, free_port, talk  # noqa: E402
from test_near_owed import Router  # noqa: E402

N = 1000


def pipelined(address, request, answers, end=b"\r\n"):
    """Sends `request` in one write and reads `answers` answers ending in `end`; the seconds it
    took."""
    with socket.create_connection(address, timeout=60) as s:
        start = time.perf_counter()
        s.sendall(request)
        got, data = 0, b""
        while got < answers:
            chunk = s.recv(1 << 16)
            assert chunk, "closed"
            data += chunk
            got = data.count(end)
        return time.perf_counter() - start


def fill(pool, nears, keys):
    sets = b"".join(b"set %s 0 0 1\r\nv\r\n" % k for k in keys)
    pipelined(pool.address, sets, len(keys))
    gets = b"".join(b"get %s\r\n" % k for k in keys)
    for n in nears:
        pipelined(n.address, gets, len(keys), b"END\r\n")


def drained(router):
    """Waits until the router's near caches' spools are empty (its deliveries are done)."""
    while True:
        with socket.create_connection(("127.0.0.1", router.port), timeout=60) as s:
            answer = talk(s, b"stats\r\n", b"END\r\n").decode()
        if all(line.endswith("pending=0") for line in answer.split("\r\n") if line.startswith("STAT near_cache ")):
            return
        time.sleep(0.01)


def held(server):
    with server.connect() as s:
        answer = talk(s, b"stats\r\n", b"END\r\n").decode()
    return int(next(line.split()[2] for line in answer.split("\r\n") if line.startswith("STAT curr_items ")))


def near(router, listen):
    return Server.shoal("--upstream", f"127.0.0.1:{router.port}", "--upstream-timeout", "10000", "--admit", "all",
                        "--near-ttl", "3600", "--invalidation-listen", f"127.0.0.1:{listen}")


def router_with(tmp, pool, listens):
    r = Router(tmp, pool)
    config = json.loads(r.config.read_text())
    if listens:
        config["near_caches"] = [f"127.0.0.1:{p}" for p in listens]
    r.config.write_text(json.dumps(config))
    r.start()
    return r


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    results = {}
    with tempfile.TemporaryDirectory() as tmp, Server.shoal() as pool, contextlib.ExitStack() as stack:
        tmp = Path(tmp)
        listens = [free_port(), free_port()]
        (tmp / "plain").mkdir()
        (tmp / "near").mkdir()
        plain = router_with(tmp / "plain", pool, [])
        listing = router_with(tmp / "near", pool, listens)
        stack.callback(plain.kill)
        stack.callback(listing.kill)
        nears = [stack.enter_context(near(listing, p)) for p in listens]
        for r in range(rounds):
            keys = [b"k%d.%d" % (r, i) for i in range(N)]
            deletes = b"".join(b"delete %s\r\n" % k for k in keys)
            # 1. A near cache's own port (forwarded) against its listener.
            drained(listing)
            fill(pool, nears[:1], keys)
            results.setdefault("near cache port, forwarded", []).append(pipelined(nears[0].address, deletes, N))
            drained(listing)
            fill(pool, nears[:1], keys)
            listener = ("127.0.0.1", listens[0])
            results.setdefault("invalidation listener", []).append(pipelined(listener, deletes, N))
            # 2. Through a router without near caches, and with two listed.
            fill(pool, [], keys)
            results.setdefault("router, no near caches", []).append(pipelined(("127.0.0.1", plain.port), deletes, N))
            drained(listing)
            fill(pool, nears, keys)
            assert all(held(n) >= N for n in nears)
            start = time.perf_counter()
            client = pipelined(("127.0.0.1", listing.port), deletes, N)
            results.setdefault("router, two near caches listed", []).append(client)
            while any(held(n) > 0 for n in nears):
                time.sleep(0.001)
            results.setdefault("  ... until both near caches dropped all", []).append(time.perf_counter() - start)
    for name, seconds in results.items():
        print(f"{name:45s} {statistics.median(seconds) * 1000:8.1f} ms  (median of {rounds}; "
              f"{', '.join(f'{s * 1000:.1f}' for s in seconds)})")


if __name__ == "__main__":
    main()
