"""`python -m shoal.mr run|worker|info`: shoal.mr's command line (docs/MAPREDUCE.md, "From Python")."""

import argparse
import json
import sys

from . import DEFAULT_LEASE_MS, MapReduceError, jobs, run, work


def _text(value):
    return value if isinstance(value, str) else repr(value)


def _json(value):
    # bytes are not JSON: they are printed as text, undecodable bytes escaped.
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m shoal.mr")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a job: this process coordinates and works")
    r.add_argument("input")
    r.add_argument("--map", required=True, help="module:function taking bytes, returning pairs or a dict")
    r.add_argument("--combine", required=True, help="module:function merging two values")
    r.add_argument("--workers", type=int, default=1, help="this process plus N-1 worker processes")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS)
    r.add_argument("--split-bytes", type=int)
    r.add_argument("--reduce-tasks", type=int, default=16)
    r.add_argument("--copy-input", action="store_true")
    r.add_argument("--region", help="region path (default: /dev/shm/shoal-mr-py-PID-N)")
    r.add_argument("--keep-region", action="store_true")
    r.add_argument("--json", action="store_true", help="print [[key, value], ...]")
    w = sub.add_parser("worker", help="work on a region's jobs until it is finished")
    w.add_argument("region")
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--lease-ms", type=int, default=DEFAULT_LEASE_MS)
    w.add_argument("--max-tasks", type=int)
    w.add_argument("--hold-ms", type=int, default=0, help=argparse.SUPPRESS)
    w.add_argument("--spawned", action="store_true", help=argparse.SUPPRESS)
    i = sub.add_parser("info", help="a region's jobs, as JSON")
    i.add_argument("region")
    a = parser.parse_args(argv)
    try:
        if a.command == "run":
            pairs = run(a.input, map=a.map, combine=a.combine, workers=a.workers, threads=a.threads,
                        lease_ms=a.lease_ms, split_bytes=a.split_bytes, reduce_tasks=a.reduce_tasks,
                        copy_input=a.copy_input, region=a.region, keep_region=a.keep_region, pairs=True)
            if a.json:
                print(json.dumps([[_json(k), _json(v)] for k, v in pairs]))
            else:
                sys.stdout.writelines(f"{_text(k)}\t{_text(v)}\n" for k, v in pairs)
        elif a.command == "worker":
            published, lost = work(a.region, a.threads, a.lease_ms, a.max_tasks, a.hold_ms, a.spawned)
            print(f"worker: published {published} task outputs ({lost} runs lost to faster attempts)")
        else:
            print(json.dumps(jobs(a.region)))
    except MapReduceError as e:
        print(f"python -m shoal.mr: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
