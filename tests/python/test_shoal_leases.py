"""Leases from Python: `lease_get`, `lease_set`, `delete(hold=…)` and `get_or_fill`, against a
real `shoal server` (issue #6's client side)."""

import threading
import time

import shoal
from harness import Server


def test_token_hot_miss_and_void_token():
    with Server.shoal() as server:
        a, b = shoal.Client(server.address), shoal.Client(server.address)
        kind, stale, token = a.lease_get("k")
        assert (kind, stale) == ("token", None) and token >= 2
        assert b.lease_get("k") == ("hot", None, None)
        assert a.lease_set("k", token, b"filled") == "stored"
        assert b.lease_get("k") == ("hit", b"filled", None)
        a.delete("k")
        assert a.lease_set("k", token, b"late") == "not_stored"


def test_stale_values_and_hold_off():
    with Server.shoal("--stale-ttl", "30") as server:
        c = shoal.Client(server.address)
        c.set("k", b"old")
        c.delete("k")
        kind, stale, _ = c.lease_get("k", stale=True)
        assert (kind, stale) == ("token", b"old")
        assert c.get_or_fill("k", lambda: b"never", stale_ok=True) == b"old"
        assert c.delete("h", hold=30) is False
        assert c.add("h", b"x") is False
        assert c.set("h", b"x") is True


def test_get_or_fill_fills_once_for_a_herd_of_threads():
    with Server.shoal() as server:
        fills = []

        def fill():
            fills.append(1)
            time.sleep(0.05)  # the database
            return "from the database"

        def reader(results):
            c = shoal.Client(server.address)
            results.append(c.get_or_fill("hot", fill, max_wait=5.0))

        results = []
        threads = [threading.Thread(target=reader, args=(results,)) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [b"from the database"] * 30
        assert len(fills) == 1


def test_an_exception_in_fill_reaches_the_caller():
    with Server.shoal() as server:
        c = shoal.Client(server.address)

        def broken():
            raise LookupError("no such row")

        try:
            c.get_or_fill("k", broken)
        except LookupError as e:
            assert "no such row" in str(e)
        else:
            raise AssertionError("the fill's exception was swallowed")
