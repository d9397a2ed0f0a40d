"""Routers deliver deletes to the near caches of their region (issue #28, item 3;
docs/design/near-cache.md, "Invalidations reach every near cache"): a change one host makes
through the router reaches the pool and, off the client's answer path, every other host's near
cache (`"near_caches"` in the router's configuration, each near cache's `--invalidation-listen`),
from a spool per near cache that waits out a near cache that is down and outlives a router killed
with -9. A delete on the invalidation listener drops the near copy and is not forwarded."""

import json

import shoal
from harness import Server, eventually, free_port, talk
from test_near_owed import Router

# Generous: the machine may be loaded; a slower answer is a miss, and these tests want answers.
TIMEOUT = ["--upstream-timeout", "10000"]


class NearRouter(Router):
    """The owed-deletes tests' restartable router, listing near caches to invalidate."""

    def __init__(self, tmp_path, server, near_caches):
        super().__init__(tmp_path, server)
        config = json.loads(self.config.read_text())
        config["near_caches"] = [f"127.0.0.1:{port}" for port in near_caches]
        self.config.write_text(json.dumps(config))


def near(router, listen_port, *extra):
    """A near cache in front of `router`, taking invalidations on `listen_port`. Its near copies
    live an hour: only a delivered delete can make one go within a test."""
    return Server.shoal("--upstream", f"127.0.0.1:{router.port}", *TIMEOUT, "--admit", "all",
                        "--near-ttl", "3600", "--invalidation-listen", f"127.0.0.1:{listen_port}", *extra)


def ask(server, request, until=b"\r\n"):
    with server.connect() as s:
        return talk(s, request, until)


def stat(server, name, kind=b"shoal"):
    lines = ask(server, b"stats " + kind + b"\r\n", b"END\r\n").decode().split("\r\n")
    return {p[1]: p[2] for p in (line.split(" ", 2) for line in lines) if p[0] == "STAT"}[name]


def held(server):
    return int(stat(server, "curr_items", b""))


def test_a_change_through_the_router_reaches_the_other_hosts_near_cache(tmp_path):
    listen = [free_port(), free_port()]
    with Server.shoal() as pool:
        router = NearRouter(tmp_path, pool, listen)
        router.start()
        try:
            with near(router, listen[0]) as n1, near(router, listen[1]) as n2:
                ask(pool, b"set k 0 0 3\r\nold\r\nset j 0 0 1\r\nj\r\n", b"STORED\r\nSTORED\r\n")
                clients = [shoal.Client(f"127.0.0.1:{n.port}") for n in (n1, n2)]
                assert [c.get("k") for c in clients] == [b"old", b"old"]
                assert [c.get("j") for c in clients] == [b"j", b"j"]
                # Host 1 deletes through its near cache, which forwards it to the router: the
                # pool loses it, and the router hands host 2's near cache a delete.
                assert ask(n1, b"delete k\r\n") == b"DELETED\r\n"
                eventually(lambda: clients[1].get("k") is None)
                assert ask(pool, b"get k\r\n", b"END\r\n") == b"END\r\n"
                # Any write counts: a set through host 1 drops host 2's old copy.
                assert ask(n1, b"set j 0 0 1\r\nJ\r\n") == b"STORED\r\n"
                eventually(lambda: clients[1].get("j") in (None, b"J"))
                assert clients[1].get("j") == b"J", "fetched again, the new value"
                assert int(stat(n2, "near_invalidations")) >= 2
                # Delivered to the listener: dropped there, never forwarded back.
                assert stat(n2, "near_forwarded") == "0"
        finally:
            router.kill()


def test_a_near_cache_down_gets_its_deletes_later_even_across_a_router_kill(tmp_path):
    listen = [free_port(), free_port()]
    region = tmp_path / "n2.region"
    with Server.shoal() as pool:
        router = NearRouter(tmp_path, pool, listen)
        router.start()
        n2 = near(router, listen[1], "-e", str(region))
        try:
            with near(router, listen[0]) as n1:
                n2.start()
                ask(pool, b"set k 0 0 3\r\nold\r\n")
                assert shoal.Client(f"127.0.0.1:{n2.port}").get("k") == b"old"
                # Host 2's near cache is down (killed: its region keeps the copy) while host 1
                # deletes through the router; then the router is killed too.
                n2.stop()
                assert ask(n1, b"delete k\r\n") == b"DELETED\r\n"
                router.kill()
                # Host 2 back, warm: its copy is still there, nobody has told it yet.
                n2.start()
                assert shoal.Client(f"127.0.0.1:{n2.port}").get("k") == b"old"
                # The restarted router delivers what its spool kept.
                router.start()
                eventually(lambda: held(n2) == 0)
                assert shoal.Client(f"127.0.0.1:{n2.port}").get("k") is None
                assert stat(n2, "near_forwarded") == "0"
        finally:
            n2.stop()
            router.kill()


def test_a_delete_on_the_invalidation_listener_is_not_forwarded(tmp_path):
    listen = free_port()
    with Server.shoal() as pool:
        router = NearRouter(tmp_path, pool, [])
        router.start()
        try:
            with near(router, listen) as n:
                ask(pool, b"set k 0 0 1\r\nv\r\n")
                assert ask(n, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
                assert stat(n, "near_invalidation_listen", b"settings") == f"127.0.0.1:{listen}"
                listener = Server([], listen, "listener")
                with listener.connect() as s:
                    assert talk(s, b"delete k\r\ndelete k\r\n", b"NOT_FOUND\r\n") == b"DELETED\r\nNOT_FOUND\r\n"
                    assert talk(s, b"set k 0 0 1\r\nx\r\n").startswith(b"CLIENT_ERROR")
                assert held(n) == 0
                assert stat(n, "near_forwarded") == "0" and stat(n, "near_invalidations") == "2"
                assert ask(pool, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n", "the pool's own"
        finally:
            router.kill()
