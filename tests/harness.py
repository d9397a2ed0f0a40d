"""Starting and stopping real servers on loopback for the Python test suites.

Both kinds speak memcached's protocol: `memcached` (Debian's binary) and `shoal server` (the
release build in target/release). Each is started on a free TCP port with UDP off, waited for
until it accepts connections, and killed when the `with` block ends.

    with Server.shoal("--test-mode") as s:      # or Server.memcached()
        sock = s.connect()
"""

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOAL = Path(os.environ.get("SHOAL_BIN", ROOT / "target" / "release" / "shoal"))
MEMCACHED = os.environ.get("MEMCACHED_BIN", "memcached")


def wait_for(what, ready, seconds=60.0, poll=0.02):
    """Polls `ready` until it returns something true and returns that; fails the test naming
    `what` after `seconds` (generous: a loaded machine is slow, never wrong)."""
    deadline = time.monotonic() + seconds
    while True:
        value = ready()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {seconds} s waiting for {what}"
        time.sleep(poll)


def eventually(check, seconds=60.0):
    """`wait_for`, named by the check's own name."""
    return wait_for(getattr(check, "__name__", "a condition"), check, seconds)


def free_port() -> int:
    """A TCP port nothing listens on right now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_until(sock, *ends: bytes) -> bytes:
    """Reads until what arrived ends with one of `ends` (default a line end); a connection the
    peer closes first fails the test rather than spinning on empty reads."""
    ends = ends or (b"\r\n",)
    data = b""
    while not data.endswith(ends):
        chunk = sock.recv(1 << 20)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return data


def talk(sock, request: bytes, until: bytes = b"\r\n") -> bytes:
    """Sends `request` and reads until the answer ends with `until`."""
    sock.sendall(request)
    return read_until(sock, until)


def _stopped(task: Path) -> bool:
    """Whether the thread behind /proc/<pid>/task/<tid> is stopped (state T or t)."""
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:
        return True  # it ended
    # The state follows the parenthesised name, which may itself hold ") ".
    return stat.rsplit(") ", 1)[1][:1] in ("T", "t")


def _listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a TCP socket listening on `port` (any address): the answer
    to a connection on that port is its, not another process's that took the port first."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


class _ExitedAtStart(RuntimeError):
    """The server process ended before it accepted a connection."""


class Server:
    """A server process listening on 127.0.0.1:`port`."""

    def __init__(self, argv, port, kind, stderr=None, env=None, port_chosen_here=False):
        self.argv, self.port, self.kind = argv, port, kind
        # A port free_port() chose may be taken by another process (an outgoing connection's
        # ephemeral port, say) before the server binds it: start() then tries another.
        self.port_chosen_here = port_chosen_here
        self.env = env  # extra environment variables for the server process
        self.stderr = stderr  # a path that receives the server's stderr, or None to inherit it
        self.proc = None

    @classmethod
    def shoal(cls, *extra, port=None, memory_mb=64, stderr=None, env=None):
        chosen, port = port is None, port or free_port()
        udp = [] if "-U" in extra else ["-U", "0"]
        argv = [str(SHOAL), "server", "-p", str(port), *udp, "-l", "127.0.0.1",
                "-m", str(memory_mb), *extra]
        return cls(argv, port, "shoal", stderr, env, port_chosen_here=chosen)

    @classmethod
    def memcached(cls, *extra, port=None, memory_mb=64, env=None):
        chosen, port = port is None, port or free_port()
        udp = [] if "-U" in extra else ["-U", "0"]
        argv = [MEMCACHED, "-p", str(port), *udp, "-l", "127.0.0.1", "-m", str(memory_mb),
                *extra]
        if os.geteuid() == 0:
            argv += ["-u", "root"]
        return cls(argv, port, "memcached", env=env, port_chosen_here=chosen)

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    def start(self, timeout=60.0):
        for _ in range(4):
            try:
                return self._start_once(timeout)
            except _ExitedAtStart:
                if not self.port_chosen_here:
                    break
                # Most likely the port was taken meanwhile: another one (the `-p` argument).
                self.port = free_port()
                self.argv[self.argv.index("-p") + 1] = str(self.port)
        return self._start_once(timeout)

    def _start_once(self, timeout):
        env = {**os.environ, **self.env} if self.env else None
        if self.stderr is None:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, env=env)
        else:
            with open(self.stderr, "wb") as log:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stderr=log, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise _ExitedAtStart(f"{self.argv} exited with {self.proc.returncode}")
            try:
                socket.create_connection(self.address, timeout=0.5).close()
                # A server started here on a port chosen here must hold the port itself: else
                # another process answers on it, and ours is still binding or will fail to.
                if not self.port_chosen_here or _listens(self.proc.pid, self.port):
                    return self
                time.sleep(0.02)
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"{self.argv} did not accept connections within {timeout}s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def pause(self, timeout=30.0):
        """Freezes the server (SIGSTOP) and waits until every thread of it has stopped: the
        signal reaches one thread first, and the others may answer a request meanwhile."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = time.monotonic() + timeout
        while not all(_stopped(task) for task in tasks.iterdir()):
            assert time.monotonic() < deadline, f"{self.argv} did not stop within {timeout}s"
            time.sleep(0.001)

    def resume(self):
        """Lets a paused server run again (SIGCONT)."""
        os.kill(self.proc.pid, signal.SIGCONT)

    def connect(self, timeout=30.0) -> socket.socket:
        return socket.create_connection(self.address, timeout=timeout)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class Postgres:
    """Debian's PostgreSQL in a scratch directory on a free loopback port (wal_level=logical,
    fsync off), run as the `postgres` user when we are root, stopped and removed on exit.

        with Postgres() as pg:
            psycopg.connect(pg.conninfo)
    """

    def __init__(self, *settings):
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not versions:
            raise RuntimeError("PostgreSQL is missing: scripts/test.sh installs Debian's postgresql")
        self.bin = versions[-1]
        self.settings = ["wal_level=logical", "fsync=off", "max_replication_slots=8", *settings]
        self.port = free_port()
        self.dir = None

    @property
    def conninfo(self):
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def _run(self, program, *args):
        argv = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ctl(self, action):
        options = " ".join(f"-c {s}" for s in self.settings)
        options += f" -h 127.0.0.1 -p {self.port} -k {self.dir}"
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-o", options,
                  "-m", "fast", "-w", action)

    def __enter__(self):
        if self.dir is not None:  # a replica, started by replica()
            return self
        self._scratch()
        self._run("initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres")
        self.ctl("start")
        return self

    def _scratch(self):
        import tempfile
        self.dir = tempfile.mkdtemp(prefix="shoal-pg-")
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres", self.dir], check=True)

    def replica(self, delay_ms=0):
        """A started streaming replica of this server that applies commits `delay_ms` late
        (use it in a `with` block of its own: it is stopped on exit)."""
        replica = Postgres(*self.settings, f"recovery_min_apply_delay={delay_ms}ms")
        replica._scratch()
        replica._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                     "-D", f"{replica.dir}/data", "-R", "-X", "stream")
        replica.ctl("start")
        return replica

    def __exit__(self, *exc):
        import shutil
        if self.dir is None:
            return
        try:
            self._run("pg_ctl", "-D", f"{self.dir}/data", "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def router(config_path, directory, *extra):
    """A `shoal router -f config_path [extra...]` on a free port, its standard error kept in a file (for
    tests of what it says), killed when the `with` block ends; yields (port, path of that file)."""
    port, stderr = free_port(), directory / "router.stderr"
    with open(stderr, "wb") as log:
        process = subprocess.Popen([str(SHOAL), "router", "-f", str(config_path), "-p", str(port), "-l", "127.0.0.1",
                                    "-t", "1", "--reload-settle-ms", "50", "--spool-dir", str(directory / "spool"), *extra],
                                   stdin=subprocess.DEVNULL, stderr=log)
    try:
        def listening():
            assert process.poll() is None, stderr.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False
        eventually(listening)
        yield port, stderr
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def hot_key_servers(count=3):
    """`count` shoal servers whose hot-key detection counts every read, so that a few hundred
    reads make a key hot (issue #28's tests); stopped when the `with` block ends."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(Server.shoal("-o", "hotkeys_sample=1")) for _ in range(count)]


def addresses(servers):
    """`host:port` of each server, as pool clients and router configs list them."""
    return [f"127.0.0.1:{s.port}" for s in servers]
