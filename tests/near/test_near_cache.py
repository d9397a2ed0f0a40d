"""The near cache (`shoal server --upstream`, docs/design/near-cache.md) with real processes: an
upstream `shoal server` (or a `shoal router` in front of one), a near `shoal server` whose misses
are fetched from it, and an application's `shoal.Client` reading the near cache's region through
shared memory."""

import contextlib
import json
import socket
import sqlite3
import subprocess
import threading

import pytest
import shoal
import harness
from harness import ROOT, SHOAL, Server, eventually, free_port, talk

# Generous: the machine may be loaded; a slower answer is a miss, and these tests want answers.
TIMEOUT = ["--upstream-timeout", "10000"]


def near(upstream_port, *extra):
    return Server.shoal("--upstream", f"127.0.0.1:{upstream_port}", *TIMEOUT, *extra)


def stats(server, kind=b""):
    with server.connect() as s:
        answer = talk(s, b"stats " + kind + b"\r\n", b"END\r\n")
    lines = answer.decode().split("\r\n")
    return {p[1]: p[2] for p in (line.split(" ", 2) for line in lines) if p[0] == "STAT"}


def shoal_stat(server, name):
    return int(stats(server, b"shoal")[name])


def ask(server, request, until=b"\r\n"):
    with server.connect() as s:
        return talk(s, request, until)


def local_client(server):
    client = shoal.Client(f"127.0.0.1:{server.port}")
    assert client.is_local(), "the near cache's region is readable on this host"
    return client


def test_a_miss_is_fetched_admitted_and_then_read_from_shared_memory():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        assert ask(upstream, b"set user:1 7 0 5\r\nalice\r\n") == b"STORED\r\n"
        client = local_client(n)
        # The local miss goes to the near cache, which fetches it from upstream.
        assert client.get("user:1") == b"alice"
        assert shoal_stat(n, "near_admitted") == 1
        assert shoal_stat(n, "near_fetch_hits") == 1
        # Admitted: with the upstream gone, the value is still read, from shared memory.
        upstream.stop()
        for _ in range(10):
            assert client.get("user:1") == b"alice"
        assert shoal_stat(n, "near_fetches") == 1, "no more fetches: every read was local"
        # Clients' local hits are folded into the server's get_hits (every 100 ms).
        eventually(lambda: int(stats(n)["get_hits"]) >= 10)
        # Its flags and CAS unique are the upstream's.
        assert ask(n, b"gets user:1\r\n", b"END\r\n").startswith(b"VALUE user:1 7 5 ")


def test_upstream_cas_uniques_work_through_the_near_cache():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        ask(upstream, b"set k 0 0 1\r\na\r\n")
        unique = ask(n, b"gets k\r\n", b"END\r\n").split(b"\r\n")[0].split(b" ")[4]
        assert ask(n, b"cas k 0 0 1 " + unique + b"\r\nb\r\n") == b"STORED\r\n"
        assert ask(upstream, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nb\r\nEND\r\n"


def test_the_default_policy_admits_a_key_on_its_second_miss():
    with Server.shoal() as upstream, near(upstream.port) as n:
        ask(upstream, b"set once 0 0 1\r\na\r\nset twice 0 0 1\r\nb\r\n", b"STORED\r\nSTORED\r\n")
        assert ask(n, b"get once\r\n", b"END\r\n") == b"VALUE once 0 1\r\na\r\nEND\r\n"
        assert shoal_stat(n, "near_not_admitted") == 1 and shoal_stat(n, "near_admitted") == 0
        ask(n, b"get twice\r\n", b"END\r\n")
        ask(n, b"get twice\r\n", b"END\r\n")
        assert shoal_stat(n, "near_admitted") == 1
        assert stats(n)["curr_items"] == "1", "only the key read twice is held"
        assert stats(n, b"settings")["near_admit"] == "reuse"


def test_the_hot_policy_admits_only_keys_this_server_sees_as_hot():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "hot", "-o", "hotkeys_sample=1") as n:
        ask(upstream, b"set hot 0 0 1\r\nh\r\nset cold 0 0 1\r\nc\r\n", b"STORED\r\nSTORED\r\n")
        ask(n, b"get cold\r\n", b"END\r\n")
        assert stats(n)["curr_items"] == "0"

        def hot_is_held():
            # Every read counts (sample 1); the hot set is looked at once a second at most.
            with n.connect() as s:
                for _ in range(50):
                    talk(s, b"get hot\r\n", b"END\r\n")
            return stats(n)["curr_items"] == "1"
        eventually(hot_is_held)
        assert ask(n, b"get cold\r\n", b"END\r\n") == b"VALUE cold 0 1\r\nc\r\nEND\r\n"


def test_leases_are_the_upstreams():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        first = ask(n, b"lease-get k\r\n", b"END\r\n")
        assert first.startswith(b"LVALUE k ")
        token = first.split(b" ")[2]
        assert int(token) > 1
        # Another caller, through the near cache or straight upstream, gets a hot miss.
        assert ask(n, b"lease-get k\r\n", b"END\r\n") == b"LVALUE k 1 0 0\r\n\r\nEND\r\n"
        assert ask(upstream, b"lease-get k\r\n", b"END\r\n") == b"LVALUE k 1 0 0\r\n\r\nEND\r\n"
        # A stale token is the upstream's to refuse.
        assert ask(n, b"lease-set k 99 0 0 1\r\nx\r\n") == b"NOT_STORED\r\n"
        assert ask(n, b"lease-set k " + token + b" 3 0 5\r\nvalue\r\n") == b"STORED\r\n"
        assert ask(upstream, b"get k\r\n", b"END\r\n") == b"VALUE k 3 5\r\nvalue\r\nEND\r\n"
        # Admitted on its lease-set: read locally, and answered by the near cache's lease-get.
        assert local_client(n).get("k") == b"value"
        fetches = shoal_stat(n, "near_fetches")
        assert ask(n, b"lease-get k\r\n", b"END\r\n") == b"VALUE k 3 5\r\nvalue\r\nEND\r\n"
        assert shoal_stat(n, "near_fetches") == fetches


def test_a_lease_set_after_a_delete_is_not_kept_here():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        token = ask(n, b"lease-get k\r\n", b"END\r\n").split(b" ")[2]
        assert ask(n, b"delete k\r\n") == b"NOT_FOUND\r\n"
        # The delete voided the upstream's token: the old value is stored nowhere.
        assert ask(n, b"lease-set k " + token + b" 0 0 3\r\nold\r\n") == b"NOT_STORED\r\n"
        assert stats(n)["curr_items"] == "0"


def test_writes_and_deletes_go_upstream_and_drop_the_near_copy():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        ask(upstream, b"set k 0 0 3\r\nold\r\n")
        client = local_client(n)
        assert client.get("k") == b"old"
        client.set("k", b"new")
        assert ask(upstream, b"get k\r\n", b"END\r\n") == b"VALUE k 0 3\r\nnew\r\nEND\r\n"
        assert client.get("k") == b"new", "the near copy went with the write"
        assert ask(n, b"incr n 1\r\n") == b"NOT_FOUND\r\n"
        ask(upstream, b"set n 0 0 1\r\n5\r\n")
        assert ask(n, b"incr n 2\r\n") == b"7\r\n"
        assert ask(n, b"append k 0 0 1\r\n!\r\n") == b"STORED\r\n"
        assert client.get("k") == b"new!"
        assert client.delete("k")
        assert ask(upstream, b"get k\r\n", b"END\r\n") == b"END\r\n"
        assert client.get("k") is None
        assert ask(n, b"set q 0 0 1 noreply\r\nq\r\nget q\r\n", b"END\r\n") == b"VALUE q 0 1\r\nq\r\nEND\r\n"
        # Meta writes are not forwarded: refused, clearly.
        assert ask(n, b"ms k 1\r\nx\r\n").startswith(b"CLIENT_ERROR a near cache forwards")


@contextlib.contextmanager
def invalidator(tmp_path, database, *destinations):
    log = open(tmp_path / "invalidator.log", "w")
    argv = [str(SHOAL), "invalidator", "--sqlite", str(database), "--state-dir", str(tmp_path / "state")]
    for d in destinations:
        argv += ["--destination", f"127.0.0.1:{d.port}"]
    proc = subprocess.Popen(argv, stderr=log)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_an_invalidation_removes_the_near_copy_read_through_shared_memory(tmp_path):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        ask(upstream, b"set user:1 0 0 1\r\na\r\nset user:2 0 0 1\r\nb\r\n", b"STORED\r\nSTORED\r\n")
        client = local_client(n)
        assert client.get("user:1") == b"a" and client.get("user:2") == b"b"
        with invalidator(tmp_path, path, upstream, n):
            with db:
                shoal.invalidate(db.cursor(), ["user:1"])
            eventually(lambda: client.get("user:1") is None)
            assert ask(upstream, b"get user:1\r\n", b"END\r\n") == b"END\r\n"
            assert stats(n)["curr_items"] == "1"
            # With the upstream down, invalidations still reach the near copy (none is lost),
            # and a miss is a miss, not an error.
            upstream.stop()
            with db:
                shoal.invalidate(db.cursor(), ["user:2"])
            eventually(lambda: stats(n)["curr_items"] == "0")
            assert client.get("user:2") is None


ROUTER = {
    "pools": {"main": {"servers": []}, "near": {"servers": []}},
    "routes": [
        {"aliases": ["/app/main/"], "route": "PoolRoute|main"},
        {"aliases": ["/app/near/"], "route": {"type": "AllAsyncRoute", "children": "Pool|near"}},
    ],
}


@contextlib.contextmanager
def router(tmp_path, main, nears):
    config = json.loads(json.dumps(ROUTER))
    config["pools"]["main"]["servers"] = [f"127.0.0.1:{main.port}"]
    config["pools"]["near"]["servers"] = [f"127.0.0.1:{p}" for p in nears]
    path = tmp_path / "router.json"
    path.write_text(json.dumps(config))
    with harness.router(path, tmp_path) as (port, _stderr):
        yield port


def test_two_near_caches_behind_a_router_get_its_broadcast_deletes(tmp_path):
    # The near caches' ports are chosen first: the router lists them, and they name the router.
    ports = [free_port(), free_port()]
    with Server.shoal() as main, router(tmp_path, main, ports) as router_port:
        nears = [Server.shoal("--upstream", f"127.0.0.1:{router_port}", *TIMEOUT, "--admit", "all", port=p)
                 for p in ports]
        with nears[0], nears[1]:
            ask(main, b"set k 0 0 1\r\nv\r\n")
            clients = [local_client(n) for n in nears]
            assert [c.get("k") for c in clients] == [b"v", b"v"]
            # A delete to every route (the invalidator's form through a router): the pool and,
            # spooled, each near cache. A near cache forwards it with no prefix: the pool only.
            with socket.create_connection(("127.0.0.1", router_port)) as s:
                assert talk(s, b"delete /app/*/k\r\n") in (b"DELETED\r\n", b"NOT_FOUND\r\n")
            for n in nears:
                eventually(lambda: stats(n)["curr_items"] == "0")
            assert [c.get("k") for c in clients] == [None, None]
            assert ask(main, b"get k\r\n", b"END\r\n") == b"END\r\n"


def test_an_upstream_that_is_down_gives_misses_and_clear_write_errors():
    with Server.shoal("--upstream", f"127.0.0.1:{free_port()}") as n:
        assert ask(n, b"get k\r\n", b"END\r\n") == b"END\r\n"
        assert ask(n, b"set k 0 0 1\r\nv\r\n").startswith(b"SERVER_ERROR upstream unavailable")
        assert ask(n, b"lease-get k\r\n").startswith(b"SERVER_ERROR upstream unavailable")
        # A delete is the near copy's: answered from here, so a spool moves on.
        assert ask(n, b"delete k\r\n") == b"NOT_FOUND\r\n"
        assert shoal_stat(n, "near_upstream_unavailable") >= 1


def scripted_upstream(answer):
    """A fake upstream that answers every request it reads with `answer`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while conn.recv(65536):
                    conn.sendall(answer)
    threading.Thread(target=serve, daemon=True).start()
    return listener


@pytest.mark.parametrize("garbage", [b"VALUE other 0 1\r\nx\r\nEND\r\n", b"HELLO\r\n", b"VALUE k 0 999999999\r\n"])
def test_bad_upstream_answers_are_misses_and_clear_errors(garbage):
    listener = scripted_upstream(garbage)
    try:
        port = listener.getsockname()[1]
        with Server.shoal("--upstream", f"127.0.0.1:{port}", *TIMEOUT) as n:
            assert ask(n, b"get k\r\n", b"END\r\n") == b"END\r\n"
            assert shoal_stat(n, "near_upstream_bad_answers") == 1
            assert stats(n)["curr_items"] == "0"
            answer = ask(n, b"lease-get k\r\n")
            assert answer.startswith(b"SERVER_ERROR"), answer
    finally:
        listener.close()


@pytest.mark.parametrize("argv, says", [
    (["--upstream", "nowhere"], "expected host:port"),
    (["--upstream", "127.0.0.1:1", "--admit", "lru"], "one of all, reuse"),
    (["--upstream", "127.0.0.1:1", "-B", "binary"], "text protocol only"),
    (["--admit", "all"], "--upstream"),
])
def test_bad_flags_say_what_to_fix(argv, says):
    done = subprocess.run([str(SHOAL), "server", "-p", "0", *argv], capture_output=True, timeout=60)
    assert done.returncode != 0
    assert says in done.stderr.decode(), done.stderr


def test_the_example_router_configuration_is_valid():
    example = ROOT / "examples" / "near" / "router.json"
    done = subprocess.run([str(SHOAL), "router", "--validate", str(example)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"pool main: 3 servers" in done.stdout
    assert b"near caches: 10.0.1.1:11312, 10.0.1.2:11312" in done.stdout


def test_a_multigets_misses_are_fetched_in_one_exchange():
    """An upstream that answers nothing until it has every key's meta get: a near cache asking
    one key at a time would get no answer (and time out, answering misses)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    seen = []

    def serve():
        conn, _ = listener.accept()
        with conn:
            data = b""
            while data.count(b"\r\n") < 3:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            seen.append(data)
            conn.sendall(b"VA 1 f1 t-1 c11 ka\r\nA\r\nEN kb\r\nVA 2 f3 t-1 c33 kc\r\nCC\r\n")
            conn.recv(65536)  # until the near cache closes
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        port = listener.getsockname()[1]
        with Server.shoal("--upstream", f"127.0.0.1:{port}", *TIMEOUT, "--admit", "all") as n:
            answer = ask(n, b"get a b c a\r\n", b"END\r\n")
            assert answer == b"VALUE a 1 1\r\nA\r\nVALUE c 3 2\r\nCC\r\nVALUE a 1 1\r\nA\r\nEND\r\n"
            assert seen == [b"mg a v f t c k\r\nmg b v f t c k\r\nmg c v f t c k\r\n"]
            assert stats(n)["curr_items"] == "2"
            assert shoal_stat(n, "near_fetches") == 3 and shoal_stat(n, "near_fetch_hits") == 2
    finally:
        listener.close()


def test_a_multiget_through_a_real_upstream_answers_and_admits_every_key():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all") as n:
        ask(upstream, b"set a 0 0 1\r\nA\r\nset c 5 0 2\r\nCC\r\n", b"STORED\r\nSTORED\r\n")
        expected = b"VALUE a 0 1\r\nA\r\nVALUE c 5 2\r\nCC\r\nEND\r\n"
        assert ask(n, b"get a b c\r\n", b"END\r\n") == expected
        assert stats(n)["curr_items"] == "2"
        upstream.stop()
        assert ask(n, b"get a b c\r\n", b"END\r\n") == expected, "from the near copies"


def test_a_near_copy_expires_no_later_than_the_upstreams():
    with Server.shoal() as upstream, near(upstream.port, "--admit", "all", "--near-ttl", "600") as n:
        ask(upstream, b"set short 0 5 1\r\ns\r\nset long 0 0 1\r\nl\r\n", b"STORED\r\nSTORED\r\n")
        assert ask(n, b"get short long\r\n", b"END\r\n").count(b"VALUE") == 2

        def ttl(key):
            line = ask(n, b"mg " + key + b" t\r\n")
            assert line.startswith(b"HD t"), line
            return int(line.split(b"t")[1])
        assert 0 < ttl(b"short") <= 5, "the upstream's remaining TTL"
        assert 500 < ttl(b"long") <= 600, "no expiry upstream: --near-ttl"
        # A lease-set's exptime caps the near copy too.
        token = ask(n, b"lease-get fresh\r\n", b"END\r\n").split(b" ")[2]
        assert ask(n, b"lease-set fresh " + token + b" 0 7 1\r\nf\r\n") == b"STORED\r\n"
        assert 0 < ttl(b"fresh") <= 7
