"""Shared helpers of the client suites: which servers to test, how to start one, and raw talk.

`SHOAL_TEST_TARGETS` (comma list, default `shoal`) names the servers the suites run against:
`shoal` (target/release/shoal, started with `--test-mode`) and/or `memcached` (Debian's binary,
used to show that the suites themselves are right). A missing shoal binary fails every test
that needs it; it is never skipped.
"""

import os
import re
import socket
import time

import pytest

from harness import SHOAL, Server

KINDS = ("shoal", "memcached")
ITEM_LIMIT = 1024 * 1024  # -I default of both servers: 1 MiB
# A value that fits under the item limit with a 250-byte key on both servers: memcached's own
# header is 48-56 bytes, Shoal's 12 (docs/PROTOCOL.md, "Item size").
LARGEST_VALUE = ITEM_LIMIT - 512
ERROR_PREFIXES = (b"ERROR", b"CLIENT_ERROR ", b"SERVER_ERROR ")


def targets() -> list:
    """The server kinds chosen by SHOAL_TEST_TARGETS, checked against the known ones."""
    chosen = [k.strip() for k in os.environ.get("SHOAL_TEST_TARGETS", "shoal").split(",")]
    chosen = [k for k in chosen if k]
    unknown = sorted(set(chosen) - set(KINDS))
    if unknown or not chosen:
        raise pytest.UsageError(f"SHOAL_TEST_TARGETS={chosen!r}: each must be one of {KINDS}")
    return chosen


def launch(kind: str, *extra: str, test_mode: bool = True) -> Server:
    """A not-yet-started server of `kind` with memcached flags `extra` (use it in `with`).

    Shoal runs in test mode (which enables `debugtime`) unless `test_mode` is false."""
    if kind == "shoal":
        if not SHOAL.exists():
            pytest.fail(f"shoal binary {SHOAL} is missing: run `cargo build --release -p shoal` "
                        "(or set SHOAL_TEST_TARGETS=memcached to check the suite alone)",
                        pytrace=False)
        return Server.shoal(*(("--test-mode",) if test_mode else ()), *extra)
    return Server.memcached(*extra)


class Conn:
    """One raw text-protocol connection with a receive buffer."""

    def __init__(self, server: Server, timeout: float = 30.0):
        self.sock = server.connect(timeout=timeout)
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self) -> bool:
        """Reads more into the buffer; false at end of stream (a reset counts as the end)."""
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        self.buf += chunk
        return bool(chunk)

    def read_until(self, terminator: bytes) -> bytes:
        """Everything up to and including `terminator`; fails if the server closes first."""
        while (end := self.buf.find(terminator)) < 0:
            if not self._fill():
                raise AssertionError(f"server closed the connection while we waited for "
                                     f"{terminator!r}; got {self.buf[-200:]!r}")
        end += len(terminator)
        out, self.buf = self.buf[:end], self.buf[end:]
        return out

    def line(self) -> bytes:
        """The next reply line, without its CRLF."""
        return self.read_until(b"\r\n")[:-2]

    def request(self, data: bytes) -> bytes:
        """Sends `data` and returns the first reply line."""
        self.send(data)
        return self.line()

    def read_to_close(self, timeout: float = 30.0) -> bytes:
        """Everything the server sends until it closes; fails if it is still open at `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while self._fill():
                pass
        except socket.timeout:
            raise AssertionError(f"server kept the connection open for {timeout}s; "
                                 f"it sent {self.buf[:200]!r}") from None
        out, self.buf = self.buf, b""
        return out

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def stats(via) -> dict:
    """`stats` as {name: value} strings, asked on a Conn or a fresh connection to a Server."""
    if isinstance(via, Server):
        with Conn(via) as c:
            return stats(c)
    via.send(b"stats\r\n")
    text = via.read_until(b"END\r\n").decode()
    return dict(re.findall(r"^STAT (\S+) (.*?)\r$", text, re.M))


def assert_serves(server: Server):
    """A fresh connection can store and read back an item: the server is alive and sane."""
    with Conn(server) as c:
        assert c.request(b"set alive-check 0 0 2\r\nok\r\n") == b"STORED"
        c.send(b"get alive-check\r\n")
        assert c.read_until(b"END\r\n") == b"VALUE alive-check 0 2\r\nok\r\nEND\r\n"


def flush(server: Server):
    with Conn(server) as c:
        assert c.request(b"flush_all\r\n") == b"OK"


def pass_time(server: Server, seconds: int):
    """Makes the server's clock move on by at least `seconds`.

    Shoal in test mode shifts its clock with `debugtime`; memcached has no such command, so
    for it we wait (at most about a second) until its `stats` time ticks."""
    if server.kind == "shoal":
        with Conn(server) as c:
            assert c.request(b"debugtime %d\r\n" % seconds) == b"OK"
        return
    assert seconds == 1, "real waits on memcached are limited to one tick, to keep the suite fast"
    start = int(stats(server)["time"])
    deadline = time.monotonic() + 10
    while int(stats(server)["time"]) < start + seconds:
        assert time.monotonic() < deadline, "memcached's clock did not tick within 10 s"
        time.sleep(0.02)


def sole_connection(server: Server, timeout: float = 30.0) -> Conn:
    """A connection opened once every earlier one is gone, by `stats` curr_connections: servers
    handle closes (such as the harness's readiness probe) asynchronously."""
    conn = Conn(server)
    deadline = time.monotonic() + timeout
    while (current := stats(conn).get("curr_connections")) != "1":
        if time.monotonic() > deadline:
            conn.close()
            raise AssertionError(f"stats curr_connections is {current!r} with one client")
        time.sleep(0.02)
    return conn
