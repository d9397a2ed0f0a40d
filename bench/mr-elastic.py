#!/usr/bin/env python3
"""The elasticity benchmark (issue 18; Elastic Phoenix's thesis, Fig. 3.12) scaled to this
machine: a long alternating sequence of linear-regression and matrix-multiply jobs while the
CPUs available change every few seconds, following a seeded random schedule.

- elastic: each job is `shoal mr run --workers 0` and this script keeps one
  `shoal mr worker --threads 1` per available CPU, pinned to it: a CPU that goes away takes its
  worker with it (SIGKILL: its task is re-run by another), a CPU that comes back gets a new one.
- static: each job is `shoal mr run --mode fixed --threads k` with k the CPUs available when it
  starts, pinned to them; when CPUs go away it keeps its threads on what is left of them (as
  an OS time-shares them), CPUs that come back are not used until the next job.

Both follow the same schedule from their own start. Prints a markdown table, writes the plot of
jobs completed over time (with the CPUs available) to docs/mr-elastic.png and the raw events
to target/bench/mr-elastic.json.

Called by bench/mr-elastic.sh. Environment: SEED (1), JOBS (24), CPUS (0,1), MIN_SECS (1),
MAX_SECS (4) for the schedule's periods, MATMUL_BYTES (16M), LINREG_BYTES (256M).
"""
import json
import os
import random
import subprocess
import sys
import time

SHOAL = "target/release/shoal"
OUT = "target/bench"


def say(*args):
    print(*args, file=sys.stderr, flush=True)


def size(text):
    units = {"K": 10, "M": 20, "G": 30}
    return int(text[:-1]) << units[text[-1]] if text[-1] in units else int(text)


class Schedule:
    """Seeded random periods of MIN..MAX seconds, each with a non-empty set of CPUs different
    from the one before; extended as far as a run needs."""

    def __init__(self, seed, cpus, low, high):
        self.rng = random.Random(seed)
        self.cpus, self.low, self.high = cpus, low, high
        self.changes = [(0.0, tuple(cpus))]  # start with every CPU

    def at(self, t):
        while self.changes[-1][0] <= t:
            last = self.changes[-1]
            choices = [s for s in self.subsets() if s != last[1]]
            self.changes.append((last[0] + self.rng.uniform(self.low, self.high), self.rng.choice(choices)))
        return next(s for start, s in reversed(self.changes) if start <= t)

    def subsets(self):
        n = len(self.cpus)
        return [tuple(c for i, c in enumerate(self.cpus) if mask >> i & 1) for mask in range(1, 1 << n)]


def pin(pid, cpus):
    subprocess.run(["taskset", "-a", "-p", "-c", ",".join(map(str, cpus)), str(pid)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(mode, jobs, schedule):
    """Runs the job sequence; returns [(app, start, end)] and the CPU changes seen."""
    t0 = time.perf_counter()
    done, seen = [], []
    avail = None
    for n, (app, path) in enumerate(jobs):
        region = f"/dev/shm/shoal-mr-elastic-{os.getpid()}-{n}"
        start = time.perf_counter() - t0
        avail_now = schedule.at(start)
        out = f"{OUT}/mr-elastic-{mode}-job.json"
        if mode == "static":
            given = avail_now
            cmd = ["taskset", "-c", ",".join(map(str, given)), SHOAL, "mr", "run", app, path,
                   "--mode", "fixed", "--threads", str(len(given))]
        else:
            cmd = ["taskset", "-c", ",".join(map(str, avail_now)), SHOAL, "mr", "run", app, path,
                   "--workers", "0", "--region", region]
        coordinator = subprocess.Popen(cmd + ["--json", "--output", out], stderr=subprocess.DEVNULL)
        workers = {}
        while True:
            t = time.perf_counter() - t0
            now = schedule.at(t)
            if now != avail:
                seen.append((t, now))
                avail = now
            if mode == "static":
                mask = [c for c in given if c in now] or list(now)
                if getattr(coordinator, "mask", None) != mask:
                    pin(coordinator.pid, mask)
                    coordinator.mask = mask
            else:
                if getattr(coordinator, "mask", None) != now:
                    pin(coordinator.pid, now)
                    coordinator.mask = now
                for cpu in [c for c in workers if c not in now]:
                    workers[cpu].kill()
                    workers.pop(cpu).wait()  # reaped, so its claims are free at once
                for cpu in now:
                    w = workers.get(cpu)
                    failed = w is not None and w.poll() not in (None, 0)
                    if (w is None or failed) and os.path.exists(region):
                        workers[cpu] = subprocess.Popen(
                            ["taskset", "-c", str(cpu), SHOAL, "mr", "worker", region, "--threads", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if coordinator.poll() is not None:
                break
            time.sleep(0.005)
        end = time.perf_counter() - t0
        for w in workers.values():
            w.kill()
            w.wait()
        if coordinator.returncode != 0:
            sys.exit(f"{mode} job {n} ({app}) failed")
        with open(out) as f:
            result = json.load(f)["result"]
        done.append((app, start, end, result))
        say(f"{mode} job {n} {app}: {start:.2f}–{end:.2f} s (CPUs at its start: {avail_now})")
    return done, seen


def plot(runs, schedule, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    end = max(done[-1][2] for done, _ in runs.values())
    schedule.at(end)  # the schedule as far as the longer run went
    for mode, (done, _) in runs.items():
        times = [0] + [d[2] for d in done]
        top.step(times, range(len(times)), where="post",
                 label=f"{mode}: {done[-1][2]:.1f} s")
    top.set_ylabel("jobs completed")
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    xs, ys = [], []
    for start, cpus in schedule.changes:
        if start > end:
            break
        xs.append(start)
        ys.append(len(cpus))
    xs.append(end)
    ys.append(ys[-1])
    bottom.step(xs, ys, where="post", color="gray")
    bottom.set_ylim(0, max(ys) + 0.5)
    bottom.set_yticks(range(0, max(ys) + 1))
    bottom.set_ylabel("CPUs available")
    bottom.set_xlabel("seconds since the first job started")
    fig.suptitle("Alternating linreg and matmul jobs while the CPUs available change")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    seed = int(os.environ.get("SEED", "1"))
    jobs_n = int(os.environ.get("JOBS", "24"))
    cpus = [int(c) for c in os.environ.get("CPUS", "0,1").split(",")]
    low, high = float(os.environ.get("MIN_SECS", "1")), float(os.environ.get("MAX_SECS", "4"))
    inputs = {}
    os.makedirs(OUT, exist_ok=True)
    for app, default in [("linreg", "256M"), ("matmul", "16M")]:
        bytes_ = size(os.environ.get(f"{app.upper()}_BYTES", default))
        path = f"{OUT}/mr-elastic-{app}-{bytes_}"
        if not os.path.exists(path):
            subprocess.run([SHOAL, "mr", "generate", app, path, "--size", str(bytes_)], check=True,
                           stdout=subprocess.DEVNULL)
        inputs[app] = (path, bytes_)
    jobs = [(app, inputs[app][0]) for app in (["linreg", "matmul"] * jobs_n)[:jobs_n]]
    load = open("/proc/loadavg").read().split()[:3]
    runs = {}
    for mode in ["elastic", "static"]:
        schedule = Schedule(seed, cpus, low, high)
        runs[mode] = run(mode, jobs, schedule)
    for (a, b) in zip(runs["elastic"][0], runs["static"][0]):
        if a[3] != b[3]:
            sys.exit(f"a {a[0]} job's result differs between the runs")
    schedule = Schedule(seed, cpus, low, high)
    plot(runs, schedule, "docs/mr-elastic.png")
    with open(f"{OUT}/mr-elastic.json", "w") as f:
        json.dump({m: {"jobs": [d[:3] for d in done], "cpu_changes": seen}
                   for m, (done, seen) in runs.items()}, f, indent=1)
    elastic, static = runs["elastic"][0][-1][2], runs["static"][0][-1][2]
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    print(f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"`bench/mr-elastic.sh` (SEED={seed} JOBS={jobs_n} CPUS={','.join(map(str, cpus))} "
          f"MIN_SECS={low:g} MAX_SECS={high:g}): {jobs_n} jobs alternating `linreg` on "
          f"{inputs['linreg'][1] >> 20} MiB and `matmul` on {inputs['matmul'][1] >> 20} MiB "
          f"(`shoal mr generate`); the CPUs available change every {low:g}–{high:g} s; "
          f"load average {' '.join(load)} at the start. Every job's result was checked equal "
          f"between the runs.")
    print()
    print("| run | total s | vs static |")
    print("|---|---:|---:|")
    print(f"| static: each job `--mode fixed` on the CPUs available when it starts | {static:.1f} | — |")
    print(f"| elastic: one worker per available CPU, joining and killed as CPUs come and go "
          f"| {elastic:.1f} | {100 * (elastic / static - 1):+.0f} % |")


if __name__ == "__main__":
    main()
