"""pymemcache (pure-Python text-protocol client) against the server.

Covers every command pymemcache speaks: set (with and without noreply), get, get_many, gets,
cas, add, replace, append, prepend, incr, decr, delete, touch, flush_all, version, stats; binary
values from empty to just under the 1 MiB item limit, a value over it, 250-byte keys, and expiry
(relative, absolute and negative exptimes, touch) on the server's clock.
"""

import random

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

import wire

KEY250 = "k" * 250


def make_client(server, **kw) -> Client:
    return Client(server.address, connect_timeout=5, timeout=5, **kw)


@pytest.fixture
def client(server):
    """Waits for every reply (noreply=False)."""
    c = make_client(server, default_noreply=False)
    yield c
    c.close()


@pytest.fixture
def noreply_client(server):
    """pymemcache's default: storage commands are sent with noreply."""
    c = make_client(server)
    yield c
    c.close()


def test_set_get(client):
    assert client.get("missing") is None
    assert client.set("a", b"1") is True
    assert client.get("a") == b"1"
    assert client.set("a", b"two") is True
    assert client.get("a") == b"two"


def test_noreply_set_is_stored(client, noreply_client):
    for i in range(50):
        assert noreply_client.set(f"nr{i}", b"v%d" % i) is True
    # A get on the same connection is answered after the sets before it have been applied.
    assert noreply_client.get("nr49") == b"v49"
    assert client.get_many([f"nr{i}" for i in range(50)]) == {
        f"nr{i}": b"v%d" % i for i in range(50)}


def test_get_many(client):
    items = {f"m{i}": b"value-%d" % i for i in range(100)}
    assert client.set_many(items) == []
    wanted = list(items) + ["absent1", "absent2"]
    assert client.get_many(wanted) == items
    assert client.get_many(["absent1"]) == {}


def test_gets_and_cas(client):
    assert client.gets("missing") == (None, None)
    assert client.cas("missing", b"x", b"1") is None  # NOT_FOUND
    client.set("c", b"v1")
    value, token = client.gets("c")
    assert value == b"v1" and token.isdigit()
    assert client.cas("c", b"v2", token) is True
    assert client.get("c") == b"v2"
    assert client.cas("c", b"v3", token) is False  # EXISTS: the token is stale
    assert client.get("c") == b"v2"
    _, newer = client.gets("c")
    assert newer != token
    client.set("c", b"v4")  # any store changes the token
    assert client.gets("c")[1] != newer
    assert client.gets_many(["c", "missing"]) == {"c": (b"v4", client.gets("c")[1])}


def test_add_replace(client):
    assert client.replace("r", b"x") is False
    assert client.get("r") is None
    assert client.add("r", b"first") is True
    assert client.add("r", b"second") is False
    assert client.get("r") == b"first"
    assert client.replace("r", b"third") is True
    assert client.get("r") == b"third"


def test_append_prepend(client):
    assert client.append("p", b"x") is False
    assert client.prepend("p", b"x") is False
    assert client.get("p") is None
    client.set("p", b"mid")
    assert client.append("p", b"-end") is True
    assert client.prepend("p", b"start-") is True
    assert client.get("p") == b"start-mid-end"


def test_incr_decr(client):
    assert client.incr("n", 1) is None  # NOT_FOUND
    assert client.decr("n", 1) is None
    client.set("n", b"10")
    assert client.incr("n", 5) == 15
    assert client.decr("n", 3) == 12
    assert client.decr("n", 100) == 0  # decr stops at zero
    assert client.get("n") == b"0 "  # memcached's in-place padding (docs/PROTOCOL.md)
    client.set("big", b"18446744073709551615")
    assert client.incr("big", 2) == 1  # incr wraps at 2^64
    client.set("pad", b"100")
    assert client.decr("pad", 91) == 9
    assert client.get("pad") == b"9  "
    assert client.incr("pad", 991) == 1000
    assert client.get("pad") == b"1000"
    client.set("text", b"abc")
    with pytest.raises(MemcacheClientError, match="cannot increment or decrement non-numeric"):
        client.incr("text", 1)


def test_delete(client):
    assert client.delete("d") is False
    client.set("d", b"x")
    assert client.delete("d") is True
    assert client.get("d") is None
    assert client.delete("d") is False
    client.set_many({"d1": b"1", "d2": b"2"})
    assert client.delete_many(["d1", "d2", "d3"]) is True
    assert client.get_many(["d1", "d2"]) == {}


def test_touch(client):
    assert client.touch("t", 100) is False
    client.set("t", b"x")
    assert client.touch("t", 100) is True
    assert client.get("t") == b"x"


def test_flush_all(client):
    client.set_many({f"f{i}": b"x" for i in range(20)})
    assert client.flush_all() is True
    assert client.get_many([f"f{i}" for i in range(20)]) == {}
    assert client.set("after", b"y") is True  # items stored after the flush live
    assert client.get("after") == b"y"


def test_version_and_stats(client):
    version = client.version()
    assert version and b" " not in version
    before = client.stats()
    client.set("s1", b"x")
    client.set("s2", b"y")
    client.get_many(["s1", "s2"])
    client.get("s3")
    after = client.stats()
    assert after[b"version"] == version
    assert after[b"limit_maxbytes"] == 64 * 1024 * 1024
    assert after[b"pid"] > 0 and after[b"curr_connections"] >= 1
    assert after[b"uptime"] >= before[b"uptime"]
    assert after[b"cmd_set"] - before[b"cmd_set"] == 2
    assert after[b"get_hits"] - before[b"get_hits"] == 2
    assert after[b"get_misses"] - before[b"get_misses"] == 1
    assert after[b"cmd_get"] - before[b"cmd_get"] == 3
    assert after[b"curr_items"] >= 2


@pytest.mark.parametrize("size", [0, 1, 2, 100, 1024, 65_536, 500_000, wire.LARGEST_VALUE])
def test_binary_values(client, size):
    value = random.Random(size).randbytes(size)
    if size >= 2:
        value = b"\r\n" + value[2:]  # a CRLF inside the block must not end it
    assert client.set(KEY250, value) is True
    assert client.get(KEY250) == value
    assert client.get_many([KEY250, "other"]) == {KEY250: value}


def test_value_over_item_limit(client):
    client.set("big", b"old")
    with pytest.raises(MemcacheServerError, match="object too large for cache"):
        client.set("big", b"x" * (wire.ITEM_LIMIT + 1))
    # memcached drops the old value of a key whose new value was refused.
    assert client.get("big") is None
    assert client.set("after-big", b"ok") is True  # the data block was swallowed
    assert client.get("after-big") == b"ok"


def test_keys_of_250_bytes(client):
    keys = {c * 250: c.encode() for c in "abcdefgh"}
    assert client.set_many(keys) == []
    assert client.get_many(list(keys)) == keys
    assert client.delete(KEY250) is False


def test_expiry_on_server_clock(server, client):
    client.set("ttl", b"x", expire=1)
    client.set("forever", b"x")
    client.set("touched-longer", b"x", expire=1)
    client.set("touched-shorter", b"x")
    assert client.touch("touched-longer", 0) is True
    assert client.touch("touched-shorter", 1) is True
    wire.pass_time(server, 1)
    assert client.get_many(["ttl", "forever", "touched-longer", "touched-shorter"]) == {
        "forever": b"x", "touched-longer": b"x"}
    assert client.add("ttl", b"new") is True  # an expired key is free for add


@pytest.mark.shoal_only  # memcached has no debugtime and we do not wait 100 s for it
def test_debugtime_moves_expiry_precisely(server, client):
    """An item lives until its exptime and no longer, by the shifted server clock."""
    client.set("ttl100", b"x", expire=100)
    wire.pass_time(server, 50)
    assert client.get("ttl100") == b"x"
    assert client.touch("ttl100", 100) is True  # from now: 100 s more
    wire.pass_time(server, 60)
    assert client.get("ttl100") == b"x"
    wire.pass_time(server, 60)
    assert client.get("ttl100") is None


def test_absolute_and_negative_exptimes(client, server):
    now = int(wire.stats(server)["time"])
    client.set("past", b"x", expire=now - 10)  # over 30 days: a Unix time, already passed
    client.set("future", b"x", expire=now + 3600)
    client.set("negative", b"x", expire=-1)
    client.set("touched-away", b"x")
    client.touch("touched-away", -1)
    assert client.get_many(["past", "future", "negative", "touched-away"]) == {"future": b"x"}
