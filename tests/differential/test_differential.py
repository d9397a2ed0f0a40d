"""Differential tests: every case of tests/differential/cases/*.txt is replayed against real
memcached and against `shoal server --test-mode`, and the normalized answers must be identical.

memcached's answers are the expected truth. A failure prints the case step by step: the
steps both servers answered alike, then for each differing step the request, memcached's
answer and shoal's answer. Cases marked `@expect-difference` (intended differences from
docs/PROTOCOL.md) must keep differing: they are strict expected failures.

    python3 -m pytest -q tests/differential                           # memcached vs shoal
    SHOAL_DIFF_SELFCHECK=1 python3 -m pytest -q tests/differential    # memcached vs memcached

The self-check replays everything on a second memcached instead of shoal: it proves that the
corpus and the normalization are deterministic, so that a difference is shoal's.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay import diff, load_cases, run_corpus  # noqa: E402
from harness import SHOAL  # noqa: E402

SELFCHECK = os.environ.get("SHOAL_DIFF_SELFCHECK") == "1"
REFERENCE = "memcached"
CANDIDATE = "memcached2" if SELFCHECK else "shoal"
CASES = load_cases()


def _param(case):
    marks = []
    if case.expect_difference and not SELFCHECK:
        marks.append(pytest.mark.xfail(strict=True,
                                       reason=f"intended difference: {case.expect_difference}"))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture(scope="session")
def replays(request):
    """Both servers' transcripts of every selected case, computed once (the servers run
    concurrently; see replay.run_corpus)."""
    if CANDIDATE == "shoal" and not SHOAL.exists():
        pytest.fail(f"{SHOAL} does not exist: build it (cargo build --release) or run the "
                    "self-check with SHOAL_DIFF_SELFCHECK=1")
    wanted = {item.callspec.params["case"].id for item in request.session.items
              if getattr(item, "function", None) is test_case}
    cases = [c for c in CASES if c.id in wanted]
    return run_corpus(cases, [REFERENCE, CANDIDATE])


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case(case, replays):
    problem = diff(case, REFERENCE, replays[REFERENCE][case.id],
                   CANDIDATE, replays[CANDIDATE][case.id])
    assert problem is None, problem


def test_corpus_is_broad():
    """Guards against a corpus that silently lost its files or cases."""
    files = {c.file for c in CASES}
    assert len(files) >= 10, files
    assert len(CASES) >= 150, len(CASES)
    assert sum(c.timed for c in CASES) >= 5
