"""memcached's `watch` log lines, compared with memcached 1.6.18 itself: the same requests against
both servers give lines of the same form (timestamps, line numbers and descriptors aside)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import Server, read_until  # noqa: E402

SERVERS = [Server.memcached, Server.shoal]


def watch(server, kinds: bytes) -> "Log":
    """A watcher of `kinds`. Its `OK` and the first log lines can arrive in one read (a
    connection event is logged as soon as the watch starts), so what follows `OK` is kept."""
    sock = server.connect(timeout=10)
    sock.sendall(b"watch " + kinds + b"\r\n")
    log = Log(sock)
    assert log.raw_line() == b"OK\r", "the watch starts"
    return log


class Log:
    """A watcher's lines as they arrive, each without its `ts=… gid=… ` prefix."""

    PREFIX = re.compile(r"ts=\d+\.\d+ gid=\d+ ")

    def __init__(self, sock):
        self.sock, self.buffer = sock, b""

    def raw_line(self) -> bytes:
        """The next line as it came, without its `\\n` (log lines end in `\\n` alone)."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(1 << 20)
            assert chunk, f"the watcher was closed after {self.buffer!r}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def next(self, about: str = "") -> str:
        """The next line containing `about`: lines of connections an earlier step left (the
        harness's own readiness probe, closed a moment before) are passed over."""
        while True:
            line = self.raw_line().decode()
            assert self.PREFIX.match(line), line
            if about in line:
                return self.PREFIX.sub("", line, count=1)


@pytest.mark.parametrize("start", SERVERS, ids=["memcached", "shoal"])
def test_connevents_log_each_connection_opened_and_why_it_closed(start):
    with start() as server:
        log = watch(server, b"connevents")
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
        log = watch(server, b"fetchers")
        client = server.connect()
        for request in [b"set wk 0 0 4\r\nvbar\r\n", b"add wk 0 0 5\r\nvbar2\r\n", b"get wk\r\n"]:
            client.sendall(request)
            read_until(client, b"STORED\r\n", b"END\r\n")
        # A miss before the first store (no item, so class 0), then hits of the stored value.
        assert re.fullmatch(r"type=item_get key=wk status=not_found clsid=0 cfd=\d+ size=0", log.next("key=wk "))
        for _ in range(2):
            assert re.fullmatch(r"type=item_get key=wk status=found clsid=1 cfd=\d+ size=4", log.next("key=wk "))
