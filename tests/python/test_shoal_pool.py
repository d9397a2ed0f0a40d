"""`shoal.Client(servers=[...])`: a pool with pymemcache's HashClient calls, against a mixed pool
of real `shoal server`s and Debian's memcached: every key on the server the hashing names,
multigets across servers, local reads per server, a killed server (misses, write errors, or a
Gutter pool), and bad input refused before anything is sent."""

import contextlib
import time

import pytest

import shoal
from harness import Server, talk


@pytest.fixture(scope="module")
def servers():
    kinds = ["shoal", "memcached", "shoal", "memcached", "shoal"]
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(Server.shoal() if k == "shoal" else Server.memcached()) for k in kinds]


def address(server):
    host, port = server.address
    return f"{host}:{port}"


def holder(servers, key):
    """The address of the one server that holds `key`, asked of each directly."""
    found = []
    for s in servers:
        with s.connect() as sock:
            answer = talk(sock, f"get {key}\r\n".encode(), b"END\r\n")
            if answer.startswith(b"VALUE"):
                found.append(address(s))
    assert len(found) == 1, f"{key} on {found}"
    return found[0]


@pytest.mark.parametrize("hashing", ["jump", "rendezvous"])
def test_keys_land_on_their_owner_and_come_back(servers, hashing):
    pool = shoal.Client(servers=[s.address for s in servers], hashing=hashing, timeout=2.0)
    pool.flush_all()
    values = {f"pool:{hashing}:{i}": f"v{i}".encode() for i in range(500)}
    assert pool.set_many(values, expire=300) == []
    for key in list(values)[:60]:
        assert holder(servers, key) == pool.server_for(key)
    owners = {pool.server_for(k) for k in values}
    assert owners == {address(s) for s in servers}, "every server owns some keys"
    assert pool.get_many(list(values) + ["absent"]) == values
    assert pool.get("absent") is None
    key = next(iter(values))
    assert pool.get(key) == values[key]
    value, cas = pool.gets(key)
    assert pool.cas(key, b"new", cas) is True
    assert pool.cas(key, b"newer", cas) is False
    assert pool.add(key, b"x") is False
    assert pool.replace(key, b"replaced") is True
    assert pool.append(key, b"+") is True
    assert pool.get(key) == b"replaced+"
    assert pool.incr("n", 1) is None
    pool.set("n", b"9")
    assert pool.incr("n", 1) == 10 and pool.decr("n", 3) == 7
    assert pool.touch(key, 100) is True
    assert pool.delete_many(list(values)) is True
    assert pool.get_many(list(values)) == {}
    assert set(pool.stats()) == {address(s) for s in servers}
    assert all(isinstance(v, str) for v in pool.version().values())
    pool.close()


def test_shoal_servers_are_read_locally(servers):
    pool = shoal.Client(servers=[s.address for s in servers], hashing="jump")
    pool.set_many({f"local:{i}": b"x" for i in range(100)})
    assert len(pool.get_many([f"local:{i}" for i in range(100)])) == 100
    shoals = {address(s) for s in servers if s.kind == "shoal"}
    assert set(pool.local_servers()) == shoals
    assert pool.is_local() is False  # the memcached servers are read over TCP


def test_weights_and_leases_through_a_pool(servers):
    shoals = [s for s in servers if s.kind == "shoal"]
    pool = shoal.Client(servers=[(*shoals[0].address, 3.0), shoals[1].address], hashing="rendezvous")
    owners = [pool.server_for(f"w:{i}") for i in range(3000)]
    heavy = owners.count(address(shoals[0])) / len(owners)
    assert 0.70 < heavy < 0.80, heavy  # weight 3 of 4
    calls = []
    value = pool.get_or_fill("lease:key", lambda: calls.append(1) or b"from-db")
    assert value == b"from-db" and pool.get_or_fill("lease:key", lambda: b"never") == b"from-db"
    assert calls == [1]
    kind, _, token = pool.lease_get("lease:other")
    assert kind == "token" and pool.lease_set("lease:other", token, b"v") == "stored"


def test_a_killed_server_misses_and_gutter_takes_its_keys():
    with contextlib.ExitStack() as stack:
        members = [stack.enter_context(Server.shoal()) for _ in range(3)]
        gutter = stack.enter_context(Server.memcached())
        addresses = [m.address for m in members]
        plain = shoal.Client(servers=addresses, hashing="jump", timeout=0.5, connect_timeout=0.5, local=False)
        guttered = shoal.Client(servers=addresses, hashing="jump", timeout=0.5, connect_timeout=0.5,
                                local=False, gutter=[gutter.address], gutter_ttl=5)
        keys = [f"k{i}" for i in range(300)]
        assert plain.set_many({k: b"v" for k in keys}) == []
        victim = members[1]
        victim.stop()
        lost = [k for k in keys if plain.server_for(k) == address(victim)]
        assert lost
        started = time.monotonic()
        got = plain.get_many(keys)
        assert time.monotonic() - started < 2.0
        assert set(got) == set(keys) - set(lost)
        assert plain.get(lost[0]) is None
        with pytest.raises(shoal.ConnectionFailed, match="down"):
            plain.set(lost[0], b"v")
        assert plain.set_many({k: b"v" for k in keys}) == lost
        assert guttered.get_many(lost) == {}
        assert guttered.set_many({k: b"g" for k in lost}, expire=3600) == []
        assert guttered.get_many(lost) == {k: b"g" for k in lost}
        with gutter.connect() as sock:
            sock.sendall(f"mg {lost[0]} t\r\n".encode())
            ttl = int(sock.recv(100).split()[1][1:])
        assert 0 < ttl <= 5


def test_bad_pools_and_keys_are_refused_naming_the_value(servers):
    with pytest.raises(shoal.IllegalInput, match="no servers"):
        shoal.Client(servers=[])
    with pytest.raises(shoal.IllegalInput, match="nonsense"):
        shoal.Client(servers=["127.0.0.1:1", "nonsense"])
    with pytest.raises(shoal.IllegalInput, match="weight"):
        shoal.Client(servers=[("127.0.0.1", 1, 0.0)])
    with pytest.raises(shoal.IllegalInput, match="weight"):
        shoal.Client(servers=["127.0.0.1:1:-2"])
    with pytest.raises(shoal.IllegalInput, match="unknown hashing"):
        shoal.Client(servers=["127.0.0.1:1"], hashing="crc99")
    with pytest.raises(TypeError):
        shoal.Client()
    pool = shoal.Client(servers=[s.address for s in servers], hashing="jump")
    with pytest.raises(shoal.IllegalInput, match="key"):
        pool.get("k" * 251)
    with pytest.raises(shoal.IllegalInput, match="key"):
        pool.get_many(["fine", "not fine"])
    with pytest.raises(shoal.IllegalInput, match="key"):
        pool.set_many({"a b": b"v"})


def test_udp_gets_from_a_pool():
    with contextlib.ExitStack() as stack:
        ports = [free_udp_port() for _ in range(2)]
        members = [stack.enter_context(Server.shoal("-U", str(ports[0]), port=ports[0])),
                   stack.enter_context(Server.memcached("-U", str(ports[1]), port=ports[1]))]
        pool = shoal.Client(servers=[m.address for m in members], hashing="jump", local=False, udp=True)
        values = {f"u{i}": f"value{i}".encode() for i in range(200)}
        assert pool.set_many(values) == []
        assert pool.get_many(list(values)) == values
        assert pool.get("u1") == b"value1"


def free_udp_port():
    import socket
    while True:
        with socket.socket() as t:
            t.bind(("127.0.0.1", 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind(("127.0.0.1", port))
                    return port
                except OSError:
                    continue


def test_a_proteus_pool_follows_the_provisioners_state_file(tmp_path):
    """The state file `shoal provision --state` writes: a changed count starts a transition in
    which moved keys are read from their old owner; a file for other servers is refused."""
    import json

    with contextlib.ExitStack() as stack:
        trio = [stack.enter_context(Server.shoal()) for _ in range(3)]
        addresses = [address(s) for s in trio]
        pool = shoal.Client(servers=addresses, hashing="proteus", timeout=2.0)
        state = tmp_path / "state.json"
        values = {f"follow:{i}": f"v{i}".encode() for i in range(200)}
        assert pool.set_many(values) == []
        state.write_text(json.dumps({"servers": addresses, "active": 2,
                                     "transition": {"from": 3, "until": time.time() + 60}}))
        pool.follow_provisioning(str(state))
        assert all(pool.server_for(k) != addresses[2] for k in values), "server 3 owns nothing now"
        assert pool.get_many(list(values)) == values, "moved keys come from server 3"
        state.write_text(json.dumps({"servers": addresses[:1], "active": 1, "transition": None}))
        with pytest.raises(shoal.IllegalInput, match="not this pool's"):
            pool.follow_provisioning(str(state))
