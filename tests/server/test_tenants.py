"""Tenants (`shoal server --tenants`, issue 16): the tenants file and its errors, how requests
find their tenant (prefix, listener, user), `stats tenants`, `curve <tenant>`, resizing with
`tenant_memlimit`, and isolation — a scanning tenant does not evict another's items."""

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import SHOAL, Server, free_port, talk  # noqa: E402

MB = 1 << 20


def tenants_file(tmp_path, text, name="tenants.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def stats_tenants(sock):
    """`stats tenants` as {tenant: {field: value}}."""
    out = {}
    for line in talk(sock, b"stats tenants\r\n", b"END\r\n").decode().splitlines()[:-1]:
        _, key, value = line.split(" ", 2)
        tenant, field = key.split(":", 1)
        out.setdefault(tenant, {})[field] = value
    return out


def set_many(sock, keys, value):
    sock.sendall(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(value), value) for k in keys))
    assert talk(sock, b"version\r\n", b"\r\n").startswith(b"VERSION")


def hits(sock, keys):
    """How many of `keys` a multiget finds."""
    found = 0
    for i in range(0, len(keys), 100):
        reply = talk(sock, b"get " + b" ".join(keys[i:i + 100]) + b"\r\n", b"END\r\n")
        found += reply.count(b"VALUE ")
    return found


@pytest.mark.parametrize("text, message", [
    ("[[tenant]]\nname = \"a\"\npolicy = \"random\"\n", "line 1: tenant \"a\": unknown eviction policy \"random\": use one of fifo, lru"),
    ("[[tenant]]\nname = \"a\"\nprefixes = [\"a:\"]\n[[tenant]]\nname = \"b\"\nprefixes = [\"a:b\"]\n",
     "line 4: prefix \"a:b\" of tenant \"b\" overlaps prefix \"a:\" of tenant \"a\""),
    ("[[tenant]]\nname = \"a\"\nsize_mb = 40\n[[tenant]]\nname = \"b\"\nsize_mb = 40\n",
     "add up to 80 MiB, over the memory limit of 64 MiB"),
    ("[[tenant]\n", "line 1"),
])
def test_a_bad_tenants_file_stops_the_start_naming_the_line(tmp_path, text, message):
    port = free_port()
    run = subprocess.run([SHOAL, "server", "-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", "64",
                          "--tenants", tenants_file(tmp_path, text)], capture_output=True, text=True, timeout=20)
    assert run.returncode != 0
    assert message in run.stderr, run.stderr


def test_keys_go_to_tenants_by_prefix_each_in_a_region_of_its_own(tmp_path):
    text = """
[[tenant]]
name = "web"
prefixes = ["web:"]
size_mb = 16
policy = "lru"
priority = 3
slo_hit_ratio = 0.8

[[tenant]]
name = "feed"
prefixes = ["feed:"]
size_mb = 8
"""
    with Server.shoal("--tenants", tenants_file(tmp_path, text)) as server, server.connect() as sock:
        set_many(sock, [b"web:%d" % i for i in range(30)], b"w")
        set_many(sock, [b"feed:%d" % i for i in range(20)], b"f")
        set_many(sock, [b"other:%d" % i for i in range(10)], b"o")
        assert talk(sock, b"get web:1 feed:2 other:3 web:none\r\n", b"END\r\n") == (
            b"VALUE web:1 0 1\r\nw\r\nVALUE feed:2 0 1\r\nf\r\nVALUE other:3 0 1\r\no\r\nEND\r\n")
        t = stats_tenants(sock)
        assert list(t) == ["web", "feed", "default"]
        assert [t[n]["curr_items"] for n in t] == ["30", "20", "10"]
        assert [t[n]["cmd_set"] for n in t] == ["30", "20", "10"]
        assert (t["web"]["cmd_get"], t["web"]["get_hits"], t["web"]["get_misses"]) == ("2", "1", "1")
        assert t["web"]["limit_maxbytes"] == str(16 * MB)
        assert t["feed"]["limit_maxbytes"] == str(8 * MB)
        assert t["default"]["limit_maxbytes"] == str(40 * MB)  # what the others leave of -m
        assert (t["web"]["policy"], t["web"]["priority"], t["web"]["slo_hit_ratio"]) == ("lru", "3", "0.8")
        regions = {t[n]["region"] for n in t}
        assert len(regions) == 3 and all(os.path.exists(r) for r in regions)
        # The general stats add the tenants up.
        general = talk(sock, b"stats\r\n", b"END\r\n").decode()
        assert "STAT curr_items 60\r\n" in general
        # Keys told apart by prefix: a client reading one region would miss the others' keys.
        assert talk(sock, b"shm\r\n", b"\r\n").startswith(b"SERVER_ERROR local reads need a connection bound")
        server.proc.terminate()
        server.proc.wait(timeout=10)
    assert not any(os.path.exists(r) for r in regions), "made-up regions go with a server that stops"


def test_a_tenants_listener_binds_its_connections_and_shm_names_its_region(tmp_path):
    port, main_port = free_port(), free_port()
    while main_port == port:
        main_port = free_port()
    text = f"""
[[tenant]]
name = "app"
listen = ["{port}"]
prefixes = ["app:"]
size_mb = 16
"""
    with Server.shoal("--tenants", tenants_file(tmp_path, text), port=main_port) as server:
        with server.connect() as main, socket.create_connection(("127.0.0.1", port)) as own:
            set_many(own, [b"x%d" % i for i in range(5)], b"v")  # no prefix: still app's
            t = stats_tenants(main)
            assert (t["app"]["curr_items"], t["default"]["curr_items"]) == ("5", "0")
            # A bound connection sees only its tenant: default's keys are not there.
            set_many(main, [b"d1"], b"v")
            assert talk(own, b"get d1 x1\r\n", b"END\r\n") == b"VALUE x1 0 1\r\nv\r\nEND\r\n"
            shm = talk(own, b"shm\r\n", b"\r\n").split()
            assert shm[0] == b"SHM" and shm[1].decode() == t["app"]["region"]
            # A tenant's connection may not resize tenants, nor flush another's items.
            assert talk(own, b"tenant_memlimit app 8388608\r\n", b"\r\n").startswith(b"SERVER_ERROR a tenant's own")
            assert talk(own, b"flush_all\r\n", b"\r\n") == b"OK\r\n"
            t = stats_tenants(main)
            assert talk(main, b"get d1\r\n", b"END\r\n").startswith(b"VALUE d1"), "default's items stay"
            assert talk(main, b"get app:x1 x1\r\n", b"END\r\n") == b"END\r\n"


def test_an_authenticated_user_is_bound_to_its_tenant(tmp_path):
    auth = tmp_path / "users"
    auth.write_text("alice:secret\nbob:pw\n")
    text = '[[tenant]]\nname = "alices"\nusers = ["alice"]\nsize_mb = 16\n'
    with Server.shoal("-Y", str(auth), "--tenants", tenants_file(tmp_path, text)) as server:
        with server.connect() as alice, server.connect() as bob:
            assert talk(alice, b"set auth 0 0 12\r\nalice secret\r\n", b"\r\n") == b"STORED\r\n"
            assert talk(bob, b"set auth 0 0 6\r\nbob pw\r\n", b"\r\n") == b"STORED\r\n"
            set_many(alice, [b"k1", b"k2"], b"a")
            set_many(bob, [b"k1"], b"b")
            assert talk(alice, b"get k1\r\n", b"END\r\n") == b"VALUE k1 0 1\r\na\r\nEND\r\n"
            assert talk(bob, b"get k1\r\n", b"END\r\n") == b"VALUE k1 0 1\r\nb\r\nEND\r\n"
            t = stats_tenants(bob)
            assert (t["alices"]["curr_items"], t["default"]["curr_items"]) == ("2", "1")


def test_tenant_memlimit_resizes_within_bounds_and_keeps_what_fits(tmp_path):
    text = '[[tenant]]\nname = "a"\nprefixes = ["a:"]\nmin_mb = 4\nmax_mb = 40\nsize_mb = 24\n'
    with Server.shoal("--tenants", tenants_file(tmp_path, text)) as server, server.connect() as sock:
        value = b"v" * 1000
        keys = [b"a:%d" % i for i in range(20_000)]  # ~20 MB
        set_many(sock, keys, value)
        before = int(stats_tenants(sock)["a"]["curr_items"])
        assert talk(sock, b"tenant_memlimit a 8388608\r\n", b"\r\n") == b"OK\r\n"
        t = stats_tenants(sock)
        after = int(t["a"]["curr_items"])
        assert t["a"]["limit_maxbytes"] == str(8 * MB)
        assert after * 1000 <= 8 * MB < before * 1000
        assert int(t["a"]["evictions"]) >= before - after
        # The newest items are the ones that stay, unchanged.
        assert hits(sock, keys[-5000:]) >= 5000 * 0.95
        assert talk(sock, b"get a:19999\r\n", b"END\r\n") == b"VALUE a:19999 0 1000\r\n" + value + b"\r\nEND\r\n"
        # Refusals say why and change nothing.
        for request, why in [
            (b"tenant_memlimit a 1048576\r\n", b"under tenant a's minimum"),
            (b"tenant_memlimit a 104857600\r\n", b"over tenant a's maximum"),
            (b"tenant_memlimit nobody 8388608\r\n", b"no tenant named nobody"),
        ]:
            reply = talk(sock, request, b"\r\n")
            assert reply.startswith(b"SERVER_ERROR") and why in reply, reply
        # Growing a past what the default tenant leaves is refused until default shrinks.
        assert talk(sock, b"tenant_memlimit a 38797312\r\n", b"\r\n").startswith(b"SERVER_ERROR tenants would hold")
        assert talk(sock, b"tenant_memlimit default 2097152\r\n", b"\r\n") == b"OK\r\n"
        assert talk(sock, b"tenant_memlimit a 38797312\r\n", b"\r\n") == b"OK\r\n"
        assert stats_tenants(sock)["a"]["limit_maxbytes"] == str(37 * MB)
        assert talk(sock, b"cache_memlimit 32\r\n", b"\r\n").startswith(b"SERVER_ERROR with --tenants")


def test_each_tenant_has_its_own_curve(tmp_path):
    text = '[[tenant]]\nname = "a"\nprefixes = ["a:"]\nsize_mb = 16\n'
    with Server.shoal("--tenants", tenants_file(tmp_path, text)) as server, server.connect() as sock:
        keys = [b"a:%d" % i for i in range(200)]
        set_many(sock, keys, b"x" * 100)
        for _ in range(3):
            hits(sock, keys)
        curve = talk(sock, b"curve a\r\n", b"END\r\n").decode().splitlines()
        ratios = [float(l.split()[3]) for l in curve if l.startswith("STAT hit_ratio ")]
        assert len(ratios) == 257 and ratios[-1] == pytest.approx(2 / 3, abs=0.05)
        idle = talk(sock, b"curve default\r\n", b"END\r\n").decode().splitlines()
        assert [float(l.split()[3]) for l in idle if l.startswith("STAT hit_ratio ")][-1] == 0
        assert talk(sock, b"curve nobody\r\n", b"\r\n") == b"SERVER_ERROR no tenant named nobody\r\n"


def test_a_scanning_tenant_does_not_evict_a_protected_tenants_items(tmp_path):
    """The Moirai isolation case: the same scan, once into a shared cache and once into a
    tenant of its own; the protected working set survives only with partitions."""
    hot = [b"hot:%d" % i for i in range(4000)]
    value = b"h" * 1000
    scan = [b"scan:%d" % i for i in range(60_000)]

    def hot_hits_after_scan(*extra):
        with Server.shoal(*extra, memory_mb=32) as server, server.connect() as sock:
            set_many(sock, hot, value)
            for i in range(0, len(scan), 5000):
                set_many(sock, scan[i:i + 5000], value)
                hits(sock, hot)  # the protected tenant keeps reading its set
            return hits(sock, hot) / len(hot)

    shared = hot_hits_after_scan()
    text = ('[[tenant]]\nname = "hot"\nprefixes = ["hot:"]\nsize_mb = 12\n'
            '[[tenant]]\nname = "scan"\nprefixes = ["scan:"]\nsize_mb = 16\n')
    partitioned = hot_hits_after_scan("--tenants", tenants_file(tmp_path, text))
    assert partitioned >= 0.98, partitioned
    assert shared < partitioned, (shared, partitioned)


def test_region_files_keep_the_servers_group_and_mode(tmp_path):
    text = '[[tenant]]\nname = "a"\nprefixes = ["a:"]\nsize_mb = 16\n'
    base = tmp_path / "cache.region"
    with Server.shoal("-e", str(base), "--region-mode", "0640", "--tenants", tenants_file(tmp_path, text)) as server, \
            server.connect() as sock:
        t = stats_tenants(sock)
        assert t["a"]["region"] == str(tmp_path / "cache-a.region")
        assert t["default"]["region"] == str(base)
        for region in (t["a"]["region"], t["default"]["region"]):
            assert stat.S_IMODE(os.stat(region).st_mode) == 0o640
        set_many(sock, [b"a:kept"], b"1")
    # -e regions outlive the server: a warm restart finds the tenant's items again.
    with Server.shoal("-e", str(base), "--tenants", tenants_file(tmp_path, text)) as server, \
            server.connect() as sock:
        assert talk(sock, b"get a:kept\r\n", b"END\r\n") == b"VALUE a:kept 0 1\r\n1\r\nEND\r\n"
