"""The Debian package, the systemd unit and the config file, against the real tools: the unit is
checked by `systemd-analyze verify` (systemd is not PID 1 here: verify is what can run), the
package is built by cargo-deb, installed with `dpkg -i`, its installed program started once with
the installed unit's command line and config, and purged, leaving the machine as it was.

Needs root (dpkg) and cargo-deb (`cargo install cargo-deb --locked`); scripts/test.sh installs it.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import ROOT, SHOAL, free_port, talk

UNIT = ROOT / "packaging" / "shoal.service"
INSTALLED_UNIT = Path("/usr/lib/systemd/system/shoal.service")
INSTALLED_FILES = [Path("/usr/bin/shoal"), INSTALLED_UNIT, Path("/etc/shoal/shoal.conf"),
                   Path("/usr/share/doc/shoal/packaging.md")]
# Where dpkg's maintainer scripts leave traces of an enabled unit.
SYSTEMD_STATE = [Path("/etc/systemd/system"), Path("/var/lib/systemd/deb-systemd-helper-enabled"),
                 Path("/var/lib/systemd/deb-systemd-helper-masked")]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="dpkg -i needs root (CI runs as root)")


def run(*argv, check=True, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=check, **kwargs)


def verify(unit_argv, root=None):
    """`systemd-analyze verify`, in a scratch root if one is given: (exit status, messages)."""
    argv = ["systemd-analyze", "verify", *([f"--root={root}"] if root else []), *unit_argv]
    done = run(*argv, check=False)
    return done.returncode, (done.stdout + done.stderr).strip()


def scratch_root(tmp_path, with_program=True):
    """A root holding systemd's own units (verify needs the targets the unit depends on), the
    unit, and /usr/bin/shoal unless told otherwise (verify checks ExecStart's program)."""
    root = tmp_path / "root"
    (root / "usr/lib/systemd").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(UNIT, root / "etc/systemd/system/shoal.service")
    if with_program:
        (root / "usr/bin").mkdir(parents=True)
        shutil.copy(SHOAL, root / "usr/bin/shoal")
    return root


def test_the_unit_verifies_cleanly_and_is_hardened(tmp_path):
    status, messages = verify(["shoal.service"], scratch_root(tmp_path))
    assert (status, messages) == (0, ""), messages
    # The same check fails when ExecStart's program is missing: verify does look.
    status, messages = verify(["shoal.service"], scratch_root(tmp_path / "bare", with_program=False))
    assert status != 0 and "/usr/bin/shoal" in messages
    done = run("systemd-analyze", "security", "--offline=true", f"--root={scratch_root(tmp_path / 's')}",
               "shoal.service", check=False)
    level = re.search(r"Overall exposure level for shoal.service: ([0-9.]+)", done.stdout)
    assert level, done.stdout + done.stderr
    assert float(level.group(1)) <= 2.0, f"the unit's exposure rose:\n{done.stdout}"


def syscall_set(group):
    """Every system call `group` allows, its nested groups expanded (systemd-analyze's lists)."""
    groups, current = {}, None
    for line in run("systemd-analyze", "syscall-filter").stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), set())
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.add(line.strip())
    expanded, pending = set(), [group]
    while pending:
        for item in groups[pending.pop()]:
            if item.startswith("@"):
                pending.append(item)
            else:
                expanded.add(item)
    return expanded


def machine_state():
    """What installing and purging the package may touch: the unit's enablement state, and the
    package's files."""
    state = {}
    for top in SYSTEMD_STATE:
        state[top] = sorted(str(p) for p in top.rglob("*")) if top.exists() else None
    for path in INSTALLED_FILES + [Path("/etc/shoal")]:
        state[path] = path.exists()
    return state


@pytest.fixture
def deb(tmp_path):
    """The package, built by cargo-deb from the release binary the test command built."""
    if run("cargo", "deb", "--version", check=False).returncode != 0:
        pytest.fail("cargo-deb is missing: cargo install cargo-deb --locked")
    out = tmp_path / "deb"
    run("cargo", "deb", "-p", "shoal", "--no-build", "--strip", "--fast", "--output", str(out), cwd=ROOT)
    (package,) = out.glob("shoal_*.deb")
    return package


def wait_for_port(proc, port, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the installed server exited with {proc.returncode}: "
                                 f"{proc.stderr.read().decode()}")
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"the installed server did not listen on {port} within {timeout}s")


def test_the_package_installs_starts_once_and_purges(deb, tmp_path):
    if run("dpkg-query", "-W", "-f=${Status}", "shoal", check=False).stdout.startswith("install"):
        pytest.skip("a shoal package is installed on this machine; the test would replace it")
    before = machine_state()
    scratch = None
    try:
        run("dpkg", "-i", str(deb))
        for path in INSTALLED_FILES:
            assert path.exists(), f"dpkg -i installed {path}"
        conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", "shoal").stdout
        assert "/etc/shoal/shoal.conf" in conffiles
        status, messages = verify([str(INSTALLED_UNIT)])
        assert (status, messages) == (0, ""), messages

        # The unit's command line, run once as systemd would: as an unprivileged user, with
        # the installed config. /run/shoal is made by systemd, so the region goes to a scratch
        # directory, and the port to a free one, both on the command line after the config.
        (exec_start,) = [line.split("=", 1)[1] for line in INSTALLED_UNIT.read_text().splitlines()
                         if line.startswith("ExecStart=")]
        argv = shlex.split(exec_start)
        assert argv[:4] == ["/usr/bin/shoal", "server", "--config", "/etc/shoal/shoal.conf"]
        # Outside pytest's tmp_path, whose parents only root may enter.
        scratch = Path(tempfile.mkdtemp(prefix="shoal-deb-run-"))
        os.chown(scratch, 65534, 65534)
        port = free_port()
        trace = tmp_path / "syscalls"
        proc = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", str(trace),
             "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
             *argv, "-p", str(port), "-e", str(scratch / "shoal.region")],
            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            with wait_for_port(proc, port) as sock:
                assert talk(sock, b"version\r\n").startswith(b"VERSION 1.6.18")
                assert talk(sock, b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
                assert talk(sock, b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
                settings = talk(sock, b"stats settings\r\n", b"END\r\n")
                assert b"STAT maxbytes 67108864\r\n" in settings, "-m 64 from the installed config"
            assert (scratch / "shoal.region").exists()
            # Stopped as systemd stops it: SIGTERM to the server (strace's one child; setpriv
            # became it), whose clean exit strace then reports as its own.
            (server_pid,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            os.kill(int(server_pid), signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
            assert proc.returncode == 0, stderr.decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # Every call the server made (setpriv's own before its exec included) is one the unit's
        # SystemCallFilter=@system-service allows.
        made = set(re.findall(r"^\d+ +([a-z0-9_]+)\(", trace.read_text(), re.M))
        assert "epoll_wait" in made or "epoll_pwait" in made, "the trace saw the server"
        assert made - syscall_set("@system-service") == set()
    finally:
        run("dpkg", "--purge", "shoal", check=False)
        if scratch is not None:
            shutil.rmtree(scratch)
    assert machine_state() == before, "dpkg --purge left the machine as it was"
    assert run("dpkg-query", "-W", "shoal", check=False).returncode != 0
