"""Hot keys spread over replicas (issue #28): a Python pool (`shoal.Client(servers=[...],
hot_replicas=R)`) and `shoal router` (`"hot_replicas": R`) over the same three `shoal server`s
put a hot key's copies on the same servers, and a write through either is seen through every
replica."""

import contextlib

import pytest
import shoal

from harness import Server, eventually, router, talk


def holders(servers, key):
    """The servers (by address) holding a copy of `key`, asked directly, with the values."""
    found = {}
    for s in servers:
        with s.connect() as sock:
            answer = talk(sock, b"get " + key + b"\r\n", b"END\r\n")
        if answer.startswith(b"VALUE"):
            found[f"127.0.0.1:{s.port}"] = answer.split(b"\r\n")[1]
    return found


def held_uniques(servers, key):
    """The servers (by address) holding a copy of `key`, asked directly with `gets`: each
    one's value and CAS unique."""
    found = {}
    for s in servers:
        with s.connect() as sock:
            answer = talk(sock, b"gets " + key + b"\r\n", b"END\r\n")
        if answer.startswith(b"VALUE"):
            header, value = answer.split(b"\r\n")[:2]
            found[f"127.0.0.1:{s.port}"] = (value, int(header.split()[4]))
    return found


@pytest.fixture(params=["jump", "proteus"])
def pool(request, tmp_path):
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(Server.shoal("-o", "hotkeys_sample=1")) for _ in range(3)]
        listed = ", ".join(f'"127.0.0.1:{s.port}"' for s in servers)
        config = tmp_path / "config.json"
        config.write_text(f'{{ "pools": {{ "A": {{ "servers": [{listed}], "hot_replicas": 2, "hot_refresh_secs": 1 }} }},'
                          f' "route": {{ "type": "PoolRoute", "pool": "A", "hash": "{request.param}" }} }}')
        port, _ = stack.enter_context(router(config, tmp_path))
        yield request.param, servers, port


def test_a_python_pool_and_the_router_agree_on_replicas_and_writes_reach_them(pool):
    hashing, servers, port = pool
    addresses = [f"127.0.0.1:{s.port}" for s in servers]
    # Network reads: reads from shared memory are not seen by the servers' detection.
    client = shoal.Client(servers=addresses, hashing=hashing, local=False, hot_replicas=2, hot_refresh=3600.0)
    key = f"hot:py:{hashing}".encode()
    client.set(key, b"v1")

    def python_learned():
        for _ in range(200):
            client.get(key)
        return key in [k for k, _ in client.refresh_hot_keys()]
    eventually(python_learned, seconds=60)
    replicas = client.replicas_for(key)
    assert len(replicas) == 2 and replicas[0] == client.server_for(key)
    for _ in range(4):
        assert client.get(key) == b"v1"
    assert sorted(holders(servers, key)) == sorted(replicas), "the Python pool copied it to its replicas"

    # The router, polling the same servers, spreads the same key over the same servers.
    with socket_to(port) as sock:
        def router_write_refilled_the_copy():
            # Once the router has polled the servers' hot keys, its write deletes the copy and
            # refills it from the owner (before, the copy keeps v1 or has expired).
            talk(sock, b"set " + key + b" 0 0 2\r\nv2\r\n")
            return holders(servers, key) == {r: b"v2" for r in replicas}
        eventually(router_write_refilled_the_copy, seconds=60)

        def router_copied():
            for _ in range(100):
                talk(sock, b"get " + key + b"\r\n", b"END\r\n")
            return len(holders(servers, key)) == 2
        eventually(router_copied, seconds=60)
        assert holders(servers, key) == {r: b"v2" for r in replicas}

        # Every copy carries the owner's CAS unique: each replica, the router's `gets` (spread
        # over the replicas like `get`) and the Python pool's `gets` hand out the same one.
        uniques = {address: unique for address, (_, unique) in held_uniques(servers, key).items()}
        assert sorted(uniques) == sorted(replicas) and len(set(uniques.values())) == 1, uniques
        unique = uniques[replicas[0]]
        for _ in range(4):
            assert talk(sock, b"gets " + key + b"\r\n", b"END\r\n") == \
                b"VALUE " + key + b" 0 2 " + str(unique).encode() + b"\r\nv2\r\nEND\r\n"
            assert client.gets(key) == (b"v2", unique)

        # A cas with it succeeds once, through Python; a second, through the router, fails.
        assert client.cas(key, b"v3", unique) is True
        assert talk(sock, b"cas " + key + b" 0 0 2 " + str(unique).encode() + b"\r\nv4\r\n") == b"EXISTS\r\n"
        assert all(v == b"v3" for v in holders(servers, key).values())

    # A write through the Python pool is seen through every replica.
    client.set(key, b"v3")
    assert all(v == b"v3" for v in holders(servers, key).values())
    for _ in range(4):
        assert client.get(key) == b"v3"


@contextlib.contextmanager
def socket_to(port):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        yield sock


def test_router_stats_and_metrics_show_each_hot_pool(tmp_path):
    """`stats` has a `hot_pool` line per pool route with `"hot_replicas"`, and `/metrics` the
    same numbers by pool: the hot keys learnt, the gets a copy answered, the copies made."""
    import urllib.request

    from harness import free_port

    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(Server.shoal("-o", "hotkeys_sample=1")) for _ in range(3)]
        listed = ", ".join(f'"127.0.0.1:{s.port}"' for s in servers)
        config = tmp_path / "config.json"
        config.write_text(f'{{ "pools": {{ "A": {{ "servers": [{listed}], "hot_replicas": 3, "hot_refresh_secs": 1 }} }},'
                          ' "route": { "type": "PoolRoute", "pool": "A" } }')
        metrics = free_port()
        port, _ = stack.enter_context(router(config, tmp_path, "--metrics-listen", f"127.0.0.1:{metrics}"))
        sock = stack.enter_context(socket_to(port))

        def hot_pool_line():
            lines = [line for line in talk(sock, b"stats\r\n", b"END\r\n").decode().split("\r\n")
                     if line.startswith("STAT hot_pool ")]
            assert len(lines) == 1, lines
            name, *fields = lines[0].split()[2:]
            assert name == "A"
            return dict(field.split("=") for field in fields)
        assert hot_pool_line() == {"replicas": "3", "hot_keys": "0", "copy_hits": "0", "copies_made": "0"}

        talk(sock, b"set hot:stats 0 0 2\r\nhi\r\n")

        def copies_answer():
            for _ in range(100):
                assert talk(sock, b"get hot:stats\r\n", b"END\r\n") == b"VALUE hot:stats 0 2\r\nhi\r\nEND\r\n"
            line = hot_pool_line()
            return int(line["hot_keys"]) >= 1 and int(line["copies_made"]) >= 1 and int(line["copy_hits"]) >= 1
        eventually(copies_answer, seconds=60)

        def scraped():
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as answer:
                text = answer.read().decode()
            return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                    if line.startswith("shoal_router_hot_")}
        seen, line = scraped(), hot_pool_line()
        assert seen['shoal_router_hot_keys{pool="A"}'] >= 1
        assert seen['shoal_router_hot_copy_hits_total{pool="A"}'] >= 1
        assert seen['shoal_router_hot_copies_made_total{pool="A"}'] >= 1
        assert seen['shoal_router_hot_copy_hits_total{pool="A"}'] <= int(line["copy_hits"])
