"""Settings for Django's own test runner (its sdist's tests/runtests.py) when
test_django_suite.py runs Django's memcached cache tests against one server, named by the
environment: SHOAL_DJANGO_SERVER ("127.0.0.1:PORT"). Each backend under test is configured
here once; Django's test classes find theirs by BACKEND, ours (shoal_cache_tests.py) by alias."""

import os

# Django's own test settings (SQLite databases, secret key): runtests.py runs from Django's
# tests/ directory, which is therefore on the import path.
from test_sqlite import *  # noqa: F401,F403

SERVER = os.environ["SHOAL_DJANGO_SERVER"]

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "pymemcache": {
        "BACKEND": "django.core.cache.backends.memcached.PyMemcacheCache",
        "LOCATION": SERVER,
    },
    "pylibmc": {"BACKEND": "django.core.cache.backends.memcached.PyLibMCCache", "LOCATION": SERVER},
    "shoal": {"BACKEND": "shoal.django.ShoalCache", "LOCATION": SERVER},
}

TEST_RUNNER = "outcome_runner.OutcomeRunner"
