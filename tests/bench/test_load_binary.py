"""`shoal bench load --protocol binary` (memcached's binary protocol: GETK, GETKQ…NOOP multigets,
SET) against real memcached and a real `shoal server`: every request answered, no errors, and
after a prefill every get hits. `fill` speaks binary too, and a server that refuses binary is
reported with the fix."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import SHOAL, Server  # noqa: E402

SERVERS = {"memcached": Server.memcached, "shoal": Server.shoal}

# Each mode's extra options; gets run after a prefill of every key.
MODES = {
    "get": ["--get-ratio", "1", "--prefill"],
    "set": ["--get-ratio", "0"],
    "multiget": ["--get-ratio", "1", "--prefill", "--multiget", "10"],
    "pipelined-get": ["--get-ratio", "1", "--prefill", "--pipeline", "8", "--connections", "4"],
}


def bench(*args, timeout=60):
    return subprocess.run([str(SHOAL), "bench", *args], capture_output=True, text=True, timeout=timeout)


def load_binary(server, *args):
    run = bench("load", "--server", f"127.0.0.1:{server.port}", "--protocol", "binary", "--json", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", SERVERS)
def test_binary_load_is_answered_without_errors(kind, mode):
    with SERVERS[kind]() as server:
        report = load_binary(server, "--keys", "5000", "--duration", "1", *MODES[mode])
    assert report["protocol"] == "binary" and report["errors"] == 0, report
    assert report["requests"] > 100, report
    if mode == "set":
        assert report["sets"] == report["requests"] and report["gets"] == 0
    else:
        keys_per_get = 10 if mode == "multiget" else 1
        assert report["hits"] > 0 and report["misses"] == 0, report
        assert report["hits"] == report["gets"] * keys_per_get
    assert report["server_cpu_us_per_request"] > 0


@pytest.mark.parametrize("kind", SERVERS)
def test_binary_misses_are_counted_per_key(kind):
    # No prefill, a quarter of the requests set: the gets miss at first, then some hit.
    with SERVERS[kind]() as server:
        report = load_binary(server, "--keys", "200", "--requests", "4000", "--get-ratio", "0.75",
                             "--multiget", "4", "--pipeline", "4")
    assert report["errors"] == 0 and report["requests"] == 4000, report
    assert report["hits"] + report["misses"] == report["gets"] * 4
    assert report["hits"] > 0 and report["misses"] > 0, report


def test_fill_counts_items_set_over_binary():
    with Server.memcached(memory_mb=8) as server:
        run = bench("fill", "--server", f"127.0.0.1:{server.port}", "--protocol", "binary", "--batch", "5000",
                    "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["stopped_because"] == "evictions started"
    assert 20_000 <= report["items"] <= 60_000, report


@pytest.mark.parametrize("kind", SERVERS)
def test_a_server_that_refuses_binary_is_reported_with_the_fix(kind):
    with SERVERS[kind]("-B", "ascii") as server:
        run = bench("load", "--server", f"127.0.0.1:{server.port}", "--protocol", "binary", "--requests", "10",
                    timeout=30)
    # Both read the packets as the start of a text line that never ends, and wait.
    assert run.returncode != 0
    assert "no reply for 10 s" in run.stderr and "start it with -B auto" in run.stderr, run.stderr
