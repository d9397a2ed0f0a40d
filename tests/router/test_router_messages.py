"""What `shoal router` says: its --help shows -f as required and a missing -f is refused naming
the fix; it prints a startup line (time, listen address, config path, pools and servers), logs
reloads with RFC 3339 times, pluralises ("1 server"); and a pool that follows a provisioning
state file (`"provisioning"`) is reloaded when that file changes, the config file untouched."""

import re
import subprocess

from pymemcache.client.base import Client as PymemcacheClient

from harness import SHOAL, Server, eventually, router

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def test_help_shows_the_config_file_as_required_and_its_absence_names_the_fix():
    run = subprocess.run([str(SHOAL), "router", "--help"], capture_output=True, text=True, check=True)
    usage, options = run.stdout.split("Options:", 1)[0], run.stdout.split("Options:", 1)[1].split("Required:")[0]
    assert "Usage: shoal router -f <FILE> [OPTIONS]" in usage, run.stdout
    assert "--config-file" not in options, "-f is not listed among the optional options"
    assert re.search(r"Required:\n\s+-f, --config-file <FILE>", run.stdout), run.stdout
    missing = subprocess.run([str(SHOAL), "router", "-p", "0"], capture_output=True, text=True)
    assert missing.returncode == 1, missing
    assert "needs its configuration: -f FILE" in missing.stderr and "--validate FILE" in missing.stderr, missing.stderr
    assert "panicked" not in missing.stderr


def test_startup_and_reload_lines_say_where_what_and_when(tmp_path):
    with Server.shoal() as one, Server.shoal() as two, Server.shoal() as three:
        a, b, c = (f"127.0.0.1:{s.port}" for s in (one, two, three))
        config = tmp_path / "router.json"
        text = (f'{{ "pools": {{ "solo": {{ "servers": ["{a}"] }}, "pair": {{ "servers": ["{b}", "{c}"] }} }},'
                f' "route": "PoolRoute|pair" }}')
        config.write_text(text)
        with router(config, tmp_path) as (port, stderr):
            eventually(lambda: "listening" in stderr.read_text())
            start = stderr.read_text().splitlines()[0]
            assert re.fullmatch(
                rf"shoal router: {TIME} listening on 127\.0\.0\.1:{port}; config {re.escape(str(config))}: "
                rf"pool pair: 2 servers \({b}, {c}\); pool solo: 1 server \({a}\)", start), start
            config.write_text(text.replace("PoolRoute|pair", "PoolRoute|solo"))
            eventually(lambda: " loaded " in stderr.read_text())
            config.write_text("{ not json")
            eventually(lambda: "still serving" in stderr.read_text())
            log = stderr.read_text()
            assert re.search(rf"^shoal router: {TIME} loaded {re.escape(str(config))}: pool pair", log, re.M), log
            assert re.search(rf"^shoal router: {TIME} .*not JSON.*still serving the last good", log, re.M), log
            assert "SystemTime" not in log and "1 servers" not in log, log


def test_a_pool_follows_its_state_file_and_is_cut_to_the_servers_on(tmp_path):
    with Server.shoal() as one, Server.shoal() as two:
        servers = [f"127.0.0.1:{s.port}" for s in (one, two)]
        listed = ", ".join(f'"{s}"' for s in servers)
        config = tmp_path / "router.json"
        text = (f'// jump placement, cut to the servers on\n{{ "route": {{ "type": "PoolRoute", "pool": "A", "hash": "jump" }},'
                f' "pools": {{ "A": {{ "servers": [{listed}], "provisioning": "state/A.json" }} }} }}\n')
        config.write_text(text)
        state = tmp_path / "state" / "A.json"
        state.parent.mkdir()
        state.write_text(f'{{ "servers": [{listed}], "active": 1, "transition": null }}')
        with router(config, tmp_path) as (port, stderr):
            client = PymemcacheClient(("127.0.0.1", port), timeout=10)
            keys = [f"k{i}" for i in range(40)]
            for key in keys:
                assert client.set(key, b"v", noreply=False)
            direct = [PymemcacheClient(s.address, timeout=10) for s in (one, two)]
            assert len(direct[0].get_many(keys)) == len(keys), "one server on: it has every key"
            assert direct[1].get_many(keys) == {}
            # The provisioner writes the state file (whole, renamed); the router follows it.
            (tmp_path / "state" / "A.json.new").write_text(f'{{ "servers": [{listed}], "active": 2 }}')
            (tmp_path / "state" / "A.json.new").rename(state)
            eventually(lambda: re.search(r" loaded .*, 2 on$", stderr.read_text(), re.M))
            for key in keys:
                assert client.set(key, b"w", noreply=False)
            assert 0 < len(direct[1].get_many(keys)) < len(keys), "both servers on: the keys spread"
            # A state file for other servers is refused; the last good configuration serves on.
            state.write_text(f'{{ "servers": ["{servers[1]}"], "active": 1 }}')
            eventually(lambda: "is the state of the servers" in stderr.read_text())
            assert client.get("k1") == b"w"
            for c in [client, *direct]:
                c.close()
        assert config.read_text() == text
