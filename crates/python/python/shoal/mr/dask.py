"""MapReduce jobs larger than one host, on Dask (docs/design/mapreduce.md, "More than one host").

    from distributed import Client
    import shoal.mr.dask
    client = Client("tcp://scheduler:8786")
    counts = shoal.mr.dask.run(["/data/part-0.txt", "/data/part-1.txt"], client=client,
                               map="shoal.mr.wordcount:map", combine="shoal.mr.wordcount:combine")
    words = shoal.mr.dask.run(shards, client=client, app="wordcount")   # a built-in Rust app

A job's input is a list of shards (files every Dask worker can read at their path). Each shard
is one Dask task: the worker that gets it runs Shoal's shared-memory engine over it on its own
host (the job region in the host's region directory: $SHOAL_MR_REGION_DIR, or /dev/shm;
`workers` and `threads` are per host, elastic there as `shoal.mr.run`'s). Only each shard's
combined result crosses hosts: the shards' results are merged in a tree of Dask tasks
(`fan_in` at a time) by the app's own combine, and the root comes back here.

A Dask worker lost mid-job (its host down, its process killed) costs the shards it was running
and the results it held that no merge had read yet: Dask's scheduler runs those tasks again on
the workers left (from their shard files: each task is a pure function of its shard), and the
merges above them. The engine's job region of a killed worker is left behind in its host's
region directory; the next shard task on that host removes regions whose process is gone.
"""

import itertools
import json
import os
import re

from distributed import WorkerPlugin, as_completed

from .. import _shoal
from . import DEFAULT_LEASE_MS, MapReduceError, _on_region, load

__all__ = ["RegionDirs", "remove_abandoned_regions", "run"]

REGION_DIR_ENV = "SHOAL_MR_REGION_DIR"
_REGION = re.compile(r"shoal-mr-dask-(\d+)-\d+")
_runs = itertools.count()


class RegionDirs(WorkerPlugin):
    """Gives each Dask worker a job-region directory of its own, `base/<worker name>`, as if
    each were a host of its own (tests and benchmarks simulating hosts on one machine):
    `client.register_plugin(RegionDirs(base))`."""

    def __init__(self, base):
        self.base = os.fspath(base)

    def setup(self, worker):
        directory = os.path.join(self.base, re.sub(r"[^A-Za-z0-9_.-]", "_", str(worker.name)))
        os.makedirs(directory, exist_ok=True)
        # The worker's own process (and the engine's worker processes it starts) sees it.
        os.environ[REGION_DIR_ENV] = directory


def run(inputs, client, map=None, combine=None, app=None, args=(), workers=1, threads=1, lease_ms=DEFAULT_LEASE_MS,
        split_bytes=None, reduce_tasks=16, copy_input=False, fan_in=2, progress=None):
    """Runs one job over the shards `inputs` on the Dask cluster of `client` and returns its
    result, equal to the single-host engine's over the shards' concatenation: with `map` and
    `combine` (Python functions, as `shoal.mr.run`'s) a dict in key order; with `app` (a
    built-in app: wordcount, histogram, linreg, strmatch; `args` its "name=value" arguments) its
    result as `shoal mr run APP --json` prints it under "result".

    Per host, as `shoal.mr.run`: `workers` engine processes (the Dask worker's own and
    `workers` - 1 more), `threads` threads each, `lease_ms`, `split_bytes`, `reduce_tasks`,
    `copy_input`. A Python job's functions are imported here first (one that does not import
    raises MapReduceError before any task runs); an error in a shard's job raises here with its
    message (a map's traceback).

    `progress`: called in this thread as tasks finish with a dict of `phase` ("map": the
    shards' jobs; "merge": the tree), `done` and `tasks` of that phase, and `workers` (the
    cluster's Dask workers now).
    """
    inputs = [os.path.abspath(os.fspath(path)) for path in inputs]
    if not inputs:
        raise MapReduceError("a job needs at least one shard")
    if (app is None) == (map is None or combine is None) or (app is not None and (map or combine)):
        raise MapReduceError("give either map and combine (Python functions) or app (a built-in app), not both")
    if fan_in < 2:
        raise MapReduceError(f"fan_in={fan_in} must be 2 or more")
    if workers < 1:
        raise MapReduceError(f"workers={workers} must be 1 or more: a shard's Dask worker runs its engine")
    args = [str(a) for a in args]
    if app is None:
        load(map)
        load(combine)
    else:
        _shoal._mr_check_app(app, args)
    job = _Job(map, combine, app, args, dict(workers=workers, threads=threads, lease_ms=lease_ms,
               split_bytes=split_bytes, reduce_tasks=reduce_tasks, copy_input=copy_input))
    # pure=False: a shard's file may have changed since an earlier run of the same job.
    level = [client.submit(_run_shard, job, path, pure=False, key=f"shoal-mr-shard-{i}-{os.urandom(6).hex()}")
             for i, path in enumerate(inputs)]
    shards, merges = list(level), []
    while len(level) > 1:
        groups = [level[i:i + fan_in] for i in range(0, len(level), fan_in)]
        level = [g[0] if len(g) == 1 else client.submit(_merge, job, *g, pure=False) for g in groups]
        merges += [merge for merge, group in zip(level, groups) if len(group) > 1]
    if progress is not None:
        _report(client, shards, merges, progress)
    return job.result(level[0].result().value)


def _report(client, shards, merges, progress):
    """Calls `progress` as each of the job's tasks finishes (or fails: the caller then raises)."""
    done = {"map": 0, "merge": 0}
    tasks = {"map": len(shards), "merge": len(merges)}
    phase_of = {f.key: "map" for f in shards} | {f.key: "merge" for f in merges}
    for future in as_completed(shards + merges):
        phase = phase_of[future.key]
        done[phase] += 1
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        progress({"phase": phase, "done": done[phase], "tasks": tasks[phase], "workers": workers})


class _Job:
    """What a shard's task needs to run its part: the app (Python functions, or a built-in
    app and its arguments) and the engine's options."""

    def __init__(self, map, combine, app, args, engine):
        self.map, self.combine, self.app, self.args, self.engine = map, combine, app, args, engine

    def run(self, path):
        """This host's part: the engine's job over the shard `path` (a partial result)."""
        directory = remove_abandoned_regions()
        region = os.path.join(directory, f"shoal-mr-dask-{os.getpid()}-{next(_runs)}")
        e = self.engine
        threads = e["threads"]
        if self.app is None:
            def job(start_workers):
                return _shoal._mr_run(region, path, self.map, self.combine, threads, e["lease_ms"], e["split_bytes"],
                                      e["reduce_tasks"], e["copy_input"], start_workers)
        else:
            def job(start_workers):
                return _shoal._mr_run_app(region, path, self.app, self.args, threads, e["lease_ms"], e["split_bytes"],
                                          e["reduce_tasks"], e["copy_input"], start_workers)
        return _on_region(region, job, e["workers"], threads, e["lease_ms"])

    def merge(self, a, b):
        """Partial results `a` and `b` as one, combined by the app's combine."""
        if self.app is None:
            combine = load(self.combine)
            merged = dict(a)
            for key, value in b:
                merged[key] = combine(merged[key], value) if key in merged else value
            return list(merged.items())
        (stage, params, records, length), (_, _, other, other_length) = a, b
        return stage, params, _shoal._mr_merge(self.app, stage, params, records, other), length + other_length

    def result(self, root):
        """The job's result from the root of the merge tree."""
        if self.app is None:
            # The engine's key order (by the keys' encoding), as the single-host result's.
            return dict(sorted(root, key=lambda pair: _shoal._mr_encode(pair[0])))
        stage, params, records, length = root
        return json.loads(_shoal._mr_render(self.app, self.args, length, stage, params, records))


class _Partial:
    """A partial result as Dask ships it: pickled as one object. (Bare, Dask's serializer walks
    lists and tuples and sends each bytes object as a frame of its own: word count's 18 000
    records took 1.2 s to cross from one worker to another, 0.01 s pickled.)"""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return _Partial, (self.value,)


def _run_shard(job, path):
    return _Partial(job.run(path))


def _merge(job, first, *rest):
    merged = first.value
    for other in rest:
        merged = job.merge(merged, other.value)
    return _Partial(merged)


def remove_abandoned_regions():
    """Removes the regions in this host's region directory (which it returns) of shard tasks
    whose process is gone (killed: a task that ends removes its own). Each shard task calls it
    first; `client.run(remove_abandoned_regions)` calls it on every worker."""
    directory = os.environ.get(REGION_DIR_ENV, "/dev/shm")
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return directory
    for name in names:
        match = _REGION.fullmatch(name)
        if match and not _alive(int(match.group(1))):
            try:
                os.remove(os.path.join(directory, name))
            except FileNotFoundError:
                pass  # another task removed it first
    return directory


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True
