#!/usr/bin/env python3
"""What Gutter can absorb, by a renewal model: the share of a killed server's reads that miss in
Gutter (and go to the database) for a look-aside workload with Zipfian keys, a Gutter TTL, and
updates that delete the cached copy (bench/gutter.sh's YCSB read-heavy).

A key read at rate r (Poisson) and updated at rate u is filled on a miss and then kept until its
TTL T runs out or an update deletes it, whichever comes first: the copy lives
L = (1 - exp(-u T)) / u on average, serves r L hits, and the next read misses again. So the key's
reads miss with probability 1 / (1 + r L), and the killed server's reads miss in Gutter with the
read-weighted mean of that over its keys (a quarter of them, placed at random: the mean over all
keys). Without updates and a long TTL the share goes to 0; with updates at 5 % of operations even
the hottest key misses 1 in 20.

    bench/gutter-model.py [--records N] [--skew S] [--ops-per-second R] [--read-share F] [--ttl T] [--share]

Prints a markdown table of the share at these settings, at longer TTLs and at 10× and 100× the
rate; `--share` prints only the share at these settings, in percent (for bench/gutter.sh).
"""

import argparse
import math


def gutter_miss_share(records, skew, reads_per_second, updates_per_second, ttl):
    weights = [1 / (k + 1) ** skew for k in range(records)]
    total = sum(weights)
    share = 0.0
    for w in weights:
        p = w / total
        reads, updates = reads_per_second * p, updates_per_second * p
        lifetime = ttl if updates == 0 else (1 - math.exp(-updates * ttl)) / updates
        share += p / (1 + reads * lifetime)
    return share


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--skew", type=float, default=0.99, help="Zipf exponent (YCSB's 0.99)")
    parser.add_argument("--ops-per-second", type=float, default=1500, help="all clients together")
    parser.add_argument("--read-share", type=float, default=0.95, help="reads among operations (the rest update)")
    parser.add_argument("--ttl", type=float, default=10, help="Gutter's TTL (failover_exptime), seconds")
    parser.add_argument("--share", action="store_true", help="print only the share at these settings, in percent")
    args = parser.parse_args()
    if args.records < 1 or args.skew <= 0 or args.ops_per_second <= 0 or not 0 < args.read_share <= 1 or args.ttl <= 0:
        parser.error("records, skew, ops-per-second and ttl must be positive, read-share in (0, 1]")
    reads = args.ops_per_second * args.read_share
    updates = args.ops_per_second - reads
    if args.share:
        print(f"{gutter_miss_share(args.records, args.skew, reads, updates, args.ttl) * 100:.0f}")
        return
    print("| ops/s | TTL s | killed server's reads that miss in Gutter (model) |")
    print("|---:|---:|---:|")
    for scale in (1, 10, 100):
        for ttl in (args.ttl, args.ttl * 6, args.ttl * 60):
            if scale > 1 and ttl != args.ttl:
                continue
            share = gutter_miss_share(args.records, args.skew, reads * scale, updates * scale, ttl)
            print(f"| {args.ops_per_second * scale:.0f} | {ttl:.0f} | {share * 100:.0f} % |")


if __name__ == "__main__":
    main()
