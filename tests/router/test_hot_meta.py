"""Meta gets of hot keys spread over replicas (issue #28): `shoal router` (`"hot_replicas"`) and
a Python pool (`shoal.Client(servers=[...], hot_replicas=R)`, the Rust pool underneath) read an
`mg` whose flags a copy answers as its owner would (v c f s k O q u:
`shoal_route::hot::meta_get_spreads`) from each replica in turn, as they read `get`; a copy's
miss asks the owner, refills the copy with the owner's item and unique, and answers as the
client's own `mg` would have; any other flag (`t` here) goes to the owner; a write is seen
through every replica."""

import contextlib
import socket

import pytest
import shoal

from harness import addresses, eventually, hot_key_servers, router, talk

KEY = b"hot:mg"


def stat(servers, name):
    """Each server's counter `name`, asked directly."""
    values = []
    for s in servers:
        with s.connect() as sock:
            stats = talk(sock, b"stats\r\n", b"END\r\n").decode()
        values.append(next(int(line.split()[2]) for line in stats.splitlines() if line.startswith(f"STAT {name} ")))
    return values


def held(servers):
    """Each server's value and CAS unique under KEY (None: no copy there), asked directly."""
    found = []
    for s in servers:
        with s.connect() as sock:
            answer = talk(sock, b"gets " + KEY + b"\r\n", b"END\r\n")
        if answer.startswith(b"VALUE"):
            header, value = answer.split(b"\r\n")[:2]
            found.append((value, int(header.split()[4])))
        else:
            found.append(None)
    return found


def reads_of(servers, read, times):
    """How many of `times` calls of `read` each server answered (its `get_hits`)."""
    before = stat(servers, "get_hits")
    for _ in range(times):
        read()
    return [a - b for a, b in zip(stat(servers, "get_hits"), before)]


@pytest.fixture
def servers():
    with hot_key_servers() as servers:
        yield servers


def test_the_router_reads_a_hot_keys_mg_from_every_replica_and_sees_every_write(servers, tmp_path):
    listed = ", ".join(f'"{a}"' for a in addresses(servers))
    config = tmp_path / "config.json"
    config.write_text(f'{{ "pools": {{ "A": {{ "servers": [{listed}], "hot_replicas": "all", "hot_refresh_secs": 1,'
                      ' "hot_ttl_secs": 120 } },'
                      ' "route": { "type": "PoolRoute", "pool": "A", "hash": "jump" } }')
    # The owner as the router places it: a pool client with the same servers and hashing.
    owner = addresses(servers).index(shoal.Client(servers=addresses(servers), hashing="jump").server_for(KEY))
    with contextlib.ExitStack() as stack:
        port, _ = stack.enter_context(router(config, tmp_path))
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))

        def mg(flags):
            # `mn` behind it: the answer, a value block included, is whole once `MN` is read.
            answer = talk(sock, b"mg " + KEY + b" " + flags + b"\r\nmn\r\n", b"MN\r\n")
            return answer[:-len(b"MN\r\n")]

        assert talk(sock, b"set " + KEY + b" 5 0 2\r\nm1\r\n") == b"STORED\r\n"

        def copied_by_mg_alone():
            # Only mg reads: once the router counts the key hot, the copies' misses ask the
            # owner and refill them (in the background).
            for _ in range(50):
                assert mg(b"v") == b"VA 2\r\nm1\r\n"
            return all(held(servers))
        eventually(copied_by_mg_alone, seconds=60)
        unique = held(servers)[owner][1]
        assert held(servers) == [(b"m1", unique)] * 3, "each copy holds the owner's item and unique"

        whole = b"VA 2 c%d f5 khot:mg s2 Oab\r\nm1\r\n" % unique
        reads = reads_of(servers, lambda: mg(b"v c f k s Oab") == whole or pytest.fail("not the owner's answer"), 30)
        assert reads == [10, 10, 10], "each replica answers a third of the mg reads"

        # A flag a copy cannot answer alike (`t`: a copy's TTL is its own) goes to the owner.
        reads = reads_of(servers, lambda: mg(b"v t") == b"VA 2 t-1\r\nm1\r\n" or pytest.fail("not t-1"), 6)
        assert reads == [6 if i == owner else 0 for i in range(3)], f"the owner is {owner}"

        # A write through the router is seen by every replica's mg; a meta delete by none.
        assert talk(sock, b"set " + KEY + b" 5 0 2\r\nm2\r\n") == b"STORED\r\n"
        assert [h and h[0] for h in held(servers)] == [b"m2"] * 3, "the write refilled every copy"
        for _ in range(6):
            assert mg(b"v f") == b"VA 2 f5\r\nm2\r\n"
        assert talk(sock, b"md " + KEY + b"\r\n") == b"HD\r\n"
        assert held(servers) == [None] * 3
        for _ in range(3):
            assert mg(b"v Oz") == b"EN Oz\r\n"
            assert mg(b"v q") == b"", "a quiet miss"


def test_a_python_pool_reads_a_hot_keys_mg_from_every_replica_and_sees_every_write(servers):
    # Network reads: reads from shared memory are not seen by the servers' detection.
    client = shoal.Client(servers=addresses(servers), hashing="jump", local=False, hot_replicas=0,
                          hot_refresh=3600.0)
    owner = addresses(servers).index(client.server_for(KEY))
    client.set(KEY, b"p1", flags=3)

    def learned():
        for _ in range(200):
            client.get(KEY)
        return KEY in [k for k, _ in client.refresh_hot_keys()]
    eventually(learned)
    # No copy yet: the copies' first mg reads miss, ask the owner and refill them.
    for _ in range(3):
        assert client.meta_get(KEY, "v") == ("VA 2", b"p1")
    unique = held(servers)[owner][1]
    assert held(servers) == [(b"p1", unique)] * 3, "each copy holds the owner's item and unique"

    whole = (f"VA 2 c{unique} f3 s2", b"p1")
    reads = reads_of(servers, lambda: client.meta_get(KEY, "v c f s") == whole or pytest.fail("not the owner's"), 30)
    assert reads == [10, 10, 10], "each replica answers a third of the mg reads"
    reads = reads_of(servers, lambda: client.meta_get(KEY, "t") == ("HD t-1", None) or pytest.fail("not t-1"), 6)
    assert reads == [6 if i == owner else 0 for i in range(3)], f"the owner ({owner}) answers every mg with t"

    client.set(KEY, b"p2", flags=3)
    for _ in range(6):
        assert client.meta_get(KEY, "v f") == ("VA 2 f3", b"p2")
    client.delete(KEY)
    for _ in range(3):
        assert client.meta_get(KEY, "v") == ("EN", None)
        assert client.meta_get(KEY, "v q") is None
    with pytest.raises(shoal.IllegalInput):
        client.meta_get(KEY, "b v")
