#!/usr/bin/env python3
"""Invalidation delivery lag (issue 15): pgbench commits transactions at a fixed rate, each
emitting one key with pg_logical_emit_message; `shoal invalidator` delivers the deletes to the
routers of two clusters (a `shoal router` and two `shoal server`s each, on loopback). Reported
per rate: lag from commit (PostgreSQL's commit timestamp) to the delete acknowledged by each
cluster's router — the router acknowledges after its server deleted — p50/p99/p99.9, and
deletes per second per invalidator core (deletes over the invalidator's CPU seconds).

    bench/invalidation-lag.py [--rates 1000,10000] [--seconds 20] [--json out.json]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from consistency import Proc, SHOAL, Postgres, clusters, free_port, status, wait_for  # noqa: E402

import psycopg  # noqa: E402


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,10000")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--dir", default="/tmp/shoal-invalidation-lag")
    args = parser.parse_args()
    work = Path(args.dir)
    subprocess.run(["rm", "-rf", str(work)], check=True)
    work.mkdir(parents=True)
    script = work / "emit.sql"
    script.write_text("\\set k random(1, 100000)\nSELECT pg_logical_emit_message(true, 'shoal', 'k:' || :k);\n")
    rows = []
    with Postgres() as pg:
        for rate in [int(r) for r in args.rates.split(",")]:
            (work / str(rate)).mkdir()
            procs, routers = clusters(work / str(rate), 2, pin=("taskset", "-c", "1"))
            metrics = free_port()
            slot = f"lag_{rate}"
            invalidator = Proc("invalidator", ["taskset", "-c", "1", str(SHOAL), "invalidator", "--postgres", pg.conninfo,
                               "--slot", slot, *sum((["--destination", f"127.0.0.1:{p}"] for p in routers), []),
                               "--state-dir", str(work / f"state-{rate}"), "--metrics-listen", f"127.0.0.1:{metrics}"],
                               metrics, work / "invalidator.log")
            procs.append(invalidator)
            for p in procs:
                p.start()
            db = psycopg.connect(pg.conninfo, autocommit=True)
            wait_for(lambda: db.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                        (slot,)).fetchone()[0] == 1, 10, "the slot exists")
            cpu_before = cpu_seconds(invalidator.proc.pid)
            pgbench = [str(Path(pg.bin) / "pgbench"), "-n", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres",
                       "-f", str(script), "-R", str(rate), "-T", str(args.seconds), "-c", "8", "-j", "2", "postgres"]
            bench = subprocess.run(["taskset", "-c", "0", *pgbench], capture_output=True, text=True)
            if bench.returncode != 0:
                raise SystemExit(f"pgbench failed: {bench.stderr}")
            committed = int(next(l for l in bench.stdout.splitlines()
                                 if l.startswith("number of transactions actually processed")).split(":")[1].split("/")[0])
            wait_for(lambda: all(d["delivered"] >= committed for d in status(metrics)["destinations"]), 120,
                     "every delete delivered")
            cpu = cpu_seconds(invalidator.proc.pid) - cpu_before
            final = status(metrics)
            for p in procs:
                p.kill()
            row = {"rate": rate, "committed": committed, "achieved_tps": round(committed / args.seconds),
                   "invalidator_cpu_seconds": round(cpu, 2),
                   "deletes_per_core_second": round(2 * committed / cpu) if cpu else None,
                   "destinations": [{k: d[k] for k in ("lag_ms_p50", "lag_ms_p99", "lag_ms_p999", "lag_ms_max",
                                                       "lag_records")} for d in final["destinations"]]}
            print(json.dumps(row))
            rows.append(row)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
