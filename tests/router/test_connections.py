"""Many connections at once (issue #26's load target, smaller): 2 000 client connections through
one `shoal router` and 2 000 straight to one `shoal server`, every one open at the same time and
every one served: each sends 12 gets of keys set first in one write, all connections at once
(24 000 requests through the router's one connection to the server: more than the 4096 in
flight it used to allow), and every answer is checked. The full
10 000 is `bench/connections.sh` (docs/BENCHMARKS.md). The load client is bench/connections.py."""

import json
import resource
import subprocess
import sys

from harness import ROOT, Server, router, talk

CONNECTIONS = 2_000
GETS = 12


def stat(port, name):
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        lines = talk(sock, b"stats\r\n", b"END\r\n").decode().split("\r\n")
    return int(next(line.split()[2] for line in lines if line.startswith(f"STAT {name} ")))


def load(address, *pids):
    """bench/connections.py against `address`; its JSON result (it fails on any error)."""
    answer = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "connections.py"), "--address", address,
         "--connections", str(CONNECTIONS), "--gets", str(GETS), "--pipeline", str(GETS), "--opening", "100",
         *(f"--pid={name}={pid}" for name, pid in pids)],
        capture_output=True, text=True, timeout=600)
    assert answer.returncode == 0, answer.stdout[-4000:] + answer.stderr[-4000:]
    return json.loads(answer.stdout)


def test_two_thousand_connections_through_a_router_and_on_a_server_are_all_served(tmp_path):
    # The processes started here inherit the limit: each holds a descriptor per connection.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = CONNECTIONS + 200
    if soft != resource.RLIM_INFINITY and soft < needed:
        assert hard == resource.RLIM_INFINITY or hard >= needed, f"the open-files hard limit {hard} is under {needed}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        # memcached's -c: the most connections the server takes at once (the default is 1 024).
        with Server.shoal("-c", str(CONNECTIONS + 100)) as server:
            config = tmp_path / "config.json"
            config.write_text(f'{{ "pools": {{ "A": {{ "servers": ["127.0.0.1:{server.port}"] }} }},'
                              ' "route": { "type": "PoolRoute", "pool": "A" } }')
            with router(config, tmp_path) as (port, stderr):
                through = load(f"127.0.0.1:{port}")
                assert (through["opened"], through["gets_answered"], through["errors"]) == \
                    (CONNECTIONS, CONNECTIONS * GETS, 0), through
                assert stat(port, "total_connections") >= CONNECTIONS
                assert stat(port, "accept_errors") == 0, stderr.read_text()

                direct = load(f"127.0.0.1:{server.port}")
                assert (direct["opened"], direct["gets_answered"], direct["errors"]) == \
                    (CONNECTIONS, CONNECTIONS * GETS, 0), direct
                assert stat(server.port, "total_connections") >= CONNECTIONS
                assert stat(server.port, "rejected_connections") == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
