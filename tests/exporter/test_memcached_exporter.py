"""Prometheus's own memcached_exporter, pointed at `shoal server` and at Debian's memcached side
by side after the same traffic: Shoal's scrape says `memcached_up 1` and has every series
memcached's has (same family names, same fixed labels) except the three slab-class families
docs/PROTOCOL.md lists as absent, and the request counters agree.

The exporter is built from its module here (Go is on the machine; scripts/test.sh runs this
under pytest), once, into target/memcached_exporter/<version>/ — never committed."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import urllib.request

import pytest

from harness import ROOT, Server, free_port, talk

MODULE = "github.com/prometheus/memcached_exporter"
# @latest and v0.15.x are refused by the module proxy this machine reaches; v0.14.4 is not.
VERSION = "v0.14.4"
# The checksum database has no entry for this version (the proxy answers 404 for its lookup),
# so the module's hash is pinned here instead: a download that differs fails the build.
MODULE_SUM = "h1:bVGqhAbE54ms5yojeXFGaA0oEolX8XvkvM2o/349uFY="
BINARY = ROOT / "target" / "memcached_exporter" / VERSION / "memcached_exporter"

# Families memcached reports and Shoal leaves out, each named (with why) in docs/PROTOCOL.md's
# section "memcached_exporter": the store keeps no queue of write times (`age`) and no record
# of what it evicted (`evicted_nonzero`, `evicted_time`).
ABSENT = {
    "memcached_slab_items_age_seconds",
    "memcached_slab_items_evicted_nonzero_total",
    "memcached_slab_items_evicted_time_seconds",
}

# Series whose values depend only on the requests sent, so both servers must agree
# (`memcached_items_total` does not: Shoal counts incr/decr results as stored items).
REQUEST_COUNTS = re.compile(
    r"memcached_(commands_total|current_items|slab_chunks_used|slab_commands_total|slab_current_items)$")


def build_exporter():
    """The exporter's binary: downloaded as a Go module and built, unless already built."""
    if BINARY.exists():
        return BINARY
    go = shutil.which("go") or "/usr/local/go/bin/go"
    assert os.path.exists(go), "Go is needed to build memcached_exporter (go version)"
    env = {**os.environ, "GONOSUMDB": MODULE}
    download = subprocess.run([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
                              capture_output=True, text=True, env=env, timeout=300)
    module = json.loads(download.stdout or "{}")
    assert download.returncode == 0 and "Error" not in module, download.stdout + download.stderr
    assert module["Sum"] == MODULE_SUM, f"{MODULE}@{VERSION} downloaded with sum {module['Sum']}"
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final name, then renamed: a run that stops halfway leaves no binary.
    with tempfile.TemporaryDirectory(dir=BINARY.parent) as scratch:
        built = os.path.join(scratch, "memcached_exporter")
        build = subprocess.run([go, "build", "-o", built, "./cmd/memcached_exporter"], cwd=module["Dir"],
                               capture_output=True, text=True, env=env, timeout=800)
        assert build.returncode == 0, build.stdout + build.stderr
        os.replace(built, BINARY)
    return BINARY


@pytest.fixture(scope="module")
def exporter():
    return build_exporter()


def traffic(server):
    """The same requests to either server: every command the exporter counts, hit and miss.
    Values are small, so memcached keeps them all in slab class 1."""
    with server.connect() as sock:
        assert talk(sock, b"flush_all\r\n") == b"OK\r\n"
        for i in range(20):
            assert talk(sock, f"set k{i} 0 0 2\r\n{i:02}\r\n".encode()) == b"STORED\r\n"
        for i in range(25):
            talk(sock, f"get k{i}\r\n".encode(), b"END\r\n")
        unique = talk(sock, b"gets k1\r\n", b"END\r\n").split()[4].decode()
        assert talk(sock, f"cas k1 0 0 1 {unique}\r\nx\r\n".encode()) == b"STORED\r\n"
        assert talk(sock, f"cas k1 0 0 1 {unique}\r\ny\r\n".encode()) == b"EXISTS\r\n"
        assert talk(sock, b"cas nope 0 0 1 1\r\nz\r\n") == b"NOT_FOUND\r\n"
        assert talk(sock, b"incr k2 5\r\n") == b"7\r\n"
        assert talk(sock, b"decr k3 1\r\n") == b"2\r\n"
        assert talk(sock, b"incr nope 1\r\ndecr nope 1\r\n", b"NOT_FOUND\r\nNOT_FOUND\r\n")
        assert talk(sock, b"touch k4 100\r\ntouch nope 100\r\n", b"TOUCHED\r\nNOT_FOUND\r\n")
        assert talk(sock, b"delete k5\r\ndelete nope\r\n", b"DELETED\r\nNOT_FOUND\r\n")


SAMPLE = re.compile(r"(memcached_\w+)(?:\{(.*)\})? (\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series(text):
    """{(name, labels): value} of the memcached_* samples, by the names the exporter writes
    (prometheus_client's parser renames counters without `_total`); the version label's value
    is free."""
    found = {}
    for line in text.splitlines():
        if sample := SAMPLE.fullmatch(line):
            name, labels, value = sample.groups()
            labels = frozenset((k, "…" if k == "version" else v) for k, v in LABEL.findall(labels or ""))
            found[(name, labels)] = float(value)
    return found


def scrape(exporter, server, log):
    """What the exporter, pointed at `server`, reports (one exporter per server, as deployed)."""
    port = free_port()
    argv = [str(exporter), f"--web.listen-address=127.0.0.1:{port}",
            f"--memcached.address=127.0.0.1:{server.port}"]
    with Server(argv, port, "memcached_exporter", stderr=log):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return series(answer.read().decode())


@pytest.mark.timeout(1200)  # the first run downloads and builds the exporter
def test_the_exporter_reports_for_shoal_what_it_reports_for_memcached(exporter, tmp_path):
    scrapes = {}
    for server in (Server.memcached(), Server.shoal()):
        with server:
            traffic(server)
            scrapes[server.kind] = scrape(exporter, server, tmp_path / f"{server.kind}.log")
    memcached, shoal = scrapes["memcached"], scrapes["shoal"]
    log = (tmp_path / "shoal.log").read_text()
    assert shoal[("memcached_up", frozenset())] == 1, log
    assert memcached[("memcached_up", frozenset())] == 1
    assert {name for name, _ in memcached} >= ABSENT, "memcached no longer reports them: update ABSENT"
    expected = {key for key in memcached if key[0] not in ABSENT}
    assert set(shoal) == expected, (sorted(expected - set(shoal)), sorted(set(shoal) - expected))
    counts = {key: value for key, value in memcached.items() if REQUEST_COUNTS.match(key[0])}
    assert any(key[0] == "memcached_slab_commands_total" for key in counts)
    assert {key: shoal[key] for key in counts} == counts
    # Every item is cold in Shoal's report, so every hit is a hit to cold.
    hits = {dict(labels)["lru"]: value for (name, labels), value in shoal.items()
            if name == "memcached_slab_lru_hits_total"}
    get_hits = shoal[("memcached_commands_total", frozenset({("command", "get"), ("status", "hit")}))]
    assert hits == {"hot": 0, "warm": 0, "cold": get_hits, "temporary": 0}


def test_the_absent_families_are_documented():
    protocol = (ROOT / "docs" / "PROTOCOL.md").read_text()
    section = protocol.split("\n## memcached_exporter\n", 1)[1].split("\n## ", 1)[0]
    for family in ABSENT:
        assert family in section, family


def stat_names(sock, group):
    answer = talk(sock, f"stats {group}\r\n".encode(), b"END\r\n").decode()
    return [line.split(" ")[1].split(":")[-1] for line in answer.splitlines() if line.startswith("STAT ")]


def test_stats_groups_the_exporter_reads_keep_memcacheds_order():
    """Of the names both print in `stats settings`, `items` and `slabs`, Shoal's come in
    memcached's order (class 1 only: both hold one small item)."""
    with Server.memcached() as memcached, memcached.connect() as m, \
            Server.shoal() as shoal, shoal.connect() as s:
        for sock in (m, s):
            assert talk(sock, b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
        for group in ("settings", "items", "slabs"):
            expected, got = stat_names(m, group), stat_names(s, group)
            assert [n for n in got if n in expected] == [n for n in expected if n in got], group
