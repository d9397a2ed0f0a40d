"""Django's memcached backend tests (BaseMemcachedTests, from Django's sdist) for
shoal.django.ShoalCache, declared the way Django declares PyMemcacheCacheTests and
PyLibMCCacheTests; loaded by runtests.py as the label `shoal_cache_tests.ShoalCacheTests`
(importable only once Django has set up its test apps, which runtests.py does first)."""

import os

from cache.tests import BaseMemcachedTests, caches_setting_for_tests, memcached_excluded_caches
from django.conf import settings
from django.core.cache import cache
from django.test import TestCase, override_settings

import shoal

ShoalCache_params = settings.CACHES["shoal"]


@override_settings(
    CACHES=caches_setting_for_tests(base=ShoalCache_params, exclude=memcached_excluded_caches)
)
class ShoalCacheTests(BaseMemcachedTests, TestCase):
    base_params = ShoalCache_params
    # The connection and the region's mapping are kept across requests (ShoalCache.close).
    should_disconnect_on_close = False
    # A server refuses incr/decr of a value that is not a number with CLIENT_ERROR.
    incr_decr_type_error = shoal.ServerError

    def test_reads_through_shared_memory_where_the_server_offers_it(self):
        cache.set("local", "value")
        self.assertEqual(cache.get("local"), "value")
        expected = os.environ["SHOAL_DJANGO_LOCAL"] == "1"
        self.assertIs(cache._cache.client.is_local(), expected)
