"""A `shoal router` process for the router suites: a config file, a free port, its standard
error kept in a file (for tests of what it says), killed when the `with` block ends."""

import contextlib
import socket
import subprocess
import time

from harness import SHOAL, eventually, free_port


@contextlib.contextmanager
def router(config_path, directory):
    """Runs `shoal router -f config_path`; yields (port, path of its standard error)."""
    port, stderr = free_port(), directory / "router.stderr"
    with open(stderr, "wb") as log:
        process = subprocess.Popen([str(SHOAL), "router", "-f", str(config_path), "-p", str(port), "-l", "127.0.0.1",
                                    "-t", "1", "--reload-settle-ms", "50", "--spool-dir", str(directory / "spool")],
                                   stdin=subprocess.DEVNULL, stderr=log)
    try:
        def listening():
            assert process.poll() is None, stderr.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False
        eventually(listening)
        yield port, stderr
    finally:
        process.kill()
        process.wait()
