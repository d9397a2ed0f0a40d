"""The Python client's invalidation helpers, end to end: `shoal.invalidate` through psycopg
(PostgreSQL) and sqlite3 cursors, in the application's transaction, followed by a real
`shoal invalidator` that deletes the keys from a real `shoal server`."""

import contextlib
import sqlite3
import subprocess
import time

import psycopg
import pytest
import shoal
from harness import SHOAL, Postgres, Server, eventually


@contextlib.contextmanager
def invalidator(tmp_path, server, *arguments):
    """`shoal invalidator` delivering to `server`, killed when the block ends."""
    log = open(tmp_path / "invalidator.log", "w")
    proc = subprocess.Popen(
        [str(SHOAL), "invalidator", *arguments, "--destination", f"127.0.0.1:{server.port}",
         "--state-dir", str(tmp_path / "state")], stderr=log)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_message_checks_its_keys():
    assert shoal.invalidation_message(["user:7", b"feed:7"]) == "user:7 feed:7"
    for bad in (["has space"], ["x" * 251], []):
        with pytest.raises(shoal.IllegalInput):
            shoal.invalidation_message(bad)


def test_postgres_commits_through_psycopg_delete_and_rollbacks_do_not(tmp_path):
    with Postgres() as pg, Server.shoal() as server:
        cache = shoal.Client(f"127.0.0.1:{server.port}")
        for key in ("user:1", "user:2", "kept"):
            cache.set(key, b"v")
        with invalidator(tmp_path, server, "--postgres", pg.conninfo):
            with psycopg.connect(pg.conninfo, autocommit=True) as db:
                # Commits before the invalidator's slot exists are not in its log.
                slot = "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'shoal_invalidator'"
                eventually(lambda: db.execute(slot).fetchone()[0] == 1)
                with db.transaction(), db.cursor() as cur:
                    shoal.invalidate(cur, ["user:1", "user:2"])
                with pytest.raises(ZeroDivisionError), db.transaction(), db.cursor() as cur:
                    shoal.invalidate(cur, ["kept"])
                    raise ZeroDivisionError  # rolls the transaction back
            eventually(lambda: cache.get("user:1") is None and cache.get("user:2") is None)
            time.sleep(0.3)
            assert cache.get("kept") == b"v"


def test_sqlite_commits_through_sqlite3_delete(tmp_path):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    with Server.shoal() as server:
        cache = shoal.Client(f"127.0.0.1:{server.port}")
        cache.set("a", b"v")
        cache.set("b", b"v")
        with db:
            shoal.invalidate(db.cursor(), ["a"])
        with invalidator(tmp_path, server, "--sqlite", str(path)):
            try:
                with db:
                    shoal.invalidate(db.cursor(), ["b"])
                    raise ZeroDivisionError
            except ZeroDivisionError:
                pass
            eventually(lambda: cache.get("a") is None)
            eventually(lambda: db.execute("SELECT count(*) FROM shoal_outbox").fetchone()[0] == 0)
            assert cache.get("b") == b"v"


def test_remote_markers_are_items_the_invalidator_deletes(tmp_path):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    with Server.shoal() as server:
        cache = shoal.Client(f"127.0.0.1:{server.port}")
        assert not cache.has_remote_marker("user:7")
        cache.set_remote_marker("user:7", ttl=600)
        assert cache.has_remote_marker("user:7")
        assert cache.get("__shoal_rm:user:7") == b"1"
        with db:
            shoal.invalidate(db.cursor(), ["user:7"])
        with invalidator(tmp_path, server, "--sqlite", str(path), "--remote-markers"):
            eventually(lambda: not cache.has_remote_marker("user:7"))
