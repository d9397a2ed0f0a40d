"""A near cache's owed deletes outlive it (issue #28; docs/design/near-cache.md, "Owed deletes"):
a delete the near cache acknowledged while its upstream router was down is on disk before the
answer, so a near cache killed (-9) before it paid it sends it when it restarts, before it reads
anything from the upstream, and the pool loses the old value. A file that is not a near cache's
owed deletes for this upstream is refused with an error naming it."""

import json
import socket
import subprocess

import shoal
from harness import SHOAL, Server, eventually, free_port, talk

# Generous: the machine may be loaded; a slower answer is a miss, and these tests want answers.
TIMEOUT = ["--upstream-timeout", "10000"]


class Router:
    """A `shoal router` in front of one server, restartable on the same port (the near cache
    names it)."""

    def __init__(self, tmp_path, server):
        self.port, self.dir = free_port(), tmp_path
        self.config = tmp_path / "router.json"
        self.config.write_text(json.dumps({
            "pools": {"main": {"servers": [f"127.0.0.1:{server.port}"]}},
            "route": {"type": "PoolRoute", "pool": "main"},
        }))
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [str(SHOAL), "router", "-f", str(self.config), "-p", str(self.port), "-l", "127.0.0.1", "-t", "1",
             "--spool-dir", str(self.dir / "spool")], stdin=subprocess.DEVNULL)

        def listening():
            assert self.process.poll() is None, "the router exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                return False
        eventually(listening)

    def kill(self):
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

        def refused():
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return False
            except OSError:
                return True
        eventually(refused)


def ask(server, request, until=b"\r\n"):
    with server.connect() as s:
        return talk(s, request, until)


def shoal_stats(server):
    lines = ask(server, b"stats shoal\r\n", b"END\r\n").decode().split("\r\n")
    return {p[1]: p[2] for p in (line.split(" ", 2) for line in lines) if p[0] == "STAT"}


def test_a_delete_owed_when_the_near_cache_is_killed_reaches_the_pool_after_restarts(tmp_path):
    region = tmp_path / "near.region"
    with Server.shoal() as pool:
        router = Router(tmp_path, pool)
        router.start()
        near = Server.shoal("-e", str(region), "--upstream", f"127.0.0.1:{router.port}", "--admit", "all",
                            *TIMEOUT)
        try:
            near.start()
            assert ask(pool, b"set k 0 0 3\r\nold\r\n") == b"STORED\r\n"
            client = shoal.Client(f"127.0.0.1:{near.port}")
            assert client.get("k") == b"old", "fetched from the pool through the router, and kept"

            # The router down: the near cache acknowledges the delete and owes it.
            router.kill()
            assert ask(near, b"delete k\r\n") == b"DELETED\r\n"
            stats = shoal_stats(near)
            assert (stats["near_deletes_owed"], stats["near_deletes_owed_now"]) == ("1", "1"), stats
            owed = region.with_name("near.region.owed")
            assert b"delete k\r\n" in owed.read_bytes(), "on disk before it was acknowledged"

            # Killed before it could pay: the pool still holds the old value.
            near.proc.kill()
            near.proc.wait()
            router.start()
            assert ask(pool, b"get k\r\n", b"END\r\n") == b"VALUE k 0 3\r\nold\r\nEND\r\n"

            # Restarted warm: the first read through it sends the delete before it fetches.
            near.start()
            assert ask(near, b"get k\r\n", b"END\r\n") == b"END\r\n", "never the old value"
            assert shoal.Client(f"127.0.0.1:{near.port}").get("k") is None
            eventually(lambda: ask(pool, b"get k\r\n", b"END\r\n") == b"END\r\n")
            eventually(lambda: shoal_stats(near)["near_deletes_owed_now"] == "0")
            assert shoal_stats(near)["near_deletes_paid"] == "1"
            assert b"delete k" not in owed.read_bytes(), "paid: gone from the file"
        finally:
            near.stop()
            router.kill()


def test_a_restart_pays_owed_deletes_with_no_request_to_the_near_cache(tmp_path):
    owed = tmp_path / "owed"
    with Server.shoal() as pool:
        router = Router(tmp_path, pool)
        router.start()
        upstream = f"127.0.0.1:{router.port}"
        near = Server.shoal("--upstream", upstream, "--owed-deletes", str(owed), *TIMEOUT)
        try:
            assert ask(pool, b"set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n", b"STORED\r\nSTORED\r\n")
            router.kill()
            near.start()
            assert ask(near, b"delete a\r\ndelete b\r\n", b"NOT_FOUND\r\nNOT_FOUND\r\n")
            near.proc.kill()
            near.proc.wait()
            router.start()
            near.start()
            # Nothing asks the near cache: its own thread sends them once the router is back.
            for key in (b"a", b"b"):
                eventually(lambda: ask(pool, b"get " + key + b"\r\n", b"END\r\n") == b"END\r\n")
        finally:
            near.stop()
            router.kill()


def test_a_foreign_or_damaged_owed_deletes_file_is_refused_naming_it(tmp_path):
    port = free_port()  # nothing listens: the file is read before the upstream is
    owed = tmp_path / "owed"
    for content, said in [
        (b"\x00\x01 not ours\n", "not a near cache's owed-deletes file"),
        (b"shoal near cache owed deletes v1 to 127.0.0.1:1\ndelete k\r\n", "owed to"),
        (f"shoal near cache owed deletes v1 to 127.0.0.1:{port}\nset k 0 0 1\r\n".encode(), "not a delete"),
    ]:
        owed.write_bytes(content)
        done = subprocess.run([str(SHOAL), "server", "-p", str(free_port()), "-U", "0", "-l", "127.0.0.1",
                               "--upstream", f"127.0.0.1:{port}", "--owed-deletes", str(owed)],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        stderr = done.stderr.decode()
        assert done.returncode != 0, stderr
        assert str(owed) in stderr and said in stderr, stderr
        assert owed.read_bytes() == content, "left as it was, for an operator"
