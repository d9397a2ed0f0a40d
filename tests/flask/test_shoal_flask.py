"""shoal.flask.ShoalCache, the Flask-Caching backend, in a Flask application against a real
`shoal server`: Flask-Caching's calls, a cached view, and reads through shared memory."""

import pytest
from flask import Flask
from flask_caching import Cache

from harness import Server


@pytest.fixture(scope="module")
def server():
    with Server.shoal() as started:
        yield started


@pytest.fixture
def app_and_cache(server):
    app = Flask(__name__)
    cache = Cache(app, config={
        "CACHE_TYPE": "shoal.flask.ShoalCache",
        "CACHE_MEMCACHED_SERVERS": [f"127.0.0.1:{server.port}"],
        "CACHE_KEY_PREFIX": "flask:",
        "CACHE_SHOAL_OPTIONS": {"timeout": 5.0},
    })
    cache.clear()
    return app, cache


def test_values_keys_and_counters(app_and_cache):
    app, cache = app_and_cache
    with app.app_context():
        cache.set("text", "héllo")
        cache.set("object", {"list": [1, 2.5, None]}, timeout=0)  # 0: never expires
        assert cache.get("text") == "héllo"
        assert cache.get("object") == {"list": [1, 2.5, None]}
        assert cache.get("absent") is None
        assert cache.has("text") and not cache.has("absent")
        assert cache.add("text", "other") is False
        assert cache.get_many("text", "absent") == ["héllo", None]
        cache.set("count", 41)
        assert cache.cache.inc("count") == 42  # the backend's own calls
        assert cache.cache.dec("count", 2) == 40
        assert cache.get("count") == 40
        assert sorted(cache.delete_many("text", "count")) == ["count", "text"]
        assert cache.get("text") is None


def test_a_cached_view_runs_once_and_reads_locally(app_and_cache):
    app, cache = app_and_cache
    calls = []

    @app.route("/slow")
    @cache.cached(timeout=60)
    def slow():
        calls.append(1)
        return f"computed {len(calls)}"

    client = app.test_client()
    assert client.get("/slow").text == "computed 1"
    assert client.get("/slow").text == "computed 1"
    assert len(calls) == 1
    with app.app_context():
        assert cache.cache._client.client.is_local()
