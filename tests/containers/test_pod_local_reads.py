"""Local reads from a client in a container: its own user, PID, mount and network namespaces
(what a Kubernetes pod is, made here with `unshare`), with the server's directory mounted into
it as a pod mounts a `hostPath` volume (docs/kubernetes.md).

The server keeps its region, the region's handoff socket (`<region>.hints`) and its unix
socket in one directory on tmpfs. In its own network namespace the client cannot reach the
host's loopback; it connects through the unix socket in the mounted directory, opens the
region `shm` names there (the volume is mounted at the same path, so the name holds), and hands
its hints area over the handoff socket as a descriptor — in its own PID namespace the server
could not open it by `/proc/<pid>/fd/<n>`. The reads are local: the server's `/metrics` counts
them as local hits, folded in from that hints area."""

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

import shoal
from harness import SHOAL, Server, free_port

KEYS = 20

# Runs inside the namespaces: what the client sees, as JSON on stdout.
CLIENT = r"""
import json, os, socket, sys
import shoal

socket_path, host_port, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    socket.create_connection(("127.0.0.1", host_port), timeout=2).close()
    reaches_host = True
except OSError:
    reaches_host = False
client = shoal.Client(socket_path, timeout=5.0)
values = [client.get(f"k{i}") for i in range(keys)]
print(json.dumps({"pid": os.getpid(), "reaches_host": reaches_host, "local": client.is_local(),
                  "values": [v and v.decode() for v in values]}))
client.close()
"""

# The pod's mounts, made inside its mount namespace before the client starts: a /dev/shm of
# its own (the host's is out of sight), and the server's directory mounted read-only at the
# path the server uses, as docs/kubernetes.md mounts the hostPath volume.
POD = r"""
set -eu
mount --bind "$1" "$2"
mount -t tmpfs pod-shm /dev/shm
mkdir -p "$1"
mount --bind "$2" "$1"
mount -o remount,bind,ro "$1"
umount "$2"
shift 2
exec "$@"
"""

NAMESPACES = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc", "--mount", "--net"]


def local_hits(metrics_port):
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
        found = re.search(r"^shoal_local_hits_total (\S+)$", answer.read().decode(), re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def volume():
    """A directory on tmpfs for the region and the sockets, as a node's hostPath would be."""
    directory = tempfile.mkdtemp(prefix="shoal-pod-", dir="/dev/shm")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_a_client_in_its_own_namespaces_reads_through_the_mounted_region(volume, tmp_path):
    assert shutil.which("unshare"), "util-linux's unshare makes the namespaces"
    stage = tmp_path / "stage"
    stage.mkdir()
    metrics_port = free_port()
    socket_path = f"{volume}/shoal.sock"
    # With -s the server listens on the unix socket only (as memcached does); it is ready once
    # /metrics answers, which starts after the listeners are bound.
    argv = [str(SHOAL), "server", "-m", "64", "-e", f"{volume}/region", "-s", socket_path,
            "--metrics-listen", f"127.0.0.1:{metrics_port}"]
    with Server(argv, metrics_port, "shoal"):
        writer = shoal.Client(socket_path, local=False)
        for i in range(KEYS):
            writer.set(f"k{i}", f"value {i}".encode())
        pod = subprocess.run(
            [*NAMESPACES, "sh", "-c", POD, "pod", volume, str(stage),
             sys.executable, "-c", CLIENT, socket_path, str(metrics_port), str(KEYS)],
            capture_output=True, text=True, timeout=60)
        assert pod.returncode == 0, pod.stderr
        seen = json.loads(pod.stdout)
        assert seen["pid"] == 1, "the client runs in a PID namespace of its own"
        assert not seen["reaches_host"], "the client's network namespace has no route to the host"
        assert seen["values"] == [f"value {i}" for i in range(KEYS)]
        assert seen["local"], "the client reads through the region in the mounted directory"
        deadline = time.monotonic() + 10
        while local_hits(metrics_port) < KEYS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert local_hits(metrics_port) == KEYS, "its hints area reached the server: hits counted"
