"""`shoal server` as an operator meets it: memcached's flags, the port file, signals and warm
restart, the unix socket, UDP framing, and the `shm` locality answer read back through the
region file itself."""

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import MEMCACHED, SHOAL, Server, free_port, talk  # noqa: E402


def test_help_and_version_exit_zero_and_name_the_unix_socket():
    out = subprocess.run([SHOAL, "server", "-h"], capture_output=True, text=True, check=True).stdout
    assert "unix-socket" in out and "-p" in out and "--test-mode" in out
    out = subprocess.run([SHOAL, "server", "-V"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("shoal ")


@pytest.mark.parametrize("argv, message", [
    (["-B", "binery"], "should be one of auto, binary, or ascii"),
    (["-S", "-B", "ascii"], "You cannot allow the ASCII protocol while using SASL"),
    (["-o", "no_such_option"], 'Illegal suboption "no_such_option"'),
    (["-m", "64", "-I", "40m"], "Cannot set item size limit higher than 1/2 of memory max."),
    (["-m", "64", "-I", "1000"], "Item max size cannot be less than 1024 bytes."),
    (["-m", "4096", "-I", "1500m"], "Cannot set item size limit higher than a gigabyte."),
])
def test_bad_flags_fail_with_the_fix(argv, message):
    run = subprocess.run([SHOAL, "server", "-p", str(free_port()), *argv], capture_output=True, text=True,
                         timeout=10)
    assert run.returncode != 0 and message in run.stderr


@pytest.mark.parametrize("argv", [["-m", "64", "-I", "40m"], ["-m", "64", "-I", "1000"], ["-m", "4096", "-I", "1500m"]])
def test_item_size_limits_are_refused_as_memcached_refuses_them(argv):
    """The same flags, the same message from Debian's memcached and from shoal."""
    runs = [subprocess.run([*command, "-p", str(free_port()), "-U", "0", *argv], capture_output=True, text=True,
                           timeout=10)
            for command in ([MEMCACHED, "-u", "root"], [SHOAL, "server"])]
    assert all(r.returncode != 0 for r in runs)
    assert runs[1].stderr.strip().endswith(runs[0].stderr.strip()), (runs[0].stderr, runs[1].stderr)


def test_port_file_names_the_ephemeral_ports(tmp_path):
    ports = tmp_path / "ports"
    env = dict(os.environ, MEMCACHED_PORT_FILENAME=str(ports))
    proc = subprocess.Popen([SHOAL, "server", "-p", "-1", "-U", "-1", "-l", "127.0.0.1"], env=env)
    try:
        deadline = time.monotonic() + 10
        while not ports.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        lines = ports.read_text().splitlines()
        assert [l.split(":")[0] for l in lines] == ["TCP INET", "UDP INET"]
        tcp, udp = (int(l.split(": ")[1]) for l in lines)
        with socket.create_connection(("127.0.0.1", tcp)) as s:
            assert talk(s, b"version\r\n", b"\r\n").startswith(b"VERSION ")
        # UDP: 8-byte frame header (id, seq, total, reserved), answer framed the same way.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.settimeout(5)
            with socket.create_connection(("127.0.0.1", tcp)) as s:
                talk(s, b"set big 7 0 3000\r\n" + b"v" * 3000 + b"\r\n", b"STORED\r\n")
            u.sendto(struct.pack(">HHHH", 4242, 0, 1, 0) + b"get big\r\n", ("127.0.0.1", udp))
            frames = []
            while not frames or len(frames) < frames[0][2]:
                data, _ = u.recvfrom(65536)
                frames.append(struct.unpack(">HHHH", data[:8]) + (data[8:],))
            assert {f[0] for f in frames} == {4242}
            assert sorted(f[1] for f in frames) == list(range(len(frames))) and len(frames) >= 3
            body = b"".join(f[4] for f in sorted(frames, key=lambda f: f[1]))
            assert body == b"VALUE big 7 3000\r\n" + b"v" * 3000 + b"\r\nEND\r\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_unix_socket_with_its_mask(tmp_path):
    path = tmp_path / "shoal.sock"
    proc = subprocess.Popen([SHOAL, "server", "-s", str(path), "-a", "770"])
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.stat().st_mode & 0o777 == 0o770
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            assert talk(s, b"set k 0 0 1\r\nx\r\nget k\r\n", b"END\r\n") == b"STORED\r\nVALUE k 0 1\r\nx\r\nEND\r\n"
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    assert not path.exists(), "the socket file is removed at exit"


def test_warm_restart_keeps_every_item(tmp_path):
    region = tmp_path / "warm.region"
    port = free_port()
    keys = [f"key:{i}" for i in range(20000)]
    with Server.shoal("-e", str(region), port=port) as server, server.connect() as s:
        batch = b"".join(f"set {k} {i} 0 {len(k)} noreply\r\n{k}\r\n".encode() for i, k in enumerate(keys))
        talk(s, batch + b"mn\r\n", b"MN\r\n")
        server.proc.send_signal(signal.SIGUSR1)
        assert server.proc.wait(timeout=10) == 0
    with Server.shoal("-e", str(region), port=port) as server, server.connect() as s:
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            data = talk(s, b"get " + " ".join(chunk).encode() + b"\r\n", b"END\r\n")
            assert data.count(b"VALUE ") == len(chunk), f"missing items in {chunk[0]}..{chunk[-1]}"
        assert b"VALUE key:7 7 5\r\nkey:7\r\n" in talk(s, b"get key:7\r\n", b"END\r\n")


def test_shm_names_the_region_and_its_cookie():
    with Server.shoal() as server, server.connect() as s:
        answer = talk(s, b"shm\r\n", b"\r\n").decode().split()
        assert answer[0] == "SHM"
        path, offset, cookie = answer[1], int(answer[2]), int(answer[3])
        with open(path, "rb") as region:
            region.seek(offset)
            assert struct.unpack("<Q", region.read(8))[0] == cookie
        # A stock memcached answers ERROR, so clients can probe safely.
    with Server.memcached() as mc, mc.connect() as s:
        assert talk(s, b"shm\r\n", b"\r\n") == b"ERROR\r\n"


def test_debugtime_only_in_test_mode():
    with Server.shoal() as server, server.connect() as s:
        assert talk(s, b"debugtime 10\r\n", b"\r\n") == b"ERROR\r\n"
    with Server.shoal("--test-mode") as server, server.connect() as s:
        talk(s, b"set k 0 5 1\r\nx\r\n", b"STORED\r\n")
        assert talk(s, b"debugtime 10\r\n", b"\r\n") == b"OK\r\n"
        assert talk(s, b"get k\r\n", b"END\r\n") == b"END\r\n"


def test_vv_traces_commands_and_answers_like_memcached(tmp_path):
    log = tmp_path / "stderr"
    with Server.shoal("-vv", stderr=log) as server, server.connect() as s:
        talk(s, b"set a 0 0 1\r\nx\r\nget a b\r\nbogus\r\n", b"ERROR\r\n")
        s.sendall(b"quit\r\n")
        assert s.recv(10) == b""
        deadline = time.monotonic() + 30
        while "connection closed" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = log.read_text().splitlines()
    # The harness's readiness probe connected (and closed) first, maybe with the same fd.
    first = next(i for i, line in enumerate(lines) if line.endswith(" set a 0 0 1"))
    fd = lines[first].split()[0][1:]
    opened = max(i for i, line in enumerate(lines[:first]) if line == f"<{fd} new auto-negotiating client connection")
    trace = [line for line in lines[opened:] if line[1:].startswith(fd + " ")]
    assert trace == [f"<{fd} new auto-negotiating client connection", f"<{fd} set a 0 0 1", f">{fd} STORED",
                     f"<{fd} get a b", f">{fd} sending key a", f">{fd} END", f"<{fd} bogus", f">{fd} ERROR",
                     f"<{fd} quit", f"<{fd} connection closed."]


def test_shutdown_needs_dash_a():
    with Server.shoal() as server, server.connect() as s:
        assert talk(s, b"shutdown\r\n", b"\r\n") == b"ERROR: shutdown not enabled\r\n"
    with Server.shoal("-A") as server, server.connect() as s:
        s.sendall(b"shutdown\r\n")
        assert s.recv(100) == b""
        assert server.proc.wait(timeout=10) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="-u switches users only when started as root: run the suite as root")
def test_u_drops_to_the_user_after_binding_and_keeps_the_region_usable(tmp_path):
    import pwd
    nobody = pwd.getpwnam("nobody")
    region = Path("/dev/shm") / f"shoal-test-u-{os.getpid()}.region"
    try:
        for attempt in range(2):  # the second start is a warm restart as nobody
            with Server.shoal("-u", "nobody", "-e", str(region)) as server:
                # The listener accepts (into its backlog) from the moment it is bound, a moment
                # before the drop: wait for the drop rather than race it.
                def uids():
                    status = Path(f"/proc/{server.proc.pid}/status").read_text()
                    return set(next(l for l in status.splitlines() if l.startswith("Uid:")).split()[1:])
                deadline = time.time() + 30
                while uids() != {str(nobody.pw_uid)} and time.time() < deadline:
                    time.sleep(0.02)
                assert uids() == {str(nobody.pw_uid)}
                assert os.stat(region).st_uid == nobody.pw_uid
                with server.connect() as s:
                    if attempt == 0:
                        assert talk(s, b"set k 0 0 2\r\nhi\r\n", b"\r\n") == b"STORED\r\n"
                    else:
                        assert talk(s, b"get k\r\n", b"END\r\n") == b"VALUE k 0 2\r\nhi\r\nEND\r\n"
                server.proc.send_signal(signal.SIGUSR1)  # a clean stop, ready for a warm restart
                server.proc.wait(timeout=10)
    finally:
        region.unlink(missing_ok=True)


def test_u_with_an_unknown_user_is_refused_as_memcached_refuses_it():
    if os.geteuid() != 0:
        pytest.skip("-u is only looked at when started as root")
    run = subprocess.run([SHOAL, "server", "-p", str(free_port()), "-u", "no-such-user-here"],
                         capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and "can't find the user no-such-user-here to switch to" in run.stderr


def test_d_daemonizes_and_p_names_the_daemon(tmp_path):
    port, pidfile = free_port(), tmp_path / "shoal.pid"
    run = subprocess.run([SHOAL, "server", "-d", "-P", str(pidfile), "-p", str(port), "-U", "0", "-l", "127.0.0.1"],
                         capture_output=True, text=True, timeout=10)
    assert run.returncode == 0, run.stderr
    # The daemon writes its pid after the parent has returned.
    deadline = time.monotonic() + 30
    while not pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(pidfile.read_text())
    try:
        assert Path(f"/proc/{pid}").exists()
        status = Path(f"/proc/{pid}/stat").read_text().split()
        assert int(status[3]) != os.getpid(), "detached: its parent is not this test"
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            assert talk(s, b"version\r\n", b"\r\n").startswith(b"VERSION ")
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not pidfile.exists(), "the pid file goes when the daemon stops"


def test_d_still_reports_a_port_in_use_on_the_terminal():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run([SHOAL, "server", "-d", "-p", str(port), "-U", "0", "-l", "127.0.0.1"],
                             capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and run.stderr


def test_idle_timeout_closes_idle_connections_and_counts_them_as_memcached_does():
    for server in (Server.memcached("-o", "idle_timeout=1"), Server.shoal("-o", "idle_timeout=1")):
        with server:
            idle, busy = server.connect(), server.connect()
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                assert talk(busy, b"version\r\n", b"\r\n").startswith(b"VERSION"), server.kind
                time.sleep(0.1)
            idle.settimeout(30)
            assert idle.recv(100) == b"", f"{server.kind}: the idle connection was closed"
            sock = busy
            data = talk(sock, b"stats\r\n", b"END\r\n")
            kicks = int(next(l.split()[2] for l in data.decode().splitlines() if l.startswith("STAT idle_kicks")))
            assert kicks >= 1, server.kind
            idle.close()
            busy.close()


def test_idle_timeout_must_be_seconds():
    run = subprocess.run([SHOAL, "server", "-p", str(free_port()), "-o", "idle_timeout=soon"],
                         capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and "idle_timeout=soon" in run.stderr


MEMLIMIT_CASES = [
    b"cache_memlimit 32\r\n",
    b"cache_memlimit 2\r\n",
    b"cache_memlimit abc\r\n",
    b"cache_memlimit\r\n",
    b"cache_memlimit -5\r\n",
    b"cache_memlimit 1 2 3\r\n",
    b"cache_memlimit 2000000000\r\n",
    b"cache_memlimit 16 noreply\r\nversion\r\n",
    b"cache_memlimit abc noreply\r\nversion\r\n",
    b"cache_memlimit 64 extra\r\n",
]


def test_cache_memlimit_answers_as_memcached_does():
    """The same requests to Debian's memcached and to Shoal, both at -m 128: the same answers
    (the version line aside)."""
    answers = {}
    for server in (Server.memcached("-m", "128"), Server.shoal(memory_mb=128)):
        with server, server.connect() as sock:
            got = []
            for request in MEMLIMIT_CASES:
                reply = talk(sock, request, b"\r\n")
                got.append(b"VERSION" if reply.startswith(b"VERSION ") else reply)
            data = talk(sock, b"cache_memlimit 40\r\nstats\r\n", b"END\r\n")
            limit = next(l for l in data.decode().splitlines() if l.startswith("STAT limit_maxbytes"))
            answers[server.kind] = (got, limit)
    assert answers["shoal"] == answers["memcached"]
    assert answers["shoal"][1] == f"STAT limit_maxbytes {40 << 20}"


def test_cache_memlimit_shrinks_by_evicting_and_refuses_to_grow_past_the_region():
    with Server.shoal(memory_mb=64) as server, server.connect() as sock:
        value = b"v" * 1000
        for i in range(40_000):  # ~40 MB
            sock.sendall(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value))
        assert talk(sock, b"version\r\n", b"\r\n").startswith(b"VERSION")

        def stat(name):
            data = talk(sock, b"stats\r\n", b"END\r\n")
            return int(next(l.split()[2] for l in data.decode().splitlines() if l.startswith(f"STAT {name} ")))

        before = stat("curr_items")
        assert talk(sock, b"cache_memlimit 8\r\n", b"\r\n") == b"OK\r\n"
        after = stat("curr_items")
        assert after * 1000 <= 8 << 20 < before * 1000, (before, after)
        assert talk(sock, b"get k39999\r\n", b"END\r\n").startswith(b"VALUE k39999 0 1000\r\n"), "the newest stay"
        assert stat("evictions") >= before - after
        # Shoal's region is made at -m: it cannot grow past it (memcached could; PROTOCOL.md).
        assert talk(sock, b"cache_memlimit 4096\r\n", b"\r\n") == b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"
        assert talk(sock, b"cache_memlimit 32\r\n", b"\r\n") == b"OK\r\n"
        assert stat("limit_maxbytes") == 32 << 20
