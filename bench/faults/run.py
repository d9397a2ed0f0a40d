#!/usr/bin/env python3
"""The long run of the fault harness over simulated hosts (issue #26; docs/design/faults.md,
"The fault harness"): two regions on nine network namespaces (Gutter in each), writers and
look-aside readers on every host, a seeded schedule of faults, and the Polaris-style checker's
verdict.

    nice -n 19 bench/faults/run.py --writes 1000000 --faults 300 --seed 1 --json out.json
    bench/faults/run.py --seconds 30 --kinds kill --control   # hold and ack rule off: must find some
    bench/faults/run.py --seconds 300 --seed 1 --bound 1 --near   # near caches on a1 a2 b1 b2

Root is needed (namespaces). A progress line goes to standard error every 5 s; the verdict
(without the fault log and key histories, which --json keeps) to standard output. Exits 1 when
an inconsistency was found (0 in a --control run that finds some).
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "cluster"))
import cluster  # noqa: E402
import scenario  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=0, help="run until at least this many committed writes")
    parser.add_argument("--faults", type=int, default=0, help="and at least this many faults")
    parser.add_argument("--seconds", type=float, default=60.0, help="and at least this long")
    parser.add_argument("--max-seconds", type=float, help="stop then even if --writes or --faults is not reached")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--rejoin-hold", type=int, default=3, help="the servers' --rejoin-hold")
    parser.add_argument("--control", action="store_true",
                        help="servers without --rejoin-hold, invalidators with --ack-rule off")
    parser.add_argument("--kinds", default=",".join(cluster.FAULT_KINDS),
                        help="the kinds of fault to inject, comma-separated (empty: none)")
    parser.add_argument("--bound", type=float, default=1.0, help="seconds after a write's visibility (and "
                        "after a fault's end) by which every read must see it")
    parser.add_argument("--near", action="store_true", help="near caches on the client hosts (tests/cluster/near.py)")
    parser.add_argument("--near-without-deletes", action="store_true",
                        help="with --near: the invalidators send the near caches nothing (a control: must find some)")
    parser.add_argument("--invalidator-arg", action="append", default=[], metavar="ARG",
                        help="added to both invalidators' command lines (repeatable; e.g. "
                        "--invalidator-arg=--snapshot-every-ms=0)")
    parser.add_argument("--replica-hold", type=int, default=scenario.REPLICA_HOLD, metavar="SECONDS",
                        help="invalidator B's --hold-replica (0: the replica is not held)")
    parser.add_argument("--json", help="write the whole verdict here")
    parser.add_argument("--dir", default="/tmp/shoal-faults", help="logs and the operations' histories")
    args = parser.parse_args()
    why = cluster.missing_privileges()
    if why:
        raise SystemExit(f"cannot build the simulated hosts: {why}")
    if not cluster.ensure_toxiproxy():
        raise SystemExit(f"Toxiproxy is missing at {cluster.TOXIPROXY} and Go is missing to build it")
    verdict = scenario.run(Path(args.dir), seed=args.seed, seconds=args.seconds, writes=args.writes,
                           faults=args.faults, keys=args.keys, control=args.control,
                           rejoin_hold=args.rejoin_hold, kinds=tuple(k for k in args.kinds.split(",") if k),
                           bound=args.bound, max_seconds=args.max_seconds, near=args.near,
                           near_deletes=not args.near_without_deletes, invalidator_args=args.invalidator_arg,
                           replica_hold=args.replica_hold,
                           progress=lambda line: print(line, file=sys.stderr))
    if args.json:
        Path(args.json).write_text(json.dumps(verdict, indent=1))
    short = {k: v for k, v in verdict.items() if k not in ("fault_log", "inconsistent_keys")}
    short["inconsistent_keys"] = sorted(verdict["inconsistent_keys"])[:50]
    print(json.dumps(short, indent=1))
    found = verdict["inconsistent_reads"] > 0
    sys.exit(0 if found == (args.control or args.near_without_deletes) else 1)


if __name__ == "__main__":
    main()
