#!/usr/bin/env python3
"""Where a long run's stale reads come from (issue #26; docs/design/faults.md, "What it found"):
each inconsistent read of a verdict (bench/faults/run.py --json) classified by the fault last
begun before it (its kind, what, and the hosts it was on), the reader (region, host, source:
`h` a router hit, `d` a database fill, `l` a local hit through shared memory, `n` a network hit
of the host's own server), and how long after the fault's end the read started and the stale
copy was gone (the first later read of the key by the same kind of reader in the same place
that returned at least the expected version, or missed).

    bench/faults/breakdown.py verdict.json --ops <run.py's --dir>/ops

Without --ops, "gone" is not computed. Prints a table per grouping and the lateness
quantiles; --json writes the rows.
"""

import argparse
import bisect
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import checker  # noqa: E402


def place(host, source, region):
    """Where a copy lives: a router read sees the region's servers, a local read its host's."""
    return (region, "router") if source in ("h", "d") else (region, host)


def gone_times(ops: Path, regions: dict, wanted):
    """For each (place, key) in `wanted`: its reads' (start, version) sorted, version -1 for a
    miss or a fill from the database (the cached copy was gone)."""
    _, reads = checker.parse(ops, regions)
    by = defaultdict(list)
    for region, host, key, start, version, source in reads:
        where = place(host, source, region)
        if (where, key) not in wanted or version is None:
            continue
        by[(where, key)].append((start, -1 if source in ("d", "m") else version))
    for v in by.values():
        v.sort()
    return by


def classify(verdict, ops=None, regions=None):
    faults = sorted(verdict.get("fault_log", []) + verdict.get("machine_stalls", []), key=lambda f: f["start"])
    starts = [f["start"] for f in faults]
    bad = [b for h in verdict["inconsistent_keys"].values() for b in h["bad_reads"]]
    acks = {(int(k), v): t for k, h in verdict["inconsistent_keys"].items() for v, t in h["writes"]}
    history = None
    if ops is not None:
        wanted = {(place(b["host"], b["source"], b["region"]), b["key"]) for b in bad}
        history = gone_times(ops, regions, wanted)
    rows = []
    for b in bad:
        i = bisect.bisect_right(starts, b["start"]) - 1
        f = faults[i] if i >= 0 else {"kind": "none", "what": "before any fault", "hosts": [], "end": 0.0}
        row = {"key": b["key"], "region": b["region"], "host": b["host"], "source": b["source"],
               "kind": f["kind"], "what": f["what"], "fault_hosts": f["hosts"],
               "on_reader_host": b["host"] in f["hosts"], "after_end": round(b["start"] - f["end"], 3),
               "write_before_end": round(f["end"] - acks.get((b["key"], b["expected_at_least"]), f["end"]), 3)}
        if history is not None:
            reads = history.get((place(b["host"], b["source"], b["region"]), b["key"]), [])
            j = bisect.bisect_right(reads, (b["start"], float("inf")))
            gone = next((t for t, v in reads[j:] if v < 0 or v >= b["expected_at_least"]), None)
            row["gone_after_end"] = None if gone is None else round(gone - f["end"], 3)
        rows.append(row)
    return rows


def quantiles(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return "-"
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return f"min {values[0]:.2f}  median {pick(0.5):.2f}  p90 {pick(0.9):.2f}  max {values[-1]:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("verdict")
    parser.add_argument("--ops", help="the run's operations (run.py's --dir, then ops)")
    parser.add_argument("--json", help="write every classified read here")
    args = parser.parse_args()
    verdict = json.loads(Path(args.verdict).read_text())
    regions = None
    if args.ops:
        hosts = {p.name.split("-", 1)[0] for p in Path(args.ops).glob("*.log")}
        regions = {h: "A" if h.startswith("a") else "B" for h in hosts}
    rows = classify(verdict, Path(args.ops) if args.ops else None, regions)
    print(f"{len(rows)} inconsistent reads in {verdict['writes']} writes "
          f"(bound {verdict['bound_seconds']} s; {verdict['inconsistent_per_million_writes']} per million)")
    groupings = {
        "fault (what)": lambda r: r["what"],
        "fault kind": lambda r: r["kind"],
        "reader (region, host, source)": lambda r: f"{r['region']} {r['host']} {r['source']}",
        "reader on the faulted host": lambda r: r["on_reader_host"],
        "fault kind x source": lambda r: f"{r['kind']} {r['source']}",
    }
    for title, key in groupings.items():
        print(f"\nby {title}:")
        for name, n in Counter(map(key, rows)).most_common(20):
            sel = [r for r in rows if key(r) == name]
            late = quantiles(r["after_end"] for r in sel)
            gone = quantiles(r.get("gone_after_end") for r in sel)
            written = quantiles(r["write_before_end"] for r in sel)
            print(f"  {n:6d}  {name}\n          read after the fault's end: {late}\n          copy gone after it: {gone}"
                  f"\n          expected write acknowledged before the fault's end: {written}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
