"""TLS (`-Z`): Shoal and Debian's memcached 1.6.18 are started with the same flags and the
same throwaway certificates (made here with the openssl command), and real TLS clients —
Python's `ssl`, pymemcache's `tls_context`, `openssl s_client` — must get the same answers
from both: the same bytes for the same requests, the same refusals (a handshake of garbage, a
plaintext client, a client without the certificate `ssl_verify_mode=2` requires), the same
`stats settings` lines and `refresh_certs` answers."""

import os
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import MEMCACHED, SHOAL, Server, free_port  # noqa: E402


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def issue(d: Path, name: str, subject: str, ca: str = "ca"):
    """A key and a certificate for `name`, signed by the CA `ca`, valid for loopback."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={subject}", cwd=d)
    (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate, a second one (for refresh_certs), and a client one."""
    d = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=shoal test CA", cwd=d)
    issue(d, "server", "first server")
    issue(d, "server2", "second server")
    issue(d, "client", "a client")
    return d


def tls_options(pki, *extra):
    opts = ",".join([f"ssl_chain_cert={pki / 'server.pem'}", f"ssl_key={pki / 'server.key'}", *extra])
    return ("-Z", "-o", opts)


def client_context(pki, cert=False):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if cert:
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    return ctx


def tls_connect(server, pki, cert=False):
    raw = socket.create_connection(server.address, timeout=5)
    return client_context(pki, cert).wrap_socket(raw, server_hostname="localhost")


def exchange(sock, request: bytes) -> bytes:
    """Sends the request and a meta no-op, and returns every byte answered before the no-op's
    `MN`: the whole answer, however many lines, without guessing its end."""
    sock.sendall(request + b"mn\r\n")
    data = b""
    while not data.endswith(b"MN\r\n"):
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data[:-4]


@pytest.fixture(scope="module")
def servers(pki):
    with Server.memcached(*tls_options(pki)) as memcached, Server.shoal(*tls_options(pki)) as shoal:
        yield memcached, shoal


BIG = b"v" * 300_000

CASES = {
    "set and get": b"set a 5 0 5\r\nhello\r\nget a b\r\n",
    "a pipeline of stores and reads": b"".join(
        b"set k%d 0 0 2\r\n%02d\r\n" % (i, i) for i in range(50)) + b"get " + b" ".join(
        b"k%d" % i for i in range(50)) + b"\r\n",
    "arithmetic and delete": b"set n 0 0 1\r\n7\r\nincr n 5\r\ndecr n 100\r\ndelete n\r\ndelete n\r\n",
    "cas": b"set c 0 0 1\r\nx\r\ncas c 0 0 1 999999\r\ny\r\n",
    "meta commands": b"ms m 3 T0\r\nabc\r\nmg m v f s\r\nmd m q\r\nmg m v\r\n",
    "bad commands": b"bogus\r\nincr n\r\nget\r\nset a 0 0 z\r\n",
}


@pytest.mark.parametrize("name", list(CASES))
def test_requests_over_tls_answer_as_memcached(servers, pki, name):
    answers = []
    for server in servers:
        with tls_connect(server, pki) as sock:
            answers.append(exchange(sock, CASES[name]))
    assert answers[1] == answers[0], f"{name}: memcached {answers[0][:300]!r}\n shoal {answers[1][:300]!r}"


def test_values_larger_than_a_tls_record_as_memcached(servers, pki):
    answers = []
    for server in servers:
        with tls_connect(server, pki) as sock:
            # memcached 1.6.18 stalls when more requests follow a value of over 16 KB in one
            # burst (they wait in OpenSSL's buffer while it waits for the socket): the set goes
            # alone here, and Shoal's pipelined case is checked below.
            sock.sendall(b"set big 0 0 %d\r\n%s\r\n" % (len(BIG), BIG))
            assert sock.recv(100) == b"STORED\r\n", server.kind
            answers.append(exchange(sock, b"get big\r\n"))
    assert answers[0] == answers[1] == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(BIG), BIG)


def test_requests_behind_a_large_value_in_one_burst_are_answered(servers, pki):
    """Records the session has decrypted but not yet handed over raise no socket event: the
    connection must not wait for one."""
    with tls_connect(servers[1], pki) as sock:
        burst = b"".join(b"set big%d 0 0 %d\r\n%s\r\nget big%d\r\n" % (i, len(BIG), BIG, i) for i in range(4))
        answer = exchange(sock, burst)
    value = b"VALUE big%d 0 %d\r\n%s\r\nEND\r\n"
    assert answer == b"".join(b"STORED\r\n" + value % (i, len(BIG), BIG) for i in range(4))


def binary_packet(opcode, key=b"", extras=b"", value=b""):
    body = len(extras) + len(key) + len(value)
    return struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0, body, 7, 0) + extras + key + value


def binary_replies(sock, count):
    """`count` binary replies, each with its CAS zeroed (the servers' CAS values differ)."""
    replies, data = [], b""
    while len(replies) < count:
        chunk = sock.recv(4096)
        assert chunk, f"closed after {replies!r}"
        data += chunk
        while len(data) >= 24 and len(data) >= 24 + struct.unpack(">I", data[8:12])[0]:
            end = 24 + struct.unpack(">I", data[8:12])[0]
            replies.append(data[:16] + bytes(8) + data[24:end])
            data = data[end:]
    return replies


def test_the_binary_protocol_over_tls_as_memcached(servers, pki):
    """-B auto picks the protocol by the first decrypted byte: a binary set, get and noop."""
    burst = binary_packet(0x01, b"bin", struct.pack(">II", 3, 0), b"value") + binary_packet(0x00, b"bin")
    answers = []
    for server in servers:
        with tls_connect(server, pki) as sock:
            sock.sendall(burst + binary_packet(0x0a))
            answers.append(binary_replies(sock, 3))
    assert answers[0] == answers[1]


def stat_lines(server, pki, command: bytes):
    with tls_connect(server, pki) as sock:
        text = exchange(sock, command).decode()
    return dict(line.split(" ", 2)[1:] for line in text.splitlines() if line.startswith("STAT "))


def test_stats_settings_show_the_tls_settings_as_memcached(servers, pki):
    expected, got = (stat_lines(s, pki, b"stats settings\r\n") for s in servers)
    ssl_lines = {k: v for k, v in expected.items() if k.startswith("ssl_")}
    assert ssl_lines["ssl_enabled"] == "yes"
    assert {k: got.get(k) for k in ssl_lines} == ssl_lines
    general = stat_lines(servers[1], pki, b"stats\r\n")
    assert {"ssl_handshake_errors", "time_since_server_cert_refresh"} <= general.keys()


def test_pymemcache_with_a_tls_context(servers, pki):
    from pymemcache.client.base import Client
    for server in servers:
        client = Client(server.address, tls_context=client_context(pki), connect_timeout=5, timeout=5)
        client.set("pymemcache", b"over tls", expire=60)
        assert client.get("pymemcache") == b"over tls"
        assert client.get_many(["pymemcache", "absent"]) == {"pymemcache": b"over tls"}
        client.close()


def test_openssl_s_client_round_trip(servers, pki):
    for server in servers:
        run = subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{server.port}", "-CAfile", str(pki / "ca.pem"),
             "-verify_return_error", "-quiet", "-ign_eof"],
            input=b"set s 0 0 6\r\nclient\r\nget s\r\nquit\r\n", capture_output=True, timeout=20)
        assert run.stdout == b"STORED\r\nVALUE s 0 6\r\nclient\r\nEND\r\n", (server.kind, run.stderr)


def closed_without_answer(sock) -> bytes:
    """Reads until the server closes; returns what came (a TLS alert at most)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (ConnectionResetError, socket.timeout) as e:
        assert not isinstance(e, socket.timeout), f"still open after {data!r}"
    return data


@pytest.mark.parametrize("garbage", [
    b"\x16\x03\x01\x00\x05hello" + b"x" * 50,  # a handshake record of nonsense
    b"get a\r\nset a 0 0 1\r\nz\r\n",  # plaintext on the TLS port
    bytes(range(256)) * 8,
])
def test_garbage_is_refused_and_others_keep_their_data(servers, pki, garbage):
    for server in servers:
        with tls_connect(server, pki) as keeper:
            assert exchange(keeper, b"set kept 0 0 4\r\nsafe\r\n") == b"STORED\r\n"
            before = int(stat_lines(server, pki, b"stats\r\n")["ssl_handshake_errors"])
            with socket.create_connection(server.address, timeout=5) as rogue:
                rogue.sendall(garbage)
                answer = closed_without_answer(rogue)
            # Nothing but TLS alert records (content type 21) may come back.
            assert answer == b"" or answer[0] == 0x15, (server.kind, answer)
            assert exchange(keeper, b"get kept\r\n") == b"VALUE kept 0 4\r\nsafe\r\nEND\r\n"
            after = int(stat_lines(server, pki, b"stats\r\n")["ssl_handshake_errors"])
            # memcached counts only handshakes that fail at once, in accept (docs/PROTOCOL.md).
            assert after == before + 1 if server.kind == "shoal" else after >= before


@pytest.fixture(scope="module")
def verifying_servers(pki):
    opts = tls_options(pki, f"ssl_ca_cert={pki / 'ca.pem'}", "ssl_verify_mode=2")
    with Server.memcached(*opts) as memcached, Server.shoal(*opts) as shoal:
        yield memcached, shoal


def test_a_required_client_certificate_refuses_clients_without_one(verifying_servers, pki):
    for server in verifying_servers:
        with tls_connect(server, pki, cert=True) as sock:
            assert exchange(sock, b"set who 0 0 4\r\ncert\r\n") == b"STORED\r\n"
        refused = False
        try:
            # TLS 1.3: the client finishes first, so the refusal arrives with the first read.
            with tls_connect(server, pki) as sock:
                sock.sendall(b"set who 0 0 4\r\nnone\r\n")
                refused = sock.recv(100) == b""
        except (ssl.SSLError, ConnectionResetError):
            refused = True
        assert refused, server.kind
        with tls_connect(server, pki, cert=True) as sock:
            assert exchange(sock, b"get who\r\n") == b"VALUE who 0 4\r\ncert\r\nEND\r\n", server.kind


@pytest.mark.parametrize("cache", [False, True])
def test_ssl_session_cache_lets_clients_resume(pki, cache):
    """With `ssl_session_cache` a second connection resumes the first one's session (no
    certificate exchange); without it every connection makes a full handshake."""
    extra = ["ssl_session_cache"] if cache else []
    with Server.shoal(*tls_options(pki, *extra)) as server:
        ctx = client_context(pki)
        with ctx.wrap_socket(socket.create_connection(server.address, timeout=5),
                             server_hostname="localhost") as first:
            exchange(first, b"")  # TLS 1.3 tickets arrive after the handshake
            session = first.session
        with ctx.wrap_socket(socket.create_connection(server.address, timeout=5),
                             server_hostname="localhost", session=session) as second:
            exchange(second, b"")
            assert second.session_reused == cache


def test_a_requested_client_certificate_is_optional(pki):
    """ssl_verify_mode=1 asks for a certificate and lets clients without one in."""
    opts = tls_options(pki, f"ssl_ca_cert={pki / 'ca.pem'}", "ssl_verify_mode=1")
    with Server.memcached(*opts) as memcached, Server.shoal(*opts) as shoal:
        for server in (memcached, shoal):
            for cert in (False, True):
                with tls_connect(server, pki, cert=cert) as sock:
                    assert exchange(sock, b"set opt 0 0 1\r\nx\r\n") == b"STORED\r\n", (server.kind, cert)


def peer_subject(server, pki):
    with tls_connect(server, pki) as sock:
        return dict(item[0] for item in sock.getpeercert()["subject"])["commonName"]


def test_refresh_certs_reloads_the_files_and_keeps_the_old_ones_on_error(tmp_path, pki):
    answers = []
    for kind in ("memcached", "shoal"):
        live = tmp_path / kind
        live.mkdir()
        for part in ("pem", "key"):
            (live / f"server.{part}").write_bytes((pki / f"server.{part}").read_bytes())
        opts = ("-Z", "-o", f"ssl_chain_cert={live / 'server.pem'},ssl_key={live / 'server.key'}")
        with getattr(Server, kind)(*opts) as server:
            assert peer_subject(server, pki) == "first server"
            (live / "server.pem").write_text("not a certificate\n")
            with tls_connect(server, pki) as sock:
                failed = exchange(sock, b"refresh_certs\r\n")
            assert peer_subject(server, pki) == "first server", "a bad file keeps the old certificate"
            for part in ("pem", "key"):
                (live / f"server.{part}").write_bytes((pki / f"server2.{part}").read_bytes())
            with tls_connect(server, pki) as sock:
                answers.append((failed.split(b" : ")[0], exchange(sock, b"refresh_certs\r\n")))
            assert peer_subject(server, pki) == "second server", kind
    path = lambda kind: str(tmp_path / kind / "server.pem").encode()  # noqa: E731
    assert answers[0] == (b"Error loading the certificate chain: " + path("memcached"), b"OK\r\n")
    assert answers[1] == (b"Error loading the certificate chain: " + path("shoal"), b"OK\r\n")


def test_refresh_certs_without_tls_and_udp_stays_plain(pki):
    udp = free_port()
    with Server.memcached() as memcached, Server.shoal() as shoal:
        answers = []
        for server in (memcached, shoal):
            with server.connect() as sock:
                answers.append(exchange(sock, b"refresh_certs\r\n"))
        assert answers == [b"Error TLS not enabled\r\n"] * 2
        settings = []
        for server in (memcached, shoal):
            with server.connect() as sock:
                text = exchange(sock, b"stats settings\r\n").decode()
            settings.append([line for line in text.splitlines() if line.startswith("STAT ssl_")])
        assert settings[1] == settings[0] and "STAT ssl_enabled no" in settings[0]
    # memcached's -Z leaves UDP in plaintext; so does Shoal's.
    with Server.shoal(*tls_options(pki), "-U", str(udp)):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(5)
            sock.sendto(b"\x00\x01\x00\x00\x00\x01\x00\x00mn\r\n", ("127.0.0.1", udp))
            assert sock.recv(100) == b"\x00\x01\x00\x00\x00\x01\x00\x00MN\r\n"


def test_unix_sockets_stay_plain_with_tls_on(tmp_path, pki):
    """memcached's -Z wraps TCP connections only: with -s (and a -p, which -s leaves unused)
    the unix socket speaks plaintext."""
    as_root = ["-u", "root"] if os.geteuid() == 0 else []
    for argv0 in ([MEMCACHED, *as_root], [SHOAL, "server"]):
        path = tmp_path / f"{Path(argv0[0]).name}.sock"
        proc = subprocess.Popen([*argv0, "-s", str(path), "-p", str(free_port()), *tls_options(pki)])
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.settimeout(5)
            for _ in range(500):  # the file appears at bind, a moment before listen
                try:
                    sock.connect(str(path))
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    time.sleep(0.01)
            with sock:
                assert exchange(sock, b"set u 0 0 1\r\nx\r\n") == b"STORED\r\n", argv0
        finally:
            proc.kill()
            proc.wait()


def test_a_notls_listener_stays_plain(pki):
    """memcached's `-l notls:<addr>:<port>`: that listener speaks plaintext, the others TLS."""
    as_root = ["-u", "root"] if os.geteuid() == 0 else []
    for argv0 in ([MEMCACHED, *as_root], [SHOAL, "server"]):
        tls_port, plain_port = free_port(), free_port()
        listen = f"127.0.0.1:{tls_port},notls:127.0.0.1:{plain_port}"
        proc = subprocess.Popen([*argv0, "-U", "0", "-l", listen, *tls_options(pki)])
        try:
            server = Server([], tls_port, "tls")
            for _ in range(500):  # until it listens
                try:
                    socket.create_connection(("127.0.0.1", plain_port), timeout=5).close()
                    break
                except ConnectionRefusedError:
                    time.sleep(0.01)
            with socket.create_connection(("127.0.0.1", plain_port), timeout=5) as sock:
                assert exchange(sock, b"set p 0 0 1\r\nx\r\n") == b"STORED\r\n", argv0
            with tls_connect(server, pki) as sock:
                assert exchange(sock, b"get p\r\n") == b"VALUE p 0 1\r\nx\r\nEND\r\n", argv0
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("argv, message", [
    (["-Z"], "Error loading the certificate chain: (null)"),
    (["-Z", "-o", "ssl_chain_cert=/nonexistent.pem,ssl_key=/nonexistent.key"],
     "Error loading the certificate chain: /nonexistent.pem"),
    (["-Z", "-s", "/tmp/shoal-tls-test.sock", "-p", "0", "-o", "ssl_chain_cert={pki}/server.pem,ssl_key={pki}/server.key"],
     "You cannot enable SSL without a TCP port."),
    (["-o", "ssl_verify_mode=7"], "Invalid ssl_verify_mode"),
])
def test_bad_tls_flags_stop_the_start_as_memcached(pki, argv, message):
    argv = [arg.format(pki=pki) for arg in argv]
    port = ["-p", str(free_port()), "-U", "0", "-l", "127.0.0.1"]
    as_root = ["-u", "root"] if os.geteuid() == 0 else []
    for argv0 in ([MEMCACHED, *as_root], [SHOAL, "server"]):
        run = subprocess.run([*argv0, *port, *argv], capture_output=True, text=True, timeout=10)
        assert run.returncode != 0 and message in run.stdout + run.stderr, (argv0, run)


def test_a_key_that_does_not_match_says_so(pki):
    run = subprocess.run(
        [SHOAL, "server", "-p", str(free_port()), "-U", "0", "-l", "127.0.0.1", "-Z", "-o",
         f"ssl_chain_cert={pki / 'server.pem'},ssl_key={pki / 'client.key'}"],
        capture_output=True, text=True, timeout=10)
    assert run.returncode != 0 and "it does not go with the certificate" in run.stderr


def test_many_clients_at_once_each_get_their_own_answers(servers, pki):
    socks = [tls_connect(servers[1], pki) for _ in range(20)]
    try:
        for i, sock in enumerate(socks):
            sock.sendall(b"set many%d 0 0 %d\r\n%s\r\n" % (i, len(str(i)), str(i).encode()))
        for sock in socks:
            assert sock.recv(100) == b"STORED\r\n"
        for i, sock in enumerate(socks):
            assert exchange(sock, b"get many%d\r\n" % i) == b"VALUE many%d 0 %d\r\n%d\r\nEND\r\n" % (
                i, len(str(i)), i)
    finally:
        for sock in socks:
            sock.close()
