"""A small raw-socket client of memcached's binary protocol, for the binary and auth suites.

Requests are built byte by byte (`request`); answers are read as packets. `Exchange` replays a
list of steps on one connection and returns every answer, with CAS uniques renumbered in order
of appearance (the two servers number items differently) and `version` bodies replaced, so
that the answers of memcached and Shoal can be compared byte for byte.
"""

import socket
import struct

HEADER = struct.Struct(">BBHBBHIIQ")  # magic opcode keylen extlen datatype status bodylen opaque cas

GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(0x0c)
GETK, GETKQ, APPEND, PREPEND, STAT, SETQ, ADDQ, REPLACEQ, DELETEQ, INCRQ, DECRQ = range(0x0c, 0x17)
QUITQ, FLUSHQ, APPENDQ, PREPENDQ = 0x17, 0x18, 0x19, 0x1a
TOUCH, GAT, GATQ, GATK, GATKQ = 0x1c, 0x1d, 0x1e, 0x23, 0x24
SASL_LIST, SASL_AUTH, SASL_STEP = 0x20, 0x21, 0x22
NO_CREATE = 0xFFFFFFFF
SENTINEL = 0xFFFFFFFF  # the opaque of the noop that ends each step


def request(op, key=b"", extras=b"", value=b"", opaque=0, cas=0, body_len=None) -> bytes:
    body = len(extras) + len(key) + len(value) if body_len is None else body_len
    return HEADER.pack(0x80, op, len(key), len(extras), 0, 0, body, opaque, cas) + extras + key + value


def store(op, key, value, flags=0, exptime=0, cas=0, opaque=0) -> bytes:
    return request(op, key, struct.pack(">II", flags, exptime), value, opaque, cas)


def arith(op, key, delta, initial=0, exptime=0, cas=0) -> bytes:
    return request(op, key, struct.pack(">QQI", delta, initial, exptime), cas=cas)


def touch(op, key, exptime) -> bytes:
    return request(op, key, struct.pack(">I", exptime))


def packets(data: bytes):
    """Splits answers into (fields, body) pairs; a trailing partial packet is kept as is."""
    out = []
    while len(data) >= HEADER.size:
        fields = HEADER.unpack_from(data)
        end = HEADER.size + fields[6]
        if len(data) < end:
            break
        out.append((fields, data[HEADER.size:end]))
        data = data[end:]
    return out, data


class Connection:
    """One connection and its unread bytes."""

    def __init__(self, server, timeout=30.0):
        self.sock = server.connect(timeout=timeout)
        self.buf = b""
        self.closed = False

    def fill(self, timeout=None) -> bool:
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(1 << 20)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
        self.buf += chunk
        return bool(chunk)

    def send(self, data: bytes):
        self.sock.sendall(data)

    def packet(self):
        """The next whole answer packet (fields, body)."""
        while True:
            found, _ = packets(self.buf)
            if found:
                fields, body = found[0]
                self.buf = self.buf[HEADER.size + len(body):]
                return fields, body
            if not self.fill():
                raise AssertionError(f"closed while waiting for a packet; have {self.buf!r}")

    def until_sentinel(self) -> bytes:
        """Every answer byte before the sentinel noop's answer."""
        got = b""
        while True:
            fields, body = self.packet()
            if fields[1] == NOOP and fields[7] == SENTINEL:
                return got
            got += HEADER.pack(*fields) + body

    def until_closed(self, wait=60.0, answered=False) -> bytes:
        """Everything until the server closes, then `<closed>` (or `<still open>` after `wait`
        seconds of silence). `answered`: an answer is due first, however long a loaded machine
        takes to send it; the silence counts from there."""
        try:
            if answered:
                self.fill(timeout=60.0)
            while self.fill(timeout=wait):
                pass
        except socket.timeout:
            data, self.buf = self.buf, b""
            return data + b"<still open>"
        data, self.buf = self.buf, b""
        return data + b"<closed>"

    def close(self):
        self.sock.close()


def normalize(data: bytes, cas_names: dict) -> bytes:
    """Renumbers CAS uniques in order of appearance and hides version strings."""
    found, rest = packets(data)
    out = b""
    for fields, body in found:
        fields = list(fields)
        if fields[8]:
            fields[8] = cas_names.setdefault(fields[8], len(cas_names) + 1)
        if fields[1] == VERSION and fields[5] == 0:
            body = b"<version>"
            fields[6] = len(body)
        out += HEADER.pack(*fields) + body
    return out + rest


def last_cas(data: bytes) -> int:
    """The CAS of the last answer that carried one (0 if none)."""
    cas = 0
    for fields, _ in packets(data)[0]:
        cas = fields[8] or cas
    return cas


def replay(server, steps) -> list:
    """Runs `steps` on a new connection and returns the normalized answers, one per step.

    A step is `bytes` (send, then a sentinel noop; the answer is what precedes the noop's),
    a function of the last CAS seen (for `cas` requests), `("close", bytes)` (send, then read
    until the server closes) or `("wait", bytes)` (send, then read an answer and what follows it
    until 0.3 s of silence: where a sentinel would be refused, before authentication). Answers
    are normalized (see
    `normalize`)."""
    conn = Connection(server)
    cas_names, answers, seen = {}, [], 0
    try:
        for step in steps:
            if isinstance(step, tuple):
                conn.send(step[1])
                raw = conn.until_closed() if step[0] == "close" else conn.until_closed(0.3, answered=True)
            else:
                data = step(seen) if callable(step) else step
                conn.send(data + request(NOOP, opaque=SENTINEL))
                raw = conn.until_sentinel()
            seen = last_cas(raw) or seen
            answers.append(normalize(raw, cas_names))
    finally:
        conn.close()
    return answers
