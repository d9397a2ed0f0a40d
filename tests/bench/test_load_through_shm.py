"""`shoal bench load --through shm` against a real `shoal server`: gets read through shared
memory are all hits after a prefill, and the server counts them (through the hints)."""

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import SHOAL, Server, talk  # noqa: E402


def stat(server, name):
    with server.connect() as s:
        data = talk(s, b"stats\r\n", b"END\r\n")
    for line in data.decode().splitlines():
        if line.startswith(f"STAT {name} "):
            return int(line.split()[2])
    raise AssertionError(f"no {name} in stats")


def test_gets_through_shared_memory_hit_and_count():
    with Server.shoal() as server:
        run = subprocess.run([str(SHOAL), "bench", "load", "--server", f"127.0.0.1:{server.port}",
                              "--through", "shm", "--prefill", "--keys", "2000", "--requests", "4000",
                              "-c", "2", "--get-ratio", "0.9", "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        report = json.loads(run.stdout)
        assert report["through"] == "shm" and report["requests"] == 4000
        assert report["errors"] == 0 and report["misses"] == 0 and report["hits"] == report["gets"] > 3000
        # The hints reach the server within a second: its gets include the local ones.
        deadline = time.monotonic() + 30
        while stat(server, "get_hits") < report["hits"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stat(server, "get_hits") >= report["hits"]


def test_pipelining_through_shared_memory_is_refused_with_the_fix():
    with Server.shoal() as server:
        run = subprocess.run([str(SHOAL), "bench", "load", "--server", f"127.0.0.1:{server.port}",
                              "--through", "shm", "--pipeline", "4"], capture_output=True, text=True, timeout=30)
        assert run.returncode != 0 and "drop --pipeline" in run.stderr
