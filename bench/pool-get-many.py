#!/usr/bin/env python3
"""A 100-key get_many spread over a pool of servers, from Python: `shoal.Client(servers=...)`
over TCP, pymemcache's HashClient, pylibmc (libmemcached), and `shoal.Client` reading every
server through its shared memory.

    bench/pool-get-many.py --servers 127.0.0.1:11211,127.0.0.1:11212,... [--json]

Each row sets KEYS keys of SIZE bytes through its own client (so each finds them where its
hashing puts them); then REQUESTS get_many calls of each are timed one after another (closed
loop), the rows taking turns, and p50 and p99 are printed in microseconds. bench/pool.sh starts the servers and pins everything.
"""

import argparse
import json
import sys
import time

import pylibmc
from pymemcache.client.hash import HashClient

import shoal

# Turns in which the rows are timed, each row a share of its calls in every turn.
ROUNDS = 20


def percentiles(samples):
    samples.sort()
    return samples[len(samples) // 2] / 1e3, samples[int(len(samples) * 0.99)] / 1e3


def prepare(client, keys, value):
    """Sets `keys` through `client` and warms it up; its get_many."""
    # pylibmc names them set_multi / get_multi.
    set_many = getattr(client, "set_many", None) or client.set_multi
    get_many = getattr(client, "get_many", None) or client.get_multi
    set_many({k: value for k in keys})
    for _ in range(50):
        get_many(keys)
    return get_many


def measure(get_manys, keys, requests, rounds=ROUNDS):
    """p50 and p99 of each get_many, timed in `rounds` turns (every client in each turn), so
    that a machine busier for a while weighs on every row alike, not on one."""
    samples = [[] for _ in get_manys]
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for get_many, timed in zip(get_manys, samples):
            for _ in range(max(1, requests // rounds)):
                start = clock()
                found = get_many(keys)
                timed.append(clock() - start)
                if len(found) != len(keys):
                    sys.exit(f"{len(keys) - len(found)} of {len(keys)} keys set a moment ago were missing")
    return [percentiles(timed) for timed in samples]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", required=True, help="host:port,host:port,... (shoal servers on this host)")
    parser.add_argument("--keys", type=int, default=100, help="keys per get_many")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--requests", type=int, default=5000, help="timed calls per row")
    parser.add_argument("--hashing", default="ketama_weighted", help="the shoal pool's hashing")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    servers = args.servers.split(",")
    pairs = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in servers)]
    keys = [f"bench:pool:{i}" for i in range(args.keys)]
    value = b"v" * args.size

    local = shoal.Client(servers=servers, hashing=args.hashing)
    local.set_many({k: value for k in keys})
    local.get_many(keys)
    if len(local.local_servers()) != len(servers):
        sys.exit("not every server offers shared memory to this process: run the shoal servers on this host")
    clients = [
        ("shoal (TCP)", shoal.Client(servers=servers, hashing=args.hashing, local=False)),
        ("pymemcache HashClient", HashClient(pairs, no_delay=True)),
        ("pylibmc (libmemcached, ketama_weighted)",
         pylibmc.Client(servers, behaviors={"ketama_weighted": True, "tcp_nodelay": True})),
        (f"shoal (shared memory, {args.hashing})", local),
    ]
    if args.hashing != "jump":
        # Placement costs a share of a local read: Shoal's own jump hash instead of md5 ketama.
        clients.append(("shoal (shared memory, jump)", shoal.Client(servers=servers, hashing="jump")))
    get_manys = [prepare(client, keys, value) for _, client in clients]
    timings = measure(get_manys, keys, args.requests)
    rows = [{"client": name, "p50_us": p50, "p99_us": p99} for (name, _), (p50, p99) in zip(clients, timings)]
    base = {r["client"]: r["p50_us"] for r in rows}
    if args.json:
        json.dump({"servers": len(servers), "keys": args.keys, "size": args.size, "rows": rows}, sys.stdout, indent=1)
        return
    print("| client | p50 µs | p99 µs | p50 ÷ pymemcache | p50 ÷ pylibmc |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['client']} | {r['p50_us']:.1f} | {r['p99_us']:.1f} | "
              f"{r['p50_us'] / base['pymemcache HashClient']:.3f} | "
              f"{r['p50_us'] / base['pylibmc (libmemcached, ketama_weighted)']:.3f} |")


if __name__ == "__main__":
    main()
