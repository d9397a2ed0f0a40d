"""Tenants with clients that read through shared memory: a client on a tenant's listener reads
that tenant's region locally, its hits count for the tenant, and resizing the tenant while
readers in other processes hammer it never shows them a wrong value."""

import multiprocessing
import socket
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

import shoal
from harness import Server, free_port

MB = 1 << 20


def value_of(key: str) -> bytes:
    """Every value says which key it is, so a reader can tell a wrong one."""
    return (key * 40).encode()[:300]


def talk(address, request: bytes) -> bytes:
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while not (data.endswith(b"END\r\n") or data.endswith(b"OK\r\n") or data.startswith(b"SERVER_ERROR")):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
        return data


def tenants_stats(address):
    out = {}
    for line in talk(address, b"stats tenants\r\n").decode().splitlines()[:-1]:
        _, key, value = line.split(" ", 2)
        tenant, field = key.split(":", 1)
        out.setdefault(tenant, {})[field] = value
    return out


def two_distinct_ports():
    a = free_port()
    b = free_port()
    while b == a:
        b = free_port()
    return a, b


def reader(port, keys, stop, result):
    """Reads `keys` locally until told to stop; counts hits, misses and wrong values."""
    client = shoal.Client(("127.0.0.1", port), timeout=5.0)
    local = client.is_local()
    hits = misses = wrong = 0
    while not stop.is_set():
        for key in keys:
            got = client.get(key)
            if got is None:
                misses += 1
            elif got == value_of(key):
                hits += 1
            else:
                wrong += 1
    result.put((local, hits, misses, wrong))


def test_resizing_a_tenant_under_load_never_shows_local_readers_a_wrong_value(tmp_path):
    port, tenant_port = two_distinct_ports()
    config = tmp_path / "tenants.toml"
    config.write_text(f'default = "app"\n[[tenant]]\nname = "app"\nlisten = ["{tenant_port}"]\nmin_mb = 4\nmax_mb = 48\nsize_mb = 32\n')
    with Server.shoal("--tenants", str(config), port=port) as server:
        writer = shoal.Client(("127.0.0.1", tenant_port), local=False, timeout=5.0)
        keys = [f"k{i}" for i in range(30_000)]  # ~10 MB of items
        for key in keys:
            writer.set(key, value_of(key))
        context = multiprocessing.get_context("fork")
        stop, result = context.Event(), context.Queue()
        readers = [context.Process(target=reader, args=(tenant_port, keys[i::3], stop, result)) for i in range(3)]
        for r in readers:
            r.start()
        # Shrink and grow while they read, and keep writing so evictions and rewrites race.
        for round_ in range(6):
            size = (4 if round_ % 2 == 0 else 40) * MB
            assert talk(server.address, b"tenant_memlimit app %d\r\n" % size) == b"OK\r\n"
            for key in keys[round_ * 1000:(round_ + 1) * 1000]:
                writer.set(key, value_of(key))
            time.sleep(0.3)
        stop.set()
        outcomes = [result.get(timeout=30) for _ in readers]
        for r in readers:
            r.join(timeout=10)
        assert all(local for local, *_ in outcomes), "the readers read the tenant's region themselves"
        assert sum(wrong for *_, wrong in outcomes) == 0, outcomes
        assert sum(hits for _, hits, _, _ in outcomes) > 0 and sum(misses for _, _, misses, _ in outcomes) > 0
        stats = tenants_stats(server.address)
        assert stats["app"]["limit_maxbytes"] == str(40 * MB)
        assert int(stats["app"]["evictions"]) > 0


def test_local_hits_count_for_the_tenant_and_metrics_carry_tenant_labels(tmp_path):
    port, tenant_port = two_distinct_ports()
    metrics_port = free_port()
    config = tmp_path / "tenants.toml"
    config.write_text(f'[[tenant]]\nname = "app"\nlisten = ["{tenant_port}"]\nsize_mb = 16\n')
    with Server.shoal("--tenants", str(config), "--metrics-listen", f"127.0.0.1:{metrics_port}", port=port) as server:
        client = shoal.Client(("127.0.0.1", tenant_port), timeout=5.0)
        assert client.is_local()
        client.set("a", b"1")
        for _ in range(100):
            assert client.get("a") == b"1"
        deadline = time.monotonic() + 30
        while int(tenants_stats(server.address)["app"]["get_hits"]) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = tenants_stats(server.address)
        assert (stats["app"]["get_hits"], stats["default"]["get_hits"]) == ("100", "0")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        samples = {(s.name, s.labels.get("tenant"), s.labels.get("bytes")): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        assert samples[("shoal_tenant_limit_bytes", "app", None)] == 16 * MB
        assert samples[("shoal_tenant_limit_bytes", "default", None)] == 48 * MB
        assert samples[("shoal_tenant_items", "app", None)] == 1
        assert samples[("shoal_tenant_get_hits", "app", None)] == 100
        assert any(name == "shoal_hit_curve_ratio" and tenant == "app" for name, tenant, _ in samples)
