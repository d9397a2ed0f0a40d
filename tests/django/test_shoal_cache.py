"""shoal.django.ShoalCache beyond Django's own suite (test_django_suite.py runs that): values
shared with Django's PyMemcacheCache both ways, reads through shared memory from every local
server of a pool, an unreadable pickle read as a miss, and LOCATION's forms."""

import pytest
from django.core.cache.backends.memcached import PyMemcacheCache

import shoal
from harness import Server
from shoal.django import ShoalCache
from shoal.values import FLAG_PICKLE


class Name(str):
    """A subclass of str: pickled, so that it reads back as itself."""


VALUES = {
    "bytes": b"\x00\xffraw",
    "text": "héllo",
    "integer": 41,
    "negative": -7,
    "object": {"list": [1, 2.5, None], "tuple": ("a", b"b")},
    "boolean": True,  # a subclass of int: pickled too
    "str subclass": Name("kept as itself"),
}


@pytest.fixture(scope="module")
def server():
    with Server.shoal() as started:
        yield started


def location(*servers):
    return ";".join(f"127.0.0.1:{s.port}" for s in servers)


def test_values_written_by_one_backend_read_the_same_through_the_other(server):
    shoal_cache = ShoalCache(location(server), {})
    pymemcache_cache = PyMemcacheCache(location(server), {})
    shoal_cache.clear()
    for writer, reader in ((shoal_cache, pymemcache_cache), (pymemcache_cache, shoal_cache)):
        for key, value in VALUES.items():
            key = key.replace(" ", "-")
            writer.set(key, value)
            assert reader.get(key) == value, (type(writer).__name__, key)
            assert type(reader.get(key)) is type(value)
        assert reader.get_many(["integer", "object", "absent"]) == {
            "integer": 41, "object": VALUES["object"]}
    assert shoal_cache._cache.client.is_local()


def test_integers_count_on_the_server_and_read_back_as_integers(server):
    cache = ShoalCache(location(server), {})
    cache.set("hits", 41)
    assert cache.incr("hits") == 42
    assert cache.decr("hits", 50) == 0  # memcached stops at 0
    assert cache.get("hits") == 0
    with pytest.raises(ValueError):
        cache.incr("no such key")


def test_an_unreadable_pickle_is_a_miss(server):
    cache = ShoalCache(location(server), {})
    with shoal.Client(server.address) as client:
        client.set(cache.make_key("broken"), b"not a pickle", flags=FLAG_PICKLE)
        client.set(cache.make_key("fine"), b"raw")
    assert cache.get("broken", "default") == "default"
    assert cache.get_many(["broken", "fine"]) == {"fine": b"raw"}


def test_a_pool_reads_every_local_server_through_shared_memory():
    with Server.shoal() as a, Server.shoal() as b:
        cache = ShoalCache(location(a, b), {"OPTIONS": {"hashing": "ketama"}})
        cache.set_many({f"key{i}": i for i in range(100)})
        assert cache.get_many([f"key{i}" for i in range(100)]) == {f"key{i}": i for i in range(100)}
        assert sorted(cache._cache.client.local_servers()) == sorted(location(a, b).split(";"))
        for s in (a, b):
            with shoal.Client(s.address) as one:
                assert one.stats()["curr_items"] > 0, "the pool placed every key on one server"


@pytest.mark.parametrize("given, expected", [
    ("127.0.0.1:11311", "127.0.0.1:11311"),
    ("localhost", "localhost:11211"),
    ("[::1]", "[::1]:11211"),
    ("[::1]:11311", "[::1]:11311"),
    ("unix:/run/shoal.sock", "/run/shoal.sock"),
    ("/run/shoal.sock", "/run/shoal.sock"),
])
def test_location_names_servers_as_django_does(given, expected):
    assert ShoalCache(given, {}).client_servers == [expected]
