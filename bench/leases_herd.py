#!/usr/bin/env python3
"""Leases against the thundering herd (issue #6): a look-aside cache whose hot key is
invalidated while many readers hammer it, with and without leases.

Readers (threads, spread over several processes) read one hot key, then one of 1000 cold keys
that nothing invalidates, then pause (`--think-ms` on average). A miss is filled from a "database" that takes
`--fill-ms` (default 50 ms) per query; every query is counted and time-stamped. Every
`--period` seconds an invalidator deletes the hot key.

- without leases, the classic look-aside loop: `get`; on a miss query the database and `set`;
- with leases: `lease-get`; on a hit done; with a token query the database and `lease-set`;
  on a hot miss wait (`--wait-ms`, default 10 ms) and ask again.

Reported per mode: database queries per invalidation and at peak (most queries in any one
second), and read latency (median and 99th percentile) of hot and cold reads, measured as the
readers see them (for a hot read, until it has a value, fills and waits included). Then the
cost of `lease-get` over `get` for an uncontended hit, on one connection, alternating batches
of each so that drift of the machine falls on both.

    python3 bench/leases_herd.py [--readers 200] [--processes 4] [--invalidations 10] ...

The server is `target/release/shoal` (build it first), started on a free port pinned to CPU 0
when `taskset` exists; readers run on the other CPUs. tests/server/test_leases.py imports
`Conn` and `herd` from this file.
"""

import argparse
import json
import multiprocessing
import os
import random
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from harness import Server  # noqa: E402

HOT = b"herd:hot"
COLD_KEYS = 1000
HOT_MISS = 1


class Conn:
    """One connection speaking the text protocol and its lease commands, on raw sockets."""

    def __init__(self, address, timeout=10.0):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill(len(self.buf) + 1)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def block(self, n) -> bytes:
        self._fill(n + 2)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def call(self, request: bytes) -> bytes:
        """Sends a request, returns the first line of its answer."""
        self.sock.sendall(request)
        return self.line()

    def get(self, key):
        """The value, or None on a miss."""
        self.sock.sendall(b"get " + key + b"\r\n")
        value = None
        while (line := self.line()) != b"END":
            value = self.block(int(line.split()[3]))
        return value

    def set(self, key, value, flags=0, exptime=0) -> bytes:
        return self.call(b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exptime, len(value), value))

    def lease_get(self, key, stale=False):
        """("hit", flags, value), ("token", token, flags, value) or ("hot", flags, value)."""
        self.sock.sendall(b"lease-get " + key + (b" stale" if stale else b"") + b"\r\n")
        head = self.line().split()
        if head[0] == b"VALUE":
            answer = ("hit", int(head[2]), self.block(int(head[3])))
        elif head[0] == b"LVALUE":
            token, flags, data = int(head[2]), int(head[3]), self.block(int(head[4]))
            answer = ("hot", flags, data) if token == HOT_MISS else ("token", token, flags, data)
        else:
            raise ValueError(f"lease-get answered {head!r}")
        assert self.line() == b"END"
        return answer

    def lease_set(self, key, token, value, flags=0, exptime=0) -> bytes:
        return self.call(b"lease-set %s %d %d %d %d\r\n%s\r\n" % (key, token, flags, exptime, len(value), value))


def read_with_leases(conn, key, fill, wait):
    """The look-aside read with leases: a value, filling it at most once per token."""
    while True:
        answer = conn.lease_get(key)
        if answer[0] == "hit":
            return answer[2]
        if answer[0] == "token":
            value = fill(key)
            conn.lease_set(key, answer[1], value)
            return value
        time.sleep(wait)


def read_plain(conn, key, fill, _wait):
    """The classic look-aside read: get, and on a miss query the database and set."""
    value = conn.get(key)
    if value is None:
        value = fill(key)
        conn.set(key, value)
    return value


def reader_process(address, threads, mode, fill_s, wait_s, think_s, stop_at, results):
    """`threads` readers until `stop_at` (time.time()); puts (fill times, hot, cold latencies)."""
    read = read_with_leases if mode == "leases" else read_plain
    fills, hot, cold = [], [], []
    lock = threading.Lock()

    def fill(key):
        time.sleep(fill_s)
        with lock:
            fills.append(time.time())
        return b"value of " + key

    def run(seed):
        rng = random.Random(seed)
        conn = Conn(address)
        mine_hot, mine_cold = [], []
        while time.time() < stop_at:
            t = time.perf_counter()
            read(conn, HOT, fill, wait_s)
            mine_hot.append(time.perf_counter() - t)
            key = b"herd:cold:%d" % rng.randrange(COLD_KEYS)
            t = time.perf_counter()
            read(conn, key, fill, wait_s)
            mine_cold.append(time.perf_counter() - t)
            time.sleep(rng.uniform(0, 2 * think_s))
        conn.close()
        with lock:
            hot.extend(mine_hot)
            cold.extend(mine_cold)

    workers = [threading.Thread(target=run, args=(os.getpid() * 1000 + i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    results.put((fills, hot, cold))


def herd(address, mode, readers=200, processes=4, invalidations=10, period=1.0, fill_ms=50, wait_ms=10,
         think_ms=10):
    """Runs the herd once against a server; returns its figures (see the module doc)."""
    conn = Conn(address)
    for i in range(COLD_KEYS):
        conn.set(b"herd:cold:%d" % i, b"value of herd:cold:%d" % i)
    conn.call(b"delete " + HOT + b"\r\n")
    start = time.time() + 0.5
    stop_at = start + invalidations * period + period / 2
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    shares = [readers // processes + (i < readers % processes) for i in range(processes)]
    procs = [ctx.Process(target=reader_process,
                         args=(address, n, mode, fill_ms / 1000, wait_ms / 1000, think_ms / 1000, stop_at,
                               results))
             for n in shares if n]
    for p in procs:
        p.start()
    for i in range(invalidations):
        time.sleep(max(0.0, start + (i + 1) * period - time.time()))
        conn.call(b"delete " + HOT + b"\r\n")
    fills, hot, cold = [], [], []
    for _ in procs:
        f, h, c = results.get()
        fills += f
        hot += h
        cold += c
    for p in procs:
        p.join()
    conn.close()
    hot_fills = [t for t in fills if t >= start]
    per_second = {}
    for t in hot_fills:
        per_second[int(t - start)] = per_second.get(int(t - start), 0) + 1
    return {
        "mode": mode,
        "readers": readers,
        "invalidations": invalidations,
        "queries": len(hot_fills),
        "queries_per_invalidation": len(hot_fills) / invalidations,
        "peak_queries_per_second": max(per_second.values(), default=0),
        "hot_reads": len(hot),
        "hot_p50_ms": percentile(hot, 50) * 1000,
        "hot_p99_ms": percentile(hot, 99) * 1000,
        "cold_reads": len(cold),
        "cold_p50_ms": percentile(cold, 50) * 1000,
        "cold_p99_ms": percentile(cold, 99) * 1000,
    }


def median_figures(runs):
    """Each figure's median over several runs of one mode (one of the runs' values)."""
    return {k: percentile([r[k] for r in runs], 50) if k != "mode" else v for k, v in runs[0].items()}


def percentile(samples, p):
    if not samples:
        return 0.0
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def uncontended(address, rounds=20, batch=2000):
    """Median round trip of `get` and of `lease-get` on a hit, in alternating batches (µs)."""
    conn = Conn(address)
    conn.set(b"herd:quiet", b"x" * 100)
    samples = {"get": [], "lease-get": []}
    requests = {"get": b"get herd:quiet\r\n", "lease-get": b"lease-get herd:quiet\r\n"}
    for _ in range(rounds):
        for name, request in requests.items():
            for _ in range(batch):
                t = time.perf_counter()
                conn.sock.sendall(request)
                conn.line()
                conn.block(100)
                conn.line()
                samples[name].append(time.perf_counter() - t)
    conn.close()
    return {name: percentile(s, 50) * 1e6 for name, s in samples.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--readers", type=int, default=200)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--invalidations", type=int, default=10)
    ap.add_argument("--period", type=float, default=1.0, help="seconds between invalidations")
    ap.add_argument("--fill-ms", type=float, default=50)
    ap.add_argument("--wait-ms", type=float, default=10, help="wait after a hot miss")
    ap.add_argument("--think-ms", type=float, default=10,
                    help="mean pause of a reader between two rounds (uniform, 0 to twice this)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="runs of each mode, alternating which goes first; figures are medians")
    ap.add_argument("--server-cpu", default="0")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    pin = ["taskset", "-c", args.server_cpu] if shutil.which("taskset") else []
    server = Server.shoal("-t", "1")
    server.argv = pin + server.argv
    runs = {"plain": [], "leases": []}
    with server:
        quiet = uncontended(server.address)
        for r in range(args.rounds):
            for mode in ("plain", "leases") if r % 2 == 0 else ("leases", "plain"):
                runs[mode].append(herd(server.address, mode, args.readers, args.processes, args.invalidations,
                                       args.period, args.fill_ms, args.wait_ms, args.think_ms))
    if args.json:
        print(json.dumps({"herd": runs, "uncontended_us": quiet}, indent=2))
        return
    plain, leases = (median_figures(runs[mode]) for mode in ("plain", "leases"))
    print(f"{args.readers} readers in {args.processes} processes, {args.invalidations} invalidations "
          f"every {args.period} s, fill {args.fill_ms} ms, hot-miss wait {args.wait_ms} ms, "
          f"think time {args.think_ms} ms; medians of {args.rounds} runs per mode\n")
    print("| | without leases | with leases | without ÷ with |")
    print("|---|---:|---:|---:|")
    rows = [("database queries per invalidation", "queries_per_invalidation", "{:.1f}"),
            ("database queries per second at peak", "peak_queries_per_second", "{:d}"),
            ("hot-key reads", "hot_reads", "{:d}"),
            ("hot-key read latency p50 (ms)", "hot_p50_ms", "{:.2f}"),
            ("hot-key read latency p99 (ms)", "hot_p99_ms", "{:.2f}"),
            ("cold-key reads", "cold_reads", "{:d}"),
            ("cold-key read latency p50 (ms)", "cold_p50_ms", "{:.2f}"),
            ("cold-key read latency p99 (ms)", "cold_p99_ms", "{:.2f}")]
    for title, field, fmt in rows:
        a, b = plain[field], leases[field]
        ratio = f"{a / b:.1f}×" if b else "–"
        print(f"| {title} | {fmt.format(a)} | {fmt.format(b)} | {ratio} |")
    g, lg = quiet["get"], quiet["lease-get"]
    print(f"\nuncontended hit, one connection, median round trip: get {g:.1f} µs, "
          f"lease-get {lg:.1f} µs ({(lg / g - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    main()
