"""The consistency checker, after Meta's Polaris: for each committed write, a read that starts
later than the write's visibility plus a bound must not return an older value.

A write is visible in region A when its commit is acknowledged to the writer. In region B it
is visible once the region's streaming replica has replayed it: the first poll of the
replica's `pg_last_xact_replay_timestamp()` at or past the write's acknowledgement (a replayed
commit that was acknowledged later proves this one replayed; the harness polls every 50 ms).
So region B's bound is the replica's lag, measured, plus the same `bound`. A write never seen
replayed in B is not checked there.

A machine stall — a span of at least `STALL` seconds in which no worker on any host started an
operation, local readers included, which wait for nothing but a CPU — is a fault of the
machine, not of the system under test: every process on it was descheduled alike (seen once,
for 10 s, at a load average of 30: the harness's own 50 ms timer did not fire either). It is
found in the logs themselves (`stalls`) and counts as a fault: deadlines move past its end
plus the bound, as for any fault; the verdict lists them (`machine_stalls`).

Input: the workers' logs (tests/cluster/worker.py's format), each file named
`<host>-<thread>.log`, and the region of each host; the replay polls as (time, replay time).
Output: counts, inconsistencies per million writes, and each inconsistent key's history.
"""

import bisect
from collections import defaultdict
from pathlib import Path


def parse(out: Path, regions: dict):
    """Writes by key ({key: [(version, ack)]}) and reads ([(region, host, key, start, version,
    source)]) from every log under `out`."""
    writes, reads = defaultdict(list), []
    for path in sorted(out.glob("*.log")):
        host = path.name.split("-", 1)[0]
        region = regions[host]
        with open(path) as f:
            for line in f:
                fields = line.split()
                if len(fields) < 4 or (fields[0] == "R" and len(fields) < 5):
                    continue  # a line cut short by the end of the run
                if fields[0] == "W":
                    writes[int(fields[1])].append((int(fields[2]), float(fields[3])))
                elif fields[0] == "R":
                    version = None if fields[3] == "E" else int(fields[3])
                    reads.append((region, host, int(fields[1]), float(fields[2]), version, fields[4]))
    return writes, reads


# A gap this long with no operation started anywhere is a machine stall (module doc). Seven
# worker processes start thousands of operations a second; at load averages of 15-30 their
# longest common gap was 0.3 s in runs without a stall.
STALL = 1.0


def stalls(writes, reads, gap=STALL):
    """Spans (start, end) of at least `gap` seconds in which no operation started (the reads'
    starts and the writes' acknowledgements), between the run's first and last."""
    times = sorted([t for history in writes.values() for _, t in history] + [r[3] for r in reads])
    return [(a, b) for a, b in zip(times, times[1:]) if b - a >= gap]


def extend(deadline, faults, bound):
    """A write's deadline (visibility + bound) moved past every fault that began before it:
    to that fault's end plus the bound (faults sorted by start, as (start, end))."""
    for start, end in faults:
        if start > deadline:
            break
        deadline = max(deadline, end + bound)
    return deadline


class Visibility:
    """When each key's versions became visible in a region: per key, versions sorted with the
    latest visibility so far (a version is only as visible as the newest it follows)."""

    def __init__(self, writes, replay_polls=None, bound=1.0, faults=()):
        polls = sorted(replay_polls or [])
        # The first poll at or after each poll whose replay reached a time: a running maximum.
        self.poll_times = [t for t, _ in polls]
        self.replayed = []
        best = float("-inf")
        for _, r in polls:
            best = max(best, r if r is not None else best)
            self.replayed.append(best)
        self.by_key = {}
        for key, history in writes.items():
            versions, visible = [], []
            for version, ack in sorted(history):
                seen = ack if replay_polls is None else self.replayed_at(ack)
                if seen is None:
                    continue
                versions.append(version)
                visible.append(extend(seen + bound, faults, bound))
            # A read must not return older than the newest version visible before it started.
            earliest = list(visible)
            for i in range(len(earliest) - 2, -1, -1):
                earliest[i] = min(earliest[i], earliest[i + 1])
            self.by_key[key] = (versions, earliest)

    def replayed_at(self, ack):
        i = bisect.bisect_left(self.replayed, ack)
        return self.poll_times[i] if i < len(self.replayed) else None

    def newest_before(self, key, when):
        """The newest version of `key` that a read starting at `when` must see, or None."""
        versions, earliest = self.by_key.get(key, ((), ()))
        # earliest[] is non-decreasing: the last version whose earliest visibility <= when.
        i = bisect.bisect_right(earliest, when)
        return versions[i - 1] if i else None


def check(out: Path, regions: dict, replay_polls, bound=1.0, faults=(), stall=STALL):
    """The verdict over a run's logs (see the module's doc): inconsistent reads counted twice,
    `strict` (the bound alone, Polaris's measure, faults included) and `after_fault` (a write's
    deadline moved to the end of each fault that began before it plus the bound: the guarantee,
    "no stale value after any single fault", whose reads are listed by key). `stall`: the gap
    that makes a machine stall (None: none is looked for, for histories written by hand)."""
    writes, reads = parse(out, regions)
    machine_stalls = stalls(writes, reads, stall) if stall else []
    faults = sorted([*faults, *machine_stalls])
    strict = {"A": Visibility(writes, bound=bound), "B": Visibility(writes, replay_polls, bound=bound)}
    visibility = {"A": Visibility(writes, bound=bound, faults=faults),
                  "B": Visibility(writes, replay_polls, bound=bound, faults=faults)}
    total_writes = sum(len(h) for h in writes.values())
    bad, answered, errors, strict_bad = [], 0, 0, 0
    for region, host, key, start, version, source in reads:
        if version is None:
            errors += 1
            continue
        answered += 1
        if version < 0:
            continue  # a miss returns no value
        newest = strict[region].newest_before(key, start)
        strict_bad += newest is not None and version < newest
        newest = visibility[region].newest_before(key, start)
        if newest is not None and version < newest:
            bad.append({"region": region, "host": host, "key": key, "start": round(start, 6),
                        "returned": version, "expected_at_least": newest, "source": source})
    histories = {}
    for b in bad:
        key = b["key"]
        if key not in histories:
            histories[key] = {"writes": sorted((v, round(t, 6)) for v, t in writes[key]),
                              "bad_reads": []}
        histories[key]["bad_reads"].append(b)
    return {
        "writes": total_writes,
        "reads": len(reads),
        "answered": answered,
        "read_errors": errors,
        "value_reads": sum(1 for r in reads if r[4] is not None and r[4] >= 0),
        "local_hits": sum(1 for r in reads if r[5] == "l" and r[4] is not None and r[4] >= 0),
        "strict_inconsistent_reads": strict_bad,
        "strict_inconsistent_per_million_writes": round(strict_bad * 1e6 / max(total_writes, 1), 3),
        "inconsistent_reads": len(bad),
        "inconsistent_per_million_writes": round(len(bad) * 1e6 / max(total_writes, 1), 3),
        "inconsistent_keys": histories,
        "bound_seconds": bound,
        "machine_stalls": [{"kind": "stall", "what": "machine stall (no worker ran)", "hosts": [],
                            "start": round(a, 3), "end": round(b, 3)} for a, b in machine_stalls],
    }


def outside_faulted_hosts(reads, faults):
    """The reads a host made while no fault on that host lasted (`faults`: (start, end, hosts,
    …)): what availability is judged on."""
    spans = defaultdict(list)  # per host, its faults' (start, end), sorted (they do not overlap)
    for s, e, hosts, *_ in sorted(faults, key=lambda f: f[0]):
        for host in hosts:
            spans[host].append((s, e))
    starts = {host: [s for s, _ in v] for host, v in spans.items()}
    for read in reads:
        host, start = read[1], read[3]
        i = bisect.bisect_right(starts.get(host, ()), start) - 1
        if not (i >= 0 and spans[host][i][1] >= start):
            yield read


def availability(out: Path, regions: dict, faults=()):
    """Share of reads answered (hit or miss, not error) per minute of the run, leaving out the
    reads a host made while a fault on that host lasted (`faults`: (start, end, hosts))."""
    _, reads = parse(out, regions)
    if not reads:
        return []
    t0 = min(r[3] for r in reads)
    minutes = defaultdict(lambda: [0, 0])
    for region, host, key, start, version, source in outside_faulted_hosts(reads, faults):
        minute = int((start - t0) // 60)
        minutes[minute][0] += 1
        minutes[minute][1] += version is not None
    return [{"minute": m, "reads": n, "answered_share": round(a / n, 5)} for m, (n, a) in sorted(minutes.items())]


def unanswered_by_fault(out: Path, regions: dict, faults=()):
    """Where the unanswered reads outside the faulted hosts come from: counted by the fault
    last begun before each (`faults`: (start, end, hosts, what)), while it lasted or after it
    ended, and by the kind of reader (`h` through a router, `l` local), most first."""
    _, reads = parse(out, regions)
    faults = sorted(faults, key=lambda f: f[0])
    starts = [f[0] for f in faults]
    counts = defaultdict(int)
    for region, host, key, start, version, source in outside_faulted_hosts(reads, faults):
        if version is not None:
            continue
        i = bisect.bisect_right(starts, start) - 1
        if i < 0:
            counts[("before any fault", "", source)] += 1
        else:
            _, end, _, what = faults[i]
            counts[(what, "during" if start <= end else "after", source)] += 1
    return [{"fault": what, "when": when, "reader": source, "reads": n}
            for (what, when, source), n in sorted(counts.items(), key=lambda x: -x[1])]
