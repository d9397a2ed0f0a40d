"""memcached's observability commands on shoal, side by side with Debian's memcached 1.6.18 in
its default configuration (LRU crawler on): `lru_crawler metadump` (and the crawler's other
subcommands), `watch`, and the connection states of `stats conns`.

Fields that legitimately differ are set aside and listed in docs/PROTOCOL.md: metadump's `cas`
(numbered differently), `cls` and `size` (slab classes and memcached's item header), and the
line order (memcached walks its LRUs, shoal its index); watch's `ts`, `gid` and `cfd`.

    python3 -m pytest -q tests/differential/test_observability.py
"""

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import Server, eventually, read_until, wait_for  # noqa: E402
from harness import talk as ask  # noqa: E402

MEMCACHED_TOOL = Path("/usr/share/memcached/scripts/memcached-tool")


def both(*extra):
    """Debian's memcached and shoal, each started for one test with the same `extra` flags."""
    return Server.memcached(*extra), Server.shoal("--test-mode", *extra)


ITEMS = [  # key, flags, exptime, value
    (b"plain", 1, 0, b"bar"),
    (b"pct%20and\xffhigh", 0, 100, b"x"),
    (b"comma,colon:slash/", 7, 0, b"hello"),
    (b"big", 0, 0, b"y" * 5000),
]


def metadump(sock, classes=b"all"):
    """The lines of `lru_crawler metadump <classes>` as dicts, and the raw answer."""
    raw = ask(sock, b"lru_crawler metadump %s\r\n" % classes, until=b"END\r\n")
    lines = raw[: -len(b"END\r\n")].split(b"\n")
    assert lines[-1] == b"", "every item line ends with a bare \\n"
    return [dict(f.split(b"=", 1) for f in line.split(b" ")) for line in lines[:-1]], raw


def test_metadump_lists_the_same_items_as_memcached():
    answers = []
    for server in both():
        with server, server.connect() as sock:
            for key, flags, exptime, value in ITEMS:
                request = b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exptime, len(value), value)
                assert ask(sock, request) == b"STORED\r\n"
            ask(sock, b"get plain\r\n", until=b"END\r\n")
            ask(sock, b"set gone 0 0 1\r\nz\r\ndelete gone\r\n", until=b"DELETED\r\n")
            now = int(time.time())
            items, raw = metadump(sock)
            # `hash` walks the hash table instead of the classes: the same items, each once.
            hashed, _ = metadump(sock, b"hash")
            assert sorted(i[b"key"] for i in hashed) == sorted(i[b"key"] for i in items), server.kind
            assert list(items[0]) == [b"key", b"exp", b"la", b"cas", b"fetch", b"cls", b"size"]
            by_key = {}
            for item in items:
                assert abs(int(item[b"la"]) - now) <= 2, item
                exp = int(item[b"exp"])
                by_key[item[b"key"]] = (exp if exp == -1 else exp - now, item[b"fetch"])
                assert int(item[b"cas"]) > 0 and int(item[b"size"]) > 0
            answers.append(by_key)
            # The connection keeps serving after the dump.
            assert ask(sock, b"get plain\r\n", until=b"END\r\n").startswith(b"VALUE plain 1 3")
    memcached, shoal = answers
    assert set(shoal) == set(memcached) == {
        b"plain", b"pct%2520and%FFhigh", b"comma%2Ccolon%3Aslash%2F", b"big"}
    for key, (exp, fetch) in memcached.items():
        shoal_exp, shoal_fetch = shoal[key]
        assert shoal_fetch == fetch, key
        assert (shoal_exp == -1) == (exp == -1) and abs(shoal_exp - exp) <= 1, (key, exp, shoal_exp)


CRAWLER_REQUESTS = [
    b"lru_crawler metadump 2\r\n",
    b"lru_crawler metadump 63\r\n",
    b"lru_crawler metadump 1,,2\r\n",
    b"lru_crawler metadump 0\r\n",
    b"lru_crawler metadump 64\r\n",
    b"lru_crawler metadump x\r\n",
    b"lru_crawler metadump 1,x\r\n",
    b"lru_crawler metadump\r\n",
    b"lru_crawler metadump all noreply\r\n",
    b"lru_crawler metadump hash foo\r\n",
    b"lru_crawler metadump hash\r\n",
    b"lru_crawler crawl hash\r\n",
    b"version\r\nlru_crawler metadump all\r\n",
    b"lru_crawler crawl\r\n",
    b"lru_crawler crawl x\r\n",
    b"lru_crawler crawl 64\r\n",
    b"lru_crawler enable\r\n",
    b"lru_crawler tocrawl 5\r\n",
    b"lru_crawler tocrawl -1\r\n",
    b"lru_crawler sleep 1000000\r\n",
    b"lru_crawler sleep 1000001\r\n",
    b"lru_crawler sleep x\r\n",
    b"lru_crawler\r\n",
    b"lru_crawler foo\r\n",
    b"lru_crawler disable\r\n",
    b"lru_crawler metadump all\r\n",
    b"lru_crawler crawl 1\r\n",
    b"lru_crawler disable\r\n",
    b"lru_crawler enable\r\n",
    b"lru_crawler crawl 1,2\r\n",
    b"watch bogus\r\n",
    b"version\r\nwatch\r\n",
]


def transcript(server, requests=CRAWLER_REQUESTS):
    """Each crawler request's answer, read up to the `mn` sentinel's `MN` (sent apart: memcached
    leaves bytes that came with a `metadump` unread until more arrive). A request the server
    finds its crawler busy for is asked again: memcached's crawler runs on its own after start,
    for as long as a loaded machine lets it, and no request here is meant to find it busy."""
    with server, server.connect() as sock:
        answers = []
        for request in requests:

            def answered():
                sock.sendall(request)
                time.sleep(0.05)
                answer = ask(sock, b"mn\r\n", until=b"MN\r\n")
                return None if answer.startswith(b"BUSY ") else answer

            answers.append(re.sub(rb"VERSION \S+", b"VERSION", wait_for(f"{request!r} not BUSY", answered)))
        return answers


def test_lru_crawler_answers_every_subcommand_as_memcached_does():
    memcached, shoal = (transcript(s) for s in both())
    for request, expected, got in zip(CRAWLER_REQUESTS, memcached, shoal):
        assert got == expected, request


DISABLED_REQUESTS = [
    b"lru_crawler metadump all\r\n",
    b"lru_crawler metadump x\r\n",
    b"lru_crawler crawl 1\r\n",
    b"lru_crawler disable\r\n",
    b"lru_crawler enable\r\n",
    b"lru_crawler metadump all\r\n",
    b"lru_crawler enable\r\n",
]


def test_no_lru_crawler_starts_with_the_crawler_disabled_as_memcached_does():
    memcached, shoal = (transcript(s, DISABLED_REQUESTS) for s in both("-o", "no_lru_crawler"))
    assert memcached[0] == b"CLIENT_ERROR lru crawler disabled\r\nMN\r\n"
    for request, expected, got in zip(DISABLED_REQUESTS, memcached, shoal):
        assert got == expected, request


def test_memcached_tool_dumps_shoal():
    if not MEMCACHED_TOOL.exists():
        pytest.skip("Debian's memcached package ships memcached-tool")
    with Server.shoal() as server, server.connect() as sock:
        for key, flags, exptime, value in ITEMS:
            request = b"set %s %d %d %d\r\n%s\r\n" % (key, flags, exptime, len(value), value)
            assert ask(sock, request) == b"STORED\r\n"
        address = f"127.0.0.1:{server.port}"
        dump = subprocess.run(["perl", str(MEMCACHED_TOOL), address, "dump"], capture_output=True,
                              timeout=30, check=True).stdout
        keys = subprocess.run(["perl", str(MEMCACHED_TOOL), address, "keys"], capture_output=True,
                              timeout=30, check=True).stdout
    for key, flags, exptime, value in ITEMS:
        if b"%" in key:
            continue  # memcached-tool decodes %25 into a `get` that cannot name the key
        header = re.search(rb"add %s %d (\d+) %d\r\n" % (re.escape(key), flags, len(value)), dump)
        assert header, (key, dump[:300])
        assert (int(header.group(1)) == 0) == (exptime == 0)
        assert dump[header.end(): header.end() + len(value)] == value
    assert keys.count(b"key=") == len(ITEMS)


def watch_lines(server, kinds, requests, setup=(), expected=7):
    """The lines a watcher of `kinds` received while another connection sent `requests`
    (after `setup`, sent before the watcher started): read until `expected` lines came (a
    loaded machine may take long: memcached's logger thread and shoal's workers send every few
    ms when they run), then any that follow within a short quiet time."""
    with server, server.connect() as watcher, server.connect() as client:
        for request, until in setup:
            ask(client, request, until=until)
        assert ask(watcher, b"watch %s\r\n" % kinds) == b"OK\r\n"
        for request, until in requests:
            ask(client, request, until=until)
        data = b""
        deadline = time.monotonic() + 60
        watcher.settimeout(60)
        while data.count(b"\n") < expected and time.monotonic() < deadline:
            chunk = watcher.recv(65536)
            if not chunk:
                break
            data += chunk
        watcher.settimeout(0.3)
        try:
            while chunk := watcher.recv(65536):
                data += chunk
        except socket.timeout:
            pass
    lines = [dict(f.split(b"=", 1) for f in line.split(b" ")) for line in data.split(b"\n") if line]
    for line in lines:
        assert re.fullmatch(rb"\d+\.\d+", line[b"ts"]) and line[b"gid"].isdigit(), line
    return lines


def test_watch_fetchers_logs_reads_in_memcached_lines():
    # Every store logs the lookup it makes first (tests/server/test_watch.py): the items are
    # stored before the watcher starts, so only the reads show here.
    setup = [(b"set k 3 0 2\r\nhi\r\n", b"STORED\r\n"), (b"set odd%20key\xff 0 0 1\r\nx\r\n", b"STORED\r\n")]
    requests = [(b"get k nokey k\r\n", b"END\r\n"), (b"gets k\r\n", b"END\r\n"),
                (b"mg nokey v\r\n", b"EN\r\n"), (b"gat 100 k\r\n", b"END\r\n"),
                (b"get odd%20key\xff\r\n", b"END\r\n")]
    memcached, shoal = (watch_lines(s, b"fetchers", requests, setup) for s in both())
    fields = [b"ts", b"gid", b"type", b"key", b"status", b"clsid", b"cfd", b"size"]
    assert len(shoal) == 7 and [list(line) for line in shoal] == [fields] * len(shoal)
    shape = [(m[b"type"], m[b"key"], m[b"status"], m[b"clsid"], m[b"size"]) for m in memcached]
    assert [(s[b"type"], s[b"key"], s[b"status"], s[b"clsid"], s[b"size"]) for s in shoal] == shape


def test_watch_mutations_logs_stores_in_memcached_lines():
    requests = [(b"set k 3 100 2\r\nhi\r\n", b"STORED\r\n"), (b"add k 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
                (b"replace nk 0 0 1\r\nx\r\n", b"NOT_STORED\r\n"),
                (b"cas k 0 0 1 999999\r\nx\r\n", b"EXISTS\r\n"),
                (b"cas nk 0 0 1 1\r\nx\r\n", b"NOT_FOUND\r\n"), (b"ms m 2 T50\r\nhi\r\n", b"HD\r\n"),
                (b"set odd,key 0 0 3\r\nabc\r\n", b"STORED\r\n"), (b"incr nk 1\r\n", b"NOT_FOUND\r\n")]
    memcached, shoal = (watch_lines(s, b"mutations", requests) for s in both())
    fields = [b"ts", b"gid", b"type", b"key", b"status", b"cmd", b"ttl", b"clsid", b"cfd", b"size"]
    assert len(shoal) == 7 and [list(line) for line in shoal] == [fields] * len(shoal)
    keep = (b"type", b"key", b"status", b"cmd", b"ttl", b"clsid", b"size")
    assert [[s[f] for f in keep] for s in shoal] == [[m[f] for f in keep] for m in memcached]


def evictions(server):
    """The eviction lines a watcher sees while a small server is filled twice over."""
    with server, server.connect() as watcher, server.connect() as client:
        assert ask(watcher, b"watch evictions\r\n") == b"OK\r\n"
        value = b"v" * 1000
        for i in range(0, 20_000, 100):
            batch = b"".join(b"set key-%d 0 0 %d noreply\r\n%s\r\n" % (i + j, len(value), value)
                             for j in range(100))
            ask(client, batch + b"mn\r\n", until=b"MN\r\n")
        watcher.settimeout(1)
        data = b""
        while data.count(b"\n") < 10:
            chunk = watcher.recv(65536)
            assert chunk, f"the watcher was closed after {data!r}"
            data += chunk
    return [dict(f.split(b"=", 1) for f in line.split(b" ")) for line in data.split(b"\n")[:10]]


def test_watch_evictions_logs_evicted_items_in_memcached_lines():
    memcached, shoal = (evictions(s) for s in (Server.memcached(memory_mb=8),
                                                Server.shoal(memory_mb=8)))
    fields = [b"ts", b"gid", b"type", b"key", b"fetch", b"ttl", b"la", b"clsid", b"size"]
    assert [list(line) for line in memcached] == [list(line) for line in shoal] == [fields] * 10
    for line in memcached + shoal:
        assert line[b"type"] == b"eviction" and line[b"key"].startswith(b"key-"), line
        assert (line[b"fetch"], line[b"ttl"], line[b"size"]) == (b"no", b"-1", b"1000"), line
        assert int(line[b"la"]) <= 5


def test_a_watcher_that_does_not_read_loses_lines_not_the_server():
    with Server.shoal() as server, server.connect() as client:
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(server.address)
        assert ask(slow, b"watch fetchers\r\n") == b"OK\r\n"
        keys = b" ".join(b"key-%d" % i for i in range(100))
        for _ in range(400):  # 40 000 lines, several MiB: far past the watcher's queue
            ask(client, b"get " + keys + b"\r\n", until=b"END\r\n")
        stats = ask(client, b"stats\r\n", until=b"END\r\n")
        skipped = int(re.search(rb"STAT log_watcher_skipped (\d+)", stats).group(1))
        sent = int(re.search(rb"STAT log_watcher_sent (\d+)", stats).group(1))
        assert skipped > 0 and sent + skipped == 40_000
        assert b"STAT log_watchers 1\r\n" in stats
        slow.settimeout(60)
        data = b""
        while b"skipped=" not in data:
            chunk = slow.recv(1 << 20)
            assert chunk
            data += chunk
        assert re.search(rb"\nskipped=\d+\nts=", data)
        slow.close()

        def the_watcher_is_gone():
            return b"STAT log_watchers 0\r\n" in ask(client, b"stats\r\n", until=b"END\r\n")

        eventually(the_watcher_is_gone)


def conn_states(server):
    """`stats conns` states of the listener and of connections that are new, idle, half-way
    through a value, watching, and asking, by role."""
    with server:
        roles = {"fresh": server.connect()}
        time.sleep(0.1)
        roles["idle"] = server.connect()
        ask(roles["idle"], b"version\r\n")
        roles["partial"] = server.connect()
        roles["partial"].sendall(b"set a 0 0 10\r\nabc")
        roles["watcher"] = server.connect()
        ask(roles["watcher"], b"watch\r\n")
        roles["asking"] = server.connect()
        time.sleep(0.2)
        answer = ask(roles["asking"], b"stats conns\r\n", until=b"END\r\n").decode()
        ports = {sock.getsockname()[1]: role for role, sock in roles.items()}
        for sock in roles.values():
            sock.close()
    fields = dict(re.findall(r"STAT (\d+:\w+) (\S+)", answer))
    states = {}
    for name, value in fields.items():
        fd, field = name.split(":")
        if field == "addr":
            port = int(value.rsplit(":", 1)[1])
            role = "listener" if port == server.port else ports[port]
            states[role] = fields[f"{fd}:state"]
    return states


def test_stats_conns_shows_the_states_memcached_shows():
    memcached, shoal = (conn_states(s) for s in both())
    assert memcached == {"listener": "conn_listening", "fresh": "conn_new_cmd", "idle": "conn_read",
                         "partial": "conn_nread", "watcher": "conn_watch", "asking": "conn_parse_cmd"}
    assert shoal == memcached


def test_metadump_of_a_tenants_connection_lists_its_own_keys(tmp_path):
    from harness import free_port
    port, main_port = free_port(), free_port()
    while main_port == port:
        main_port = free_port()
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "app"\nlisten = ["{port}"]\nprefixes = ["app:"]\nsize_mb = 16\n')
    with Server.shoal("--tenants", str(tenants), port=main_port) as server, server.connect() as main, \
            socket.create_connection(("127.0.0.1", port), timeout=5) as own:
        for key in (b"app:1", b"app:2", b"plain"):
            assert ask(main, b"set %s 0 0 1\r\nv\r\n" % key) == b"STORED\r\n"
        everyone, _ = metadump(main)
        assert sorted(item[b"key"] for item in everyone) == [b"app%3A1", b"app%3A2", b"plain"]
        own_items, _ = metadump(own)
        assert sorted(item[b"key"] for item in own_items) == [b"app%3A1", b"app%3A2"]


def test_a_large_metadump_streams_every_key_once_between_other_connections_requests():
    with Server.shoal("-t", "1", "-R", "4") as server, server.connect() as sock, server.connect() as other:
        count = 30_000
        for start in range(0, count, 1000):
            batch = b"".join(b"set key-%d 0 0 1 noreply\r\nv\r\n" % i for i in range(start, start + 1000))
            ask(sock, batch + b"mn\r\n", until=b"MN\r\n")
        sock.sendall(b"lru_crawler metadump all\r\n")
        # The dump goes a slice at a time: the same worker still answers another connection.
        assert ask(other, b"version\r\n").startswith(b"VERSION")
        data = read_until(sock, b"END\r\n")
        keys = [line.split(b" ", 1)[0] for line in data[:-5].split(b"\n") if line]
        assert len(keys) == len(set(keys)) == count
