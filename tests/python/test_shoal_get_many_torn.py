"""A local multiget builds each value's `bytes` straight from the region (issue #29): a value
that writers in other processes change while a batch reads it comes back whole, old or new,
never a mix. Two writer processes keep rewriting the same keys (every byte of a value the same,
its length a function of that byte) and churning a small region so that its segments are reused
under the readers; this process reads the keys with `get_many`, `gets_many` and
`get_many_flagged` through shared memory and checks every value it gets."""

import select
import subprocess
import sys
import time

import shoal
from harness import Server

# A guard against a hang only (a writer's round takes well under a second when the machine is
# idle): the test is bounded by its rounds, not timed.
HANG = 300.0

KEYS = [f"torn:{i}" for i in range(100)]

WRITER = r"""
import random, sys, shoal
address, seed = sys.argv[1], int(sys.argv[2])
keys = [f"torn:{i}" for i in range(100)]
rng = random.Random(seed)
client = shoal.Client(address, local=False, timeout=30.0)
filler = b"f" * 3000
n = 0
while sys.stdin.readline():  # a line per round from the test; end of input stops the writer
    for _ in range(20):
        byte = rng.randrange(1, 256)
        value = bytes([byte]) * (16 + byte * 37 % 600)
        client.set_many({k: value for k in rng.sample(keys, 30)}, flags=byte)
        # Churn: fresh items push the small region to reuse segments that old values sat in.
        client.set_many({f"churn:{seed}:{n + j}": filler for j in range(20)})
        n += 20
    print("round", flush=True)
"""


def whole(value):
    """Whether `value` is one the writers wrote: every byte the same, its length set by it."""
    return len(value) > 0 and len(value) == 16 + value[0] * 37 % 600 and value == bytes([value[0]]) * len(value)


def test_values_changing_under_a_local_multiget_come_back_whole():
    with Server.shoal(memory_mb=4) as server:
        address = f"127.0.0.1:{server.port}"
        reader = shoal.Client(servers=[address], hashing="jump")
        first = bytes([1]) * (16 + 37)
        reader.set_many({k: first for k in KEYS}, flags=1)
        assert reader.get_many(KEYS) == {k: first for k in KEYS}
        assert reader.local_servers() == [address], "the reads under test are the shared-memory ones"
        writers = [
            subprocess.Popen([sys.executable, "-c", WRITER, address, str(seed)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
            for seed in (1, 2)
        ]
        seen = {k: {first} for k in KEYS}
        batches = 0
        deadline = time.monotonic() + HANG
        try:
            # Rounds of writes, each answered before the next: a bounded amount of racing, with
            # the reader's batches running while every round is under way.
            for _ in range(100):
                for w in writers:
                    w.stdin.write("go\n")
                    w.stdin.flush()
                done = [False] * len(writers)
                while not all(done):
                    batches += 1
                    kind = batches % 3
                    if kind == 0:
                        got = reader.get_many(KEYS)
                    elif kind == 1:
                        got = {k: v for k, (v, _cas) in reader.gets_many(KEYS).items()}
                    else:
                        flagged = reader.get_many_flagged(KEYS)
                        for k, (v, flags) in flagged.items():
                            assert flags == v[0], f"{k}: flags {flags} with a value of byte {v[0]}"
                        got = {k: v for k, (v, _flags) in flagged.items()}
                    for k, v in got.items():
                        assert whole(v), f"{k}: a torn or foreign value of {len(v)} bytes: {v[:40]!r}…"
                        seen[k].add(v)
                    for i, w in enumerate(writers):
                        if not done[i] and select.select([w.stdout], [], [], 0)[0]:
                            assert w.stdout.readline() == "round\n", f"writer {i} stopped: {w.wait()}"
                            done[i] = True
                    assert time.monotonic() < deadline, "the writers hung"
        finally:
            for w in writers:
                w.stdin.close()
            for w in writers:
                w.wait(timeout=60)
        assert all(w.returncode == 0 for w in writers)
        changed = sum(len(values) > 1 for values in seen.values())
        assert changed > len(KEYS) // 2, f"only {changed} keys were seen changing: the test raced nothing"
        assert reader.is_local(), "the reads stayed local throughout"
        print(f"{batches} batches; {changed} keys seen changing")
