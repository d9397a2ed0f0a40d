"""What a near cache's miss costs the pool, counted by the pool's own `stats` (issue #28: a fill
in one pool request per missed key). A look-aside reader through a near cache reads with `get`
(shared memory, then the near cache), and on a miss takes the pool's lease and fills it. The
near cache leaves the get's miss of a key lease-read through it to the `lease-get` that follows
(docs/design/near-cache.md, "One pool request per miss"): a refill costs the pool a `lease-get`
and the `lease-set`, as without a near cache, not a fetch besides; a key read with plain gets
costs one `mg` per miss; a multiget's misses one `mg` each, in one exchange."""

import shoal
from harness import Server, eventually, talk

N = 20
TIMEOUT = ["--upstream-timeout", "10000"]


def counters(server):
    with server.connect() as s:
        answer = talk(s, b"stats\r\n", b"END\r\n")
    lines = (line.split(" ", 2) for line in answer.decode().split("\r\n"))
    return {p[1]: int(p[2]) for p in lines if p[0] == "STAT" and p[2].isdigit()}


def pool_requests(upstream, action):
    """The pool's read and write requests while `action` runs: cmd_get (get, gets, mg,
    lease-get), cmd_touch, cmd_set, deletes."""
    names = ("cmd_get", "cmd_touch", "cmd_set", "delete_hits", "delete_misses")
    before = counters(upstream)
    action()
    after = counters(upstream)
    return {name: after[name] - before[name] for name in names}


def fill(client, key):
    assert client.get(key) is None
    kind, _, token = client.lease_get(key)
    assert kind == "token", kind
    assert client.lease_set(key, token, b"v") == "stored"


def test_a_refill_costs_the_pool_one_lease_get_and_the_lease_set_per_key():
    with Server.shoal() as upstream, Server.shoal("--upstream", f"127.0.0.1:{upstream.port}", "--admit", "all",
                                                 *TIMEOUT) as n:
        client = shoal.Client(f"127.0.0.1:{n.port}")
        assert client.is_local()
        keys = [f"row:{i}" for i in range(N)]
        # The first fill of a key, which the near cache has not seen lease-read: fetched too.
        first = pool_requests(upstream, lambda: [fill(client, k) for k in keys])
        assert first["cmd_get"] == 2 * N and first["cmd_set"] == N, first
        # Read from shared memory now: nothing reaches the pool.
        assert pool_requests(upstream, lambda: [client.get(k) for k in keys])["cmd_get"] == 0
        assert all(client.get(k) == b"v" for k in keys)

        def invalidate():
            with n.connect() as s:
                for k in keys:
                    assert talk(s, f"delete {k}\r\n".encode(), b"\r\n") == b"DELETED\r\n"
        # Each invalidated key is filled again: one lease-get and one lease-set, no fetch.
        for _ in range(2):
            invalidate()
            again = pool_requests(upstream, lambda: [fill(client, k) for k in keys])
            assert again == {"cmd_get": N, "cmd_touch": 0, "cmd_set": N, "delete_hits": 0, "delete_misses": 0}, again
        with n.connect() as s:
            stats = talk(s, b"stats shoal\r\n", b"END\r\n").decode()
        assert f"STAT near_left_to_lease {2 * N}\r\n" in stats, stats


def test_a_plain_get_miss_is_one_pool_request_and_a_value_a_lease_get_found_is_fetched_with_its_ttl():
    with Server.shoal() as upstream, Server.shoal("--upstream", f"127.0.0.1:{upstream.port}", "--admit", "all",
                                                 "--near-ttl", "600", *TIMEOUT) as n:
        client = shoal.Client(f"127.0.0.1:{n.port}")
        with upstream.connect() as s:
            for i in range(N):
                talk(s, f"set plain:{i} 0 0 1\r\np\r\nset short:{i} 0 5 1\r\ns\r\n".encode(), b"STORED\r\nSTORED\r\n")
        # Gets of keys nobody lease-read: one mg each.
        got = pool_requests(upstream, lambda: [client.get(f"plain:{i}") for i in range(N)])
        assert got["cmd_get"] == N, got
        # A multiget's misses: one mg each too (in one exchange).
        multi = pool_requests(upstream, lambda: client.get_many([f"m:{i}" for i in range(N)]))
        assert multi["cmd_get"] == N, multi
        # A lease-get that finds a value answers it; the near cache does not keep it (a VALUE
        # line has no TTL), and the next miss fetches it with its TTL: kept no longer than 5 s.
        for i in range(N):
            kind, value, _ = client.lease_get(f"short:{i}")
            assert (kind, value) == ("hit", b"s")
            assert client.get(f"short:{i}") == b"s"
        with n.connect() as s:
            for i in range(N):
                line = talk(s, f"mg short:{i} t\r\n".encode(), b"\r\n")
                assert line.startswith(b"HD t") and 0 < int(line.split(b"t")[1]) <= 5, line


def test_a_delete_the_upstream_missed_is_sent_again_before_the_next_fetch(tmp_path):
    # The near cache acknowledges an invalidation its upstream cannot take (so that the
    # invalidator's spool moves on), and owes the delete to the upstream: a pool that comes
    # back still holding the old value must not hand it back to the near cache to keep.
    region = tmp_path / "upstream.region"
    upstream = Server.shoal("-e", str(region)).start()
    port = upstream.port
    try:
        with Server.shoal("--upstream", f"127.0.0.1:{port}", "--admit", "all", *TIMEOUT) as n:
            with upstream.connect() as s:
                assert talk(s, b"set k 0 0 3\r\nold\r\n", b"\r\n") == b"STORED\r\n"
            with n.connect() as s:
                assert talk(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 3\r\nold\r\nEND\r\n"
            upstream.stop()
            with n.connect() as s:
                assert talk(s, b"delete k\r\n", b"\r\n") == b"DELETED\r\n", "the near copy was deleted"
                assert "STAT near_deletes_owed 1\r\n" in talk(s, b"stats shoal\r\n", b"END\r\n").decode()
            # Back, warm: it still holds the old value (it never had the delete).
            upstream = Server.shoal("-e", str(region), port=port).start()

            def paid():
                with n.connect() as s:
                    assert talk(s, b"get k\r\n", b"END\r\n") == b"END\r\n", "never the old value"
                    return "STAT near_deletes_paid 1\r\n" in talk(s, b"stats shoal\r\n", b"END\r\n").decode()
            eventually(paid)  # the near cache leaves a failed upstream alone for a second
            with upstream.connect() as s:
                assert talk(s, b"get k\r\n", b"END\r\n") == b"END\r\n", "the owed delete reached the upstream"
    finally:
        upstream.stop()
