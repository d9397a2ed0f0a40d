#!/usr/bin/env python3
"""The overhead of elasticity (issue 18): each app run by `shoal mr run` in its three modes —
elastic (the framework as shipped), fixed (the original Phoenix: a fixed set of threads, no
leases or heartbeats) and rayon (the same computation written directly with Rayon, no
framework) — with the same threads, rounds interleaved, medians reported with their ratios.
Prints a markdown table (for docs/BENCHMARKS.md); raw timings go to target/bench/.

Called by bench/mr-overhead.sh, which builds the binary first. Environment:
  MR_SCALE (default 1: runs of a second or two; the run time grows about as MR_SCALE, so 14
  gives the issue's 10 s for word count and matrix multiply, and 64 — 32 GiB, more than this
  machine's memory, read from disk with COLD=1 — for histogram and linear regression),
  ROUNDS (3), THREADS (2),
  MR_APPS (the four apps), COLD (1: the page cache dropped before every run, so each one reads
  its input from disk; needs root — for inputs larger than memory, whose runs otherwise
  depend on what the run before left cached).
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

SHOAL = "target/release/shoal"
OUT = "target/bench"
# Input bytes at MR_SCALE=1, and the target for the elastic run against the others.
APPS = {
    "wordcount": (200 << 20, "within 1.5× of Rayon"),
    "histogram": (512 << 20, "≤ 5 % over Rayon and fixed"),
    "linreg": (512 << 20, "≤ 5 % over Rayon and fixed"),
    "matmul": (12 << 20, "≤ 5 % over Rayon and fixed"),
}
MODES = ["elastic", "fixed", "rayon"]


def say(*args):
    print(*args, file=sys.stderr, flush=True)


# `shoal mr generate` builds an input in memory, up to this size.
GENERATE_MAX = 16 << 30
# Apps whose input is fixed-size records, so pieces generated apart join into one valid input.
JOINABLE = {"histogram", "linreg"}


def generate(app, size):
    path = f"{OUT}/mr-input-{app}-{size}"
    meta = path + ".json"
    if not (os.path.exists(path) and os.path.exists(meta)):
        say(f"generating {path}")
        pieces = -(-size // GENERATE_MAX)
        if pieces > 1 and app not in JOINABLE:
            sys.exit(f"{app}: inputs over {GENERATE_MAX >> 30} GiB can be made only for {sorted(JOINABLE)}")
        # Over the generator's limit: pieces of whole 6-byte records from seeds 1, 2, …,
        # appended into one file (a larger input than the page cache holds is read from disk).
        piece = size if pieces == 1 else size // pieces // 6 * 6
        part = path if pieces == 1 else path + ".part"
        for seed in range(1, pieces + 1):
            out = subprocess.run([SHOAL, "mr", "generate", app, part, "--size", str(piece),
                                  "--seed", str(seed), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            if part != path:
                with open(part, "rb") as f, open(path, "ab" if seed > 1 else "wb") as whole:
                    shutil.copyfileobj(f, whole, 64 << 20)
                os.remove(part)
        info = json.loads(out)
        info.update(path=path, bytes=os.path.getsize(path))
        with open(meta, "w") as f:
            json.dump(info, f)
    with open(meta) as f:
        return path, json.load(f)


def drop_page_cache():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError as e:
        sys.exit(f"COLD=1 drops the page cache before each run, which needs root: {e}")


def run(app, path, args, mode, threads, cold=False):
    if cold:
        drop_page_cache()
    cmd = [SHOAL, "mr", "run", app, path, "--mode", mode, "--threads", str(threads), "--json",
           "--output", f"{OUT}/mr-overhead-{app}-{mode}.json"]
    for a in args:
        cmd += ["--arg", a]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(f"{OUT}/mr-overhead-{app}-{mode}.json") as f:
        report = json.load(f)
    return wall, cpu, report["result"]


def main():
    scale = float(os.environ.get("MR_SCALE", "1"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    threads = int(os.environ.get("THREADS", "2"))
    apps = os.environ.get("MR_APPS", " ".join(APPS)).split()
    cold = os.environ.get("COLD") == "1"
    os.makedirs(OUT, exist_ok=True)
    load = open("/proc/loadavg").read().split()[:3]
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    rows, raw = [], {}
    for app in apps:
        # Matrix multiply's time grows as n³ and its input as n².
        size = int(APPS[app][0] * (scale ** (2 / 3) if app == "matmul" else scale))
        path, meta = generate(app, size)
        # Untimed: the input's pages written back and in the page cache before any mode is timed
        # (a freshly generated input of gigabytes otherwise slows whichever mode runs first).
        os.sync()
        if not cold:
            run(app, path, meta["args"], "rayon", threads)
        walls = {m: [] for m in MODES}
        cpus = {m: [] for m in MODES}
        results = {}
        for r in range(rounds):
            # Interleaved, and each round in another order, so drifting load hits all modes.
            for mode in MODES[r % 3:] + MODES[:r % 3]:
                wall, cpu, result = run(app, path, meta["args"], mode, threads, cold)
                walls[mode].append(wall)
                cpus[mode].append(cpu)
                results.setdefault(mode, result)
                say(f"{app} {mode} round {r + 1}: {wall:.3f} s, CPU {cpu:.3f} s")
        if any(results[m] != results["rayon"] for m in MODES):
            sys.exit(f"{app}: the modes' results differ; not a fair comparison")
        med = {m: statistics.median(walls[m]) for m in MODES}
        cpu = {m: statistics.median(cpus[m]) for m in MODES}
        raw[app] = {"bytes": meta["bytes"], "args": meta["args"], "wall_seconds": walls, "cpu_seconds": cpus}
        rows.append((app, meta["bytes"], med, cpu, APPS[app][1]))
    with open(f"{OUT}/mr-overhead.json", "w") as f:
        json.dump(raw, f, indent=1)
    print(f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"`bench/mr-overhead.sh` (MR_SCALE={scale:g} ROUNDS={rounds} THREADS={threads}"
          f"{' COLD=1' if cold else ''}): "
          f"`shoal mr run <app> <input> --mode elastic|fixed|rayon --threads {threads}` on inputs "
          f"from `shoal mr generate <app> --size N`; wall time and CPU time (user + system) of "
          f"the whole process, reading the input and writing the result included; medians of "
          f"{rounds} interleaved rounds"
          f"{', the page cache dropped before every run, so each read its input from disk' if cold else ' after an untimed warm-up run'}; load average {' '.join(load)} at the start. Every "
          f"mode's result was checked equal. Ratios: wall (CPU).")
    print()
    print("| app | input | elastic s wall (CPU) | fixed s | Rayon s | elastic / Rayon "
          "| fixed / Rayon | elastic / fixed | target (elastic) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for app, size, med, cpu, target in rows:
        e, f, r = med["elastic"], med["fixed"], med["rayon"]
        ce, cf, cr = cpu["elastic"], cpu["fixed"], cpu["rayon"]
        print(f"| {app} | {size / (1 << 20):.0f} MiB | {e:.2f} ({ce:.2f}) | {f:.2f} ({cf:.2f}) "
              f"| {r:.2f} ({cr:.2f}) | {e / r:.2f}× ({ce / cr:.2f}×) | {f / r:.2f}× ({cf / cr:.2f}×) "
              f"| {e / f:.2f}× ({ce / cf:.2f}×) | {target} |")


if __name__ == "__main__":
    main()
