"""Authentication: SASL PLAIN over the binary protocol (`-S`) and ascii tokens (`-Y`), and what
authentication guards (the `shm` answer), plus the region file's group and mode.

Differential where memcached can be the truth: every `-Y` exchange, and every `-S` answer
before and around a failed authentication, go to Debian's memcached 1.6.18 and to Shoal
started alike, and must be identical. A successful SASL login is checked against Shoal
alone: Debian builds memcached without `--enable-sasl-pwdb`, so its `-S` consults Cyrus SASL's
own user database (sasldb, which needs `saslpasswd2` to fill) and ignores MEMCACHED_SASL_PWDB,
which Shoal reads. Memcached gets a Cyrus configuration offering PLAIN (SASL_CONF_PATH) so
that both list the same mechanisms."""

import glob
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from binwire import (GET, NOOP, SASL_AUTH, SASL_LIST, SASL_STEP, SET, VERSION,  # noqa: E402
                     Connection, replay, request, store)
from harness import Server  # noqa: E402

USERS = b"alice:secret\nbob:hunter2\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("auth")
    (d / "users").write_bytes(USERS)
    (d / "sasl").mkdir()
    (d / "sasl" / "memcached.conf").write_text("mech_list: plain\n")
    return d


def plain(user: bytes, password: bytes, opcode=SASL_AUTH) -> bytes:
    return request(opcode, b"PLAIN", value=b"\0" + user + b"\0" + password)


SASL_CASES = {
    "mechanisms are listed before authentication": [("wait", request(SASL_LIST))],
    "version needs no authentication": [("wait", request(VERSION)), ("close", request(NOOP))],
    "a command before authentication is refused and closes": [("close", request(GET, b"k"))],
    "a store before authentication is refused and closes": [("close", store(SET, b"k", b"v"))],
    "a wrong password fails and the connection stays": [
        ("wait", plain(b"alice", b"wrong")), ("wait", plain(b"nobody", b"x")),
        ("wait", request(SASL_AUTH, b"CRAM-MD5", value=b"x")),
        ("wait", request(SASL_STEP, b"PLAIN", value=b"\0alice\0x")), ("close", request(GET, b"k")),
    ],
    "a mechanism name over 32 bytes is invalid": [
        ("wait", request(SASL_AUTH, b"M" * 33, value=b"x")), ("wait", request(SASL_LIST)),
    ],
    "text on a SASL server closes once a header arrived": [("close", b"get a b c d e f g h i j k\r\n")],
}


@pytest.fixture(scope="module")
def sasl_servers(files):
    env = {"MEMCACHED_SASL_PWDB": str(files / "users"), "SASL_CONF_PATH": str(files / "sasl")}
    with Server.memcached("-S", env=env) as memcached, Server.shoal("-S", env=env) as shoal:
        yield memcached, shoal


@pytest.mark.parametrize("name", list(SASL_CASES))
def test_sasl_answers_as_memcached(sasl_servers, name):
    expected, got = (replay(server, SASL_CASES[name]) for server in sasl_servers)
    for step, (e, g) in enumerate(zip(expected, got)):
        assert g == e, f"{name}, step {step}: memcached {e!r}\n shoal {g!r}"


def status_and_body(conn):
    fields, body = conn.packet()
    return fields[5], body


def test_sasl_plain_logs_in_at_once_or_in_two_steps(sasl_servers):
    shoal = sasl_servers[1]
    conn = Connection(shoal)
    conn.send(plain(b"alice", b"secret"))
    assert status_and_body(conn) == (0, b"Authenticated")
    conn.send(store(SET, b"k", b"v") + request(GET, b"k"))
    assert status_and_body(conn) == (0, b"")
    assert status_and_body(conn) == (0, b"\0\0\0\0v")
    conn.close()
    conn = Connection(shoal)
    conn.send(request(SASL_AUTH, b"plain"))  # no data yet: "continue"
    assert status_and_body(conn) == (0x21, b"")
    conn.send(plain(b"bob", b"hunter2", SASL_STEP) + request(GET, b"k"))
    assert status_and_body(conn) == (0, b"Authenticated")
    assert status_and_body(conn) == (0, b"\0\0\0\0v")
    conn.close()
    # Another connection has proved nothing.
    conn = Connection(shoal)
    conn.send(request(GET, b"k"))
    assert status_and_body(conn) == (0x20, b"Auth failure.")
    conn.close()


PYLIBMC_SASL = """
import sys, pylibmc
assert pylibmc.support_sasl, "pylibmc was built without SASL"
address = [sys.argv[1]]
client = pylibmc.Client(address, binary=True, username="alice", password="secret")
assert client.set("py", b"value") is True
assert client.get("py") == b"value"
assert client.set("n", b"1") and client.incr("n", 2) == 3
for intruder in (pylibmc.Client(address, binary=True, username="alice", password="guess"),
                 pylibmc.Client(address, binary=True)):
    try:
        got = intruder.get("py")
    except pylibmc.Error as e:
        got = e
    assert got != b"value", "read without the password"
    print("refused:", repr(got))
"""


def test_pylibmc_with_sasl_credentials(sasl_servers):
    # pylibmc's wheel carries its own libsasl2, which finds the PLAIN client plugin (Debian's
    # libsasl2-modules) only through SASL_PATH, read when the module loads: a process of its own.
    plugins = glob.glob("/usr/lib/*/sasl2/libplain.so*") + glob.glob("/usr/lib/sasl2/libplain.so*")
    assert plugins, "the SASL PLAIN plugin is missing: install libsasl2-modules (scripts/test.sh)"
    env = {**os.environ, "SASL_PATH": os.path.dirname(plugins[0])}
    run = subprocess.run([sys.executable, "-c", PYLIBMC_SASL, f"127.0.0.1:{sasl_servers[1].port}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("refused: ") == 2, run.stdout


def ascii_replay(server, chunks):
    """What one connection answered to the chunks sent one by one (each followed by 0.3 s of
    silence), as one stream: a loaded machine may answer a chunk after the silence, with the
    next chunk's answer, so where one chunk's answer ends is not compared."""
    conn = Connection(server)
    answers = []
    for chunk in chunks:
        conn.send(chunk)
        data = b""
        try:
            while conn.fill(timeout=0.3):
                pass
        except TimeoutError:
            pass
        data, conn.buf = conn.buf, b""
        answers.append(data + (b"<closed>" if conn.closed else b""))
    conn.close()
    return b"".join(answers)


ASCII_CASES = {
    "commands before the token": [b"get k\r\n", b"version\r\n", b"shm\r\n", b"set k 0 0 1\r\nv\r\n"],
    "a wrong password, then the right one": [
        b"set auth 0 0 11\r\nalice wrong\r\n", b"get k\r\n", b"set x 1 2 12\r\nalice secret\r\n",
        b"set k 0 0 1\r\nv\r\n", b"get k\r\n",
    ],
    "a bad termination and a bad format": [
        b"set a 0 0 3\r\nabcde", b"set a 0 0 5\r\nalice\r\n", b"set a 0 0 5 noreply\r\nx y z\r\n",
    ],
    "a short line": [b"set a b\r\n", b"\r\n", b"set a 0 0 z\r\n"],
}


@pytest.fixture(scope="module")
def ascii_servers(files):
    auth = str(files / "users")
    with Server.memcached("-Y", auth) as memcached, Server.shoal("-Y", auth) as shoal:
        yield memcached, shoal


@pytest.mark.parametrize("name", list(ASCII_CASES))
def test_ascii_auth_answers_as_memcached(ascii_servers, name):
    expected, got = (ascii_replay(server, ASCII_CASES[name]) for server in ascii_servers)
    assert got == expected


def test_shm_answers_only_an_authenticated_connection(ascii_servers):
    shoal = ascii_servers[1]
    answers = ascii_replay(shoal, [b"shm\r\n", b"set a 0 0 12\r\nalice secret\r\nshm\r\n"])
    assert answers.startswith(b"CLIENT_ERROR unauthenticated\r\nSTORED\r\nSHM /dev/shm/shoal-")


def serving(server):
    """Waits for an answer: the server accepts connections (its listeners are bound) a moment
    before its region is open and given its mode."""
    with server.connect() as sock:
        sock.sendall(b"version\r\n")
        assert sock.recv(4096).startswith(b"VERSION ")
    return server


def test_region_file_group_and_mode(tmp_path):
    region = tmp_path / "r.region"
    with Server.shoal("-e", str(region)) as server:
        serving(server)
        assert stat.S_IMODE(os.stat(region).st_mode) == 0o600
    group = os.getgroups()[-1] if os.getgroups() else os.getgid()
    with Server.shoal("-e", str(region), "--region-group", str(group), "--region-mode", "640") as server:
        serving(server)
        info = os.stat(region)
        assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o640, group)
