#!/usr/bin/env python3
"""Issue #29's local multiget row: a 100-key `get_many` from Python through the shared memory of
a pool of Shoal servers on this host, against CPython's own cost of building the same result (a
dict of 100 `bytes` keyed by the same key objects, each value copied out of one buffer).

    bench/local-get-many.py --servers 127.0.0.1:11211,127.0.0.1:11212,... [--json]

The rows take turns (ROUNDS rounds, every row REQUESTS/ROUNDS closed-loop calls in each), so a
busier stretch of the machine weighs on every row alike; each row's figure is the median of its
per-round medians, and the ratio is taken round by round too (median of the rounds' ratios).
bench/local-get-many.sh starts the servers and pins everything.
"""

import argparse
import json
import statistics
import sys
import time

import shoal

ROUNDS = 15


def python_baseline(keys, size):
    """CPython building a dict of len(keys) fresh `bytes` of `size` bytes, copied out of one
    buffer (what a client that had the values back to back would do, at the least)."""
    buf = bytes(range(256)) * (len(keys) * size // 256 + 1)
    slices = [slice(i * size, (i + 1) * size) for i in range(len(keys))]
    get = buf.__getitem__

    def build(keys):
        return dict(zip(keys, map(get, slices)))

    return build


def measure(rows, keys, requests, rounds=ROUNDS):
    """Per row, the median call time (ns) of each round."""
    medians = [[] for _ in rows]
    clock = time.perf_counter_ns
    per_round = max(1, requests // rounds)
    for _ in range(rounds):
        for (_, call), out in zip(rows, medians):
            timed = []
            for _ in range(per_round):
                start = clock()
                found = call(keys)
                timed.append(clock() - start)
                if len(found) != len(keys):
                    sys.exit(f"{len(keys) - len(found)} of {len(keys)} keys set a moment ago were missing")
            out.append(statistics.median(timed))
    return medians


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", required=True, help="host:port,host:port,... (shoal servers on this host)")
    parser.add_argument("--keys", type=int, default=100, help="keys per get_many")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--requests", type=int, default=30000, help="timed calls per row")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    servers = args.servers.split(",")
    keys = [f"bench:pool:{i}" for i in range(args.keys)]
    value = b"v" * args.size
    values = [value] * len(keys)
    rows = [
        ("CPython: dict of bytes (the reference)", python_baseline(keys, args.size)),
        # The dict alone: what is left of the reference when no `bytes` is made.
        ("CPython: dict of existing bytes (no bytes made)", lambda keys: dict(zip(keys, values))),
    ]
    for hashing in ("jump", "ketama_weighted"):
        client = shoal.Client(servers=servers, hashing=hashing)
        client.set_many({k: value for k in keys})
        if client.get_many(keys) != {k: value for k in keys}:
            sys.exit("the values read back are not the ones set")
        if len(client.local_servers()) != len(servers):
            sys.exit("not every server offers shared memory to this process: run the shoal servers on this host")
        rows.append((f"shoal get_many, shared memory ({hashing})", client.get_many))
    for _, call in rows:
        for _ in range(200):
            call(keys)
    medians = measure(rows, keys, args.requests)
    reference = medians[0]
    result = []
    for (name, _), per_round in zip(rows, medians):
        ratios = [m / r for m, r in zip(per_round, reference)]
        result.append({
            "row": name,
            "median_us": statistics.median(per_round) / 1e3,
            "rounds_us": [m / 1e3 for m in per_round],
            "ratio": statistics.median(ratios),
            "ratio_range": [min(ratios), max(ratios)],
        })
    if args.json:
        json.dump({"servers": len(servers), "keys": args.keys, "size": args.size, "rows": result}, sys.stdout,
                  indent=1)
        return
    print("| row | median µs | ÷ CPython (median of rounds) | rounds' range |")
    print("|---|---:|---:|---|")
    for r in result:
        lo, hi = r["ratio_range"]
        print(f"| {r['row']} | {r['median_us']:.2f} | {r['ratio']:.2f} | {lo:.2f}–{hi:.2f} |")


if __name__ == "__main__":
    main()
