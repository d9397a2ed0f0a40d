"""libmemcached's conformance checker `memccapable` (Debian libmemcached-tools) against the
server: all of its text-protocol checks (`-a`, 27 in libmemcached 1.1.4) and all of its
binary-protocol checks (`-b`, 27 too) must pass.

memccapable prints one line per check, e.g. `ascii set noreply   [pass]`, and exits non-zero if
any check fails. It flushes the server, so it gets a server of its own (this module's).
"""

import re
import shutil
import subprocess

import pytest

CHECKS = 27  # what libmemcached-tools 1.1.4 runs with -a, and with -b


@pytest.mark.parametrize("protocol, flag", [("ascii", "-a"), ("binary", "-b")])
def test_memccapable_checks_all_pass(server, protocol, flag):
    tool = shutil.which("memccapable")
    assert tool, "memccapable is missing: install Debian's libmemcached-tools (scripts/test.sh)"
    run = subprocess.run([tool, flag, "-t", "5", "-h", "127.0.0.1", "-p", str(server.port)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    output = run.stdout + run.stderr
    results = dict(re.findall(rf"^({protocol} .+?)\s+\[(\w+)\]\s*$", output, re.M))
    failed = {name: verdict for name, verdict in results.items() if verdict != "pass"}
    assert not failed, f"memccapable checks not passed: {failed}\n{output}"
    assert len(results) == CHECKS, f"memccapable ran {len(results)} checks:\n{output}"
    assert run.returncode == 0, f"memccapable exited {run.returncode}:\n{output}"
    assert "All tests passed" in output
