"""`shoal server --config FILE` side by side with Debian's memcached reading the same file
through its own systemd wrapper (/usr/share/memcached/scripts/systemd-memcached-wrapper, which
turns /etc/memcached.conf into memcached's command line): a file both accept configures both
servers alike, and a value memcached refuses gets memcached's message from Shoal too, with
neither server starting."""

import os
import subprocess

import pytest

from harness import SHOAL, Server, free_port, talk

WRAPPER = "/usr/share/memcached/scripts/systemd-memcached-wrapper"

# The wrapper runs only as root, and memcached as root only with -u.
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="Debian's wrapper runs only as root")


def conf(tmp_path, body, port=0, name="memcached.conf"):
    path = tmp_path / name
    path.write_text(f"# written as Debian writes /etc/memcached.conf\n-d\nlogfile /var/log/x.log\n"
                    f"-p {port}\n-U 0\n-l 127.0.0.1\n-u nobody\n{body}")
    return path


def words(text):
    return " ".join(text.split())


@pytest.mark.parametrize("body", [
    "-m 64\n-I 1000\n",
    "-m 64\n-I 40m\n",
    "-B foo\n",
    "-S\n-B ascii\n",
])
def test_values_memcached_refuses_get_its_message_and_nothing_starts(tmp_path, body):
    path = conf(tmp_path, body)
    memcached = subprocess.run([WRAPPER, str(path)], capture_output=True, text=True, timeout=60)
    shoal = subprocess.run([str(SHOAL), "server", "--config", str(path)], capture_output=True,
                           text=True, timeout=60)
    assert memcached.returncode != 0 and memcached.stderr.strip(), memcached
    assert shoal.returncode == 1, shoal
    # memcached breaks one of its messages over two lines; the words are the same.
    assert words(memcached.stderr) in words(shoal.stderr), (memcached.stderr, shoal.stderr)


def test_a_file_both_accept_configures_both_alike(tmp_path):
    settings = []
    for kind, argv, extra in (("memcached", [WRAPPER], ""),
                              ("shoal", [str(SHOAL), "server", "--config"], f"-e {tmp_path}/region\n")):
        # memcached's -e is a file of its own format: only Shoal's copy of the file names one.
        port = free_port()
        path = conf(tmp_path, f"-m 48\n-c 900\n-R 7\n{extra}", port, name=f"{kind}.conf")
        with Server([*argv, str(path)], port, kind) as server, server.connect() as sock:
            answer = talk(sock, b"stats settings\r\n", b"END\r\n").decode()
        stats = dict(line.split()[1:] for line in answer.splitlines() if len(line.split()) == 3)
        assert stats["tcpport"] == str(port)
        settings.append({name: stats[name] for name in ("maxbytes", "maxconns", "reqs_per_event",
                                                         "udpport", "evictions", "item_size_max")})
    assert settings[0] == settings[1]
    assert settings[0]["maxbytes"] == str(48 << 20)
