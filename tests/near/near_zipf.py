"""Issue #28's near-cache target on simulated hosts: two client hosts, each with a near cache
(`shoal server --upstream`) in its own /dev/shm, in front of a pool of three behind a router,
with writes through PostgreSQL. `run(...)` is what tests/near/test_near_zipf.py and
bench/near-zipf.py call; the hosts, PostgreSQL and the checker are tests/cluster's (imported).

    db   PostgreSQL + `shoal invalidator` (-d router, --near c1's near cache, --near c2's: each
         delete at once and again once the router acknowledged it)
         + writers: UPDATE a Zipf-drawn row and name its key in the same transaction
    s1 s2 s3  `shoal server` (the pool)      p  `shoal router` (PoolRoute over s1 s2 s3)
    c1 c2     `shoal server --upstream p` (the near cache, on the host's own /dev/shm)
              + readers: Zipf 0.99 look-aside reads, `get` from shared memory first
              (without near caches: lease-gets through the router)

With `faults` (fault kinds of the fault harness: "kill", "pause", "cut"), the window is a
seeded fault schedule instead (`NearZipf.fault`): kill -9 and a warm restart (`-e` region,
`--rejoin-hold`) of a pool server, a near cache, the router and the invalidator in turn,
SIGSTOP/SIGCONT of any of them, a host's link cut; the checker then excuses a read only while a
fault lasts and `bound` seconds after, and the reads of hosts not under a fault must be answered
(a near cache whose upstream is down answers misses; its readers fill from the database).

Measured over a window after a warm-up: the share of the client hosts' reads served from
their shared memory (the near caches' `local_hits` / `local_gets`, from /metrics), the pool's
requests (its servers' `cmd_get`, `cmd_set`, deletes) per second and per client read, and the
checker's verdict over every read of the run (tests/cluster/checker.py: no read returns a
version older than the newest committed `bound` seconds before it began).
"""

import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
import checker  # noqa: E402
from cluster import (HostPostgres, Net, Proc, cleanup, kill_all, missing_privileges, restart_crashed,  # noqa: E402
                     stop_workers, wait_for)
from harness import SHOAL, talk  # noqa: E402

WORKER = HERE / "near_zipf_worker.py"
SERVER_PORT, ROUTER_PORT, METRICS_PORT = 11211, 5000, 9100
# A near cache's invalidation listener: the invalidator's deletes there drop the near copy and are
# not forwarded to the router (the pool gets the invalidator's own copy).
INVALIDATION_PORT = 11212
# The fault schedule: the pause between two faults (s), and how often each kind comes after
# the first of each (as tests/cluster/scenario.py's FAULT_WEIGHTS).
FAULT_GAP = (1.5, 3.0)
FAULT_WEIGHTS = {"kill": 3, "pause": 2, "cut": 2}
REJOIN_HOLD = 3
HOSTS = {"db": 10, "p": 11, "s1": 21, "s2": 22, "s3": 23, "c1": 31, "c2": 32}
CLIENTS = ("c1", "c2")
POOL = ("s1", "s2", "s3")


def why_not():
    """Why the run cannot be made on this machine, or None."""
    if not sorted(Path("/usr/lib/postgresql").glob("*/bin")):
        return "PostgreSQL is missing"
    return missing_privileges()


def stats(ip, port, kind=b""):
    import socket
    with socket.create_connection((ip, port), timeout=30) as s:
        answer = talk(s, b"stats " + kind + b"\r\n", b"END\r\n")
    out = {}
    for line in answer.decode().split("\r\n"):
        parts = line.split(" ")
        if len(parts) >= 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def metric(ip, port, name):
    text = urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=30).read().decode()
    match = re.search(rf"^shoal_{name}(?:_total)?(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert match, f"no {name} in {ip}:{port}/metrics"
    return float(match.group(1))


class NearZipf:
    def __init__(self, work: Path, keys, near, near_ttl, admit, read_rate, readers, write_rate):
        self.work, self.keys, self.near = work, keys, near
        self.near_ttl, self.admit = near_ttl, admit
        self.read_rate, self.readers, self.write_rate = read_rate, readers, write_rate
        self.net = Net()
        self.procs, self.workers, self.pg = [], [], None
        self.groups = {"pool server": [], "near cache": [], "router": [], "invalidator": []}
        self.kills = 0

    def proc(self, name, host, argv, port, group):
        p = Proc(name, host, argv, port, self.work / f"{name.replace(' ', '-')}.log")
        self.procs.append(p)
        self.groups[group].append(p)
        return p

    def warm(self, name):
        """A server's flags for a warm restart: its region in the host's /dev/shm, held after
        a restart until the deletes it missed have come (docs/design/faults.md, rule 3)."""
        return ["-e", f"/dev/shm/shoal-{name}.region", "--rejoin-hold", str(REJOIN_HOLD)]

    def fault(self, kind, rng, log):
        """Injects one fault of `kind` (as tests/cluster/scenario.py's Cluster.fault, over this
        run's processes), holds it, undoes it, and logs it for the checker."""
        started = time.time()
        if kind == "kill":
            # Pool servers, near caches, the router, the invalidator in turn, each group's in turn.
            groups = [(group, members) for group, members in self.groups.items() if members]
            group, members = groups[self.kills % len(groups)]
            p = members[(self.kills // len(groups)) % len(members)]
            self.kills += 1
            p.kill()
            time.sleep(rng.uniform(0.2, 1.5))  # the fault's length, not synchronisation
            p.start()
            what, hosts = f"kill {group} ({p.name})", [p.host.name]
        elif kind == "pause":
            p = rng.choice(self.procs)
            p.pause()
            time.sleep(rng.uniform(0.2, 0.8))
            p.resume()
            what, hosts = f"pause {p.name}", [p.host.name]
        elif kind == "cut":
            host = self.net.hosts[rng.choice(sorted(HOSTS))]
            host.link(False)
            time.sleep(rng.uniform(0.5, 3.0))
            host.link(True)
            what, hosts = f"cut host {host.name}", [host.name]
        else:
            raise ValueError(f"fault kind {kind!r}: one of {sorted(FAULT_WEIGHTS)}")
        log.append({"kind": kind, "what": what, "hosts": hosts, "start": round(started, 3),
                    "end": round(time.time(), 3)})

    def supervise(self, log):
        restart_crashed(self.procs, log)

    def start(self):
        self.net.start()
        for name, number in HOSTS.items():
            self.net.host(name, "A", number)
        h = self.net.hosts
        self.pg = HostPostgres(h["db"]).primary()
        with psycopg.connect(self.pg.conninfo, autocommit=True) as db:
            db.execute("CREATE TABLE kv (k int PRIMARY KEY, v bigint NOT NULL)")
            db.execute("INSERT INTO kv SELECT g, 0 FROM generate_series(0, %s) g", (self.keys - 1,))
        for name in POOL:
            self.proc(f"server {name}", h[name], [
                str(SHOAL), "server", "-l", h[name].ip, "-p", str(SERVER_PORT), "-U", "0", "-m", "64", "-t", "1",
                *self.warm(name)], SERVER_PORT, "pool server")
        config = self.work / "router.json"
        config.write_text(json.dumps({
            "pools": {"main": {"servers": [f"{h[s].ip}:{SERVER_PORT}" for s in POOL]}},
            "route": {"type": "PoolRoute", "pool": "main"}}))
        self.router = f"{h['p'].ip}:{ROUTER_PORT}"
        self.proc("router", h["p"], [str(SHOAL), "router", "-l", h["p"].ip, "-p", str(ROUTER_PORT), "-t", "1",
                                     "-f", str(config), "--spool-dir", str(self.work / "spool")], ROUTER_PORT,
                  "router")
        destinations = ["-d", self.router]
        if self.near:
            for name in CLIENTS:
                ip = h[name].ip
                self.proc(f"near {name}", h[name], [
                    str(SHOAL), "server", "-l", ip, "-p", str(SERVER_PORT), "-U", "0", "-m", "64", "-t", "1",
                    "--upstream", self.router, "--admit", self.admit, "--near-ttl", str(self.near_ttl),
                    "--upstream-timeout", "5000", "--metrics-listen", f"{ip}:{METRICS_PORT}",
                    "--invalidation-listen", f"{ip}:{INVALIDATION_PORT}", *self.warm(name)],
                    SERVER_PORT, "near cache")
                # `--near`: sent again once the router took the delete (a near cache that
                # refetched the old value from the pool before it did is cleaned then).
                destinations += ["--near", f"{ip}:{INVALIDATION_PORT}"]
        self.proc("invalidator", h["db"], [
            str(SHOAL), "invalidator", "--postgres", self.pg.conninfo, *destinations,
            "--state-dir", str(self.work / "invalidator"), "--metrics-listen", f"{h['db'].ip}:{METRICS_PORT}"],
            METRICS_PORT, "invalidator")
        for p in self.procs:
            p.start()
        with psycopg.connect(self.pg.conninfo, autocommit=True) as db:
            slot = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'shoal_invalidator'"
            wait_for("the invalidator's slot", lambda: db.execute(slot).fetchone()[0] == 1)

    def start_workload(self, seed):
        self.ops = self.work / "ops"
        self.ops.mkdir()
        h = self.net.hosts
        roles = {"db": {"writers": 1}, **{c: {"readers": self.readers} for c in CLIENTS}}
        for n, (name, role) in enumerate(roles.items()):
            settings = {"host": name, "out": str(self.ops), "seed": seed * 100 + n, "keys": self.keys,
                        "write_dsn": self.pg.conninfo, "read_dsn": self.pg.conninfo, "router": self.router,
                        "read_rate": self.read_rate,
                        "write_rate": self.write_rate,
                        "near": f"{h[name].ip}:{SERVER_PORT}" if self.near and name in CLIENTS else None, **role}
            self.workers.append(h[name].popen([sys.executable, str(WORKER), json.dumps(settings)],
                                              self.work / f"worker-{name}.log"))

    def counts(self):
        total = {}
        for path in self.ops.glob("status-*.json"):
            try:
                for k, v in json.loads(path.read_text()).items():
                    if k != "done":
                        total[k] = total.get(k, 0) + v
            except (OSError, ValueError):
                pass  # being replaced
        return total

    def sample(self):
        """The counters the window is measured by, now."""
        h = self.net.hosts
        pool = {"gets": 0, "sets": 0, "deletes": 0}
        for name in POOL:
            s = stats(h[name].ip, SERVER_PORT)
            pool["gets"] += int(s["cmd_get"])
            pool["sets"] += int(s["cmd_set"])
            pool["deletes"] += int(s["delete_hits"]) + int(s["delete_misses"])
        local = {"gets": 0, "hits": 0}
        if self.near:
            for name in CLIENTS:
                local["gets"] += metric(h[name].ip, METRICS_PORT, "local_gets")
                local["hits"] += metric(h[name].ip, METRICS_PORT, "local_hits")
        for p in self.procs:
            assert p.proc.poll() is None, f"{p.name} exited: see {p.log}"
        return {"time": time.time(), "pool": pool, "local": local, "clients": self.counts()}

    def latency(self, requests):
        """`shoal bench latency` on c1: a read of an admitted 100-byte value through the near
        cache's shared memory, against a network get through the pool's router."""
        h = self.net.hosts
        argv = h["c1"].argv([str(SHOAL), "bench", "latency", "--server", f"{h['c1'].ip}:{SERVER_PORT}",
                             "--memcached", self.router, "--sizes", "100", "--requests", str(requests), "--json"])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def stop_workload(self):
        stop_workers(self.ops, self.workers)

    def stop(self):
        kill_all(self.workers, self.procs, [self.pg] if self.pg else [])


def window(before, after):
    """What happened between two samples."""
    seconds = after["time"] - before["time"]
    d = lambda part, k: after[part].get(k, 0) - before[part].get(k, 0)  # noqa: E731
    reads = d("clients", "reads")
    pool_requests = d("pool", "gets") + d("pool", "sets") + d("pool", "deletes")
    local_gets = d("local", "gets")
    return {
        "seconds": round(seconds, 1),
        "client_reads": reads,
        "client_reads_per_second": round(reads / seconds, 1),
        "local_share": round(d("local", "hits") / local_gets, 4) if local_gets else None,
        "pool_gets_per_second": round(d("pool", "gets") / seconds, 1),
        "pool_requests_per_second": round(pool_requests / seconds, 1),
        "pool_gets_per_client_read": round(d("pool", "gets") / max(reads, 1), 4),
        "pool_requests_per_client_read": round(pool_requests / max(reads, 1), 4),
        "pool_deletes_per_second": round(d("pool", "deletes") / seconds, 1),
        "writes_per_second": round(d("clients", "writes") / seconds, 1),
        "read_errors": d("clients", "errors"),
    }


def run(work: Path, near=True, seed=1, keys=10_000, warmup=20.0, seconds=40.0, near_ttl=30, admit="reuse",
        read_rate=1000, readers=2, write_rate=50, bound=2.0, latency_requests=0, progress=None, faults=()):
    """Builds the hosts, runs the workload for `warmup` then a measured window of `seconds`,
    tears everything down and returns the window's figures and the checker's verdict over the
    whole run. `read_rate` is per reader thread (`readers` per client host). With `faults`
    (kinds), the window is a fault schedule seeded by `seed`: each kind first (every group's
    kill, then the others, shuffled), then kinds drawn by FAULT_WEIGHTS, until `seconds`."""
    cleanup()  # what a crashed run left
    work.mkdir(parents=True, exist_ok=True)
    run = NearZipf(work, keys, near, near_ttl, admit, read_rate, readers, write_rate)
    fault_log = []
    try:
        run.start()
        run.start_workload(seed)
        wait_for("the first reads", lambda: run.counts().get("reads", 0) > 0)
        deadline = time.time() + warmup
        while time.time() < deadline:  # the warm-up, with progress
            time.sleep(min(5.0, max(0.0, deadline - time.time())))
            if progress:
                progress(f"warm-up: {run.counts()}")
        before = run.sample()
        deadline = time.time() + seconds
        rng = random.Random(seed)
        first = [k for k in faults if k != "kill"]
        rng.shuffle(first)
        first = ["kill"] * sum(1 for m in run.groups.values() if m) * ("kill" in faults) + first
        while time.time() < deadline or first:
            if faults:
                kind = first.pop(0) if first else rng.choices(faults, [FAULT_WEIGHTS[k] for k in faults])[0]
                run.fault(kind, rng, fault_log)
                run.supervise(fault_log)
                time.sleep(rng.uniform(*FAULT_GAP))  # the calm between faults, not synchronisation
            else:
                time.sleep(min(5.0, max(0.0, deadline - time.time())))
            if progress:
                progress(f"window: {run.counts()} {len(fault_log)} faults")
        run.supervise(fault_log)
        after = run.sample()
        measured = window(before, after)
        run.stop_workload()
        if near and latency_requests:
            measured["latency"] = run.latency(latency_requests)
        measured["final_counts"] = run.counts()
    finally:
        run.stop()
        cleanup(owner=os.getpid())
    regions = {name: "A" for name in HOSTS}
    spans = [(f["start"], f["end"], set(f["hosts"])) for f in fault_log]
    verdict = checker.check(run.ops, regions, [], bound=bound, faults=[(f["start"], f["end"]) for f in fault_log])
    if faults:
        verdict["availability_per_minute"] = checker.availability(run.ops, regions, spans)
        verdict["unanswered_by_fault"] = checker.unanswered_by_fault(
            run.ops, regions, [(*span, f["what"]) for span, f in zip(spans, fault_log)])
        verdict["fault_log"] = fault_log
        verdict["crashes"] = {p.name: p.crashes for p in run.procs if p.crashes}
    # How stale the reads were: the stale count under tighter bounds (no faults here).
    tighter = {str(b): checker.check(run.ops, regions, [], bound=b)["inconsistent_reads"]
               for b in (0.1, 0.25, 0.5, 1.0) if b < bound}
    return {"near": near, "keys": keys, "skew": 0.99, "near_ttl": near_ttl if near else None,
            "admit": admit if near else None, "seed": seed, "window": measured,
            "checker": {k: v for k, v in verdict.items() if k != "inconsistent_keys"},
            "stale_reads_by_bound": tighter,
            "inconsistent_keys": dict(list(verdict["inconsistent_keys"].items())[:5])}
