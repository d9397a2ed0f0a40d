"""Bad input and server limits over raw sockets, answered as memcached 1.6 answers them.

Covers: a line over 2048 bytes without a newline, a data block not ending in CRLF, a declared
size over the item limit, a key over 250 bytes, text and binary-protocol garbage, a client that
sends one byte per 50 ms while another works, more connections than `-c`, a multiget of 100 000
keys, and `debugtime` refused when Shoal is not in test mode. After each, a fresh connection
must still be served.
"""

import random
import select
import time

import wire
from wire import Conn


def test_long_line_without_newline_is_closed(server):
    with Conn(server) as c:
        c.send(b"a" * 3000)
        assert c.read_to_close() == b""  # memcached closes without a word
    wire.assert_serves(server)


def test_data_block_not_ending_in_crlf(server):
    with Conn(server) as c:
        assert c.request(b"set k 0 0 3\r\nabcXY") == b"CLIENT_ERROR bad data chunk"
        # The declared 3 bytes + 2 were consumed; the next command is read after them.
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        assert c.request(b"get k\r\n") == b"END"
    wire.assert_serves(server)


def test_declared_size_over_item_limit(server):
    size = 2_000_000
    with Conn(server) as c:
        c.send(b"set k 0 0 %d\r\n" % size + b"x" * size + b"\r\n")
        assert c.line() == b"SERVER_ERROR object too large for cache"
        assert c.request(b"get k\r\n") == b"END"  # the block was swallowed, not parsed
    wire.assert_serves(server)


def test_key_over_250_bytes(server):
    with Conn(server) as c:
        assert c.request(b"get " + b"k" * 251 + b"\r\n") == b"CLIENT_ERROR bad command line format"
        # A refused storage line's data block is read as the next command.
        c.send(b"set " + b"k" * 251 + b" 0 0 1\r\nx\r\n")
        assert [c.line(), c.line()] == [b"CLIENT_ERROR bad command line format", b"ERROR"]
    wire.assert_serves(server)


def test_text_garbage_gets_an_error_per_line(server):
    rng = random.Random(7)
    alphabet = bytes(b for b in range(1, 256) if b not in b"\r\n ")
    lines = [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 200))) for _ in range(50)]
    with Conn(server) as c:
        c.send(b"".join(line + b"\r\n" for line in lines))
        replies = [c.line() for _ in lines]
        bad = [r for r in replies if not r.startswith(wire.ERROR_PREFIXES)]
        assert not bad, f"garbage lines answered with {bad}"
        assert c.request(b"version\r\n").startswith(b"VERSION ")
    wire.assert_serves(server)


def test_binary_protocol_garbage_does_not_hurt_the_server(server):
    """A first byte 0x80 selects memcached's binary protocol, which Shoal does not speak yet:
    whatever the answer, the server must survive and serve others."""
    rng = random.Random(11)
    with Conn(server) as c:
        c.send(b"\x80" + rng.randbytes(4000))
        c.sock.settimeout(0.3)
        try:
            c.sock.recv(1 << 16)
        except (TimeoutError, ConnectionResetError):
            pass
    wire.assert_serves(server)


def test_slow_client_does_not_block_others(server):
    with Conn(server) as slow, Conn(server) as fast:
        assert fast.request(b"set slow 0 0 4\r\nslow\r\n") == b"STORED"
        command = b"get slow\r\n"
        for i, byte in enumerate(command):
            slow.send(bytes([byte]))
            started = time.monotonic()
            assert fast.request(b"set fast%d 0 0 1\r\nx\r\n" % i) == b"STORED"
            fast.send(b"get fast%d\r\n" % i)
            assert fast.read_until(b"END\r\n") == b"VALUE fast%d 0 1\r\nx\r\nEND\r\n" % i
            assert time.monotonic() - started < 0.5, "a trickling client held up another"
            if i < len(command) - 1:
                ready, _, _ = select.select([slow.sock], [], [], 0.05)
                assert not ready, f"answer before the command was complete: {slow.sock.recv(99)}"
        assert slow.read_until(b"END\r\n") == b"VALUE slow 0 4\r\nslow\r\nEND\r\n"
    wire.assert_serves(server)


# `-c` per server kind, chosen so that 10 clients fit: memcached counts about 24 descriptors of
# its own (listener, 4 worker threads' pipes and event fds, stdio) against -c, and cannot even
# start with -c 10 and 4 threads. Shoal's -c is taken to count client connections only.
CONN_LIMIT_FLAG = {"shoal": 10, "memcached": 34}
CLIENT_SLOTS = 10
TOO_MANY = b"ERROR Too many open connections\r\n"


def test_more_connections_than_the_limit(kind):
    with wire.launch(kind, "-c", str(CONN_LIMIT_FLAG[kind])) as limited:
        # The first connection is opened alone, so that no earlier one still holds a slot.
        conns = [wire.sole_connection(limited)]
        conns += [Conn(limited) for _ in range(2 * CLIENT_SLOTS - 1)]
        # A refused connection is told so at once, before it sends anything (as memcached
        # does); sending first could race with the server's close and lose its message.
        time.sleep(0.2)
        told, _, _ = select.select([c.sock for c in conns], [], [], 0)
        served = [c for c in conns if c.sock not in told]
        refused = [c for c in conns if c.sock in told]
        for c in refused:
            assert c.read_to_close() == TOO_MANY, "a refused connection gets one line, then EOF"
        assert (len(served), len(refused)) == (CLIENT_SLOTS, CLIENT_SLOTS), \
            f"-c {CONN_LIMIT_FLAG[kind]}: {len(served)} served, {len(refused)} refused"
        for c in served:  # the admitted ones still work
            assert c.request(b"version\r\n").startswith(b"VERSION ")
        for c in conns:
            c.close()
        # Once the clients have gone, new ones are admitted (the server notices closes soon).
        deadline = time.monotonic() + 30
        while True:
            with Conn(limited) as c:
                c.send(b"version\r\n")
                if c.read_until(b"\r\n").startswith(b"VERSION "):
                    break
            assert time.monotonic() < deadline, "slots were not freed after clients closed"
            time.sleep(0.05)
        wire.assert_serves(limited)


def test_multiget_of_100k_keys(server):
    keys = [b"key%d" % i for i in range(100_000)]
    stored = keys[7::1000]
    with Conn(server) as c:
        c.send(b"".join(b"set %s 5 0 3\r\nval\r\n" % k for k in stored))
        assert [c.line() for _ in stored] == [b"STORED"] * len(stored)
        c.send(b"get " + b" ".join(keys) + b"\r\n")
        reply = c.read_until(b"END\r\n")
        assert reply == b"".join(b"VALUE %s 5 3\r\nval\r\n" % k for k in stored) + b"END\r\n"
        assert c.request(b"version\r\n").startswith(b"VERSION ")
    wire.assert_serves(server)


def test_debugtime_refused_without_test_mode(kind):
    """Shoal accepts `debugtime` only in test mode; stock memcached does not know it."""
    with wire.launch(kind, test_mode=False) as plain, Conn(plain) as c:
        assert c.request(b"set k 0 100 1\r\nx\r\n") == b"STORED"
        reply = c.request(b"debugtime 1000\r\n")
        assert reply.startswith(wire.ERROR_PREFIXES), f"debugtime outside test mode: {reply}"
        c.send(b"get k\r\n")
        assert c.read_until(b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"  # the clock did not jump
        wire.assert_serves(plain)

