#!/usr/bin/env python3
"""Draws the ATRL breakdown of a bench/ycsb.sh run as stacked bars, like the Nahanni paper's
figure: one group per workload, one bar per cache, each bar split into datastore reads, cache
reads and cache writes (microseconds per read).

    bench/ycsb-plot.py target/bench/ycsb-<time>/ docs/ycsb-atrl.png
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

WORKLOADS = ["read-only", "read-heavy", "read-latest"]
CACHES = ["none", "memcached", "shoal-tcp", "shoal-shm"]
PARTS = [("datastore_read", "datastore read", "#8c8c8c"), ("cache_read", "cache read", "#1f77b4"),
         ("cache_write", "cache write", "#ff7f0e")]


def main():
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} <ycsb.sh report directory> <output.png>")
    reports, output = Path(sys.argv[1]), Path(sys.argv[2])
    fig, ax = plt.subplots(figsize=(10, 4.5), dpi=120)
    width, labels, positions, tallest = 0.2, [], [], 0.0
    for w, workload in enumerate(WORKLOADS):
        for c, cache in enumerate(CACHES):
            path = reports / f"{workload}-{cache}.json"
            if not path.exists():
                sys.exit(f"{path} is missing: run bench/ycsb.sh first")
            report = json.loads(path.read_text())
            x = w + (c - 1.5) * width
            bottom = 0.0
            for key, name, colour in PARTS:
                value = report["per_read_us"][key]
                ax.bar(x, value, width * 0.9, bottom=bottom, color=colour,
                       label=name if (w, c) == (0, 0) else None)
                bottom += value
            tallest = max(tallest, bottom)
            ax.text(x, bottom, report["cache"].replace(" ", "\n", 1), ha="center", va="bottom", fontsize=6)
        labels.append(workload)
        positions.append(w)
    ax.set_xticks(positions, labels)
    ax.set_ylabel("µs per read (ATRL)")
    ax.set_title("Average total read latency and its parts, PostgreSQL behind each cache")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylim(0, tallest * 1.15)  # room for the labels above the bars
    fig.tight_layout()
    fig.savefig(output)
    print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
