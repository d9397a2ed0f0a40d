#!/usr/bin/env python3
"""Proteus's Fig. 9 from a bench/proteus.sh run: prints the table (markdown) and draws the
database's read rate, the p99.9 read latency and the servers on over time, for every variant.

    bench/proteus-plot.py target/bench/proteus-<time>/ docs/proteus.png <servers in the pool> <drain seconds>

A transition's window is its drain period, from the provisioner's log; the comparison window
is the same length right after it, at the same load level (bench/proteus.sh makes each level
twice the drain period long). Request balance, when the run recorded each server's `cmd_get`
(`<variant>.servers.txt`, bench/proteus-servers.py): the busiest of the servers on ÷ their mean,
over each window after a transition (steady) and each transition's drain (the servers on after
it; the one turned off is left out).
"""

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

VARIANTS = [
    ("modulo", "#d62728"),
    ("ketama", "#ff7f0e"),
    ("proteus", "#1f77b4"),
    ("proteus-digests", "#2ca02c"),
    ("proteus-pool", "#8c564b"),
    ("proteus-hot", "#9467bd"),
]


def load(run, variant):
    ycsb = json.loads((run / f"{variant}.ycsb.json").read_text())
    events = [json.loads(line) for line in (run / f"{variant}.provision.jsonl").read_text().splitlines() if line]
    start = next(e["time"] for e in events if e["event"] == "start")
    return ycsb, events, start


def servers_on(events, start, seconds):
    """Servers running each second: the active count, and during a transition the larger of
    the counts before and after (a server turned off runs until its drain ends)."""
    on, current, draining_from, i = [], 0, None, 0
    events = sorted(events, key=lambda e: e["time"])
    for second in range(seconds):
        while i < len(events) and events[i]["time"] - start < second + 1:
            current = events[i]["active"]
            draining_from = events[i]["from"] if events[i]["event"] == "transition-start" else None
            i += 1
        on.append(max(current, draining_from or 0))
    return on


def windows(events, start, drain):
    """(transition seconds, the same number of seconds right after) for each transition."""
    out = []
    for e in events:
        if e["event"] == "transition-start":
            t = int(round(e["time"] - start))
            out.append((range(t, t + drain), range(t + drain, t + 2 * drain)))
    return out


def load_gets(run, variant):
    """Each server's (unix time, cmd_get) samples, or None when the run did not record them."""
    path = run / f"{variant}.servers.txt"
    if not path.exists():
        return None
    samples = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) in (3, 4):  # time, server, cmd_get (and get_hits, since issue 28)
            samples.setdefault(int(parts[1]), []).append((float(parts[0]), int(parts[2])))
    return samples


def gets_between(samples, a, b):
    """A server's gets from unix time a to b (its last samples at or before each), or None."""
    before = [v for t, v in samples if t <= a]
    until = [v for t, v in samples if t <= b]
    if not before or not until or until[-1] < before[-1]:
        return None  # not running at a, or restarted in between
    return until[-1] - before[-1]


def balance(gets, events, start, drain):
    """(max/mean of the servers on after each transition, over the window after it; the same
    over each transition's drain)."""
    steady, moving = [], []
    for e in events:
        if e["event"] != "transition-start":
            continue
        t = e["time"]
        for (a, b), out in (((t + drain, t + 2 * drain), steady), ((t, t + drain), moving)):
            counts = [gets_between(gets.get(i, []), a, b) for i in range(e["active"])]
            if all(c is not None for c in counts) and sum(counts) > 0:
                out.append(max(counts) / mean(counts))
    return steady, moving


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def main():
    if len(sys.argv) != 5:
        sys.exit(f"usage: {sys.argv[0]} <proteus.sh report directory> <output.png> <servers> <drain seconds>")
    run, output, pool, drain = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    fig, (reads_ax, p999_ax, on_ax) = plt.subplots(3, 1, figsize=(11, 9), dpi=110, sharex=True)
    print("| placement | hit rate | transitions | DB reads/s in a transition ÷ after it (median, max) "
          "| p99.9 read ms: transitions (max) / steady (median) | server-seconds ÷ always-on "
          "| busiest server ÷ mean: steady (median, max) / transitions (max) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for variant, color in VARIANTS:
        if not (run / f"{variant}.ycsb.json").exists():
            continue
        ycsb, events, start = load(run, variant)
        reads = ycsb["datastore_reads_per_second"]
        p999 = [v / 1000 for v in ycsb["read_p999_us_per_second"]]
        seconds = len(p999)
        on = servers_on(events, start, seconds)
        ratios, spikes, inside = [], [], set()
        for during, after in windows(events, start, drain):
            d = [reads[s] for s in during if s < len(reads)]
            a = [reads[s] for s in after if s < len(reads)]
            if d and a and mean(a) > 0:
                ratios.append(mean(d) / mean(a))
            spikes.extend(p999[s] for s in during if s < seconds)
            inside.update(during)
        steady = [p999[s] for s in range(seconds) if s not in inside]
        ratio = f"{statistics.median(ratios):.2f}, {max(ratios):.2f}" if ratios else "—"
        spike = f"{max(spikes):.1f} / {statistics.median(steady):.1f}" if spikes and steady else "—"
        energy = sum(on) / (pool * seconds) if seconds else float("nan")
        transitions = sum(1 for e in events if e["event"] == "transition-start")
        gets = load_gets(run, variant)
        spread = "—"
        if gets is not None:
            steady_balance, moving_balance = balance(gets, events, start, drain)
            if steady_balance and moving_balance:
                spread = (f"{statistics.median(steady_balance):.3f}, {max(steady_balance):.3f} / "
                          f"{max(moving_balance):.3f}")
        print(f"| {variant} | {ycsb['hit_rate']:.3f} | {transitions} | {ratio} | {spike} | {energy:.2f} "
              f"| {spread} |")
        reads_ax.plot(range(len(reads)), reads, label=variant, color=color, linewidth=1)
        p999_ax.plot(range(seconds), p999, label=variant, color=color, linewidth=1)
        on_ax.step(range(seconds), on, where="post", label=variant, color=color, linewidth=1)
    reads_ax.set_ylabel("database reads/s")
    p999_ax.set_ylabel("p99.9 read (ms)")
    p999_ax.set_yscale("log")
    on_ax.set_ylabel("servers running")
    on_ax.set_xlabel("seconds")
    reads_ax.legend(loc="upper left")
    reads_ax.set_title("A day compressed: servers turned on and off by shoal provision (Proteus Fig. 9)")
    fig.tight_layout()
    fig.savefig(output)
    print(f"\nPlot: `{output}`.", file=sys.stderr)


if __name__ == "__main__":
    main()
