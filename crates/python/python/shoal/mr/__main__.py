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
    r.add_argument("input", nargs="+", help="the input file (with --dask: its shards, one or more)")
    r.add_argument("--map", help="module:function taking bytes, returning pairs or a dict")
    r.add_argument("--combine", help="module:function merging two values")
    r.add_argument("--dask", metavar="ADDRESS",
                   help="run the shards on this Dask scheduler's workers (tcp://host:8786), each host's on its engine")
    r.add_argument("--app", help="with --dask: a built-in app (wordcount, histogram, linreg, strmatch) "
                   "instead of --map and --combine; prints its JSON result")
    r.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", help="with --app: an argument of it")
    r.add_argument("--fan-in", type=int, default=2, help="with --dask: partial results merged per task")
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
        if a.command == "run" and a.dask:
            return run_on_dask(a)
        if a.command == "run":
            if a.app or len(a.input) > 1 or not (a.map and a.combine):
                parser.error("without --dask, run takes one input, --map and --combine (a built-in app: shoal mr run)")
            pairs = run(a.input[0], map=a.map, combine=a.combine, workers=a.workers, threads=a.threads,
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


def run_on_dask(a):
    """`run --dask`: the job over the shards on a Dask cluster (shoal.mr.dask), progress on stderr."""
    try:
        from distributed import Client

        from . import dask
    except ImportError as e:
        raise MapReduceError(f"--dask needs dask.distributed ({e}): pip install 'dask[distributed]'") from e

    def progress(p):
        print(f"{p['phase']}: {p['done']}/{p['tasks']} tasks, {p['workers']} Dask workers", file=sys.stderr)

    try:
        client = Client(a.dask, timeout=10)
    except OSError as e:
        raise MapReduceError(f"cannot reach the Dask scheduler at {a.dask} ({e}): is `dask scheduler` running there?")
    with client:
        result = dask.run(a.input, client=client, map=a.map, combine=a.combine, app=a.app, args=a.arg,
                          workers=a.workers, threads=a.threads, lease_ms=a.lease_ms, split_bytes=a.split_bytes,
                          reduce_tasks=a.reduce_tasks, copy_input=a.copy_input, fan_in=a.fan_in, progress=progress)
    if a.app:
        print(json.dumps(result))
    elif a.json:
        print(json.dumps([[_json(k), _json(v)] for k, v in result.items()]))
    else:
        sys.stdout.writelines(f"{_text(k)}\t{_text(v)}\n" for k, v in result.items())
    return 0


if __name__ == "__main__":
    sys.exit(main())
