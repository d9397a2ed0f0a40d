"""Leases, stale values and the delete hold-off (issue #6), against a real `shoal server`:
mcrouter's `lease-get`/`lease-set` answers, the one-token-per-interval rate limit, tokens
voided by delete and set, stale values for callers that take them, hold-off refusing `add`,
one consistent state with meta's N/W/Z/X, the stale-set race and the thundering herd."""

import random
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from harness import Server  # noqa: E402
from leases_herd import Conn, herd  # noqa: E402


@pytest.fixture
def server():
    """A server whose clock the test moves, with a 3 s lease interval and stale values kept
    for 5 s after a delete."""
    with Server.shoal("--test-mode", "--lease-ttl", "3", "--stale-ttl", "5") as s:
        yield s


@pytest.fixture
def conn(server):
    c = Conn(server.address)
    yield c
    c.close()


def advance(server, seconds):
    c = Conn(server.address)
    assert c.call(b"debugtime %d\r\n" % seconds) == b"OK"
    c.close()


def test_miss_hands_out_one_token_then_hot_misses(server, conn):
    kind, token, flags, data = conn.lease_get(b"k")
    assert (kind, flags, data) == ("token", 0, b"") and token > 1
    others = [Conn(server.address) for _ in range(5)]
    for c in others:
        for _ in range(10):
            assert c.lease_get(b"k") == ("hot", 0, b"")
    # A key under lease is still a miss for plain readers.
    assert conn.get(b"k") is None
    assert conn.call(b"mg k v\r\n") == b"EN"
    assert conn.lease_set(b"k", token, b"filled", flags=7) == b"STORED"
    for c in others:
        assert c.lease_get(b"k") == ("hit", 7, b"filled")
    assert conn.get(b"k") == b"filled"


def test_token_expires_after_the_lease_interval(server, conn):
    _, first, _, _ = conn.lease_get(b"k")
    advance(server, 4)
    kind, second, _, _ = conn.lease_get(b"k")
    assert kind == "token" and second != first
    assert conn.lease_set(b"k", first, b"late") == b"NOT_STORED"
    assert conn.lease_set(b"k", second, b"v") == b"STORED"


def test_delete_or_set_voids_the_token(conn):
    _, token, _, _ = conn.lease_get(b"k")
    assert conn.call(b"delete k\r\n") == b"NOT_FOUND"  # a lease is not a value
    assert conn.lease_set(b"k", token, b"old") == b"NOT_STORED"
    assert conn.get(b"k") is None
    _, token, _, _ = conn.lease_get(b"k")
    assert conn.set(b"k", b"newer") == b"STORED"
    assert conn.lease_set(b"k", token, b"old") == b"NOT_STORED"
    assert conn.get(b"k") == b"newer"
    # A token from before a delete of a value is void too.
    assert conn.call(b"delete k\r\n") == b"DELETED"
    _, token, _, _ = conn.lease_get(b"k")
    assert conn.call(b"delete k\r\n") == b"NOT_FOUND"
    assert conn.lease_set(b"k", token, b"old") == b"NOT_STORED"


def test_stale_values_for_callers_that_take_them(server, conn):
    assert conn.set(b"k", b"v1", flags=3) == b"STORED"
    assert conn.call(b"delete k\r\n") == b"DELETED"
    assert conn.get(b"k") is None
    kind, token, flags, data = conn.lease_get(b"k", stale=True)
    assert (kind, flags, data) == ("token", 3, b"v1")
    assert conn.lease_get(b"k", stale=True) == ("hot", 3, b"v1")
    assert conn.lease_get(b"k") == ("hot", 0, b"")  # without `stale`, no stale data
    # A late value under a void token is kept, still stale; the holder's token still works.
    assert conn.lease_set(b"k", token + 12345, b"late") == b"STALE_STORED"
    assert conn.lease_get(b"k", stale=True) == ("hot", 0, b"late")
    assert conn.lease_set(b"k", token, b"v2") == b"STORED"
    assert conn.lease_get(b"k", stale=True) == ("hit", 0, b"v2")
    # Stale values go when their time is up (the lease interval, then --stale-ttl).
    assert conn.call(b"delete k\r\n") == b"DELETED"
    advance(server, 7)
    kind, _, _, data = conn.lease_get(b"k", stale=True)
    assert (kind, data) == ("token", b"")


def test_hold_off_refuses_add_until_it_ends(server, conn):
    assert conn.set(b"k", b"v") == b"STORED"
    assert conn.call(b"delete k hold 4\r\n") == b"DELETED"
    assert conn.get(b"k") is None
    assert conn.call(b"add k 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert conn.call(b"delete missing hold 4\r\n") == b"NOT_FOUND"
    assert conn.call(b"add missing 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert conn.call(b"replace k 0 0 1\r\nx\r\n") == b"NOT_STORED"
    assert conn.call(b"incr k 1\r\n") == b"NOT_FOUND"
    advance(server, 5)
    assert conn.call(b"add k 0 0 1\r\nx\r\n") == b"STORED"
    # set is always allowed, and so is a lease holder's lease-set.
    assert conn.call(b"delete k hold 30 noreply\r\ndelete missing hold 30\r\n") == b"NOT_FOUND"
    assert conn.set(b"k", b"y") == b"STORED"
    assert conn.call(b"delete missing hold 30\r\n") == b"NOT_FOUND"
    _, token, _, _ = conn.lease_get(b"missing")
    assert conn.lease_set(b"missing", token, b"z") == b"STORED"
    # memcached's own forms keep memcached's answers.
    assert conn.call(b"delete k 0\r\n") == b"DELETED"
    assert conn.call(b"delete k 5\r\n") == b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"


def test_meta_and_lease_clients_share_one_state(conn):
    # A meta win blocks a lease token...
    assert conn.call(b"mg a N30 c\r\n").split()[-1] == b"W"
    assert conn.lease_get(b"a") == ("hot", 0, b"")
    # ... and a lease win blocks a meta one.
    _, token, _, _ = conn.lease_get(b"b")
    assert conn.call(b"mg b N30 c\r\n").split()[-1] == b"Z"
    assert conn.lease_set(b"b", token, b"v") == b"STORED"
    # md I: the first of either kind wins, the other sees the key as taken.
    assert conn.call(b"md b I\r\n") == b"HD"
    kind, token, _, _ = conn.lease_get(b"b", stale=True)
    assert kind == "token"
    assert conn.call(b"mg b v c\r\n") == b"VA 1 c%d Z X" % token
    assert conn.block(1) == b"v"
    # The token is the item's CAS: the meta winner may finish with ms C, the lease one with
    # lease-set, whichever protocol it speaks.
    assert conn.call(b"ms b 2 C%d\r\nv2\r\n" % token) == b"HD"
    assert conn.lease_get(b"b") == ("hit", 0, b"v2")


def stale_set_race(server, leases, rounds=40):
    """Writer A reads version n from the database and is slow; the database moves to n+1 and
    the key is invalidated; writer B fills n+1; A and B store in a random order. Returns the
    rounds that ended with the older value cached."""
    db = {"version": 0}
    older = []
    for round_ in range(rounds):
        key = b"race:%d:%d" % (leases, round_)
        a_read = threading.Event()
        invalidated = threading.Event()

        def writer_a():
            c = Conn(server.address)
            token = c.lease_get(key)[1] if leases else None
            value = b"%d" % db["version"]
            a_read.set()
            invalidated.wait()
            time.sleep(random.uniform(0, 0.01))
            if leases:
                c.lease_set(key, token, value)
            else:
                c.set(key, value)
            c.close()

        def writer_b():
            c = Conn(server.address)
            invalidated.wait()
            time.sleep(random.uniform(0, 0.01))
            if not leases:
                c.set(key, b"%d" % db["version"])
            else:
                while (answer := c.lease_get(key))[0] == "hot":
                    time.sleep(0.001)
                if answer[0] == "token":
                    c.lease_set(key, answer[1], b"%d" % db["version"])
            c.close()

        threads = [threading.Thread(target=writer_a), threading.Thread(target=writer_b)]
        for t in threads:
            t.start()
        a_read.wait()
        db["version"] += 1
        c = Conn(server.address)
        c.call(b"delete " + key + b"\r\n")
        invalidated.set()
        for t in threads:
            t.join()
        if c.get(key) not in (None, b"%d" % db["version"]):
            older.append(round_)
        c.close()
    return older


def test_stale_set_race_never_leaves_the_older_value(server):
    assert stale_set_race(server, leases=True) == []
    # The same schedule without leases does leave it (so the test can fail).
    assert stale_set_race(server, leases=False) != []


@pytest.mark.parametrize("mode, at_most, at_least", [("leases", 2.0, 0.5), ("plain", None, 10)])
def test_herd_fills_once_per_invalidation_with_leases(mode, at_most, at_least):
    with Server.shoal() as s:
        figures = herd(s.address, mode, readers=200, processes=4, invalidations=4, period=0.7)
    per_invalidation = figures["queries_per_invalidation"]
    assert per_invalidation >= at_least, figures
    if at_most is not None:
        assert per_invalidation <= at_most, figures


def test_meta_commands_treat_lease_records_as_missing(conn):
    conn.lease_get(b"p")  # a placeholder
    assert conn.call(b"delete h hold 30\r\n") == b"NOT_FOUND"  # a hold-off
    for key in (b"p", b"h"):
        assert conn.call(b"mg %s v T30\r\n" % key) == b"EN"
        assert conn.call(b"ms %s 1 MR\r\nx\r\n" % key) == b"NS"
        assert conn.call(b"ms %s 1 MA\r\nx\r\n" % key) == b"NS"
        assert conn.call(b"ms %s 1 ME\r\nx\r\n" % key) == b"NS"
        assert conn.call(b"ma %s\r\n" % key) == b"NF"
        assert conn.call(b"touch %s 10\r\n" % key) == b"NOT_FOUND"
    # A value kept stale after a delete may be replaced by add.
    assert conn.set(b"s", b"v") == b"STORED"
    assert conn.call(b"delete s\r\n") == b"DELETED"
    assert conn.call(b"ms s 1 ME\r\nx\r\n") == b"HD"
    assert conn.get(b"s") == b"x"
    # md removes a lease record (voiding its token) and says there was no item.
    _, token, _, _ = conn.lease_get(b"q")
    assert conn.call(b"md q\r\n") == b"NF"
    assert conn.lease_set(b"q", token, b"late") == b"NOT_STORED"


def test_settings_show_the_lease_intervals(conn):
    conn.sock.sendall(b"stats settings\r\n")
    lines = []
    while (line := conn.line()) != b"END":
        lines.append(line)
    assert b"STAT lease_ttl 3" in lines and b"STAT stale_ttl 5" in lines
