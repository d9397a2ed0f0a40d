#!/usr/bin/env python3
"""What a record costs crossing between shoal.mr's engine and Python, and Python word count
against the Rust one (docs/MAPREDUCE.md, "From Python").

    bench/mr_python.py [--mib 32] [--records 50000] [--json]

One process, one thread, so the figures are per core. Each case times a whole job over the
same generated text (maps get pieces of ~1 MiB of whole lines):

- `empty`: the map returns {} - reading, the job's machinery and one Python call per piece;
- `distinct`: each map call returns `--records` keys never returned before (so nothing is
  combined); minus `empty` and minus the time the same dicts take to build in plain Python, per
  record: a record's way from the map's dict through encoding, the engine (partition, reduce,
  merge) and back into the result dict;
- `colliding`: each call returns the same `--records` keys, so every record but the first of
  each key is combined into an earlier one by a call into Python; minus `empty`, the dicts'
  building and the result's records, per combined record (its encoding and the call); and
  the same with `shoal.mr.add`, which workers sum without calling Python.

Each job runs three times; the fastest counts.

Then word count (shoal.mr.wordcount) over the same text: Python in two worker processes against
`shoal mr run wordcount --threads 2` (the binary from $SHOAL_BIN or target/release/shoal).
"""

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECORDS = 50_000
calls = 0
_fresh = itertools.count()


def empty_map(piece):
    global calls
    calls += 1
    return {}


def distinct_map(piece):
    global calls
    calls += 1
    base = next(_fresh) * RECORDS
    return dict.fromkeys(range(base, base + RECORDS), 1)


def colliding_map(piece):
    global calls
    calls += 1
    return dict.fromkeys(range(RECORDS), 1)


def add(a, b):
    return a + b


def timed(run):
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def main():
    global RECORDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="input size in MiB")
    parser.add_argument("--records", type=int, default=RECORDS, help="records per map call")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import mr_python  # the module the job's functions are loaded from (not __main__)
    import shoal.mr

    mr_python.RECORDS = a.records
    rng = random.Random(7)
    words = [f"word{i}" for i in range(5000)] + ["The", "and", "of", "Shoal"]
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "text.txt"
        with path.open("w") as out:
            line_words = rng.choices(words, k=4096)
            while out.tell() < a.mib << 20:
                rng.shuffle(line_words)
                out.writelines(" ".join(line_words[i:i + 12]) + "\n" for i in range(0, 4096, 12))
        one = {"workers": 1, "threads": 1}

        def job(map_name, combine="mr_python:add"):
            # The fastest of three: the machine may be busy.
            runs = []
            for _ in range(3):
                mr_python.calls = 0
                seconds, result = timed(lambda: shoal.mr.run(path, map=f"mr_python:{map_name}",
                                                             combine=combine, **one))
                runs.append((seconds, mr_python.calls, len(result)))
            return min(runs)

        empty, pieces, _ = job("empty_map")
        distinct, _, records = job("distinct_map")
        build, _ = timed(lambda: [dict.fromkeys(range(i * a.records, (i + 1) * a.records), 1)
                                  for i in range(pieces)])
        colliding, _, _ = job("colliding_map")
        native, _, _ = job("colliding_map", combine="shoal.mr:add")
        combines = pieces * a.records - a.records
        per_record = (distinct - empty - build) / records
        # The colliding job's own records: the same dicts, a.records of them in the result.
        colliding_base = empty + build + a.records * per_record
        per_combine_us = (colliding - colliding_base) / combines * 1e6
        per_native_us = (native - colliding_base) / combines * 1e6
        per_record_us = per_record * 1e6

        wordcount = {"map": "shoal.mr.wordcount:map", "combine": "shoal.mr.wordcount:combine"}
        python_wc, counts = timed(lambda: shoal.mr.run(path, **wordcount, workers=2, threads=1))
        shoal_bin = os.environ.get("SHOAL_BIN", str(Path(__file__).resolve().parents[1] / "target/release/shoal"))
        rust_wc, rust = timed(lambda: subprocess.run(
            [shoal_bin, "mr", "run", "wordcount", str(path), "--threads", "2", "--json"],
            capture_output=True, text=True, check=True))
        same = dict(json.loads(rust.stdout)["result"]["words"]) == counts

    report = {
        "input_mib": a.mib, "map_calls": pieces, "records_per_call": a.records,
        "map_call_us": empty / pieces * 1e6, "per_record_us": per_record_us, "per_combine_us": per_combine_us,
        "per_native_add_us": per_native_us,
        "wordcount_python_s": python_wc, "wordcount_rust_s": rust_wc, "wordcount_equal": same,
    }
    if a.json:
        print(json.dumps(report))
    else:
        print(f"input {a.mib} MiB, {pieces} map calls of {a.records} records, one thread")
        print(f"a map call (empty job / calls):        {report['map_call_us']:10.1f} us")
        print(f"a record through the engine:           {per_record_us:10.3f} us")
        print(f"a record combined, Python combine:     {per_combine_us:10.3f} us")
        print(f"a record combined, shoal.mr.add:       {per_native_us:10.3f} us")
        print(f"word count, Python (2 processes):      {python_wc:10.2f} s")
        print(f"word count, Rust (shoal mr, 2 threads): {rust_wc:9.2f} s  (results equal: {same})")


if __name__ == "__main__":
    main()
