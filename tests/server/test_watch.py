"""memcached's `watch` log lines, compared with memcached 1.6.18 itself: the same requests against
both servers give lines of the same form (timestamps, line numbers and descriptors aside)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import Server, read_until, talk  # noqa: E402

SERVERS = [Server.memcached, Server.shoal]


def watcher(server, kinds: bytes):
    sock = server.connect(timeout=10)
    assert talk(sock, b"watch " + kinds + b"\r\n") == b"OK\r\n"
    return sock


class Log:
    """A watcher's lines as they arrive, each without its `ts=… gid=… ` prefix."""

    PREFIX = re.compile(r"ts=\d+\.\d+ gid=\d+ ")

    def __init__(self, sock):
        self.sock, self.pending = sock, []

    def next(self, about: str = "") -> str:
        """The next line containing `about`: lines of connections an earlier step left (the
        harness's own readiness probe, closed a moment before) are passed over."""
        while True:
            while not self.pending:
                self.pending = read_until(self.sock, b"\n").decode().splitlines()
            line = self.pending.pop(0)
            assert self.PREFIX.match(line), line
            if about in line:
                return self.PREFIX.sub("", line, count=1)


@pytest.mark.parametrize("start", SERVERS, ids=["memcached", "shoal"])
def test_connevents_log_each_connection_opened_and_why_it_closed(start):
    with start() as server:
        log = Log(watcher(server, b"connevents"))
        for request, reason in [(b"quit\r\n", "normal"), (b"GET / HTTP/1.1\r\n", "error")]:
            client = server.connect()
            rport = client.getsockname()[1]
            client.sendall(request)
            client.settimeout(10)
            assert client.recv(100) == b"", "the server closes"
            client.close()
            opened, closed = log.next(f"rport={rport} "), log.next(f"rport={rport} ")
            match = re.fullmatch(rf"type=conn_new rip=127\.0\.0\.1 rport={rport} transport=tcp cfd=(\d+)", opened)
            assert match, opened
            cfd = match[1]
            expected = rf"type=conn_close rip=127\.0\.0\.1 rport={rport} transport=tcp reason={reason} cfd={cfd}"
            assert re.fullmatch(expected, closed), closed
        # A client that just goes away closed normally too.
        client = server.connect()
        rport = client.getsockname()[1]
        client.close()
        assert log.next(f"rport={rport} ").startswith("type=conn_new ")
        closed = log.next(f"rport={rport} ")
        assert closed.startswith("type=conn_close ") and " reason=normal " in closed, closed


@pytest.mark.parametrize("start", SERVERS, ids=["memcached", "shoal"])
def test_fetchers_see_the_lookup_a_store_makes_first(start):
    with start() as server:
        log = Log(watcher(server, b"fetchers"))
        client = server.connect()
        for request in [b"set wk 0 0 4\r\nvbar\r\n", b"add wk 0 0 5\r\nvbar2\r\n", b"get wk\r\n"]:
            client.sendall(request)
            read_until(client, b"STORED\r\n", b"END\r\n")
        # A miss before the first store (no item, so class 0), then hits of the stored value.
        assert re.fullmatch(r"type=item_get key=wk status=not_found clsid=0 cfd=\d+ size=0", log.next("key=wk "))
        for _ in range(2):
            assert re.fullmatch(r"type=item_get key=wk status=found clsid=1 cfd=\d+ size=4", log.next("key=wk "))
