"""`shoal.mr`: MapReduce jobs whose map and combine are Python functions, on the elastic engine.
Word count equals `shoal mr run wordcount`'s; a worker process SIGKILLed while it holds tasks in
the map phase, and one in the reduce phase, changes nothing; a map or combine that raises fails
the job with its traceback, a map that hangs is stopped at the task lease; a `module:function`
that does not import is refused before anything starts.
Every wait is for a condition, with a deadline."""

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

import shoal.mr
import shoal.mr.wordcount
from harness import SHOAL, wait_for

WORDCOUNT = {"map": "shoal.mr.wordcount:map", "combine": "shoal.mr.wordcount:combine"}
DEADLINE_SECS = 60


def raising_map(piece):
    if b"poison" in piece:
        raise ValueError("a poisoned record")
    return {}


def sum_values(a, b):
    return a + b


def hanging_map(piece):
    while True:
        pass


def raising_combine(a, b):
    raise KeyError("no combining")


def slow_map(piece):
    time.sleep(0.01)  # the map phase lasts past the coordinator's first polls
    return shoal.mr.wordcount.map(piece)


@pytest.fixture
def text(tmp_path):
    """A text file of mixed-case words, digits and non-ASCII letters, and its word counts by
    word count's ASCII rule."""
    rng = random.Random(7)
    vocabulary = ["Alpha", "beta", "GAMMA", "delta", "x1", "café", "naïve", "end", "Ω", "3.5"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 12))) for _ in range(6000)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    counts = Counter(w.decode() for w in re.findall(rb"[a-z0-9]+", path.read_bytes().lower()))
    return path, dict(counts)


def worker(region, *extra):
    return subprocess.Popen(shoal.mr.worker_command(region) + list(extra), stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})


def test_word_count_equals_the_rust_engines(text):
    path, expected = text
    result = shoal.mr.run(path, **WORDCOUNT, workers=2, split_bytes=16 << 10)
    rust = subprocess.run([SHOAL, "mr", "run", "wordcount", path, "--json", "--workers", "2"],
                          capture_output=True, text=True, check=True,
                          timeout=DEADLINE_SECS)
    assert result == dict(json.loads(rust.stdout)["result"]["words"]) == expected
    assert list(result) == sorted(result), "the result comes in key order"
    # The command line prints the same pairs.
    cli = subprocess.run([sys.executable, "-m", "shoal.mr", "run", path, "--map", WORDCOUNT["map"],
                          "--combine", WORDCOUNT["combine"], "--json"], capture_output=True, text=True, check=True,
                          timeout=DEADLINE_SECS)
    assert dict(json.loads(cli.stdout)) == expected


@pytest.mark.parametrize("phase", ["map", "reduce"])
def test_a_worker_killed_holding_tasks_loses_nothing(text, tmp_path, phase):
    path, expected = text
    region = f"/dev/shm/shoal-mr-test-{os.getpid()}-{phase}"
    outcome = {}

    def coordinate():
        try:
            outcome["result"] = shoal.mr.run(path, **WORDCOUNT, workers=0, region=region, lease_ms=60_000,
                                             split_bytes=16 << 10)
        except Exception as e:  # the test thread asserts on it
            outcome["error"] = e

    # A daemon: if the test fails, a coordinator left waiting for workers does not keep
    # pytest from exiting.
    coordinator = threading.Thread(target=coordinate, daemon=True)
    coordinator.start()
    workers = []
    try:
        job = wait_for("the job", lambda: os.path.exists(region) and _running(region))
        if phase == "reduce":
            # A worker that does every map task and leaves, so the victim can only claim reduces.
            workers.append(worker(region, "--max-tasks", str(job["maps"][0])))
            assert workers[-1].wait(timeout=DEADLINE_SECS) == 0
        # The victim holds each claim for a minute, with a lease as long: only its death frees it.
        victim = worker(region, "--threads", "2", "--lease-ms", "60000", "--hold-ms", "60000")
        workers.append(victim)
        held = wait_for("the victim's claims",
                        lambda: [c for c in _running(region)["claims"] if c[1] == victim.pid][1:] and
                        [c for c in _running(region)["claims"] if c[1] == victim.pid])
        assert all(reduce == (phase == "reduce") for _, _, reduce in held), held
        victim.kill()
        victim.wait()
        rescuer = worker(region, "--lease-ms", "60000")
        workers.append(rescuer)
        coordinator.join(timeout=DEADLINE_SECS)
        assert not coordinator.is_alive()
        assert outcome.get("result") == expected, outcome.get("error")
        out, _ = rescuer.communicate(timeout=DEADLINE_SECS)
        assert rescuer.returncode == 0 and "(0 runs lost" in out, out
    finally:
        for w in workers:
            w.kill()
            w.wait()
        coordinator.join(timeout=DEADLINE_SECS)


def _running(region):
    try:
        jobs = shoal.mr.jobs(region)
    except shoal.mr.MapReduceError:
        return None  # not created yet
    return next((j for j in jobs if j["state"] == "running"), None)


def test_progress_is_reported_phase_by_phase(text):
    path, expected = text
    reports = []
    result = shoal.mr.run(path, map=f"{__name__}:slow_map", combine=WORDCOUNT["combine"], workers=2,
                          split_bytes=16 << 10, progress=reports.append)
    assert result == expected
    phases = [r["phase"] for r in reports]
    assert phases and phases[0] == "map" and phases == sorted(phases), reports  # map, then reduce
    for phase in set(phases):
        of_phase = [r for r in reports if r["phase"] == phase]
        assert len({r["tasks"] for r in of_phase}) == 1, of_phase
        assert [r["done"] for r in of_phase] == sorted(r["done"] for r in of_phase), of_phase
        assert all(0 <= r["done"] <= r["tasks"] and 0 <= r["workers"] <= 2 for r in of_phase), of_phase
    assert reports[0]["tasks"] > 1, "the job has several map tasks"


def test_a_map_that_raises_fails_the_job_with_its_traceback(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("fine\n" * 1000 + "poison\n")
    with pytest.raises(shoal.mr.MapReduceError) as failure:
        shoal.mr.run(path, map=f"{__name__}:raising_map", combine=f"{__name__}:sum_values", workers=2)
    message = str(failure.value)
    assert "Traceback" in message and "raising_map" in message, message
    assert "ValueError: a poisoned record" in message, message


def test_a_map_that_hangs_is_stopped_at_the_task_lease(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("a b c\n" * 100)
    with pytest.raises(shoal.mr.MapReduceError) as failure:
        shoal.mr.run(path, map=f"{__name__}:hanging_map", combine=f"{__name__}:sum_values", lease_ms=300)
    message = str(failure.value)
    assert "ran past the task lease (300 ms)" in message and "hanging_map" in message, message
    assert "MapTimeout" in message, message


def test_a_combine_that_raises_fails_the_job_with_its_traceback(text):
    path, _ = text
    with pytest.raises(shoal.mr.MapReduceError) as failure:
        shoal.mr.run(path, map=WORDCOUNT["map"], combine=f"{__name__}:raising_combine", workers=2,
                     split_bytes=16 << 10)
    message = str(failure.value)
    assert "Traceback" in message and "KeyError: 'no combining'" in message, message


@pytest.mark.parametrize("spec, says", [
    ("no_such_module_for_shoal:map", "cannot import module 'no_such_module_for_shoal'"),
    ("shoal.mr.wordcount:no_such_function", "has no 'no_such_function'"),
    ("shoal.mr.wordcount", "is not of the form module:function"),
    ("shoal.mr:DEFAULT_LEASE_MS", "names a int object, which is not callable"),
])
def test_a_bad_module_function_is_refused_before_anything_starts(tmp_path, spec, says):
    path = tmp_path / "input.txt"
    path.write_text("a b c\n")
    region = tmp_path / "region"
    with pytest.raises(shoal.mr.MapReduceError, match=re.escape(says)):
        shoal.mr.run(path, map=spec, combine=WORDCOUNT["combine"], workers=2, region=region, keep_region=True)
    assert not region.exists()
    cli = subprocess.run([sys.executable, "-m", "shoal.mr", "run", path, "--map", WORDCOUNT["map"],
                          "--combine", spec], capture_output=True, text=True, timeout=DEADLINE_SECS)
    assert cli.returncode == 1 and says in cli.stderr, cli.stderr
