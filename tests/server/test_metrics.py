"""`shoal server --metrics-listen`: Prometheus text at /metrics, scraped over HTTP and parsed with
the official Python client's parser; the numbers follow `stats` and local reads."""

import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import shoal
from harness import Server, free_port


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_follow_stats_and_local_reads():
    port = free_port()
    with Server.shoal("--metrics-listen", f"127.0.0.1:{port}") as server:
        network = shoal.Client(server.address, local=False)
        for i in range(50):
            network.set(f"k{i}", b"v" * 100)
        for i in range(60):
            network.get(f"k{i}")
        metrics = scrape(port)
        assert metrics["shoal_cmd_set_total"] == 50
        assert metrics["shoal_cmd_get_total"] == 60
        assert metrics["shoal_get_hits_total"] == 50 and metrics["shoal_get_misses_total"] == 10
        assert metrics["shoal_curr_items"] == 50
        assert 0 < metrics["shoal_region_fill_ratio"] < 1
        assert metrics["shoal_segments"] > 0 and metrics["shoal_limit_maxbytes"] == 64 << 20
        local = shoal.Client(server.address)
        assert local.is_local()
        for _ in range(200):
            assert local.get("k1") == b"v" * 100
        deadline = time.monotonic() + 30
        while scrape(port)["shoal_local_hits_total"] < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        metrics = scrape(port)
        assert metrics["shoal_local_hits_total"] == 200 and metrics["shoal_local_gets_total"] == 200
        assert metrics["shoal_get_hits_total"] == 250, "local hits count in get_hits too"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
        assert missing.value.code == 404


def test_a_metrics_address_that_cannot_be_used_is_refused():
    import subprocess
    from harness import SHOAL
    run = subprocess.run([str(SHOAL), "server", "-p", str(free_port()), "--metrics-listen", "nonsense"],
                         capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and "--metrics-listen nonsense" in run.stderr
