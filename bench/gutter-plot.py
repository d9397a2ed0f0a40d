#!/usr/bin/env python3
"""Draws the database's read rate over time of a bench/gutter.sh run, with and without a Gutter
pool, with the outage shaded (Scaling Memcache's Gutter figure).

    bench/gutter-plot.py target/bench/gutter-<time>/ docs/gutter.png <kill at> <kill seconds>
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 5:
        sys.exit(f"usage: {sys.argv[0]} <gutter.sh report directory> <output.png> <kill at> <kill seconds>")
    reports, output = Path(sys.argv[1]), Path(sys.argv[2])
    kill_at, kill_secs = float(sys.argv[3]), float(sys.argv[4])
    fig, ax = plt.subplots(figsize=(10, 4), dpi=120)
    for run, color in [("with-gutter", "#2ca02c"), ("without-gutter", "#d62728")]:
        timeline = json.loads((reports / f"{run}.ycsb.json").read_text())["datastore_reads_per_second"]
        ax.plot(range(len(timeline)), timeline, label=run.replace("-", " "), color=color)
    ax.axvspan(kill_at, kill_at + kill_secs, color="#cccccc", alpha=0.4, label="one of 4 servers down")
    ax.set_xlabel("seconds")
    ax.set_ylabel("database reads per second")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left")
    ax.set_title("Look-aside reads through shoal router: a server killed, with and without Gutter")
    fig.tight_layout()
    fig.savefig(output)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
