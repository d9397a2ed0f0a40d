"""Real clients pointed at `shoal router`: pymemcache, pylibmc and libmemcached's `memccapable -a`,
with a pool of two `shoal server`s and a memcached behind the router."""

import contextlib
import re
import shutil
import socket
import subprocess
import time

import pylibmc
import pytest
from pymemcache.client.base import Client as PymemcacheClient

from harness import SHOAL, Server, free_port


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    directory = tmp_path_factory.mktemp("router")
    with contextlib.ExitStack() as stack:
        backends = [stack.enter_context(Server.shoal()), stack.enter_context(Server.shoal()),
                    stack.enter_context(Server.memcached())]
        servers = ", ".join(f'"127.0.0.1:{b.port}"' for b in backends)
        config = directory / "config.json"
        config.write_text(f'{{ "pools": {{ "A": {{ "servers": [{servers}] }} }},'
                          f' "route": {{ "type": "PoolRoute", "pool": "A", "hash": "jump" }} }}')
        port = free_port()
        process = subprocess.Popen([str(SHOAL), "router", "-f", str(config), "-p", str(port), "-l", "127.0.0.1",
                                    "-t", "2", "--spool-dir", str(directory / "spool")], stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the router did not listen"
                    time.sleep(0.02)
            yield port
        finally:
            process.kill()
            process.wait()


def test_memccapable_ascii_checks_pass_through_the_router(router):
    tool = shutil.which("memccapable")
    assert tool, "memccapable is missing: install Debian's libmemcached-tools (scripts/test.sh)"
    run = subprocess.run([tool, "-a", "-t", "5", "-h", "127.0.0.1", "-p", str(router)],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    output = run.stdout + run.stderr
    results = dict(re.findall(r"^(ascii .+?)\s+\[(\w+)\]\s*$", output, re.M))
    assert results and all(v == "pass" for v in results.values()), output
    assert run.returncode == 0, output


def test_pymemcache_through_the_router(router):
    c = PymemcacheClient(("127.0.0.1", router), default_noreply=False)
    values = {f"py:{i}": f"v{i}".encode() for i in range(300)}
    assert c.set_many(values) == []
    assert c.get_many(list(values)) == values
    assert c.add("py:1", b"x") is False
    assert c.incr("n", 1) is None
    c.set("n", b"5")
    assert c.incr("n", 2) == 7
    value, cas = c.gets("py:2")
    assert c.cas("py:2", b"new", cas) is True
    assert c.delete("py:2") is True and c.get("py:2") is None
    assert c.set("q", b"quiet", noreply=True) is True
    assert c.get("q") == b"quiet"
    c.close()


def test_pylibmc_through_the_router(router):
    c = pylibmc.Client([f"127.0.0.1:{router}"])
    values = {f"lib:{i}": f"v{i}" for i in range(300)}
    assert c.set_multi(values) == []
    assert c.get_multi(list(values)) == values
    assert c.incr("lib:n", 1) if c.set("lib:n", 1) else False
    assert c.delete("lib:1") and c.get("lib:1") is None
    c.disconnect_all()
