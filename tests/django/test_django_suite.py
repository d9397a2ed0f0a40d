"""Django's own memcached cache tests (tests/cache/tests.py of Django's sdist: the
BaseMemcachedTests suite) against Debian's memcached and against `shoal server`, side by side:
every test that passes against memcached must pass against Shoal.

Three backends run the suite against each server: Django's PyMemcacheCache and PyLibMCCache,
and shoal.django.ShoalCache (shoal_cache_tests.py), which reads through shared memory from
`shoal server`. Django's runtests.py runs it with our settings (shoal_django_settings.py) and a
runner that writes each test's outcome (outcome_runner.py); the sdist of the installed Django
version is downloaded once into SHOAL_DJANGO_CACHE (default target/django), never committed.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

from harness import ROOT, Server

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SHOAL_DJANGO_CACHE", ROOT / "target" / "django"))
SUITES = ["PyMemcacheCacheTests", "PyLibMCCacheTests", "ShoalCacheTests"]
LABELS = ["cache.tests.PyMemcacheCacheTests", "cache.tests.PyLibMCCacheTests",
          "shoal_cache_tests.ShoalCacheTests"]


def django_tests_dir() -> Path:
    """The tests/ directory of the installed Django version's sdist, downloaded and unpacked
    on first use (into a temporary directory first, so an interrupted run leaves nothing)."""
    release = f"django-{version('django')}"
    tests = CACHE / release / "tests"
    if (tests / "runtests.py").exists():
        return tests
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--no-binary", ":all:", f"django=={version('django')}", "--dest", scratch],
            check=True)
        [sdist] = Path(scratch).glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            tar.extractall(scratch, filter="data")
        unpacked = next(p for p in Path(scratch).iterdir() if p.is_dir())
        if not (tests / "runtests.py").exists():  # another run may have finished first
            shutil.rmtree(CACHE / release, ignore_errors=True)
            unpacked.rename(CACHE / release)
    return tests


def start_suite(tests: Path, server: Server, outcomes: Path, log: Path) -> subprocess.Popen:
    """Django's runtests.py on the three backends, all pointed at `server`."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
        "SHOAL_DJANGO_SERVER": f"127.0.0.1:{server.port}",
        "SHOAL_DJANGO_OUTCOMES": str(outcomes),
        "SHOAL_DJANGO_LOCAL": "1" if server.kind == "shoal" else "0",
    }
    argv = [sys.executable, "runtests.py", "--settings=shoal_django_settings", "--parallel=1",
            "--noinput", "--verbosity=2", *LABELS]
    with open(log, "wb") as out:
        return subprocess.Popen(argv, cwd=tests, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """`{"memcached": ({"Class.test": outcome}, log), "shoal": (...)}`: both runs go at once,
    each against its own server; `log` is runtests.py's output, with every failure's traceback."""
    tests = django_tests_dir()
    scratch = tmp_path_factory.mktemp("django")
    with Server.memcached() as memcached, Server.shoal() as shoal:
        runs = {}
        for server in (memcached, shoal):
            path, log = scratch / f"{server.kind}.json", scratch / f"{server.kind}.log"
            runs[server.kind] = path, log, start_suite(tests, server, path, log)
        for _, _, run in runs.values():
            run.wait()
    results = {}
    for kind, (path, log, _) in runs.items():
        # runtests.py exits 1 when a test fails: that is judged below; no outcomes at all is not.
        assert path.exists(), f"Django's suite against {kind} recorded nothing:\n{log.read_text()}"
        results[kind] = json.loads(path.read_text()), log
    return results


def in_suite(results: dict, suite: str) -> dict:
    return {name.split(".", 1)[1]: outcome for name, outcome in results.items()
            if name.split(".", 1)[0] == suite}


def counts(outcomes: dict) -> str:
    tally = {}
    for outcome in outcomes.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(tally.items()))


@pytest.mark.parametrize("suite", SUITES)
def test_the_suite_ran_against_memcached(outcomes, suite):
    """The comparison means something only if the suite really ran: BaseMemcachedTests has
    some sixty tests, and Debian's memcached passes nearly all of them."""
    on_memcached = in_suite(outcomes["memcached"][0], suite)
    passed = [name for name, outcome in on_memcached.items() if outcome == "passed"]
    assert len(passed) >= 50, f"{suite} on memcached: {counts(on_memcached)}"


@pytest.mark.parametrize("suite", SUITES)
def test_what_passes_on_memcached_passes_on_shoal(outcomes, suite):
    (on_memcached, _), (on_shoal, log) = outcomes["memcached"], outcomes["shoal"]
    on_memcached, on_shoal = in_suite(on_memcached, suite), in_suite(on_shoal, suite)
    print(f"\n{suite}: memcached {counts(on_memcached)}; shoal {counts(on_shoal)}")
    regressed = sorted(name for name, outcome in on_memcached.items()
                       if outcome == "passed" and on_shoal.get(name) != "passed")
    side_by_side = "\n".join(
        f"  {name:<60} memcached: passed   shoal: {on_shoal.get(name, 'not run')}"
        for name in regressed)
    assert not regressed, (
        f"{suite}: passes on memcached but not on Shoal (tracebacks in {log}):\n{side_by_side}")
