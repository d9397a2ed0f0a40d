#!/usr/bin/env python3
"""Latency of one read from Python: the `shoal` package through shared memory and over TCP to
Shoal, and over TCP to memcached (with the `shoal` package, and with pymemcache for reference).

    bench/client-latency.py --server 127.0.0.1:11211 --memcached 127.0.0.1:11212 [--json]

Each row times REQUESTS calls one after another (closed loop) with time.perf_counter_ns and
prints p50 and p99 in microseconds as a markdown table (or JSON). bench/client-latency.sh
starts the servers, pins them, and runs this beside `shoal bench latency`.
"""

import argparse
import json
import sys
import time

import shoal


def percentiles(samples):
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int(len(samples) * 0.99)] / 1e3


def measure(read, requests):
    for _ in range(requests // 10):
        read()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(requests):
        start = clock()
        found = read()
        samples.append(clock() - start)
        if not found:
            sys.exit("a key set a moment ago was missing")
    return percentiles(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:11211", help="the Shoal server (on this host)")
    parser.add_argument("--memcached", help="a memcached to compare with (host:port)")
    parser.add_argument("--sizes", default="100,1024,16384", help="value sizes in bytes, comma-separated")
    parser.add_argument("--requests", type=int, default=20000, help="timed calls per row")
    parser.add_argument("--multiget", type=int, default=10, help="keys per multiget")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()

    clients = [("shared memory", "shoal", shoal.Client(args.server)),
               ("shoal tcp", "shoal", shoal.Client(args.server, local=False))]
    if not clients[0][2].is_local():
        sys.exit(f"{args.server} offers no shared memory to this process: run `shoal server` on this host")
    if args.memcached:
        clients.append(("memcached tcp", "shoal", shoal.Client(args.memcached, local=False)))
        import pymemcache
        host, port = args.memcached.rsplit(":", 1)
        clients.append(("memcached tcp", "pymemcache", pymemcache.Client((host, int(port)), no_delay=True)))

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        keys = [f"latency:{size}:{i}" for i in range(args.multiget)]
        value = b"v" * size
        for path, library, client in clients:
            for key in keys:
                client.set(key, value)
            for operation, read in [
                ("get", lambda: client.get(keys[0]) is not None),
                (f"{args.multiget}-key multiget", lambda: len(client.get_many(keys)) == len(keys)),
            ]:
                p50, p99 = measure(read, args.requests)
                rows.append({"path": path, "library": library, "operation": operation, "size": size,
                             "p50_us": p50, "p99_us": p99})
                print(f"{path} ({library}) {operation} {size} B: p50 {p50:.2f} µs", file=sys.stderr)

    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
        return
    print("| path | client | operation | bytes | p50 µs | p99 µs |")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['path']} | {r['library']} | {r['operation']} | {r['size']} | {r['p50_us']:.2f} | {r['p99_us']:.2f} |")


if __name__ == "__main__":
    main()
