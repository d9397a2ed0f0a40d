"""Near caches on the fault harness's hosts (issue #28 item 3; docs/design/near-cache.md, "In the
two-region fault harness"). Data flow, per host with a near cache (a1 a2 | b1 b2):

    near worker (near_worker.py) --get, shared memory--> the near cache's region (this host's /dev/shm)
        local miss --get, network--> near cache (`shoal server --upstream <this host's router>`)
            near miss --mg--> this host's router --> the region's pool (or its Gutter)
        get miss --lease-get / lease-set through the near cache--> the pool's lease; fill from
            the region's database
    invalidator A (a0) --deletes, a spool per destination--> routers a1 a2, near caches a1 a2
    invalidator B (b0) --deletes, once the replica replayed--> routers b1 b2, near caches b1 b2
        (to each near cache's invalidation listener: it drops its copy and forwards nothing;
        each delete twice: at once, and again once both routers of the region acknowledged it)

The near caches' invalidation listeners (`--invalidation-listen`, port 11312) are listed at their
region's invalidator as `--near` (`invalidator_args`): a near cache whose miss refetched through a
router before the pool's copy was deleted would keep the old value, and the invalidator's second
delivery, sent only after the routers acknowledged the delete, removes it. The routers do not
list them (`"near_caches"`): the invalidators are the only source of changes here besides the
readers' fills, and with them every fill through a router (hundreds a second) would be a spool
append per near cache on the router's answer path, for deletes correctness here does not need.
The scenario (scenario.py) builds the near caches with `near_argv`, kills and pauses them like
any process, and reads their counters with `NearCounters` while the run lasts; the control run
sends them no deletes.
"""

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "near"))
from harness import SHOAL  # noqa: E402
from near_zipf import metric  # noqa: E402  (the two-host Zipf run's /metrics reader)

# The near cache's port on its host (the pool's server there has 11211, the router 5000).
NEAR_PORT, NEAR_METRICS_PORT = 11311, 9101
# Its invalidation listener (`--invalidation-listen`): the invalidator's deletes drop the near copy
# there and are not forwarded to the router (which gets the invalidator's own copy).
NEAR_INVALIDATION_PORT = 11312
# The hosts that get one: the client hosts with a router of their own to use as upstream.
NEAR_HOSTS = ("a1", "a2", "b1", "b2")
# Long enough that hot copies serve many reads, short enough that a lost invalidation shows in
# a 30 s control run as well as through the checker; every copy is admitted (the host's working
# set, 2 000 keys, fits).
NEAR_TTL, NEAR_ADMIT = 10, "all"
# The near workers' log sources (tests/cluster/checker.py's last field): `c` a value the get
# returned (the near cache's region through shared memory, or the near cache over the network),
# `C` a value its lease-get returned (the near cache's or the pool's), `D` the database's row
# (a miss, filled under the lease when the reader held it, or read alone when the lease-get failed).
SOURCES = ("c", "C", "D")


def near_argv(host, upstream, rejoin_hold):
    """`shoal server --upstream` on `host`, its region in the host's /dev/shm (a warm restart
    keeps it, held `rejoin_hold` seconds like the pool's servers)."""
    return [str(SHOAL), "server", "-l", host.ip, "-p", str(NEAR_PORT), "-U", "0", "-m", "32", "-t", "1",
            "--upstream", upstream, "--admit", NEAR_ADMIT, "--near-ttl", str(NEAR_TTL),
            "--metrics-listen", f"{host.ip}:{NEAR_METRICS_PORT}",
            "--invalidation-listen", f"{host.ip}:{NEAR_INVALIDATION_PORT}",
            "-e", f"/dev/shm/shoal-near-{host.name}.region", "--rejoin-hold", str(rejoin_hold)]


def address(host):
    return f"{host.ip}:{NEAR_PORT}"


def listeners(hosts):
    """The invalidation listeners of the near caches on `hosts`."""
    return [f"{host.ip}:{NEAR_INVALIDATION_PORT}" for host in hosts]


def invalidator_args(hosts, deliver):
    """The invalidator's `--near` arguments for the near caches on `hosts` (none when not
    `deliver`): each delete sent at once and again once the invalidator's routers acknowledged it."""
    return [arg for a in listeners(hosts) for arg in ("--near", a)] if deliver else []





class NearCounters:
    """The near caches' `local_gets` and `local_hits` summed over the run, polled every second:
    a counter that went down is a restarted process's, whose new counts are added (what the
    killed one counted after its last poll is lost: a second's worth at most)."""

    def __init__(self, hosts, stopping):
        self.hosts, self.stopping = hosts, stopping
        self.last = {h.name: {} for h in hosts}
        self.total = {"local_gets": 0.0, "local_hits": 0.0}
        self.lock = threading.Lock()

    def poll_once(self):
        with self.lock:  # one poll at a time: a poll's older figures must not look like a restart
            for host in self.hosts:
                try:
                    now = {name: metric(host.ip, NEAR_METRICS_PORT, name) for name in self.total}
                except (OSError, ValueError, AssertionError):
                    continue  # killed, paused or cut off: the next poll
                for name, value in now.items():
                    before = self.last[host.name].get(name, 0.0)
                    self.total[name] += value - before if value >= before else value
                    self.last[host.name][name] = value

    def run(self):
        while not self.stopping.is_set():
            self.poll_once()
            self.stopping.wait(1.0)

    def start(self):
        threading.Thread(target=self.run, daemon=True).start()

    def share(self):
        """{local_gets, local_hits, local_share}: the share of the near workers' gets that were
        hits in the host's shared memory."""
        with self.lock:
            gets, hits = self.total["local_gets"], self.total["local_hits"]
        return {"local_gets": int(gets), "local_hits": int(hits),
                "local_share": round(hits / gets, 4) if gets else None}


def summary(verdict, counters, ops, regions, parse):
    """The near caches' part of a verdict: their readers' reads (by the checker's `parse`), how
    many of the inconsistent reads were theirs, the share of the gets made locally that hit
    (`local_share`) and the share of their reads served from shared memory (each read is one get)."""
    _, reads = parse(ops, regions)
    near = [r for r in reads if r[5] in SOURCES]
    bad = [b for h in verdict["inconsistent_keys"].values() for b in h["bad_reads"] if b["source"] in SOURCES]
    share = counters.share()
    served = share["local_hits"] / len(near) if near else None
    return {"reads": len(near), "value_reads": sum(1 for r in near if r[4] is not None and r[4] >= 0),
            "errors": sum(1 for r in near if r[4] is None), "inconsistent_reads": len(bad), **share,
            "reads_served_from_shared_memory": None if served is None else round(served, 4)}
