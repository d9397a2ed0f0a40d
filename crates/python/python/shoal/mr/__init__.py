"""MapReduce jobs whose map and combine are Python functions, on Shoal's elastic engine
(docs/MAPREDUCE.md, "From Python"; the engine: docs/design/mapreduce.md).

    import shoal.mr
    counts = shoal.mr.run("book.txt", map="shoal.mr.wordcount:map",
                          combine="shoal.mr.wordcount:combine", workers=4)

`map(piece: bytes)` gets whole lines of the input (about 1 MiB at a time, never a line cut in
two) and returns a dict or an iterable of (key, value) pairs; `combine(a, b)` merges two
values of one key (associative and commutative: it runs in workers, in any grouping).
Functions are named `module:function` so that any worker process, started anywhere with
`python -m shoal.mr worker REGION`, imports the same ones. Keys and values are bytes, str,
int (64-bit), float, bool or None; the result is a dict in key order.
"""

import importlib
import itertools
import os
import subprocess
import sys

from .._shoal import MapReduceError, MapTimeout, _mr_jobs, _mr_run, _mr_work

__all__ = ["MapReduceError", "MapTimeout", "add", "jobs", "load", "run", "work", "worker_command"]

DEFAULT_LEASE_MS = 10_000
# Seconds `run` waits for its worker processes to leave once the job is over (they leave as
# soon as they see the region finished) before killing them.
WORKERS_LEAVE_SECS = 60

_runs = itertools.count()


def add(a, b):
    """The combine that sums (`combine="shoal.mr:add"`): workers add two ints (whose sum fits
    64 bits) or two floats themselves, with no call into Python; other values are added by
    this function."""
    return a + b


def load(spec):
    """The callable `spec` ("package.module:function") names, or MapReduceError saying why not."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise MapReduceError(f"{spec!r} is not of the form module:function")
    try:
        target = importlib.import_module(module_name)
    except Exception as e:
        raise MapReduceError(f"{spec!r}: cannot import module {module_name!r}: {type(e).__name__}: {e}") from e
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise MapReduceError(f"{spec!r}: module {module_name!r} has no {attribute!r}") from None
    if not callable(target):
        raise MapReduceError(f"{spec!r} names a {type(target).__name__} object, which is not callable")
    return target


def worker_command(region, threads=1, lease_ms=DEFAULT_LEASE_MS):
    """The command that starts a worker process on `region` with this Python."""
    return [sys.executable, "-m", "shoal.mr", "worker", os.fspath(region), "--threads", str(threads),
            "--lease-ms", str(lease_ms)]


def _worker_env():
    # The workers import the job's functions from this process's path too (a module found
    # here by a script's directory or a test's sys.path insert is found there).
    paths = [p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def run(input_path, map, combine, workers=1, threads=1, lease_ms=DEFAULT_LEASE_MS, split_bytes=None,
        reduce_tasks=16, copy_input=False, region=None, keep_region=False, pairs=False, client=None,
        progress=None):
    """Runs one job over the text file `input_path` and returns its result: a dict in key
    order (a list of (key, value) pairs if `pairs`).

    `workers=N`: this process works too (`threads` threads) and starts N - 1 worker
    processes; 0 leaves the work to workers started elsewhere on `region` (a path under
    /dev/shm, by default one of this process's, removed at the end unless `keep_region`).
    Both functions are imported here first: one that does not import raises MapReduceError
    before anything starts. A map that raises fails the job: MapReduceError with its
    traceback; so does a combine (when the result is read). Each map call is bounded by
    `lease_ms`: one running longer is stopped (MapTimeout raised in it) and fails the job.

    `progress`: called (from this thread) with a dict of `phase` ("map", then "reduce"),
    `done` and `tasks` of the phase, and `workers` (processes holding one of its tasks now)
    each time they change, polled every 2 ms; one that raises is reported, not fatal.

    `client`: a dask.distributed Client; `input_path` is then a list of shards, each run on
    a Dask worker's host by this engine (shoal.mr.dask.run, where `workers`, `threads` and
    the rest are per host).
    """
    load(map)
    load(combine)
    if workers < 0:
        raise MapReduceError(f"workers={workers} must be 0 or more")
    if client is not None:
        from . import dask

        return dask.run(input_path, client=client, map=map, combine=combine, workers=workers, threads=threads,
                        lease_ms=lease_ms, split_bytes=split_bytes, reduce_tasks=reduce_tasks, copy_input=copy_input,
                        progress=progress)
    region = region or f"/dev/shm/shoal-mr-py-{os.getpid()}-{next(_runs)}"

    def job(start_workers):
        return _mr_run(region, os.fspath(input_path), map, combine, threads if workers > 0 else 0, lease_ms,
                       split_bytes, reduce_tasks, copy_input, start_workers, progress)

    records = _on_region(region, job, workers, threads, lease_ms, keep_region)
    return records if pairs else dict(records)


def _on_region(region, job, workers=1, threads=1, lease_ms=DEFAULT_LEASE_MS, keep_region=False):
    """What `job(start_workers)` returns: `job` calls one of the engine's native runs on
    `region`, which calls `start_workers()` once the region exists (starting `workers` - 1
    worker processes); they are waited for, and the region removed unless `keep_region`."""
    children = []

    def start_workers():
        env = _worker_env()
        for _ in range(workers - 1):
            # --spawned: a worker starting after a short job has ended leaves quietly.
            command = worker_command(region, threads, lease_ms) + ["--spawned"]
            children.append(subprocess.Popen(command, env=env,
                                             stdout=subprocess.DEVNULL))

    try:
        return job(start_workers)
    finally:
        for child in children:
            try:
                child.wait(timeout=WORKERS_LEAVE_SECS)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if not keep_region:
            try:
                os.remove(region)
            except FileNotFoundError:
                pass


def work(region, threads=1, lease_ms=DEFAULT_LEASE_MS, max_tasks=None, hold_ms=0, finished_ok=False):
    """Works on the jobs of `region` until it is finished; returns (published, lost) task
    outputs. `max_tasks` leaves after that many; `hold_ms` holds each claim that long before
    running it (for tests that kill a worker holding claims); `finished_ok` makes a region
    already finished no error."""
    return _mr_work(os.fspath(region), threads, lease_ms, max_tasks, hold_ms, finished_ok)


def jobs(region):
    """The jobs of `region`: dicts of index, state, app, maps and reduces (all, done) and
    claims (task, pid, is a reduce task)."""
    return _mr_jobs(os.fspath(region))
