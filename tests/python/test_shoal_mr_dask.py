"""`shoal.mr.dask`: a job over several shards on a real `dask.distributed` cluster (`dask
scheduler` on 127.0.0.1 and two `dask worker`s, each a simulated host: started under `unshare
--mount` with a tmpfs of its own on /dev/shm, so that neither sees the other's job regions).
Its results equal the single-host engine's over the shards' concatenation, for a Python job and
for the built-in word count and histogram, also run as `shoal mr run APP --dask ADDRESS SHARD…`;
a Dask worker SIGKILLed while its shard's job runs changes nothing (Dask runs the shard again);
an app of chained jobs, a map that raises and a `module:function` that does not import are
refused with clear errors, and so is `shoal mr run --dask` without the Python packages. Every
wait is for a condition, with a deadline. Needs root (mount namespaces) and util-linux."""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

# dask[distributed] is in tests/requirements.txt: without it this file fails to import, loudly,
# rather than skipping.
import distributed

import shoal.mr
import shoal.mr.dask
import shoal.mr.wordcount
from harness import SHOAL, wait_for

WORDCOUNT = {"map": "shoal.mr.wordcount:map", "combine": "shoal.mr.wordcount:combine"}
DEADLINE_SECS = 120
GATE = re.compile(rb"^#gate (\S+)$", re.MULTILINE)


def gated_map(piece):
    """Word count's map, except that a piece holding a line `#gate PATH` first notes this
    process in PATH.log and waits (bounded) for PATH to exist: a test holds a shard's job
    running until it has killed the worker running it."""
    gate = GATE.search(piece)
    if gate:
        path = gate.group(1).decode()
        with open(path + ".log", "a") as log:
            log.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + DEADLINE_SECS
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the test never opened the gate {path}")
            time.sleep(0.02)
    return shoal.mr.wordcount.map(piece)


def raising_map(piece):
    if b"poison" in piece:
        raise ValueError("a poisoned shard")
    return {}


HOSTS = 2
HOST_SHM = "size=1g,mode=1777"
# A host's worker: in a mount namespace of its own, a tmpfs on /dev/shm ($0 names it), then
# the program. The namespace, and the tmpfs with it, ends with its last process.
OWN_DEV_SHM = 'mount -t tmpfs -o {} "$0" /dev/shm && exec "$@"'.format(HOST_SHM)


def shm_files():
    """Shoal's files in /dev/shm (on a Dask worker: its host's own), not Python's semaphores."""
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith("shoal"))


def touch_in_shm(*names):
    for name in names:
        Path("/dev/shm", name).touch()


def remove_from_shm(*names):
    for name in names:
        Path("/dev/shm", name).unlink(missing_ok=True)


def start_group(command, env, log):
    """`command` as the leader of a process group of its own (stopped as one by stop_group), its
    output in the file `log`."""
    with open(log, "wb") as output:
        return subprocess.Popen(command, env=env, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=output, stderr=subprocess.STDOUT)


def stop_group(leader):
    """Stops `leader`'s process group (SIGTERM, then SIGKILL past the deadline) and waits until
    none of its processes is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(leader.pid, sig)
        except ProcessLookupError:
            break
        try:
            leader.wait(timeout=DEADLINE_SECS / 4)
            break
        except subprocess.TimeoutExpired:
            continue
    leader.wait(timeout=DEADLINE_SECS)

    def group_gone():
        try:
            os.killpg(leader.pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_for(f"process group {leader.pid} to end", group_gone, seconds=DEADLINE_SECS)


@pytest.fixture(scope="module")
def cluster():
    """`dask scheduler` on 127.0.0.1 and HOSTS `dask worker`s (one thread each, with a nanny that
    restarts a killed worker), each in a mount namespace of its own with its own tmpfs on
    /dev/shm; every process stopped, and so every such mount gone, at the end."""
    here = Path(__file__).resolve().parent
    # Workers import this module (gated_map, shm_files) and, through it, tests/harness.py.
    path = [str(here), str(here.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    scratch = Path(tempfile.mkdtemp(prefix="shoal-mr-dask-test-"))  # under /tmp: not a host's
    groups = []
    try:
        scheduler_file = scratch / "scheduler.json"
        groups.append(start_group([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                   "--port", "0", "--no-dashboard", "--scheduler-file", scheduler_file], env,
                                  scratch / "scheduler.log"))

        def address():
            try:
                return json.loads(scheduler_file.read_text())["address"]
            except (FileNotFoundError, ValueError, KeyError):
                return None  # not written yet, or half written
        address = wait_for("the scheduler's address", address, seconds=DEADLINE_SECS)
        for i in range(HOSTS):
            groups.append(start_group(
                ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", OWN_DEV_SHM, f"shoal-host-{i}",
                 sys.executable, "-m", "distributed.cli.dask_worker", address, "--name", f"host-{i}",
                 "--host", "127.0.0.1", "--nthreads", "1", "--no-dashboard",
                 "--local-directory", scratch / f"host-{i}"], env, scratch / f"host-{i}.log"))
        with distributed.Client(address, timeout=DEADLINE_SECS) as client:
            client.wait_for_workers(HOSTS, timeout=DEADLINE_SECS)
            yield client
    finally:
        for group in reversed(groups):
            stop_group(group)
        shutil.rmtree(scratch, ignore_errors=True)


def test_each_dask_worker_has_a_dev_shm_of_its_own(cluster):
    client = cluster
    marker = f"shoal-mr-dask-test-{os.getpid()}"
    client.run(touch_in_shm, marker)
    try:
        seen = client.run(shm_files)
        devices = client.run(os.stat, "/dev/shm")
    finally:
        client.run(remove_from_shm, marker)
    assert len(seen) == HOSTS and all(files == [marker] for files in seen.values()), seen
    assert not Path("/dev/shm", marker).exists(), "the hosts' /dev/shm is not this process's"
    assert len({d.st_dev for d in devices.values()} | {os.stat("/dev/shm").st_dev}) == HOSTS + 1


def text_shards(directory, count, lines=4000, gate=None):
    """`count` text files of random words (the first line of each `#gate GATE` if `gate`) and
    their concatenation, in `directory`."""
    rng = random.Random(count)
    vocabulary = ["Alpha", "beta", "GAMMA", "delta", "x1", "café", "naïve", "end", "Ω", "3.5"]
    shards = []
    for i in range(count):
        body = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12))) for _ in range(lines)]
        path = directory / f"shard-{i}.txt"
        path.write_text("\n".join(([f"#gate {gate}"] if gate else []) + body) + "\n", encoding="utf-8")
        shards.append(path)
    whole = directory / "all.txt"
    whole.write_bytes(b"".join(p.read_bytes() for p in shards))
    return shards, whole


def single_host(app, path, *args):
    """`shoal mr run APP PATH --json`'s result."""
    out = subprocess.run([SHOAL, "mr", "run", app, path, "--json", *args], capture_output=True, text=True,
                         check=True, timeout=DEADLINE_SECS).stdout
    return json.loads(out)["result"]


def test_a_python_job_over_shards_equals_the_single_host_run(cluster, tmp_path):
    client = cluster
    shards, whole = text_shards(tmp_path, 5)
    expected = shoal.mr.run(whole, **WORDCOUNT, split_bytes=16 << 10)
    assert expected == dict(Counter(re.findall(r"[a-z0-9]+", whole.read_text().lower())))
    # Two engine processes per host (the Dask worker's and one it starts), a merge of three.
    result = shoal.mr.dask.run(shards, client=client, **WORDCOUNT, workers=2, split_bytes=16 << 10, fan_in=3)
    assert result == expected and list(result) == list(expected), "same counts, same key order"
    # shoal.mr.run with a client is the same thing.
    assert shoal.mr.run(shards, **WORDCOUNT, client=client) == expected
    # Each host's job regions are gone.
    assert list(client.run(shm_files).values()) == [[]] * HOSTS


def test_the_command_line_and_progress(cluster, tmp_path):
    client = cluster
    shards, whole = text_shards(tmp_path, 3)
    expected = shoal.mr.run(whole, **WORDCOUNT)
    reports = []
    assert shoal.mr.dask.run(shards, client=client, **WORDCOUNT, progress=reports.append) == expected
    # Three shards' jobs and two merges (3 -> 2 -> 1), each reported as it finished (the first
    # merge may finish before the third shard), the root last.
    for phase, tasks in (("map", 3), ("merge", 2)):
        assert [(r["done"], r["tasks"]) for r in reports if r["phase"] == phase] == \
            [(n, tasks) for n in range(1, tasks + 1)], reports
    assert reports[-1]["phase"] == "merge" and len(reports) == 5, reports
    assert all(r["workers"] == 2 for r in reports), reports
    address = client.scheduler.address
    command = [sys.executable, "-m", "shoal.mr", "run", *map(str, shards), "--dask", address]
    python = subprocess.run(command + ["--map", WORDCOUNT["map"], "--combine", WORDCOUNT["combine"], "--json"],
                            capture_output=True, text=True, timeout=DEADLINE_SECS)
    assert python.returncode == 0 and dict(json.loads(python.stdout)) == expected, python.stderr
    assert "merge: 2/2 tasks, 2 Dask workers" in python.stderr, python.stderr
    rust = subprocess.run(command + ["--app", "wordcount", "--arg", "top=2"], capture_output=True, text=True,
                          timeout=DEADLINE_SECS)
    assert rust.returncode == 0 and json.loads(rust.stdout) == single_host("wordcount", whole, "--arg", "top=2")
    refused = subprocess.run([sys.executable, "-m", "shoal.mr", "run", *map(str, shards), "--map", WORDCOUNT["map"],
                              "--combine", WORDCOUNT["combine"]], capture_output=True, text=True,
                             timeout=DEADLINE_SECS)
    assert refused.returncode == 2 and "without --dask, run takes one input" in refused.stderr, refused.stderr


def test_shoal_mr_run_dask_hands_the_job_to_python(cluster, tmp_path):
    client = cluster
    shards, whole = text_shards(tmp_path, 3)
    # The Rust command line's flags reach each host's engine (per host: two engine processes,
    # 16K map tasks) and the merge tree (a fan-in of 3).
    rust = subprocess.run([SHOAL, "mr", "run", "wordcount", *shards, "--dask", client.scheduler.address, "--json",
                           "--arg", "top=4", "--workers", "2", "--split-bytes", "16K", "--fan-in", "3"],
                          capture_output=True, text=True, timeout=DEADLINE_SECS)
    assert rust.returncode == 0, rust.stderr
    printed = json.loads(rust.stdout)
    assert printed["app"] == "wordcount" and printed["mode"] == "dask" and printed["region"] is None, printed
    assert printed["result"] == single_host("wordcount", whole, "--arg", "top=4")
    assert "merge: 1/1 tasks, 2 Dask workers" in rust.stderr, rust.stderr
    # A shard that does not exist fails the job with the Python package's message.
    missing = subprocess.run([SHOAL, "mr", "run", "wordcount", shards[0], tmp_path / "no-such-shard", "--dask",
                              client.scheduler.address], capture_output=True, text=True, timeout=DEADLINE_SECS)
    assert missing.returncode == 1 and "no-such-shard" in missing.stderr, missing.stderr
    assert "shoal: the Dask job failed" in missing.stderr, missing.stderr


def test_shoal_mr_run_dask_refuses_what_it_cannot_run(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("a b c\n")
    # An interpreter that cannot import shoal nor distributed: site-packages left out.
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    bare.chmod(0o755)
    cases = [
        (["--dask", "tcp://127.0.0.1:1", "--python", bare],
         "cannot import shoal and distributed: pip install shoal 'dask[distributed]'"),
        (["--dask", "tcp://127.0.0.1:1", "--python", tmp_path / "no-such-python"],
         "cannot be started"),
        (["--dask", "tcp://127.0.0.1:1", "--region", tmp_path / "region"], "--region is for a run on this host"),
        (["--dask", "tcp://127.0.0.1:1", "--mode", "rayon"], "--mode is for a run on this host"),
        ([path], "2 inputs: a run on this host takes one input file"),
    ]
    for flags, says in cases:
        cli = subprocess.run([SHOAL, "mr", "run", "wordcount", path, *flags], capture_output=True, text=True,
                             timeout=DEADLINE_SECS)
        assert cli.returncode == 1 and says in cli.stderr, (flags, cli.stderr)


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "input.txt"
    path.write_text("a b c\n")
    cli = subprocess.run([sys.executable, "-m", "shoal.mr", "run", path, "--dask", f"tcp://127.0.0.1:{port}",
                          "--app", "wordcount"], capture_output=True, text=True, timeout=DEADLINE_SECS)
    assert cli.returncode == 1, cli.stderr
    assert f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port}" in cli.stderr, cli.stderr


@pytest.mark.parametrize("app", ["wordcount", "histogram"])
def test_a_built_in_app_over_shards_equals_the_single_host_run(cluster, tmp_path, app):
    client = cluster
    whole = tmp_path / "input"
    subprocess.run([SHOAL, "mr", "generate", app, whole, "--size", "3M", "--seed", "5"], check=True,
                   capture_output=True, timeout=DEADLINE_SECS)
    data = whole.read_bytes()
    # Three shards, cut where the app's records end (a line; a pixel of 3 bytes).
    cuts = [0]
    for i in (1, 2):
        at = len(data) * i // 3
        cuts.append(data.index(b"\n", at) + 1 if app == "wordcount" else at - at % 3)
    cuts.append(len(data))
    shards = []
    for i, (start, end) in enumerate(zip(cuts, cuts[1:])):
        shards.append(tmp_path / f"shard-{i}")
        shards[-1].write_bytes(data[start:end])
    result = shoal.mr.dask.run(shards, client=client, app=app, split_bytes=256 << 10)
    assert result == single_host(app, whole)
    if app == "wordcount":
        # Arguments reach the shards' jobs and the rendering.
        top = shoal.mr.dask.run(shards, client=client, app=app, args=["top=3", "words=unicode"])
        assert top == single_host(app, whole, "--arg", "top=3", "--arg", "words=unicode")
        assert len(top["words"]) == 3


def test_a_dask_worker_killed_mid_job_changes_nothing(cluster, tmp_path):
    client = cluster
    gate = tmp_path / "gate"
    shards, whole = text_shards(tmp_path, 2, gate=gate)
    job = {"map": f"{__name__}:gated_map", "combine": WORDCOUNT["combine"]}
    outcome = {}

    def run():
        try:
            outcome["result"] = shoal.mr.dask.run(shards, client=client, **job, lease_ms=600_000)
        except Exception as e:  # the test thread asserts on it
            outcome["error"] = e

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    log = Path(f"{gate}.log")
    # A shard's map is held at the gate inside a worker's engine: kill that Dask worker.
    first = int(wait_for("a shard's map at the gate", lambda: log.exists() and log.read_text().split()[:1], seconds=DEADLINE_SECS)[0])
    assert first in client.run(os.getpid).values(), "the gated map runs in a Dask worker's own process"
    os.kill(first, signal.SIGKILL)
    gate.touch()
    runner.join(timeout=DEADLINE_SECS)
    assert not runner.is_alive()
    # The killed shard ran again, in a live worker (Dask re-ran the task from its shard file);
    # the other shard ran once.
    runs = log.read_text().split()
    assert runs.count(str(first)) == 1 and len(runs) == len(shards) + 1, runs
    assert outcome.get("result") == shoal.mr.run(whole, **job), outcome.get("error")
    # The killed worker's region may be left in its host's /dev/shm (unless the shard ran again
    # there): the next shard task there (in the worker its nanny restarted), or this, removes it.
    client.wait_for_workers(HOSTS, timeout=DEADLINE_SECS)
    client.run(shoal.mr.dask.remove_abandoned_regions)
    assert list(client.run(shm_files).values()) == [[]] * HOSTS


def test_regions_of_processes_gone_are_removed_and_others_kept(cluster):
    client = cluster
    gone = subprocess.Popen(["true"])
    gone.wait()
    # This test's process is alive (the hosts share the pid namespace).
    kept = [f"shoal-mr-dask-{os.getpid()}-0", "shoal-unrelated"]
    client.run(touch_in_shm, f"shoal-mr-dask-{gone.pid}-0", *kept)
    try:
        client.run(shoal.mr.dask.remove_abandoned_regions)
        assert list(client.run(shm_files).values()) == [kept] * HOSTS
    finally:
        client.run(remove_from_shm, *kept)


def test_an_app_of_chained_jobs_is_refused(cluster, tmp_path):
    client = cluster
    whole = tmp_path / "points"
    generated = subprocess.run([SHOAL, "mr", "generate", "kmeans", whole, "--size", "64K", "--json"], check=True,
                               capture_output=True, text=True, timeout=DEADLINE_SECS).stdout
    args = json.loads(generated)["args"]
    with pytest.raises(shoal.mr.MapReduceError, match="kmeans runs chained jobs.*cannot run shard by shard"):
        shoal.mr.dask.run([whole, whole], client=client, app="kmeans", args=args)


def test_a_map_that_raises_fails_the_job_with_its_traceback(cluster, tmp_path):
    client = cluster
    shards, _ = text_shards(tmp_path, 2)
    with shards[1].open("a") as f:
        f.write("poison\n")
    with pytest.raises(shoal.mr.MapReduceError) as failure:
        shoal.mr.dask.run(shards, client=client, map=f"{__name__}:raising_map", combine="shoal.mr:add")
    message = str(failure.value)
    assert "Traceback" in message and "ValueError: a poisoned shard" in message, message


@pytest.mark.parametrize("job, says", [
    ({"map": "no_such_module_for_shoal:map", "combine": "shoal.mr:add"}, "cannot import module"),
    ({"app": "no-such-app"}, "no-such-app"),
    ({"app": "wordcount", "map": "shoal.mr.wordcount:map"}, "either map and combine"),
    ({"app": "wordcount", "fan_in": 1}, "fan_in=1 must be 2 or more"),
    ({"app": "wordcount", "args": ["top"]}, "not of the form name=value"),
    ({"app": "wordcount", "workers": 0}, "workers=0 must be 1 or more"),
])
def test_bad_jobs_are_refused_before_any_shard_runs(cluster, tmp_path, job, says):
    client = cluster
    path = tmp_path / "input.txt"
    path.write_text("a b c\n")
    with pytest.raises(shoal.mr.MapReduceError, match=re.escape(says)):
        shoal.mr.dask.run([path], client=client, **job)
    with pytest.raises(shoal.mr.MapReduceError, match="at least one shard"):
        shoal.mr.dask.run([], client=client, **WORDCOUNT)
