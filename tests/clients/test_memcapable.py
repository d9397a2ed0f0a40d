"""libmemcached's conformance checker `memccapable -a` (Debian libmemcached-tools) against the
server: all of its text-protocol checks (27 in libmemcached 1.1.4) must pass.

memccapable prints one line per check, e.g. `ascii set noreply   [pass]`, and exits non-zero if
any check fails. It flushes the server, so it gets a server of its own (this module's).
"""

import re
import shutil
import subprocess

ASCII_CHECKS = 27  # what libmemcached-tools 1.1.4 runs with -a
RESULT = re.compile(r"^(ascii .+?)\s+\[(\w+)\]\s*$", re.M)


def test_memccapable_ascii_checks_all_pass(server):
    tool = shutil.which("memccapable")
    assert tool, "memccapable is missing: install Debian's libmemcached-tools (scripts/test.sh)"
    run = subprocess.run([tool, "-a", "-t", "5", "-h", "127.0.0.1", "-p", str(server.port)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    output = run.stdout + run.stderr
    results = dict(RESULT.findall(output))
    failed = {name: verdict for name, verdict in results.items() if verdict != "pass"}
    assert not failed, f"memccapable checks not passed: {failed}\n{output}"
    assert len(results) == ASCII_CHECKS, f"memccapable ran {len(results)} checks:\n{output}"
    assert run.returncode == 0, f"memccapable exited {run.returncode}:\n{output}"
    assert "All tests passed" in output
