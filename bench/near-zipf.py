#!/usr/bin/env python3
"""Issue #28's near-cache target (docs/design/near-cache.md, "The two-host Zipf run"): two client
hosts, each with a near cache on its own /dev/shm, in front of a pool of three behind a router,
writes through PostgreSQL and `shoal invalidator`, Zipf 0.99 reads. Runs the workload twice —
without near caches (the client hosts lease-get through the router), then with them — and
reports the share of reads served from the client hosts' shared memory, the pool's request rate
both ways, a local read's latency (`shoal bench latency` on a client host) and the checker's
verdict (tests/cluster/checker.py) of each run. Needs root (network and mount namespaces) and
PostgreSQL, as the fault harness does.

    SHOAL_BIN=<bin> bench/near-zipf.py [--keys 10000] [--seconds 60] [--near-ttl 30] [--json out]

With `--faults kill,pause,cut` the measured window is the fault harness's kinds of fault on a
seeded schedule (tests/near/near_zipf.py, `NearZipf.fault`), and the report adds the checker's
verdict after faults, the answered share per minute outside the faulted host, and the fault log.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "near"))
import near_zipf  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--warmup", type=float, default=30.0, help="seconds before the measured window")
    p.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    p.add_argument("--near-ttl", type=int, default=30)
    p.add_argument("--admit", default="reuse", choices=["all", "reuse", "hot"])
    p.add_argument("--read-rate", type=int, default=1000, help="reads a second per reader thread")
    p.add_argument("--readers", type=int, default=2, help="reader threads per client host")
    p.add_argument("--write-rate", type=int, default=50, help="writes a second (one writer)")
    p.add_argument("--bound", type=float, default=2.0, help="the checker's bound, seconds")
    p.add_argument("--latency-requests", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--only", choices=["near", "direct"], help="run one of the two only")
    p.add_argument("--json", type=Path, help="also write the whole report here")
    p.add_argument("--faults", default="", help="fault kinds during the window: kill,pause,cut (default none)")
    o = p.parse_args()
    why = near_zipf.why_not()
    if why:
        sys.exit(f"near-zipf: cannot run here: {why}")
    report = {}
    for near in (False, True):
        name = "near" if near else "direct"
        if o.only and o.only != name:
            continue
        with tempfile.TemporaryDirectory(prefix=f"near-zipf-{name}-") as work:
            report[name] = near_zipf.run(
                Path(work), near=near, seed=o.seed, keys=o.keys, warmup=o.warmup, seconds=o.seconds,
                near_ttl=o.near_ttl, admit=o.admit, read_rate=o.read_rate, readers=o.readers,
                write_rate=o.write_rate, bound=o.bound, latency_requests=o.latency_requests if near else 0,
                faults=tuple(k for k in o.faults.split(",") if k),
                progress=lambda line, name=name: print(f"[{name}] {line}", file=sys.stderr, flush=True))
        w, c = report[name]["window"], report[name]["checker"]
        print(f"{name}: {w['client_reads_per_second']} client reads/s, local share {w['local_share']}, "
              f"pool {w['pool_requests_per_second']} requests/s ({w['pool_gets_per_second']} gets/s, "
              f"{w['pool_requests_per_client_read']} requests per client read), {w['writes_per_second']} writes/s; "
              f"checker: {c['inconsistent_reads']} stale of {c['value_reads']} value reads "
              f"(bound {c['bound_seconds']} s; at tighter bounds {report[name]['stale_reads_by_bound']}), "
              f"{c['read_errors']} errors", flush=True)
        if "fault_log" in c:
            shares = [m["answered_share"] for m in c["availability_per_minute"]]
            print(f"{name}: {len(c['fault_log'])} faults {sorted({f['kind'] for f in c['fault_log']})}, "
                  f"stale after faults {c['inconsistent_reads']} (strict {c['strict_inconsistent_reads']}), "
                  f"answered share per minute outside the faulted host: min {min(shares, default=None)}, "
                  f"crashes {c['crashes']}", flush=True)
    if "near" in report and "direct" in report:
        d, n = report["direct"]["window"], report["near"]["window"]
        report["pool_requests_per_read_down_by"] = round(
            1 - n["pool_requests_per_client_read"] / d["pool_requests_per_client_read"], 4)
        report["pool_gets_per_read_down_by"] = round(
            1 - n["pool_gets_per_client_read"] / d["pool_gets_per_client_read"], 4)
        print(f"pool requests per client read down by {report['pool_requests_per_read_down_by']:.1%} "
              f"(gets {report['pool_gets_per_read_down_by']:.1%}); local share {n['local_share']:.1%}")
    latency = report.get("near", {}).get("window", {}).get("latency")
    if latency:
        print("latency:", json.dumps(latency))
    if o.json:
        o.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
