"""The fault harness over simulated hosts (issue #26 item 4; docs/design/faults.md, "The fault
harness"). Data flow:

    writers (region A hosts) --UPDATE + invalidation, one transaction--> PostgreSQL primary (a0)
        primary --logical decoding--> invalidator A (a0) --deletes--> router a1, router a2
        primary --Toxiproxy (the WAN)--> streaming replica (b0, recovery_min_apply_delay)
        primary --Toxiproxy--> invalidator B (b0, waits for the replica) --deletes--> router b1, b2
    routers --FailoverWithExptimeRoute--> servers (a1 a2 a3 | b1 b2), each `shoal server -e` on its
        host's /dev/shm; a failed server's reads go to the region's Gutter (ag | bg), deletes to both
    readers on every host: lease-get through the region's routers (the other router when one
        does not answer), fill from the region's database;
        a local reader per server host: gets through the server's shared memory
    every worker logs its operations --> checker.py (Polaris: no read older than commit + bound)
    a seeded fault schedule meanwhile: kill -9 + warm restart, SIGSTOP/SIGCONT, a host's or the
        region's link cut, a delay spike (Toxiproxy latency or `tc tbf`), a replica restart

Each host is a network namespace joined to one bridge by a veth pair, with link-local
addresses 169.254.N.x that exist only on these links, and a mount namespace with its own
/dev/shm (a holder process keeps it; every process of the host enters both). Everything is named
`shc<pid>-…` after the harness's process id, so a run that crashed is cleaned up by the next
one (`cleanup_leftovers`): the processes in its namespaces killed, its links and namespaces
deleted, its PostgreSQL directories removed.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import ROOT, Postgres, _stopped, wait_for  # noqa: E402


PREFIX = "shc"
TOXIPROXY_VERSION = "v2.9.0"
TOXIPROXY = Path(os.environ.get("TOXIPROXY_BIN", ROOT / "target" / "toxiproxy" / TOXIPROXY_VERSION / "server"))
WORKER = Path(__file__).resolve().parent / "worker.py"
FAULT_KINDS = ("kill", "pause", "cut", "delay", "replica")


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ensure_toxiproxy():
    """Shopify's Toxiproxy, built once from its Go module into target/toxiproxy/<version>/ (as
    tests/exporter builds memcached_exporter); False when Go is missing."""
    if TOXIPROXY.exists():
        return True
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        return False
    TOXIPROXY.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([go, "install", f"github.com/Shopify/toxiproxy/v2/cmd/server@{TOXIPROXY_VERSION}"],
                   env={**os.environ, "GOBIN": str(TOXIPROXY.parent)}, check=True)
    return TOXIPROXY.exists()


def missing_privileges():
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "nsenter", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    probe = f"{PREFIX}{os.getpid()}-probe"
    if sh("ip", "netns", "add", probe, check=False).returncode != 0:
        return "ip netns add fails"
    sh("ip", "netns", "del", probe, check=False)
    return None


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def cleanup(owner=None):
    """Removes what the run of process `owner` made (every dead owner's when None)."""
    def ours(name):
        if not name.startswith(PREFIX):
            return False
        digits = name[len(PREFIX):].split("-", 1)[0]
        if not digits.isdigit():
            return False
        return int(digits) == owner if owner is not None else not alive(int(digits))

    for ns in sh("ip", "netns", "list").stdout.split("\n"):
        name = ns.split(" ", 1)[0]
        if name and ours(name):
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            sh("ip", "netns", "del", name, check=False)
    for line in sh("ip", "-o", "link", "show").stdout.split("\n"):
        parts = line.split(": ")
        if len(parts) > 1:
            name = parts[1].split("@", 1)[0]
            if ours(name):
                sh("ip", "link", "del", name, check=False)
    for path in Path("/tmp").glob(f"{PREFIX}*-pg-*"):
        if ours(path.name):
            shutil.rmtree(path, ignore_errors=True)
    for path in Path("/tmp").glob(f"{PREFIX}*-pgfs"):
        if ours(path.name):
            sh("umount", "--lazy", str(path), check=False)
            shutil.rmtree(path, ignore_errors=True)


class Host:
    """A simulated host: a network namespace on the bridge and a mount namespace of its own
    with a private /dev/shm."""

    def __init__(self, net, name, region, number):
        self.net, self.name, self.region = net, name, region
        self.ns = f"{net.prefix}-{name}"
        self.ip = f"169.254.{net.octet}.{number}"
        self.holder = None

    def start(self):
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.ns, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        sh("ip", "link", "set", self.ns, "master", self.net.bridge, "up")
        sh("ip", "-n", self.ns, "addr", "add", f"{self.ip}/24", "dev", "eth0")
        sh("ip", "-n", self.ns, "link", "set", "eth0", "up")
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        self.holder = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, "unshare", "--mount", "--propagation", "private", "sh", "-c",
             "mount -t tmpfs -o size=512m shoal-shm /dev/shm && exec sleep infinity"],
            stdin=subprocess.DEVNULL)
        own = os.readlink("/proc/self/ns/mnt")

        def holding():
            try:
                return (os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != own
                        and Path(f"/proc/{self.holder.pid}/cmdline").read_bytes().startswith(b"sleep"))
            except OSError:
                return False
        wait_for(f"host {self.name}'s /dev/shm", holding)

    def argv(self, argv):
        return ["nsenter", f"--net=/run/netns/{self.ns}", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *argv]

    def popen(self, argv, log):
        with open(log, "ab") as f:
            return subprocess.Popen(self.argv(argv), stdin=subprocess.DEVNULL, stdout=f, stderr=f)

    def link(self, up):
        sh("ip", "link", "set", self.ns, "up" if up else "down")

    def rate_limit(self, on):
        if on:
            sh("tc", "qdisc", "replace", "dev", self.ns, "root", "tbf", "rate", "200kbit", "burst", "8kb",
               "latency", "500ms")
        else:
            sh("tc", "qdisc", "del", "dev", self.ns, "root", check=False)


class Net:
    """The bridge and the hosts on it, and the tmpfs its databases live on (`pgfs`).

    PostgreSQL's directories are on a tmpfs of their own, mounted before the hosts so that
    every host's mount namespace has it: the harness tests Shoal, not PostgreSQL's disk (its
    `fsync` is off already), and on a disk another process was writing to, a logical
    walsender's slot save (a rename over the slot's state file, done on each confirmation past a
    standby snapshot) waited 3 s for writeback, so the stream the invalidator reads stopped
    (issue #26; docs/design/faults.md, "What it found"). Shoal's own files (spools, regions,
    owed deletes) stay where the test puts them."""

    def __init__(self):
        self.prefix = f"{PREFIX}{os.getpid()}"
        self.octet = 20 + os.getpid() % 200
        self.bridge = f"{self.prefix}-br"
        self.ip = f"169.254.{self.octet}.1"
        self.hosts = {}
        self.pgfs = Path(f"/tmp/{self.prefix}-pgfs")

    def start(self):
        self.pgfs.mkdir()
        sh("mount", "-t", "tmpfs", "-o", "size=4g,mode=0755", f"{self.prefix}-pgfs", str(self.pgfs))
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.ip}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")

    def host(self, name, region, number):
        host = Host(self, name, region, number)
        self.hosts[name] = host
        host.start()
        return host


def listening(ip, port):
    try:
        socket.create_connection((ip, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Proc:
    """A restartable process on a host, ready when its port accepts connections."""

    def __init__(self, name, host, argv, port, log):
        self.name, self.host, self.argv, self.port, self.log = name, host, argv, port, log
        self.proc = None
        self.crashes = 0

    def start(self):
        self.proc = self.host.popen(self.argv, self.log)
        wait_for(f"{self.name} listens", lambda: listening(self.host.ip, self.port) or self.proc.poll() is not None)
        assert self.proc.poll() is None, f"{self.name} exited: see {self.log}"

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        if self.proc:
            self.proc.wait()

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        wait_for(f"{self.name} stops", lambda: all(_stopped(t) for t in tasks.iterdir()), poll=0.001)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)


# How fast a replication connection whose link was cut is noticed and replaced (issue #26):
# the replica's walreceiver asks for a reply after 2.5 s of silence and gives the connection up
# after 5 s (PostgreSQL's default: a minute), reports every second, and retries its primary
# 100 ms after a failure (the default, 5 s, left region B's database seconds behind after each
# WAN cut). Not shorter: a delay spike (up to 1.5 s on the WAN) over a quiet stream must not
# end a connection that works — and Toxiproxy 2.9's removal of a toxic can hang when one of its
# connections closes meanwhile (a CI run with 2 s: a connection closed during a delay spike,
# and the API answered 503 after 25 s; `Toxiproxy` restarts it now). The walsenders keep
# PostgreSQL's `wal_sender_timeout`: the invalidators end their own old ones.
REPLICATION_TIMING = ("wal_receiver_timeout=5s", "wal_receiver_status_interval=1s",
                      "wal_retrieve_retry_interval=100ms")


class HostPostgres(Postgres):
    """harness.Postgres on a simulated host, listening on the host's address (trusting the
    harness's link-local network), with REPLICATION_TIMING."""

    def __init__(self, host, *settings):
        super().__init__(*REPLICATION_TIMING, *settings, "listen_addresses='*'", "max_wal_senders=8",
                         "hot_standby=on")
        self.host, self.port = host, 5432

    @property
    def conninfo(self):
        return f"host={self.host.ip} port={self.port} user=postgres dbname=postgres connect_timeout=5"

    def _run(self, program, *args):
        argv = [str(self.bin / program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        subprocess.run(self.host.argv(argv), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def ctl(self, action):
        options = " ".join(f"-c {s}" for s in self.settings) + f" -p {self.port} -k {self.dir}"
        self._run("pg_ctl", "-D", f"{self.dir}/data", "-l", f"{self.dir}/log", "-o", options, "-m", "fast",
                  "-t", "120", "-w", action)

    def _scratch(self):
        import tempfile
        self.dir = tempfile.mkdtemp(prefix=f"{self.host.net.prefix}-pg-", dir=self.host.net.pgfs)
        subprocess.run(["chown", "postgres", self.dir], check=True)

    def trust_the_links(self):
        with open(f"{self.dir}/data/pg_hba.conf", "a") as f:
            f.write("host all all 169.254.0.0/16 trust\nhost replication all 169.254.0.0/16 trust\n")

    def primary(self):
        self._scratch()
        self._run("initdb", "-D", f"{self.dir}/data", "-A", "trust", "-U", "postgres")
        self.trust_the_links()
        self.ctl("start")
        return self

    def replica_of(self, ip, port):
        self._scratch()
        # `-c fast`: the primary checkpoints at once (a spread checkpoint took seconds of CI's set-up).
        self._run("pg_basebackup", "-h", ip, "-p", str(port), "-U", "postgres", "-D", f"{self.dir}/data", "-R",
                  "-X", "stream", "-c", "fast")
        self.ctl("start")
        return self


def stop_workers(ops, workers, seconds=60):
    """Asks every worker to stop (the file `stop` in `ops`) and waits for them; one that has not
    ended within `seconds` is killed."""
    (ops / "stop").touch()
    deadline = time.time() + seconds
    for w in workers:
        try:
            w.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def restart_crashed(procs, log):
    """A process that died without being killed is a finding: logged in `log` (a fault log's
    entry of kind `crash`), and restarted."""
    for p in procs:
        if p.proc.poll() is not None:
            p.crashes += 1
            log.append({"kind": "crash", "what": p.name, "hosts": [p.host.name], "start": time.time(),
                        "end": time.time(), "code": p.proc.returncode})
            p.start()


def kill_all(workers, procs, databases):
    """Kills what still runs at the end: workers, the system's processes, then the databases
    (the last started first)."""
    for w in workers:
        if w.poll() is None:
            w.kill()
            w.wait()
    for p in procs:
        try:
            p.kill()
        except Exception:
            pass
    for db in reversed(databases):
        try:
            db.__exit__(None, None, None)
        except Exception:
            pass


class Toxiproxy:
    """Shopify's Toxiproxy on a host of its own (so a crashed run's cleanup finds it too): the
    WAN between the regions. Its proxies listen on that host's address.

    Toxiproxy 2.9 can deadlock when a toxic is added or removed while one of a proxy's
    connections is being torn down (a chunk sent to a link whose writer has gone blocks with the
    proxy's lock held: Shopify/toxiproxy#558, #427; the fix, PR #760, is not released): its API
    then answers every later call 503 after 25 s, for good. Seen under load in the fault run
    (a WAN delay spike added just as a replication connection broke). So a call that gets no
    answer within CALL_WITHIN, or a 503, restarts Toxiproxy with the state asked for (the proxies,
    enabled or not, with the delay spike or not): its connections close, as in a cut of the WAN.
    It only happens inside a WAN fault (a cut or a delay spike, whose span covers the call), and
    is said on standard error and kept in `restarts`."""

    API = 8474
    # How long one API call may take before Toxiproxy is taken for hung (calls take
    # milliseconds, and under load well under a second).
    CALL_WITHIN = 10

    def __init__(self, work, host):
        self.work, self.host = work, host
        self.specs = {}  # name -> (listen port, upstream)
        self.enabled, self.latency_ms = True, 0
        self.restarts = []
        self.proc = None
        self.start()

    def start(self):
        self.proc = self.host.popen([str(TOXIPROXY), "-host", self.host.ip, "-port", str(self.API)],
                                    self.work / "toxiproxy.log")
        wait_for("Toxiproxy's API", lambda: listening(self.host.ip, self.API))

    def restart(self, why):
        """A fresh Toxiproxy in the state asked for (proxies, enabled, delay spike)."""
        print(f"Toxiproxy restarted ({why}): its connections close as in a WAN cut", file=sys.stderr)
        self.restarts.append({"time": round(time.time(), 3), "why": why})
        self.stop()
        self.start()
        for name, (port, upstream) in self.specs.items():
            self.request("POST", "/proxies", {"name": name, "listen": f"{self.host.ip}:{port}",
                                              "upstream": upstream, "enabled": self.enabled})
            if self.latency_ms:
                self.request("POST", f"/proxies/{name}/toxics", self.spike())

    def request(self, method, path, body=None):
        """One API call, answered within CALL_WITHIN or raising."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://{self.host.ip}:{self.API}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.CALL_WITHIN) as r:
            return r.read()

    def call(self, method, path, body=None, done_already=()):
        """One API call whose effect is part of the state asked for: a status in `done_already`
        means it is there already (a toxic created twice is a 409, one deleted twice a 404). A
        Toxiproxy that answers 503 or not at all is restarted in that state (class doc)."""
        try:
            return self.request(method, path, body)
        except urllib.error.HTTPError as e:
            if e.code in done_already:
                return b""
            if e.code != 503:
                raise
            why = f"{method} {path} answered 503"
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            why = f"{method} {path}: no answer within {self.CALL_WITHIN} s ({e})"
        self.restart(why)
        return b""

    def spike(self):
        return {"name": "spike", "type": "latency", "attributes": {"latency": self.latency_ms}}

    def proxy(self, name, port, upstream):
        self.specs[name] = (port, upstream)
        self.call("POST", "/proxies", {"name": name, "listen": f"{self.host.ip}:{port}", "upstream": upstream,
                                       "enabled": self.enabled}, done_already=(409,))
        return port

    def enable(self, on):
        self.enabled = on
        for name in self.specs:
            self.call("POST", f"/proxies/{name}", {"enabled": on})

    def latency(self, ms):
        self.latency_ms = ms
        for name in self.specs:
            if ms:
                self.call("POST", f"/proxies/{name}/toxics", self.spike(), done_already=(409,))
            else:
                self.call("DELETE", f"/proxies/{name}/toxics/spike", done_already=(404,))

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
