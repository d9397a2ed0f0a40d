"""Fixtures of the client suites: one server per test module and server kind.

The kinds come from SHOAL_TEST_TARGETS (see wire.py); each test module runs once per kind,
against a server started for that module (shoal in test mode, `-m 64`), and each test that asks
for `server` starts from an empty cache."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import wire  # noqa: E402  (needs the path above)


def pytest_report_header(config):
    return f"client suites against: {', '.join(wire.targets())} (SHOAL_TEST_TARGETS)"


@pytest.fixture(scope="module", params=wire.targets())
def kind(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def module_server(kind):
    with wire.launch(kind) as s:
        yield s


@pytest.fixture
def server(module_server):
    """The module's server, flushed, and checked to be still serving after the test."""
    wire.flush(module_server)
    yield module_server
    assert module_server.proc.poll() is None, f"{module_server.kind} exited during the test"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "shoal_only: needs a Shoal feature (debugtime); not collected for memcached")


def pytest_collection_modifyitems(config, items):
    """Drops the memcached runs of shoal_only tests; pytest reports them as deselected."""
    dropped = [item for item in items if item.get_closest_marker("shoal_only")
               and getattr(item, "callspec", None) and item.callspec.params.get("kind") != "shoal"]
    if dropped:
        items[:] = [item for item in items if item not in dropped]
        config.hook.pytest_deselected(items=dropped)
