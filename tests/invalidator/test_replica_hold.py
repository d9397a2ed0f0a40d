"""`shoal invalidator --hold-replica` against Debian's PostgreSQL and a real streaming replica:
a replica that has replayed past what the invalidator's commit log has given is paused, for at
most the bound, and a pause a killed invalidator left is resumed by the next one once its log
has caught up (docs/design/invalidation.md, "Regions")."""

import subprocess
import time

import psycopg

from harness import SHOAL, Postgres, eventually, free_port


def invalidator(log_conninfo, replica, hold_seconds, directory, stderr):
    """An invalidator following `log_conninfo`, gated on and holding `replica`; its deletes go to
    a port nothing listens on (they wait in its spool, which this test does not look at)."""
    return subprocess.Popen(
        [str(SHOAL), "invalidator", "--postgres", log_conninfo, "--wait-for-replica", replica.conninfo,
         "--hold-replica", str(hold_seconds), "-d", f"127.0.0.1:{free_port()}", "--state-dir", str(directory)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)


def paused(replica):
    with psycopg.connect(replica.conninfo, autocommit=True) as db:
        return db.execute("SELECT pg_is_wal_replay_paused()").fetchone()[0]


def rows_on(server):
    with psycopg.connect(server.conninfo, autocommit=True) as db:
        if db.execute("SELECT to_regclass('held') IS NULL").fetchone()[0]:
            return 0
        return db.execute("SELECT count(*) FROM held").fetchone()[0]


def test_a_replica_ahead_of_the_log_is_held_at_most_the_bound_and_a_killed_holds_pause_is_resumed(tmp_path):
    with Postgres() as primary, primary.replica() as replica:
        with psycopg.connect(primary.conninfo, autocommit=True) as db:
            db.execute("CREATE TABLE held (id int)")
        eventually(lambda: replica_has_table(replica))
        # A commit log that never answers (nothing listens there) has given nothing: the replica,
        # which has replayed something, is ahead of it and is paused.
        never = f"host=127.0.0.1 port={free_port()} user=postgres dbname=postgres connect_timeout=1"
        stderr = tmp_path / "bounded.stderr"
        with open(stderr, "wb") as log:
            held = invalidator(never, replica, 4, tmp_path / "bounded", log)
        try:
            eventually(lambda: paused(replica), 30)
            with psycopg.connect(primary.conninfo, autocommit=True) as db:
                db.execute("INSERT INTO held VALUES (1)")
            # Held: the row does not reach the replica while the pause lasts (observed, not timed:
            # the pause is said to have ended only once the bound has passed). The rows are counted
            # before the pause is looked at: still paused then means paused when they were counted.
            while True:
                rows = rows_on(replica)
                if not paused(replica):
                    break
                assert rows == 0, "a paused replica replayed a commit"
                assert held.poll() is None, stderr.read_text()
                time.sleep(0.05)
            eventually(lambda: b"released the replica after the bound of 4 s" in stderr.read_bytes(), 30)
            eventually(lambda: rows_on(replica) == 1, 30)
            # Released at the bound and not held again while the log stays behind.
            with psycopg.connect(primary.conninfo, autocommit=True) as db:
                db.execute("INSERT INTO held VALUES (2)")
            eventually(lambda: rows_on(replica) == 2, 30)
            assert not paused(replica)
        finally:
            held.kill()
            held.wait()

        # A killed invalidator's pause stays (PostgreSQL keeps it): the next invalidator, whose
        # commit log is the primary's and soon gives a position past the replica's, resumes it.
        with psycopg.connect(replica.conninfo, autocommit=True) as db:
            db.execute("SELECT pg_wal_replay_pause()")
        with psycopg.connect(primary.conninfo, autocommit=True) as db:
            db.execute("INSERT INTO held VALUES (3)")
        stderr = tmp_path / "following.stderr"
        with open(stderr, "wb") as log:
            following = invalidator(primary.conninfo, replica, 600, tmp_path / "following", log)
        try:
            eventually(lambda: rows_on(replica) == 3, 60)
            eventually(lambda: not paused(replica), 30)
            assert following.poll() is None, stderr.read_text()
            assert b"released the replica after the bound" not in stderr.read_bytes(), stderr.read_text()
        finally:
            following.kill()
            following.wait()


def replica_has_table(replica):
    with psycopg.connect(replica.conninfo, autocommit=True) as db:
        return not db.execute("SELECT to_regclass('held') IS NULL").fetchone()[0]
