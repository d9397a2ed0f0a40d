#!/usr/bin/env python3
"""A model of the pool's hot-key replicas at a steady active count (bench/proteus.sh's Fig. 9 run
with `--hot-replicas all`): which server's `cmd_get` the hot set's reads and refills land on.

    bench/proteus-hot-model.py [--servers 8] [--seconds 60] [--seeds 2]

Read-heavy YCSB (95 % reads, 5 % updates that delete the key, Zipf 0.99 over 100 000 keys), at
bench/proteus.sh's rate for n servers (300·n − 50 operations a second), three readers each
round-robin over a hot key's n replicas (R = all), copies kept 10 s, every server an LRU of
13 000 items (about a `-m 16` server's). Owners are drawn at random, the hottest key's on server
0 (as Proteus's ring puts it). Counts the gets each server answers over the second half, and
prints the busiest ÷ the mean for each refill and hot-set size:

    reader   a copy that misses is refilled by the reader that missed (one owner read per copy
             after each write of the key)
    writer   as reader, and a write that stored refills every copy once (one owner read)

Hot sets are the true top K (the servers' detection is left out): 64·n (the union of each
server's top 64, the most the pool held before hot_set_size) and shoal_route's ⌈5·n·ln n⌉.
"""

import argparse
import bisect
import math
import random
from collections import OrderedDict

KEYS = 100_000
SKEW = 0.99
WRITES = 0.05
TTL = 10.0
ITEMS = 13_000


def run(n, hot_keys, refill, seconds, seed):
    rnd = random.Random(seed)
    weights = [1 / (k + 1) ** SKEW for k in range(KEYS)]
    total = sum(weights)
    cdf, acc = [], 0.0
    for w in weights:
        acc += w / total
        cdf.append(acc)
    owner = [random.Random(k * 7919 + 13).randrange(n) for k in range(KEYS)]
    owner[0] = 0
    hot = set(range(hot_keys))
    caches = [OrderedDict() for _ in range(n)]  # key -> expiry (inf: the owner's item)
    gets, adds = [0] * n, [0] * n
    turn = [rnd.randrange(1 << 30) for _ in range(3)]

    def get(s, k, t):
        gets[s] += 1
        expiry = caches[s].get(k)
        if expiry is None:
            return False
        if expiry < t:
            del caches[s][k]
            return False
        caches[s].move_to_end(k)
        return True

    def store(s, k, expiry):
        caches[s][k] = expiry
        caches[s].move_to_end(k)
        while len(caches[s]) > ITEMS:
            caches[s].popitem(last=False)

    def add(s, k, t):
        adds[s] += 1
        expiry = caches[s].get(k)
        if expiry is None or expiry < t:
            store(s, k, t + TTL)

    def copies(k):
        return [(owner[k] + i) % n for i in range(1, n)]

    def fill(k, t):
        """The look-aside fill after a miss: set on the owner, copies deleted (and refilled)."""
        store(owner[k], k, math.inf)
        for c in copies(k):
            caches[c].pop(k, None)
        if refill == "writer":
            gets[owner[k]] += 1
            for c in copies(k):
                add(c, k, t)

    rate = 300 * n - 50
    operations = rate * seconds
    for i in range(operations):
        t = i / rate
        if i == operations // 2:
            gets, adds = [0] * n, [0] * n
        k = bisect.bisect_left(cdf, rnd.random())
        o = owner[k]
        if rnd.random() < WRITES:
            caches[o].pop(k, None)
            if k in hot:
                for c in copies(k):
                    caches[c].pop(k, None)
            continue
        if k in hot:
            reader = i % 3
            turn[reader] += 1
            r = (o + turn[reader] % n) % n
            if r != o:
                if get(r, k, t):
                    continue
                if get(o, k, t):
                    add(r, k, t)
                else:
                    fill(k, t)
                continue
        if not get(o, k, t):
            if k in hot:
                fill(k, t)
            else:
                store(o, k, math.inf)
    return max(gets) / (sum(gets) / n), gets.index(max(gets)), sum(gets), sum(adds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    o = parser.parse_args()
    n = o.servers
    sizes = [64 * n, math.ceil(5 * n * max(math.log(n), 1))]
    print("| refill | hot keys | busiest ÷ mean (per seed) | gets | copies added |")
    print("|---|---:|---|---:|---:|")
    for refill in ("reader", "writer"):
        for size in sizes:
            results = [run(n, size, refill, o.seconds, seed) for seed in range(1, o.seeds + 1)]
            ratios = ", ".join(f"{r[0]:.3f} (server {r[1]})" for r in results)
            print(f"| {refill} | {size} | {ratios} | {results[0][2]} | {results[0][3]} |", flush=True)


if __name__ == "__main__":
    main()
