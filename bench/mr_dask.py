#!/usr/bin/env python3
"""Word count over ~1 GiB on one host and on two simulated hosts through Dask, and what Dask
itself costs (docs/BENCHMARKS.md, "MapReduce on Dask").

    bench/mr_dask.py [--gib 1] [--rounds 3] [--dir /tmp/shoal-mr-dask-bench] [--skip-bag] [--json]

The text is `shoal mr generate wordcount` output (kept in --dir, generated once), cut at line
ends into two shards of half each. Every case runs once per round (--rounds, default 3), in
the order below; the figures are medians. Timed, wall clock from the caller:

- single host: `shoal mr run wordcount --threads 2` (the Rust app on the engine),
  `--mode rayon` (the same word count written directly with Rayon, no framework) and
  shoal.mr.run with shoal.mr.wordcount (Python map, batched) in two engine processes;
- two hosts (after a job over two one-line shards has warmed the workers): a LocalCluster on 127.0.0.1 of two worker processes, one thread each, each with a
  region directory of its own (shoal.mr.dask.RegionDirs); one shard per worker, each run by the
  engine in one process there; for the Rust app and for the Python functions. "Crossing" is the
  job's time beyond the slower shard's task (from Dask's task stream): shipping the task, the
  partial results' transfer, the merge, the rendering;
- plain Dask: the same Python map over the same shards with `dask.bag` (64 MiB blocks, the
  map on each block's lines joined, the dicts merged by a fold), unless --skip-bag;
- Dask's own costs: a round trip of one no-op task, and per task when 1000 are in flight; the
  tree reduce of 2 word-count partials (the merge task alone, and the whole reduce step).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOAL = os.environ.get("SHOAL_BIN", str(ROOT / "target" / "release" / "shoal"))
WORDCOUNT = {"map": "shoal.mr.wordcount:map", "combine": "shoal.mr.wordcount:combine"}


def timed(run):
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def inputs(directory, gib):
    """The generated text and its two shards (cut at a line end), made once."""
    directory.mkdir(parents=True, exist_ok=True)
    whole = directory / f"words-{gib}g.txt"
    shards = [directory / f"words-{gib}g.shard-{i}" for i in (0, 1)]
    if not all(p.exists() for p in [whole, *shards]):
        subprocess.run([SHOAL, "mr", "generate", "wordcount", whole, "--size", f"{int(gib * 1024)}M"], check=True,
                       stdout=subprocess.DEVNULL)
        size = whole.stat().st_size
        with whole.open("rb") as f:
            f.seek(size // 2)
            cut = size // 2 + len(f.readline())
            f.seek(0)
            for shard, length in zip(shards, (cut, size - cut)):
                with shard.open("wb") as out:
                    while length:
                        chunk = f.read(min(length, 16 << 20))
                        out.write(chunk)
                        length -= len(chunk)
    return whole, shards


def rust_single(whole, *extra):
    out = subprocess.run([SHOAL, "mr", "run", "wordcount", whole, "--json", "--threads", "2", *extra],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["result"]


def shard_seconds(stream):
    """The compute time of each shard task in a task stream."""
    return [sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
            for t in stream if t["key"].startswith("shoal-mr-shard-")]


def merge_seconds(stream):
    return [sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
            for t in stream if t["key"].startswith("_merge")]


def bag_word_count(client, shards):
    import dask.bag

    import shoal.mr.wordcount

    def count(lines):
        return [shoal.mr.wordcount.map("".join(lines).encode())]

    def merge(a, b):
        for key, value in b.items():
            a[key] = a.get(key, 0) + value
        return a

    bag = dask.bag.read_text([str(s) for s in shards], blocksize="64MiB")
    return bag.map_partitions(count).fold(merge, merge, initial={}).compute()


def noop(x):
    return x


def one_round(a, rows, client, whole, shards):
    """Every case once, each time appended to its row; returns the Python word count."""
    import distributed

    import shoal.mr
    import shoal.mr.dask

    def add(name, seconds):
        rows[name].append(seconds)

    seconds, rust = timed(lambda: rust_single(whole))
    add("rust engine, 1 host, 2 threads", seconds)
    add("rust rayon (no framework), 1 host, 2 threads", timed(lambda: rust_single(whole, "--mode", "rayon"))[0])
    seconds, python = timed(lambda: shoal.mr.run(whole, **WORDCOUNT, workers=2))
    add("python map on the engine, 1 host, 2 processes", seconds)
    assert python == dict(rust["words"]), "the Python word count differs from the Rust one"
    for name, job in [("rust app", {"app": "wordcount"}), ("python map", WORDCOUNT)]:
        with distributed.get_task_stream(client) as stream:
            seconds, result = timed(lambda: shoal.mr.dask.run(shards, client=client, **job))
        expected = rust if "app" in job else python
        assert result == expected, f"{name}: the two hosts' result differs from the single host's"
        slower = max(shard_seconds(stream.data))
        add(f"dask, 2 hosts, {name}", seconds)
        add(f"dask, 2 hosts, {name}: slower shard's task", slower)
        add(f"dask, 2 hosts, {name}: crossing (job - slower shard)", seconds - slower)
        add(f"dask, 2 hosts, {name}: merge task", sum(merge_seconds(stream.data)))
    if not a.skip_bag:
        seconds, bag = timed(lambda: bag_word_count(client, shards))
        add("plain dask.bag, 2 workers, python map", seconds)
        assert bag == python, "dask.bag's word count differs"
    timed(lambda: client.submit(noop, 0, pure=False).result())  # warm
    add("dask: one no-op task's round trip", timed(lambda: client.submit(noop, 0, pure=False).result())[0])
    add("dask: per task, 1000 no-op tasks in flight",
        timed(lambda: client.gather(client.map(noop, range(1000), pure=False)))[0] / 1000)
    return python


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "shoal-mr-dask-bench")
    parser.add_argument("--rounds", type=int, default=3, help="every case this many times; medians")
    parser.add_argument("--skip-bag", action="store_true", help="leave out the plain dask.bag run")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    import distributed

    import shoal.mr.dask

    whole, shards = inputs(a.dir, a.gib)
    rows = defaultdict(list)
    regions = tempfile.mkdtemp(prefix="shoal-mr-dask-bench-", dir="/dev/shm")
    try:
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                      dashboard_address="127.0.0.1:0") as cluster, \
                distributed.Client(cluster) as client:
            client.register_plugin(shoal.mr.dask.RegionDirs(regions))
            # Warm: the workers import shoal and the job's functions before anything is timed.
            warm = [a.dir / f"warm-{i}.txt" for i in (0, 1)]
            for path in warm:
                path.write_text("warm up\n")
            for job in ({"app": "wordcount"}, WORDCOUNT):
                shoal.mr.dask.run(warm, client=client, **job)
            for _ in range(a.rounds):
                python = one_round(a, rows, client, whole, shards)
    finally:
        shutil.rmtree(regions, ignore_errors=True)
    rows = {name: statistics.median(values) for name, values in rows.items()}
    rows["input bytes"] = whole.stat().st_size
    rows["distinct words"] = len(python)
    if a.json:
        print(json.dumps(rows, indent=2))
    else:
        for name, value in rows.items():
            print(f"{name:60} {value:12.4f}" if isinstance(value, float) else f"{name:60} {value:12}")


if __name__ == "__main__":
    sys.exit(main())
