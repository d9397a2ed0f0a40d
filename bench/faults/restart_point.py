#!/usr/bin/env python3
"""How far a logical slot's restart point stays behind, and how long a restarted decoding takes to
give its first new change, with PostgreSQL's own standby snapshots (every 15 s) and with
`shoal invalidator --snapshot-every-ms 1000` (issue #26; docs/design/faults.md, "The re-decoding
after a restart"). A private PostgreSQL 15 (root: run as the postgres user), pgbench writers
(UPDATE + an invalidation message per transaction, RATE a second), the invalidator following
the slot into a `shoal server`; each restart is a kill -9 of the invalidator, then the slot's
first new change is asked for (`pg_logical_slot_peek_changes(slot, NULL, 1)`, which decodes
from the restart point), timed.

    INV=target/release/shoal bench/faults/restart_point.py [RATE]
"""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

BIN = "/usr/lib/postgresql/15/bin"
WORK = tempfile.mkdtemp(prefix="shoal-restart-point-")
os.chmod(WORK, 0o755)
D = f"{WORK}/pg"
PORT, SERVER_PORT = free_port(), free_port()
def run(*a, **k):
    return subprocess.run(["runuser", "-u", "postgres", "--", *a], capture_output=True, text=True, **k)
def sql(q):
    r = run(f"{BIN}/psql", "-h", D, "-p", str(PORT), "-U", "postgres", "-d", "postgres", "-Atqc", q)
    if r.returncode: raise RuntimeError(r.stderr)
    return r.stdout.strip()
subprocess.run(["rm", "-rf", D]); os.makedirs(D); subprocess.run(["chown", "postgres", D])
run(f"{BIN}/initdb", "-D", f"{D}/data", "-A", "trust", "-U", "postgres", check=True)
run(f"{BIN}/pg_ctl", "-D", f"{D}/data", "-l", f"{D}/log", "-o", f"-c wal_level=logical -p {PORT} -k {D} -c listen_addresses=''", "-w", "start", check=True)
sql("CREATE TABLE kv (k int PRIMARY KEY, v bigint NOT NULL DEFAULT 0); INSERT INTO kv SELECT g FROM generate_series(0,1999) g")
open(f"{WORK}/w.sql", "w").write("\\set k random(0, 1999)\nBEGIN;\nUPDATE kv SET v = v + 1 WHERE k = :k RETURNING v;\nSELECT pg_logical_emit_message(true, 'shoal', 'k:' || :k);\nCOMMIT;\n")
os.chmod(f"{WORK}/w.sql", 0o644)
bench = subprocess.Popen(["runuser", "-u", "postgres", "--", f"{BIN}/pgbench", "-h", D, "-p", str(PORT), "-U", "postgres", "-n", "-c", "2", "-R", sys.argv[1] if len(sys.argv) > 1 else "300", "-T", "400", "-f", f"{WORK}/w.sql", "postgres"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
INV = os.environ.get("INV", "target/release/shoal")
server = subprocess.Popen([INV, "server", "-p", str(SERVER_PORT), "-l", "127.0.0.1", "-U", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def recv(every_ms):
    return subprocess.Popen([INV, "invalidator", "--postgres", f"host={D} port={PORT} user=postgres dbname=postgres", "--slot", "exp", "--state-dir", f"{WORK}/state", "-d", f"127.0.0.1:{SERVER_PORT}", "--snapshot-every-ms", str(every_ms)], stdout=subprocess.DEVNULL, stderr=open(f"{WORK}/inv.log", "a"))
def phase(name, every_ms, seconds=45, restarts=6):
    r = recv(every_ms); time.sleep(3)
    lags = []; conf = []; t0 = time.time(); w0 = int(sql("SELECT pg_current_wal_lsn() - '0/0'"))
    while time.time() - t0 < seconds:
        a, b = sql("SELECT pg_current_wal_lsn() - restart_lsn, pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'exp'").split("|"); lags.append(int(a)); conf.append(int(b))
        time.sleep(0.25)
    rate = (int(sql("SELECT pg_current_wal_lsn() - '0/0'")) - w0) / (time.time() - t0)
    dec = []
    for i in range(restarts):
        time.sleep(random.uniform(1, 4))
        r.kill(); r.wait()
        behind = int(sql("SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots WHERE slot_name = 'exp'"))
        t = time.time(); sql("SELECT count(*) FROM pg_logical_slot_peek_changes('exp', NULL, 1)"); d = time.time() - t
        dec.append((behind, d))
        r = recv(every_ms)
    r.kill(); r.wait()
    q = lambda xs, p: sorted(xs)[int(p * (len(xs) - 1))]
    print(f"{name}: WAL {rate/1e3:.0f} kB/s; restart_lsn behind the WAL's end: median {q(lags,.5)/1e3:.0f} kB, max {max(lags)/1e3:.0f} kB "
          f"(~{q(lags,.5)/rate:.1f} s / {max(lags)/rate:.1f} s of WAL); confirmed_flush behind: median {q(conf,.5)/1e3:.0f} kB max {max(conf)/1e3:.0f} kB")
    print(f"  restarted decoding, first new change: " + ", ".join(f"{b/1e3:.0f} kB in {d*1e3:.0f} ms" for b, d in dec))
    return dec
try:
    phase("--snapshot-every-ms 0 (PostgreSQL's own snapshots)", 0)
    phase("--snapshot-every-ms 1000", 1000)
finally:
    bench.terminate()
    server.kill()
    run(f"{BIN}/pg_ctl", "-D", f"{D}/data", "-m", "immediate", "-w", "stop")
    subprocess.run(["rm", "-rf", WORK])
