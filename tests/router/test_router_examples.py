"""The example configurations in examples/router/: every one loads (`shoal router --validate`);
the twemproxy one, served through a real router, finds every key where a real twemproxy
(Debian's nutcracker, `hash: md5`, `distribution: ketama`) stored it, while the router's default
placement (mcrouter's Ch3) misses about two in three; the Gutter one, with a main server down,
stores that server's keys in the gutter with the clamped expiry. Addresses in the examples are
replaced by servers started on free ports."""

import re
import socket
import subprocess
import time

from pymemcache.client.base import Client as PymemcacheClient

from harness import ROOT, SHOAL, Server, free_port, router

EXAMPLES = ROOT / "examples" / "router"
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
KEYS = [f"key:{i}" for i in range(3500)]


def example_addresses(text):
    """The example's server addresses, in order of first appearance."""
    return list(dict.fromkeys(m.group(0) for m in ADDRESS.finditer(text)))


def moved_to(text, servers):
    """The example's text with its addresses replaced by `servers`' (in order)."""
    mapping = dict(zip(example_addresses(text), (f"127.0.0.1:{s.port}" for s in servers)))
    return ADDRESS.sub(lambda m: mapping[m.group(0)], text)


def test_the_examples_are_there_and_each_loads():
    names = sorted(p.name for p in EXAMPLES.glob("*.json"))
    assert {"twemproxy.json", "gutter.json", "regional.json", "proteus.json"} <= set(names), names
    for name in names:
        run = subprocess.run([str(SHOAL), "router", "--validate", str(EXAMPLES / name)],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode == 0 and ": ok (" in run.stdout, (name, run.stdout, run.stderr)


def owners(hashing, servers, keys):
    argv = [str(SHOAL), "route", "owner", "--hashing", hashing]
    for address in servers:
        argv += ["--server", address]
    run = subprocess.run(argv, input="\n".join(keys) + "\n", capture_output=True, text=True, check=True)
    return run.stdout.split()


def test_the_twemproxy_examples_count_of_keys_placed_elsewhere_by_default_is_what_shoal_route_says():
    text = (EXAMPLES / "twemproxy.json").read_text()
    said = re.search(r"\((\d) (\d{3}) of keys key:0 … key:3499", text)
    assert said, "the example says how many keys move"
    servers = example_addresses(text)
    moved = sum(a != b for a, b in zip(owners("ch3", servers, KEYS), owners("ketama_weighted", servers, KEYS)))
    assert moved == int(said.group(1) + said.group(2)), moved


def hits(port, keys):
    client = PymemcacheClient(("127.0.0.1", port), timeout=10)
    try:
        found = 0
        for i in range(0, len(keys), 100):
            found += len(client.get_many(keys[i:i + 100]))
        return found
    finally:
        client.close()


def test_the_twemproxy_example_serves_every_key_nutcracker_stored(tmp_path):
    text = (EXAMPLES / "twemproxy.json").read_text()
    servers = [Server.memcached() for _ in example_addresses(text)]
    started = []
    try:
        for s in servers:
            started.append(s.start())
        listen = free_port()
        (tmp_path / "nutcracker.yml").write_text(
            "cache:\n"
            f"  listen: 127.0.0.1:{listen}\n"
            "  hash: md5\n"
            "  distribution: ketama\n"
            "  auto_eject_hosts: false\n"
            "  servers:\n" + "".join(f"    - 127.0.0.1:{s.port}:1\n" for s in servers))
        nutcracker = subprocess.Popen(["nutcracker", "-c", str(tmp_path / "nutcracker.yml"), "-s", str(free_port()),
                                       "-a", "127.0.0.1", "-o", str(tmp_path / "nutcracker.log"),
                                       "-p", str(tmp_path / "pid")], stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                assert nutcracker.poll() is None, (tmp_path / "nutcracker.log").read_text()
                try:
                    socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "nutcracker did not listen within 10 s"
                    time.sleep(0.05)
            client = PymemcacheClient(("127.0.0.1", listen), timeout=10)
            for key in KEYS:
                assert client.set(key, b"v", noreply=False)
            client.close()
        finally:
            nutcracker.kill()
            nutcracker.wait()
        config = tmp_path / "twemproxy.json"
        config.write_text(moved_to(text, servers))
        with router(config, tmp_path) as (port, _):
            assert hits(port, KEYS) == len(KEYS), "every key found where nutcracker put it"
        # The same file without "hash": mcrouter's Ch3 places most keys elsewhere.
        default = tmp_path / "default"
        default.mkdir()
        without_hash = moved_to(text, servers).replace(', "hash": "ketama_weighted"', "")
        assert without_hash != moved_to(text, servers)
        (default / "config.json").write_text(without_hash)
        with router(default / "config.json", default) as (port, _):
            missed = len(KEYS) - hits(port, KEYS)
        assert len(KEYS) // 2 < missed < len(KEYS) * 4 // 5, missed
    finally:
        for s in started:
            s.stop()


def remaining_ttl(server, key):
    """The seconds `key` has left on `server` (-1: no expiry), or None if it is not there."""
    with server.connect() as sock:
        sock.sendall(f"mg {key} t\r\n".encode())
        answer = b""
        while not answer.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            assert chunk
            answer += chunk
    words = answer.decode().split()
    return int(words[1][1:]) if words[0] == "HD" else None


def test_the_gutter_example_takes_a_dead_servers_keys_for_ten_seconds_at_most(tmp_path):
    text = (EXAMPLES / "gutter.json").read_text()
    servers = [Server.memcached() for _ in example_addresses(text)]
    started = []
    try:
        for s in servers:
            started.append(s.start())
        main, gutter = servers[:3], servers[3]
        config = tmp_path / "gutter.json"
        config.write_text(moved_to(text, servers))
        with router(config, tmp_path) as (port, _):
            main[0].stop()  # its keys now fail over to the gutter
            keys = [f"user:{i}" for i in range(60)]
            client = PymemcacheClient(("127.0.0.1", port), timeout=10)
            for key in keys:
                assert client.set(key, b"v", expire=0, noreply=False), key
            assert len(client.get_many(keys)) == len(keys), "every key is served, the dead server's from the gutter"
            client.close()
            on_gutter = {k: remaining_ttl(gutter, k) for k in keys}
            on_gutter = {k: ttl for k, ttl in on_gutter.items() if ttl is not None}
            assert on_gutter, "the dead server's keys are in the gutter"
            assert all(0 < ttl <= 10 for ttl in on_gutter.values()), on_gutter
            elsewhere = [k for k in keys if k not in on_gutter]
            assert elsewhere and all(any(remaining_ttl(s, k) == -1 for s in main[1:]) for k in elsewhere)
    finally:
        for s in started:
            s.stop()
