"""The two-region cluster on simulated hosts (cluster.py), its workload (worker.py), the seeded
fault schedule, and the checker's verdict: `run(...)` is what tests/cluster/test_faults.py and
bench/faults/run.py call.

    region A: a0 PostgreSQL primary + invalidator A | a1 server + router | a2 server + router
              | a3 server | ag Gutter
    region B: b0 streaming replica + invalidator B   | b1 server + router | b2 server + router
              | bg Gutter
    wan: Toxiproxy, through which alone b0's replication and invalidator B's log reach a0

Each router reads its region's servers through `FailoverWithExptimeRoute` (a server that
fails, times out, is TKO or catching up is read from the region's Gutter, whose copies live
`GUTTER_TTL` seconds), and sends every delete to the Gutter as well (`router_config`).

With `near` (issue #28 item 3; near.py): a near cache on a1 a2 b1 b2 (`shoal server --upstream`
the host's router, its region in the host's /dev/shm), read by a reader of its own on that host
(near_worker.py), listed at its region's invalidator (`--near`: each delete at once and again
once the region's routers acknowledged it) unless `near_deletes` is off (the control: its
copies then go stale), and killed, warm-restarted and paused like the other processes.
"""

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checker  # noqa: E402
import near as nearcache  # noqa: E402
from cluster import (FAULT_KINDS, WORKER, HostPostgres, Net, Proc, Toxiproxy, cleanup, kill_all,  # noqa: E402
                     restart_crashed, stop_workers, wait_for)
from harness import SHOAL  # noqa: E402

NEAR_WORKER = Path(__file__).resolve().parent / "near_worker.py"

SERVER_PORT, ROUTER_PORT, METRICS_PORT = 11211, 5000, 9100
REPLICA_DELAY_MS = 500
# Invalidator B's `--hold-replica` bound in seconds; 0: not held (the default). Held, the
# cuts-only runs found 5× fewer stale reads, but the 10⁶-write run with every kind of fault
# found 48× more, its replica up to 709 s behind (docs/BENCHMARKS.md, "Holding region B's
# replica behind its commit log"): off until that is understood.
REPLICA_HOLD = 0
# Gutter's copies live this long (Scaling Memcache at Facebook, section 3.3; examples/router/gutter.json).
GUTTER_TTL = 10
# The Gutter hosts, one per region: they run no workload (a Gutter machine serves only what
# the routers send it).
GUTTER_HOSTS = ("ag", "bg")
# How often each kind of fault comes after the first of each (FAULT_KINDS' order).
FAULT_WEIGHTS = (3, 2, 2, 2, 1)


class Cluster:
    def __init__(self, work: Path, keys=2000, rejoin_hold=3, control=False, near=False, near_deletes=True,
                 invalidator_args=(), replica_hold=REPLICA_HOLD):
        self.work, self.keys, self.control = work, keys, control
        self.replica_hold = 0 if control else replica_hold
        self.invalidator_args = list(invalidator_args)
        self.rejoin_hold = 0 if control else rejoin_hold
        self.near, self.near_deletes = near, near_deletes
        self.net = Net()
        self.procs, self.servers, self.routers, self.invalidators, self.gutters = [], [], [], [], []
        self.nears, self.near_counters = [], None
        self.pgs, self.workers = [], []
        self.toxi = None
        self.replay_polls = []
        self.stopping = threading.Event()

    # --- building --------------------------------------------------------------------------
    def start(self):
        self.net.start()
        hosts = {"a0": ("A", 10), "a1": ("A", 11), "a2": ("A", 12), "a3": ("A", 13), "ag": ("A", 14),
                 "b0": ("B", 20), "b1": ("B", 21), "b2": ("B", 22), "bg": ("B", 23), "wan": ("-", 2)}
        for name, (region, number) in hosts.items():
            self.net.host(name, region, number)
        h = self.net.hosts
        self.toxi = Toxiproxy(self.work, h["wan"])
        self.primary = HostPostgres(h["a0"], "wal_level=logical", "max_replication_slots=8")
        self.pgs.append(self.primary)
        self.primary.primary()
        with psycopg.connect(self.primary.conninfo, autocommit=True) as db:
            db.execute("CREATE TABLE kv (k int PRIMARY KEY, v bigint NOT NULL)")
            db.execute("INSERT INTO kv SELECT g, 0 FROM generate_series(0, %s) g", (self.keys - 1,))
        wan = self.toxi.proxy("wan-pg", 5432, f"{h['a0'].ip}:5432")
        self.replica = HostPostgres(h["b0"], f"recovery_min_apply_delay={REPLICA_DELAY_MS}ms")
        self.pgs.append(self.replica)
        self.replica.replica_of(h["wan"].ip, wan)

        for name in ("a1", "a2", "a3", "b1", "b2"):
            self.servers.append(self.proc(f"server {name}", h[name], [
                str(SHOAL), "server", "-l", h[name].ip, "-p", str(SERVER_PORT), "-U", "0", "-m", "32", "-t", "2",
                "-e", f"/dev/shm/shoal-{name}.region", "--rejoin-hold", str(self.rejoin_hold)], SERVER_PORT))
        for name in GUTTER_HOSTS:
            # Gutter restarts empty (no `-e`): the assumption of Facebook's design holds for it.
            self.gutters.append(self.proc(f"gutter {name}", h[name], [
                str(SHOAL), "server", "-l", h[name].ip, "-p", str(SERVER_PORT), "-U", "0", "-m", "32", "-t", "1"],
                SERVER_PORT))
        a_pool, b_pool = ("a1", "a2", "a3"), ("b1", "b2")
        # In this order, the kills' turn (`fault`) reaches router b1 at the fourth kill: the
        # control run's region B deletes are lost then.
        for name, pool, gutter in (("a1", a_pool, "ag"), ("b1", b_pool, "bg"), ("a2", a_pool, "ag"),
                                   ("b2", b_pool, "bg")):
            config = self.work / f"router-{name}.json"
            config.write_text(json.dumps(router_config([f"{h[s].ip}:{SERVER_PORT}" for s in pool],
                                                       f"{h[gutter].ip}:{SERVER_PORT}"), indent=1))
            self.routers.append(self.proc(f"router {name}", h[name], [
                str(SHOAL), "router", "-l", h[name].ip, "-p", str(ROUTER_PORT), "-t", "2", "-f", str(config),
                "--spool-dir", str(self.work / f"spool-{name}")], ROUTER_PORT))
        if self.near:
            for name in nearcache.NEAR_HOSTS:
                self.nears.append(self.proc(f"near {name}", h[name], nearcache.near_argv(
                    h[name], f"{h[name].ip}:{ROUTER_PORT}", self.rejoin_hold), nearcache.NEAR_PORT))
        # Each region's near caches are its invalidator's `--near` (near.py).
        listed = self.near and self.near_deletes
        near_a = nearcache.invalidator_args([h[n] for n in nearcache.NEAR_HOSTS if n[0] == "a"], listed)
        near_b = nearcache.invalidator_args([h[n] for n in nearcache.NEAR_HOSTS if n[0] == "b"], listed)
        ack = ["--ack-rule", "off"] if self.control else []
        # Invalidator B delivers through both region B routers; the control run's through b1's
        # alone, so that its kill loses what is sent meanwhile (a kill of one of two routers
        # loses nothing: the other delivers).
        b_routers = [arg for r in (("b1",) if self.control else ("b1", "b2"))
                     for arg in ("-d", f"{h[r].ip}:{ROUTER_PORT}")]
        self.invalidators.append(self.proc("invalidator a0", h["a0"], [
            str(SHOAL), "invalidator", "--postgres", self.primary.conninfo, "-d", f"{h['a1'].ip}:{ROUTER_PORT}",
            "-d", f"{h['a2'].ip}:{ROUTER_PORT}", *near_a, "--state-dir", str(self.work / "invalidator-a"),
            "--metrics-listen", f"{h['a0'].ip}:{METRICS_PORT}", *ack, *self.invalidator_args], METRICS_PORT))
        self.invalidators.append(self.proc("invalidator b0", h["b0"], [
            str(SHOAL), "invalidator", "--postgres", f"host={h['wan'].ip} port={wan} user=postgres dbname=postgres",
            "--slot", "shoal_b", "--wait-for-replica", self.replica.conninfo,
            *(("--hold-replica", str(self.replica_hold)) if self.replica_hold else ()), *b_routers, *near_b,
            "--state-dir", str(self.work / "invalidator-b"), "--metrics-listen", f"{h['b0'].ip}:{METRICS_PORT}",
            *ack, *self.invalidator_args], METRICS_PORT))
        for p in self.procs:
            p.start()
        with psycopg.connect(self.primary.conninfo, autocommit=True) as db:
            slots = "SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ('shoal_invalidator', 'shoal_b')"
            wait_for("both invalidators' slots", lambda: db.execute(slots).fetchone()[0] == 2)
        if self.near:
            self.near_counters = nearcache.NearCounters([p.host for p in self.nears], self.stopping)

    def sites(self):
        """The hosts of the two regions (not the WAN's)."""
        return {n: x for n, x in self.net.hosts.items() if x.region in ("A", "B")}

    def proc(self, name, host, argv, port):
        p = Proc(name, host, argv, port, self.work / f"{name.replace(' ', '-')}.log")
        self.procs.append(p)
        return p

    def start_workload(self, seed, writers_per_host=2):
        out = self.work / "ops"
        out.mkdir()
        self.ops = out
        h = self.net.hosts
        workload = {n: x for n, x in self.sites().items() if n not in GUTTER_HOSTS}
        for n, (name, host) in enumerate(sorted(workload.items())):
            if host.region == "A":
                routers = [f"{h['a1'].ip}:{ROUTER_PORT}", f"{h['a2'].ip}:{ROUTER_PORT}"]
                read_dsn = self.primary.conninfo
            else:
                routers = [f"{h['b1'].ip}:{ROUTER_PORT}", f"{h['b2'].ip}:{ROUTER_PORT}"]
                read_dsn = self.replica.conninfo
            settings = {"host": name, "out": str(out), "seed": seed * 100 + n, "keys": self.keys,
                        "routers": routers, "read_dsn": read_dsn, "write_dsn": self.primary.conninfo,
                        "writers": writers_per_host if host.region == "A" else 0,
                        "local_server": f"{host.ip}:{SERVER_PORT}" if name[1] != "0" else None}
            script = WORKER
            if self.near and name in nearcache.NEAR_HOSTS:
                script, settings["near"] = NEAR_WORKER, nearcache.address(host)
            self.workers.append(host.popen([sys.executable, str(script), json.dumps(settings)],
                                           self.work / f"worker-{name}.log"))
        threading.Thread(target=self.poll_replay, daemon=True).start()
        if self.near_counters:
            self.near_counters.start()

    def poll_replay(self):
        """(time, replay time) of the replica every 50 ms, for region B's visibility."""
        conn = None
        while not self.stopping.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.replica.conninfo, autocommit=True)
                r = conn.execute("SELECT extract(epoch FROM pg_last_xact_replay_timestamp())").fetchone()[0]
                self.replay_polls.append((time.time(), None if r is None else float(r)))
            except psycopg.Error:
                if conn is not None:
                    conn.close()
                conn = None
            self.stopping.wait(0.05)

    def counts(self):
        total = {"reads": 0, "answered": 0, "writes": 0, "local_reads": 0, "router_failovers": 0, "near_reads": 0}
        for path in self.ops.glob("status-*.json"):
            try:
                for k, v in json.loads(path.read_text()).items():
                    if k in total:
                        total[k] += v
            except (ValueError, OSError):
                pass
        return total

    # --- faults ----------------------------------------------------------------------------
    def fault(self, kind, rng, log):
        """Injects one fault of `kind`, holds it, and undoes it; returns what it did."""
        servers = self.servers + self.gutters
        processes = servers + self.routers + self.invalidators + self.nears
        started = time.time()
        if kind == "kill":
            # Servers, routers and invalidators in turn, and each class's processes in turn:
            # every process is killed in a run of 3 × 7 kills, both invalidators in five. With
            # near caches they are a fourth class, after the invalidators: the kills are an
            # invalidator, a near cache, a server, then router b1 (as without: the control's
            # premise), and every near cache is killed in 14 kills.
            self.kills = getattr(self, "kills", 0) + 1
            groups = (self.routers, self.invalidators, self.nears, servers) if self.nears else \
                (servers, self.routers, self.invalidators)
            group = groups[self.kills % len(groups)]
            p = group[(self.kills // len(groups)) % len(group)]
            p.kill()
            time.sleep(rng.uniform(0.2, 1.5))  # the fault's length, not synchronisation
            p.start()
            what, hosts = p.name, [p.host.name]
        elif kind == "pause":
            # Any process; the first pause is a near cache's (its local readers read on meanwhile).
            first_near = self.nears and not any(f["kind"] == "pause" for f in log)
            p = rng.choice(self.nears if first_near else processes)
            p.pause()
            time.sleep(rng.uniform(0.2, 0.8))
            p.resume()
            what, hosts = p.name, [p.host.name]
        elif kind == "cut":
            if rng.random() < 0.5:
                host = rng.choice(list(self.sites().values()))
                host.link(False)
                time.sleep(rng.uniform(0.5, 3.0))
                host.link(True)
                what, hosts = f"host {host.name}", [host.name]
            else:
                self.toxi.enable(False)
                time.sleep(rng.uniform(0.5, 3.0))
                self.toxi.enable(True)
                what, hosts = "region B from A", []
        elif kind == "delay":
            if rng.random() < 0.5:
                ms = rng.randrange(200, 1500)
                self.toxi.latency(ms)
                time.sleep(rng.uniform(1.0, 3.0))
                self.toxi.latency(0)
                what, hosts = f"WAN latency {ms} ms", []
            else:
                host = rng.choice(list(self.sites().values()))
                host.rate_limit(True)
                time.sleep(rng.uniform(1.0, 3.0))
                host.rate_limit(False)
                what, hosts = f"host {host.name} tbf 200kbit", [host.name]
        else:
            self.replica.ctl("restart")
            what, hosts = "replica restart", ["b0"]
        entry = {"kind": kind, "what": what, "hosts": hosts, "start": round(started, 3), "end": round(time.time(), 3)}
        log.append(entry)
        return entry

    def supervise(self, log):
        restart_crashed(self.procs, log)

    # --- ending ----------------------------------------------------------------------------
    def stop_workload(self):
        if not self.workers:
            return
        stop_workers(self.ops, self.workers)
        if self.near_counters:
            self.near_counters.poll_once()  # the last reads' counts
        self.stopping.set()

    def stop(self):
        self.stopping.set()
        kill_all(self.workers, self.procs, self.pgs)
        if self.toxi:
            self.toxi.stop()


def router_config(servers, gutter):
    """A region's router: reads (and every change) go to the server that owns the key, or to
    Gutter when it fails (`FailoverWithExptimeRoute`, Gutter's copies clamped to GUTTER_TTL).
    Deletes go to Gutter as well, so that a copy Gutter filled during one outage cannot be read
    stale in the next: in the background (`AllInitialRoute`: the answer is the owner's, or
    Gutter's when the owner fails), so that a Gutter that is down does not fail the
    invalidators' deletes (the router spools what Gutter missed, rule 1, and reads none of
    Gutter's answers until it has caught up, rule 2)."""
    failover = {"type": "FailoverWithExptimeRoute", "normal": "PoolRoute|main", "failover": "PoolRoute|gutter",
                "failover_exptime": GUTTER_TTL}
    return {"pools": {"main": {"servers": servers}, "gutter": {"servers": [gutter]}},
            "route": {"type": "OperationSelectorRoute", "default_policy": failover,
                      "operation_policies": {"delete": {"type": "AllInitialRoute",
                                                        "children": [failover, "PoolRoute|gutter"]}}}}


def run(work: Path, seed=1, seconds=60.0, writes=0, faults=0, keys=2000, control=False, progress=None,
        rejoin_hold=3, gap=(2.0, 4.0), kinds=FAULT_KINDS, bound=1.0, max_seconds=None, near=False,
        near_deletes=True, invalidator_args=(), replica_hold=REPLICA_HOLD):
    """Builds the cluster, runs the workload under a seeded fault schedule until `seconds` have
    passed and at least `writes` writes and `faults` faults were made (each kind at least once
    first, in a shuffled order) — or `max_seconds` have passed — tears everything down and returns the checker's verdict.
    `near`: near caches on the client hosts (the module's doc), sent the invalidators' deletes
    unless `near_deletes` is off; the verdict's `near` says what they served. `invalidator_args`
    are added to both invalidators' command lines; `replica_hold` is invalidator B's `--hold-replica`
    (0: none)."""
    cleanup()  # what a crashed run left
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    cluster = Cluster(work, keys=keys, rejoin_hold=rejoin_hold, control=control, near=near,
                      near_deletes=near_deletes, invalidator_args=invalidator_args, replica_hold=replica_hold)
    fault_log = []
    began = time.time()
    try:
        cluster.start()
        cluster.start_workload(seed)
        started = time.time()
        first = list(kinds)
        rng.shuffle(first)
        last_progress = 0.0
        while True:
            counts = cluster.counts()
            elapsed = time.time() - started
            if elapsed >= seconds and counts["writes"] >= writes and len(fault_log) >= (max(faults, len(kinds)) if kinds else 0):
                break
            if max_seconds is not None and elapsed >= max_seconds:
                break
            if first:
                cluster.fault(first.pop(0), rng, fault_log)
            elif kinds:
                weights = [FAULT_WEIGHTS[FAULT_KINDS.index(k)] for k in kinds]
                cluster.fault(rng.choices(kinds, weights=weights)[0], rng, fault_log)
            cluster.supervise(fault_log)
            time.sleep(rng.uniform(*gap))  # the calm between faults, not synchronisation
            if progress and time.time() - last_progress >= 5:
                last_progress = time.time()
                progress(f"{elapsed:6.0f} s  {counts['writes']} writes  {counts['reads']} reads "
                         f"({counts['local_reads']} local, {counts['near_reads']} near)  {len(fault_log)} faults")
        cluster.stop_workload()
        wall = time.time() - started
    finally:
        stopping = time.time()
        cluster.stop()
        cleanup(owner=os.getpid())
    (work / "replay-polls.json").write_text(json.dumps(cluster.replay_polls))
    regions = {name: host.region for name, host in cluster.net.hosts.items()}
    verdict = checker.check(cluster.ops, regions, cluster.replay_polls, bound=bound,
                            faults=[(f["start"], f["end"]) for f in fault_log])
    spans = [(f["start"], f["end"], set(f["hosts"])) for f in fault_log]
    verdict["availability_per_minute"] = checker.availability(cluster.ops, regions, spans)
    verdict["unanswered_by_fault"] = checker.unanswered_by_fault(
        cluster.ops, regions, [(*span, f["what"]) for span, f in zip(spans, fault_log)])
    verdict["router_failovers"] = cluster.counts()["router_failovers"]
    if near:
        verdict["near"] = {"deletes": near_deletes, **nearcache.summary(verdict, cluster.near_counters, cluster.ops,
                                                                         regions, checker.parse)}
    kinds_done = {}
    for f in fault_log:
        kinds_done[f["kind"]] = kinds_done.get(f["kind"], 0) + 1
    verdict.update({"seed": seed, "control": control, "seconds": round(wall, 1),
                    "setup_seconds": round(started - began, 1),
                    "teardown_and_check_seconds": round(time.time() - stopping, 1),
                    "faults": len(fault_log),
                    "fault_kinds": kinds_done, "fault_log": fault_log,
                    "crashes": {p.name: p.crashes for p in cluster.procs if p.crashes},
                    "toxiproxy_restarts": cluster.toxi.restarts if cluster.toxi else []})
    return verdict
