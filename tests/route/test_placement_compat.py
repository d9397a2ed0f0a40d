"""Shoal's routing core places keys exactly as the tools users migrate from.

For each scheme and server set, real memcached servers are started on loopback, the real tool
stores >= 8000 keys on them (pylibmc over libmemcached, pymemcache's HashClient, Debian's
nutcracker), each server is then asked which keys it holds, and `shoal route owner` must name
the same server for every key: zero mismatches.

A server set with port 11211 (which libmemcached and twemproxy leave out of point names) binds
127.0.0.1:11211 only when it is free; otherwise that set is skipped, saying why.
"""

import json
import random
import socket
import subprocess
import time

import pylibmc
import pytest
from pymemcache.client.hash import HashClient

from harness import SHOAL, Server, free_port

KEYS = 8000
NUTCRACKER = "nutcracker"

# (name, [(port or None for a free one, weight), ...])
SERVER_SETS = [
    ("three", [(None, 1)] * 3),
    ("eight-weighted", [(None, w) for w in (1, 2, 3, 1, 5, 1, 2, 4)]),
    ("default-port-weighted", [(11211, 2), (None, 1), (None, 3), (None, 1), (None, 1)]),
]


def make_keys(prefix, count, unicode=False):
    """Keys of many shapes, all starting with `prefix` (each test its own, so no test sees
    another's keys without a flush, whose one-second granularity could drop fresh sets): short,
    long (up to 250 bytes), punctuation, bytes from 0x80 (or non-ASCII characters, for clients
    that take text), never a space, control byte or `|#|`."""
    rng = random.Random(13)
    printable = [chr(c) for c in range(0x21, 0x7F)]
    keys = set()
    while len(keys) < count:
        n = len(keys)
        if n % 4 == 0:
            key = f"user:{n}:profile"
        elif n % 4 == 1:
            key = "".join(rng.choice(printable) for _ in range(rng.randint(1, 40)))
        elif n % 4 == 2:
            key = f"k{n}-" + "x" * rng.randint(0, 240)
        else:
            extra = "éü€漢" if unicode else "\x80\xa9\xff"
            key = f"n{n}" + "".join(rng.choice(printable + list(extra)) for _ in range(rng.randint(1, 20)))
        key = prefix + key
        if "|#|" in key:
            continue
        raw = key.encode("utf-8") if unicode else key.encode("latin-1")
        if len(raw) <= 250:
            keys.add(key)
    return sorted(keys)


def as_bytes(key):
    return key.encode("latin-1") if isinstance(key, str) else key


def request(sock, payload, until):
    sock.sendall(payload)
    data = b""
    while not data.endswith(until):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise RuntimeError(f"connection closed after {data[-200:]!r}")
        data += chunk
    return data


def held_keys(server, wire_keys):
    """The keys (as sent on the wire) that `server` holds, by multi-get in batches."""
    held = set()
    with server.connect() as sock:
        for i in range(0, len(wire_keys), 100):
            batch = wire_keys[i:i + 100]
            data = request(sock, b"get " + b" ".join(batch) + b"\r\n", b"END\r\n")
            lines = iter(data.split(b"\r\n"))
            for line in lines:
                if line.startswith(b"VALUE "):
                    held.add(line.split(b" ")[1])
                    next(lines)
    return held


def placement_on(servers, wire_keys):
    """Which server holds each key, checking each is held exactly once."""
    owner = {}
    for s in servers:
        for key in held_keys(s, wire_keys):
            assert key not in owner, f"{key!r} is on two servers"
            owner[key] = f"127.0.0.1:{s.port}"
    missing = [k for k in wire_keys if k not in owner]
    assert not missing, f"{len(missing)} keys were stored nowhere, e.g. {missing[:3]}"
    return owner


def shoal_owners(hashing, specs, wire_keys):
    argv = [str(SHOAL), "route", "owner", "--hashing", hashing]
    for spec in specs:
        argv += ["--server", spec]
    out = subprocess.run(argv, input=b"\n".join(wire_keys) + b"\n", capture_output=True, check=True)
    owners = out.stdout.decode().splitlines()
    assert len(owners) == len(wire_keys)
    return dict(zip(wire_keys, owners))


def assert_same(tool, hashing, specs, servers, wire_keys):
    real = placement_on(servers, wire_keys)
    ours = shoal_owners(hashing, specs, wire_keys)
    wrong = [(k, real[k], ours[k]) for k in wire_keys if real[k] != ours[k]]
    assert not wrong, f"{tool} vs shoal {hashing}: {len(wrong)} of {len(wire_keys)} differ, e.g. {wrong[:5]}"
    used = {real[k] for k in wire_keys}
    assert len(used) == len(servers), f"{tool} used only {sorted(used)}"


@pytest.fixture(scope="module", params=SERVER_SETS, ids=[s[0] for s in SERVER_SETS])
def pool(request):
    """Started memcached servers and their `host:port:weight` specs."""
    _, layout = request.param
    for port, _ in layout:
        if port is not None:
            with socket.socket() as probe:
                # As memcached binds: TIME-WAIT leftovers do not make the port taken.
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError as e:
                    pytest.skip(f"SKIPPED LOUDLY: 127.0.0.1:{port} is taken ({e}), so the server set "
                                f"with libmemcached's default port cannot run here")
    servers = [Server.memcached(port=port) if port else Server.memcached() for port, _ in layout]
    started = []
    try:
        for s in servers:
            started.append(s.start())
        specs = [f"127.0.0.1:{s.port}:{w}" for s, (_, w) in zip(servers, layout)]
        yield servers, specs
    finally:
        for s in started:
            s.stop()


@pytest.mark.parametrize("behavior,hashing", [("ketama_weighted", "ketama_weighted"), ("ketama", "ketama")])
def test_pylibmc(pool, behavior, hashing):
    servers, specs = pool
    if behavior == "ketama":
        # Unweighted ketama has no weights: pylibmc aborts on a ketama pool with weights above
        # 1 (libmemcached: "realloc(): invalid old size") and shoal refuses them.
        refused = subprocess.run([str(SHOAL), "route", "owner", "--hashing", "ketama",
                                  *(a for spec in specs for a in ("--server", spec)), "k"],
                                 capture_output=True, text=True)
        if any(not spec.endswith(":1") for spec in specs):
            assert refused.returncode != 0 and "weight" in refused.stderr, refused
        specs = [spec.rsplit(":", 1)[0] for spec in specs]
    keys = [as_bytes(k) for k in make_keys(f"{behavior}:", KEYS)]
    client = pylibmc.Client(specs, behaviors={behavior: True})
    for i in range(0, len(keys), 500):
        assert not client.set_multi({k: b"1" for k in keys[i:i + 500]})
    client.disconnect_all()
    assert_same(f"pylibmc {behavior}", hashing, specs, servers, keys)


def test_pymemcache(pool):
    servers, specs = pool
    keys = make_keys("pymemcache:", KEYS, unicode=True)
    client = HashClient([f"127.0.0.1:{s.port}" for s in servers], allow_unicode_keys=True)
    # With replies: HashClient's default noreply sets are not yet stored when it returns, and
    # the checking gets, on other connections, can overtake a batch's tail.
    assert not client.set_many({k: b"1" for k in keys}, noreply=False)
    client.quit()
    # pymemcache ignores weights: give them anyway, the placement must not change.
    assert_same("pymemcache HashClient", "pymemcache", specs, servers, [k.encode() for k in keys])


@pytest.fixture(params=["addresses", "named"])
def nutcracker(request, pool, tmp_path):
    """nutcracker over the pool, its servers given as `host:port:weight` or, named, as
    `host:port:weight name` (twemproxy then names ketama points by the name)."""
    servers, specs = pool
    if request.param == "named":
        specs = [f"{spec} cache-{i}" for i, spec in enumerate(specs)]
    listen = free_port()
    conf = tmp_path / "nutcracker.yml"
    conf.write_text(
        "shoal:\n"
        f"  listen: 127.0.0.1:{listen}\n"
        "  hash: md5\n"
        "  distribution: ketama\n"
        "  auto_eject_hosts: false\n"
        "  servers:\n" + "".join(f"    - {spec}\n" for spec in specs)
    )
    proxy = subprocess.Popen([NUTCRACKER, "-c", str(conf), "-s", str(free_port()), "-a", "127.0.0.1",
                              "-o", str(tmp_path / "nutcracker.log"), "-p", str(tmp_path / "pid")],
                             stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proxy.poll() is None, f"nutcracker exited: {(tmp_path / 'nutcracker.log').read_text()}"
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "nutcracker did not listen within 10 s"
                time.sleep(0.05)
        yield listen, specs
    finally:
        proxy.kill()
        proxy.wait()


def test_twemproxy(pool, nutcracker):
    servers, _ = pool
    nutcracker, specs = nutcracker
    keys = [as_bytes(k) for k in make_keys(f"twemproxy-{len(specs[0].split())}:", KEYS)]
    with socket.create_connection(("127.0.0.1", nutcracker), timeout=10) as sock:
        for i in range(0, len(keys), 200):
            batch = keys[i:i + 200]
            payload = b"".join(b"set " + k + b" 0 0 1\r\n1\r\n" for k in batch)
            data = b""
            sock.sendall(payload)
            while data.count(b"\r\n") < len(batch):
                chunk = sock.recv(1 << 16)
                assert chunk, "nutcracker closed the connection"
                data += chunk
            assert data == b"STORED\r\n" * len(batch), data[:200]
    assert_same("nutcracker (hash: md5, distribution: ketama)", "ketama_weighted", specs, servers, keys)


@pytest.mark.parametrize("hashing,servers,keys,names", [
    ("crc32", ["127.0.0.1:1"], ["k"], ['"crc32"']),
    ("ketama_weighted", ["127.0.0.1:1", "nonsense"], ["k"], ['"nonsense"']),
    ("ketama_weighted", ["127.0.0.1:1:1.5", "127.0.0.1:2"], ["k"], ['"127.0.0.1:1"', "1.5"]),
    ("ketama", ["127.0.0.1:1:2", "127.0.0.1:2"], ["k"], ['"127.0.0.1:1"', "weight 2"]),
    ("pymemcache", ["127.0.0.1:1 cache-a", "127.0.0.1:2"], ["k"], ['"127.0.0.1:1"', "name"]),
    ("weighted_ch3", ["127.0.0.1:1:3", "127.0.0.1:2"], ["k"], ['"127.0.0.1:1"', "(0, 1]"]),
    ("ch3", ["127.0.0.1:1", "127.0.0.1:1"], ["k"], ['"127.0.0.1:1"', "twice"]),
    ("ch3", ["127.0.0.1:1"], ["a b"], ['"a b"']),
])
def test_cli_refuses_bad_input_naming_it(hashing, servers, keys, names):
    argv = [str(SHOAL), "route", "owner", "--hashing", hashing]
    for spec in servers:
        argv += ["--server", spec]
    out = subprocess.run(argv + keys, capture_output=True, text=True)
    assert out.returncode != 0 and not out.stdout, out
    for name in names:
        assert name in out.stderr, out.stderr


def test_cli_json_and_arguments():
    argv = [str(SHOAL), "route", "owner", "--hashing", "ch3", "--server", "h:1", "--server", "h:2"]
    lines = subprocess.run(argv + ["a", "b", "c"], capture_output=True, text=True, check=True).stdout
    js = subprocess.run(argv + ["--json"], input="a\nb\r\nc\n", capture_output=True, text=True, check=True)
    assert json.loads(js.stdout) == lines.split()
    assert set(lines.split()) <= {"h:1", "h:2"} and len(lines.split()) == 3
