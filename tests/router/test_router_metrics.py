"""`shoal router --metrics-listen`: Prometheus text at /metrics, scraped over HTTP and parsed with
the official Python client's parser; the numbers follow what the router did — requests, a
destination that is down (TKO, failed, spooled deletes), and config reloads good and bad."""

import contextlib
import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pymemcache.client.base import Client as PymemcacheClient

from harness import SHOAL, Server, eventually, free_port, router


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {(sample.name, sample.labels.get("destination")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def raw(port, request, until):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        answer = b""
        while not answer.endswith(until):
            chunk = s.recv(65536)
            assert chunk, answer
            answer += chunk
        return answer.decode()


@contextlib.contextmanager
def router_with_metrics(directory, config):
    path = directory / "config.json"
    path.write_text(config)
    metrics = free_port()
    with router(path, directory, "--metrics-listen", f"127.0.0.1:{metrics}") as (port, _stderr):
        yield port, metrics, path


def test_router_metrics_follow_requests_destinations_and_reloads(tmp_path):
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    with Server.shoal() as shoal_server, Server.memcached() as memcached:
        live = [f"127.0.0.1:{shoal_server.port}", f"127.0.0.1:{memcached.port}"]
        servers = ", ".join(f'"{a}"' for a in live + [dead])
        config = (f'{{ "pools": {{ "A": {{ "servers": [{servers}], "server_timeout": 2000, "connect_timeout": 2000 }} }},'
                  f' "routes": [ {{ "aliases": ["/r/c/"], "route": {{ "type": "PoolRoute", "pool": "A", "hash": "jump" }} }} ] }}')
        with router_with_metrics(tmp_path, config) as (port, metrics_port, path):
            owner = {}
            for i in range(60):
                lookup = raw(port, f"get __mcrouter__.route(get,k{i})\r\n".encode(), b"END\r\n")
                owner[f"k{i}"] = next(a for a in live + [dead] if a in lookup)
            c = PymemcacheClient(("127.0.0.1", port), default_noreply=False)
            stored = 0
            for key, address in owner.items():
                if address != dead:
                    assert c.set(key, b"v")
                    stored += 1
            on_dead = [k for k, a in owner.items() if a == dead]
            assert len(on_dead) >= 4, owner
            for key in on_dead[:4]:
                with pytest.raises(Exception):
                    c.get(key)
            # A broadcast delete of a key the dead server owns waits in its spool.
            assert raw(port, f"delete /*/*/{on_dead[0]}\r\n".encode(), b"\r\n") == "DELETED\r\n"
            metrics = scrape(metrics_port)
            assert metrics[("shoal_router_requests_total", None)] >= stored + 4 + 1
            assert metrics[("shoal_router_errors_total", None)] >= 4
            assert metrics[("shoal_router_destination_up", dead)] == 0
            assert metrics[("shoal_router_destination_failed_total", dead)] >= 3
            assert metrics[("shoal_router_destination_spooled", dead)] == 1
            for address in live:
                assert metrics[("shoal_router_destination_up", address)] == 1
                assert metrics[("shoal_router_destination_failed_total", address)] == 0
                assert metrics[("shoal_router_destination_spooled", address)] == 0
                assert metrics[("shoal_router_destination_pending", address)] == 0
            assert sum(metrics[("shoal_router_destination_sent_total", a)] for a in live) == stored
            assert metrics[("shoal_router_config_reloads_total", None)] == 0
            # A file that does not load is counted; the next good one is loaded.
            path.write_text("{ not json")
            eventually(lambda: scrape(metrics_port)[("shoal_router_config_reload_failures_total", None)] == 1)
            path.write_text(config + " ")
            eventually(lambda: scrape(metrics_port)[("shoal_router_config_reloads_total", None)] == 1)
            with pytest.raises(urllib.error.HTTPError) as missing:
                urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/other", timeout=5)
            assert missing.value.code == 404
            c.close()


def test_metrics_listen_on_a_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        (tmp_path / "config.json").write_text('{ "pools": { "A": { "servers": ["127.0.0.1:1"] } },'
                                              ' "route": "PoolRoute|A" }')
        run = subprocess.run([str(SHOAL), "router", "-f", str(tmp_path / "config.json"), "-p", str(free_port()),
                              "-l", "127.0.0.1", "--spool-dir", str(tmp_path / "spool"), "--metrics-listen", address],
                             capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        assert run.returncode != 0
        assert f"--metrics-listen {address}: cannot listen there" in run.stderr, run.stderr
