"""`stats` on shoal names every counter memcached 1.6 prints that has a meaning for a segment
store (the list of the server issue); the differential case compares names with memcached and
is an expected difference, since memcached also prints slab, LRU-crawler and logger counters."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import Server, read_until, talk  # noqa: E402

REQUIRED = """cmd_get get_hits get_misses get_expired get_flushed cmd_set cmd_touch delete_misses
delete_hits incr_misses incr_hits decr_misses decr_hits cas_misses cas_hits cas_badval touch_hits
touch_misses curr_items total_items bytes limit_maxbytes evictions expired_unfetched
evicted_unfetched curr_connections total_connections threads uptime time pid version
rusage_user rusage_system bytes_read bytes_written""".split()


def stats(sock, args=""):
    sock.sendall(f"stats {args}".strip().encode() + b"\r\n")
    data = read_until(sock, b"END\r\n", b"RESET\r\n")
    return dict(line.split(" ", 2)[1:] for line in data.decode().splitlines() if line.startswith("STAT "))


def test_stats_names_the_counters_memcached_users_read():
    with Server.shoal("-t", "2") as server, server.connect() as sock:
        sock.sendall(b"set a 0 0 1\r\nx\r\nget a\r\nget b\r\n")
        while not sock.recv(4096).endswith(b"END\r\nEND\r\n"):
            pass
        names = stats(sock)
        assert [n for n in REQUIRED if n not in names] == []
        assert int(names["threads"]) == 2
        assert (int(names["get_hits"]), int(names["get_misses"]), int(names["curr_items"])) == (1, 1, 1)
        assert int(names["limit_maxbytes"]) == 64 << 20
        for sub in ("settings", "items", "slabs", "conns"):
            assert stats(sock, sub), sub
        sock.sendall(b"stats reset\r\n")
        assert sock.recv(4096) == b"RESET\r\n"
        assert int(stats(sock)["get_hits"]) == 0


SHOAL_OWN = ["index_evictions", "segments", "segments_free", "segment_bytes", "index_bytes",
             "segments_evicted", "segments_reclaimed", "io_uring", "open_fds"]
# The io_uring data path's own counts follow (SHOAL_SERVER_IO=uring, -o io_uring).
URING_OWN = ["uring_buffers", "uring_buffers_lent", "uring_ring_empty", "uring_ops_in_flight"]


def test_stats_lists_every_field_of_memcached_in_its_order():
    # memcached prints its crawler's, maintainer's and page mover's counters only while those
    # are on (`no_modern` turns all three off); Shoal's own fields are in `stats shoal`.
    for extra in ([], ["-o", "idle_timeout=600"], ["-o", "no_lru_crawler,no_lru_maintainer"],
                  ["-o", "no_modern"], ["-o", "no_modern,lru_crawler,slab_reassign"]):
        with Server.memcached(*extra) as memcached, memcached.connect() as m, \
                Server.shoal(*extra) as shoal, shoal.connect() as s:
            expected, got = list(stats(m)), list(stats(s))
            assert got == expected, (extra, [n for n in expected if n not in got],
                                     [n for n in got if n not in expected])
            assert ("idle_kicks" in got) == (extra == ["-o", "idle_timeout=600"])
            own = stats(s, "shoal")
            assert list(own) == SHOAL_OWN + (URING_OWN if own["io_uring"] == "1" else [])
            m.sendall(b"stats shoal\r\n")
            assert read_until(m, b"\r\n") == b"ERROR\r\n", "an extension memcached does not have"


def test_a_delimiter_turns_detail_on_and_names_the_prefix_end():
    for server in (Server.memcached, Server.shoal):
        with server("-D", "|") as srv, srv.connect() as sock:
            settings = stats(sock, "settings")
            assert (settings["stat_key_prefix"], settings["detail_enabled"]) == ("|", "yes")
            sock.sendall(b"set a:b|c 0 0 1\r\nx\r\nstats detail dump\r\n")
            assert read_until(sock, b"END\r\n") == b"STORED\r\nPREFIX a:b get 0 hit 0 set 1 del 0\r\nEND\r\n"


def conns(sock):
    """`stats conns` with descriptors, ports and client ports taken out: (field, value) pairs.
    Seconds since a connection's last command are checked to be a number and left out: a loaded
    machine can take a second between the connection's first command and `stats conns`."""
    import re
    data = talk(sock, b"stats conns\r\n", b"END\r\n")
    pairs = []
    for line in data.decode().splitlines()[:-1]:
        _, key, value = line.split(" ", 2)
        field = key.split(":", 1)[1]
        if field == "secs_since_last_cmd":
            assert value.isdigit(), line
            value = "SECONDS"
        pairs.append((field, re.sub(r":\d+$", ":PORT", value)))
    return pairs


def test_stats_conns_lists_listeners_then_connections_as_memcached_does():
    from harness import free_port
    port = free_port()
    with Server.memcached("-t", "1", "-U", str(port), port=port) as memcached, memcached.connect() as m:
        expected = conns(m)
    with Server.shoal("-t", "1", "-U", str(port), port=port) as shoal, shoal.connect() as s:
        assert conns(s) == expected
