"""The binary protocol, differentially: each case's byte sequences go to Debian's memcached
1.6.18 and to `shoal server`, started with the same flags, and the answers must be identical
byte for byte (CAS uniques renumbered, `version` bodies hidden: binwire.normalize). What
memcached answers is the expected truth; no case states an answer of its own.

Also: `-B` negotiation and a text request on a binary-only server, and answers that are
Shoal's to check alone (the `stat` packets' shape, a store refused for size removing the old
value). SASL and `-Y` are in test_auth.py."""

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from binwire import *  # noqa: E402,F401,F403
from binwire import Connection, normalize, replay, request  # noqa: E402
from harness import MEMCACHED, SHOAL, Server, free_port  # noqa: E402

BIG = b"x" * (1024 * 1024 + 1)  # over the 1 MiB item limit of both servers

CASES = {
    "get misses, each form": [
        request(GET, b"k"), request(GETK, b"k"), request(GETQ, b"k"), request(GETKQ, b"k"),
    ],
    "set then every get form hits, with flags and key": [
        store(SET, b"k", b"hello", flags=0xdeadbeef), request(GET, b"k", opaque=7),
        request(GETK, b"k"), request(GETQ, b"k"), request(GETKQ, b"k"),
    ],
    "quiet stores answer only errors": [
        store(SETQ, b"a", b"1"), store(ADDQ, b"a", b"2"), store(ADDQ, b"b", b"2"),
        store(REPLACEQ, b"c", b"3"), store(REPLACEQ, b"a", b"3"), request(GET, b"a"),
    ],
    "add and replace": [
        store(ADD, b"k", b"v1"), store(ADD, b"k", b"v2"), store(REPLACE, b"r", b"x"),
        store(REPLACE, b"k", b"v3", flags=5), request(GET, b"k"),
    ],
    "append and prepend": [
        request(APPEND, b"k", value=b"x"), request(PREPENDQ, b"k", value=b"x"),
        store(SET, b"k", b"mid", flags=3), request(APPEND, b"k", value=b"-end"),
        request(PREPEND, b"k", value=b"start-"), request(APPENDQ, b"k", value=b"!"), request(GET, b"k"),
    ],
    "cas on set, add, replace, append": [
        store(SET, b"k", b"v1"),
        store(SET, b"k", b"bad", cas=12345), store(REPLACE, b"k", b"bad", cas=12345),
        store(ADD, b"k", b"bad", cas=12345), store(SET, b"missing", b"x", cas=12345),
        lambda cas: store(SET, b"k", b"v2", cas=cas), request(GET, b"k"),
        lambda cas: request(APPEND, b"k", value=b"+", cas=cas + 1),
        lambda cas: request(APPEND, b"k", value=b"+", cas=cas), request(GET, b"k"),
    ],
    "delete, with and without cas": [
        request(DELETE, b"k"), request(DELETEQ, b"k"), store(SET, b"k", b"v"),
        request(DELETE, b"k", cas=999), lambda cas: request(DELETE, b"k", cas=cas),
        store(SET, b"k", b"v"), request(DELETEQ, b"k"), request(GET, b"k"),
    ],
    "incr and decr: create, count, wrap, floor, refuse": [
        arith(INCR, b"n", 1, exptime=NO_CREATE), arith(INCR, b"n", 5, initial=10),
        arith(INCR, b"n", 5, initial=10), arith(DECR, b"n", 100), arith(DECRQ, b"d", 1, initial=7),
        request(GET, b"d"), store(SET, b"w", b"18446744073709551615"), arith(INCR, b"w", 2),
        store(SET, b"t", b"text"), arith(INCR, b"t", 1), arith(INCRQ, b"n", 3), request(GET, b"n"),
        arith(INCR, b"n", 1, cas=1), lambda cas: arith(INCR, b"n", 1, cas=cas),
    ],
    "touch and gat": [
        touch(TOUCH, b"k", 100), touch(GAT, b"k", 100), touch(GATQ, b"k", 100), touch(GATK, b"k", 0),
        store(SET, b"k", b"v", flags=9), touch(TOUCH, b"k", 100), touch(GAT, b"k", 100),
        touch(GATK, b"k", 0), touch(GATKQ, b"k", 0), touch(GATQ, b"k", 0),
    ],
    "flush, noop, version": [
        store(SET, b"k", b"v"), request(FLUSH), request(GET, b"k"), store(SET, b"k", b"v"),
        request(FLUSHQ), request(GET, b"k"), request(FLUSH, extras=struct.pack(">I", 0)),
        request(NOOP, opaque=3), request(VERSION),
    ],
    "a value over the item limit is too large, and set drops the old value": [
        store(SET, b"k", b"old"), store(SET, b"k", BIG), request(GET, b"k"),
        store(SET, b"a", b"old"), request(APPEND, b"a", value=BIG), request(GET, b"a"),
        store(ADD, b"n", BIG),
    ],
    "unknown opcodes are answered and the connection goes on": [
        request(0x50), request(0x1b, opaque=5), request(GET, b"k"),
    ],
    "sasl commands without -S are unknown": [
        request(SASL_LIST), request(SASL_AUTH, b"PLAIN", value=b"\0u\0p"), request(NOOP),
    ],
    "a pipelined quiet multiget answers only the hits, then the last key": [
        store(SETQ, b"a", b"1", flags=1) + store(SETQ, b"c", b"3", flags=3),
        request(GETKQ, b"a") + request(GETKQ, b"b") + request(GETKQ, b"c") + request(GETK, b"d"),
    ],
    "stat reset answers only the end packet": [request(STAT, b"reset")],
    "an unknown stat group is not found": [request(STAT, b"bogus")],
    "quit answers then closes": [("close", request(QUIT, opaque=9))],
    "quitq closes silently": [("close", request(QUITQ))],
    "a key over 250 bytes is invalid and closes": [("close", request(GET, b"k" * 251))],
    "wrong extras for set are invalid and close": [("close", request(SET, b"k", b"1234", b"v"))],
    "extras on get are invalid and close": [("close", request(GET, b"k", b"1234"))],
    "a body shorter than its key is an unknown command and closes":
        [("close", request(GET, b"key", body_len=1))],
    "a noop with a body is invalid and closes": [("close", request(NOOP, b"k"))],
    "a wrong magic is answered as text, and the connection stays": [("wait", b"\x81" + request(NOOP)[1:])],
}


@pytest.fixture(scope="module")
def servers():
    with Server.memcached() as memcached, Server.shoal("--test-mode") as shoal:
        yield memcached, shoal


def flush(server):
    conn = Connection(server)
    conn.send(request(FLUSH))
    conn.packet()
    conn.close()


@pytest.mark.parametrize("name", list(CASES))
def test_same_answers_as_memcached(servers, name):
    answers = []
    for server in servers:
        flush(server)
        answers.append(replay(server, CASES[name]))
    for step, (expected, got) in enumerate(zip(*answers)):
        assert got == expected, f"{name}, step {step}: memcached {expected!r}\n shoal {got!r}"


@pytest.mark.parametrize("flags", [(), ("-B", "binary")])
def test_text_on_a_binary_server_and_binary_on_an_ascii_one(flags):
    """`-B binary`: text closes once a header's worth arrived; `-B ascii`: 0x80 is text."""
    def answers(server):
        got = []
        for data in (b"version\r\n", b"get a b c d e f g h i j k\r\n"):
            conn = Connection(server)
            conn.send(data)
            got.append(conn.until_closed(wait=0.5))
            conn.close()
        return got
    with Server.memcached(*flags) as memcached, Server.shoal(*flags) as shoal:
        expected, got = answers(memcached), answers(shoal)
    assert [g.split(b" ")[0] for g in got] == [e.split(b" ")[0] for e in expected]
    if flags:
        assert got == [b"<still open>", b"<closed>"]
    with Server.memcached("-B", "ascii") as memcached, Server.shoal("-B", "ascii") as shoal:
        got = []
        for server in (memcached, shoal):
            conn = Connection(server)
            conn.send(request(VERSION) + b"\r\n")
            got.append(conn.until_closed(wait=0.5))
        assert got[0] == got[1] and got[0].startswith(b"ERROR\r\n")


def test_stat_packets_carry_name_and_value_and_end_empty(servers):
    for server in servers:
        conn = Connection(server)
        conn.send(request(STAT, opaque=4))
        stats = {}
        while True:
            fields, body = conn.packet()
            assert fields[1] == STAT and fields[5] == 0 and fields[7] == 4
            if fields[2] == 0:
                assert body == b""
                break
            stats[body[:fields[2]].decode()] = body[fields[2]:].decode()
        assert int(stats["pid"]) == server.proc.pid
        assert {"cmd_get", "curr_items", "auth_cmds", "auth_errors"} <= set(stats)
        conn.send(request(STAT, b"settings"))
        settings = {}
        while (packet := conn.packet())[0][2]:
            fields, body = packet
            settings[body[:fields[2]].decode()] = body[fields[2]:].decode()
        assert settings["binding_protocol"] == "auto-negotiate"
        assert settings["auth_enabled_sasl"] == "no"
        conn.close()


def udp_answers(server_argv, port):
    """Binary requests in one datagram: a set, a get and a getk miss, answered in frames."""
    proc = subprocess.Popen(server_argv, stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        got = []
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.settimeout(5)
            body = (store(SET, b"u", b"dgram", flags=2) + request(GET, b"u", opaque=1)
                    + request(GETK, b"nope"))
            u.sendto(struct.pack(">HHHH", 77, 0, 1, 0) + body, ("127.0.0.1", port))
            u.settimeout(1)
            try:
                while True:
                    frame, _ = u.recvfrom(2000)
                    assert frame[:2] == struct.pack(">H", 77)
                    got.append(frame[8:])
            except socket.timeout:
                pass
        # memcached sends each request's answer in datagrams of its own, Shoal one datagram's
        # answers together (docs/PROTOCOL.md): the bytes must be the same.
        return normalize(b"".join(got), {})
    finally:
        proc.kill()
        proc.wait()


def test_binary_over_udp_as_memcached_answers():
    port = free_port()
    root = ["-u", "root"] if os.geteuid() == 0 else []
    expected = udp_answers([MEMCACHED, "-p", "0", "-U", str(port), "-l", "127.0.0.1", *root], port)
    shoal = [str(SHOAL), "server", "-p", str(free_port()), "-U", str(port), "-l", "127.0.0.1"]
    got = udp_answers(shoal, port)
    assert got == expected
