"""pylibmc (Python over C libmemcached, text protocol) against the server.

Each test runs with four client set-ups: libmemcached's default behaviors, `tcp_nodelay`, an
explicit `binary=False` client with the `cas` behavior (libmemcached then reads every item
with `gets`), and a `binary=True` client (memcached's binary protocol, with `cas`). Covers set/get/add/replace/append/prepend/delete/touch, multi get/set/delete,
incr/decr, gets/cas, Python values that travel with client flags, binary values up to just
under the item limit, a value over it, flush_all and stats.
SASL with pylibmc is in tests/server/test_auth.py.
"""

import random

import pylibmc
import pytest

import wire

CONFIGS = {
    "default": {},
    "tcp_nodelay": {"behaviors": {"tcp_nodelay": True}},
    "text_cas": {"binary": False, "behaviors": {"cas": True}},
    "binary": {"binary": True, "behaviors": {"cas": True}},
}


def make_client(server, config, **extra_behaviors) -> pylibmc.Client:
    behaviors = {**config.get("behaviors", {}), **extra_behaviors}
    return pylibmc.Client([f"127.0.0.1:{server.port}"], binary=config.get("binary", False),
                          behaviors=behaviors)


@pytest.fixture(params=list(CONFIGS))
def config(request):
    return CONFIGS[request.param]


@pytest.fixture
def client(server, config):
    c = make_client(server, config)
    yield c
    c.disconnect_all()


def test_store_commands(client, config):
    assert client.get("k") is None
    assert client.set("k", b"v1") is True
    assert client.get("k") == b"v1"
    assert client.add("k", b"v2") is False
    assert client.add("new", b"n") is True
    assert client.replace("k", b"v3") is True
    if config.get("binary"):
        # libmemcached reports the binary "not found" status of a replace as an error.
        with pytest.raises(pylibmc.NotFound):
            client.replace("absent", b"x")
    else:
        assert client.replace("absent", b"x") is False
    assert client.append("k", b"-tail") is True
    assert client.prepend("k", b"head-") is True
    assert client.get("k") == b"head-v3-tail"
    assert client.append("absent", b"x") is False
    assert client.get("absent") is None


def test_delete_and_touch(client):
    client.set("d", b"x")
    assert client.touch("d", 100) is True
    assert client.touch("absent", 100) is False
    assert client.delete("d") is True
    assert client.delete("d") is False
    assert client.get("d") is None


def test_multi(client):
    items = {f"m{i}": b"v%d" % i for i in range(200)}
    assert client.set_multi(items) == []
    assert client.get_multi(list(items) + ["absent"]) == items
    assert client.add_multi({"m0": b"again", "fresh": b"f"}) == ["m0"]
    assert client.get_multi(["m0", "fresh"]) == {"m0": b"v0", "fresh": b"f"}
    assert client.delete_multi([f"m{i}" for i in range(100)]) is True
    assert client.delete_multi(["m100", "absent"]) is False  # one key was not there
    assert client.get_multi(list(items)) == {f"m{i}": b"v%d" % i for i in range(101, 200)}


def test_incr_decr(client):
    with pytest.raises(pylibmc.NotFound):
        client.incr("n")
    client.set("n", b"10")
    assert client.incr("n") == 11
    assert client.incr("n", 9) == 20
    assert client.decr("n", 5) == 15
    assert client.decr("n", 100) == 0
    client.set_multi({"a": b"1", "b": b"2"})
    client.incr_multi(["a", "b"], delta=10)
    assert client.get_multi(["a", "b"]) == {"a": b"11", "b": b"12"}
    client.set("text", b"abc")
    # The text protocol's CLIENT_ERROR; in binary, libmemcached cannot name the status 0x06.
    with pytest.raises((pylibmc.ClientError, pylibmc.UnknownReadFailure)):
        client.incr("text")


def test_gets_cas(server, config):
    c = make_client(server, config, cas=True)
    assert c.gets("c") == (None, None)
    c.set("c", b"v1")
    value, token = c.gets("c")
    assert value == b"v1" and token > 0
    assert c.cas("c", b"v2", token) is True
    assert c.cas("c", b"v3", token) is False  # the token is stale now
    assert c.get("c") == b"v2"
    assert c.gets("c")[1] != token
    c.disconnect_all()


def test_python_values_keep_their_flags(client):
    values = {"int": 42, "str": "text", "bytes": b"\x00\xff", "list": [1, "two", None],
              "big": 2 ** 70, "bool": True}
    assert client.set_multi(values) == []
    assert client.get_multi(list(values)) == values
    assert client.incr("int", 8) == 50


@pytest.mark.parametrize("size", [0, 3, 1000, 200_000, wire.LARGEST_VALUE])
def test_binary_values(client, size):
    value = random.Random(size).randbytes(size).replace(b"\n", b"\r\n")[:size]
    key = "b" * 250
    assert client.set(key, value) is True
    assert client.get(key) == value


def test_value_over_item_limit(client):
    with pytest.raises(pylibmc.TooBig):
        client.set("big", b"x" * (wire.ITEM_LIMIT + 1))
    assert client.set("after", b"ok") is True
    assert client.get("after") == b"ok"


def test_flush_all_and_stats(client):
    client.set_multi({"f1": b"1", "f2": b"2"})
    assert client.flush_all() is True
    assert client.get_multi(["f1", "f2"]) == {}
    [(name, stats)] = client.get_stats()
    assert name.startswith(b"127.0.0.1:")
    assert int(stats["limit_maxbytes"]) == 64 * 1024 * 1024
    assert stats["version"] and int(stats["pid"]) > 0
