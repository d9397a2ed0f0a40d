"""The `shoal` Python package reading locally from a server of another user: the server drops
root to `nobody` (`-u`), so it cannot open this (root) process's `/proc/<pid>/fd/<n>`, and the
client hands its hints memfd over the server's handoff socket (`shm handoff`, docs/PROTOCOL.md).
Its reads must be local, counted at the server (`shoal_local_hits_total`) and mark what they hit.
The client as `nobody` against a root server, and a server as `daemon` with a client as
`nobody`, are in crates/client/tests/cross_user.rs (the Rust client the package wraps)."""

import os
import pwd
import signal
import socket
import stat
import time
import urllib.request
from pathlib import Path

import pytest

import shoal
from harness import Server, free_port, talk

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root: run the suite as root")


def local_hits(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith("shoal_local_hits_total "))


def meta(server, request):
    with server.connect() as sock:
        return talk(sock, request)


def test_a_root_client_reads_locally_from_a_server_run_as_nobody():
    nobody = pwd.getpwnam("nobody")
    metrics = free_port()
    with Server.shoal("-u", "nobody", "--metrics-listen", f"127.0.0.1:{metrics}") as server:
        region = Path(f"/dev/shm/shoal-{server.proc.pid}.region")
        handoff = Path(f"{region}.hints")
        network = shoal.Client(server.address, local=False, timeout=5.0)
        network.set("shared", b"across users")
        client = shoal.Client(server.address, timeout=5.0)
        assert client.is_local(), "the server (nobody) took the hints area this root process handed over"
        info = os.stat(handoff)
        assert stat.S_ISSOCK(info.st_mode) and info.st_uid == nobody.pw_uid
        assert stat.S_IMODE(info.st_mode) == 0o600, "a 0600 region: only its owner (and root) may connect"
        for _ in range(250):
            assert client.get("shared") == b"across users"
        deadline = time.monotonic() + 30
        while local_hits(metrics) < 250 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert local_hits(metrics) == 250
        assert meta(server, b"mg shared h\r\n") == b"HD h1\r\n", "the local hits marked the item read"
        client.close()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=10)
    assert not handoff.exists(), "the server removes its handoff socket when it stops"


def test_shm_handoff_hands_out_one_token_per_ask():
    with Server.shoal() as server, server.connect() as sock:
        sock.settimeout(5)
        answers = []
        for _ in range(2):
            line = talk(sock, b"shm handoff\r\n")
            answers.append(line.split(b" ", 2))
        (word, first, path), (_, second, again) = answers
        assert word == b"HANDOFF" and len(first) == 32 and first != second and path == again
        assert path == f"/dev/shm/shoal-{server.proc.pid}.region.hints\r\n".encode()
        # The socket answers whoever may connect, but only a token it handed out counts.
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(path.strip().decode())
            s.sendall(b"0" * 32 + b"\r\n")
            assert s.recv(4096).startswith(b"SERVER_ERROR no descriptor came with the token")
