"""A Django cache backend on `shoal.Client`: reads come from the server's shared memory when
it runs on this host, everything else goes over memcached's protocol (docs/django.md).

    CACHES = {
        "default": {
            "BACKEND": "shoal.django.ShoalCache",
            "LOCATION": "127.0.0.1:11211",   # or "a:11211;b:11211", or a list: a pool
            "OPTIONS": {"timeout": 1.0},     # keyword arguments of shoal.Client
        }
    }

It behaves as Django's own memcached backends (it is a `BaseMemcachedCache`): memcached's key
rule (at most 250 characters, no spaces or control characters; a bad key raises InvalidCacheKey),
`KEY_PREFIX`/`VERSION`/`KEY_FUNCTION`, and timeouts as memcached takes them (None: never
expire; 0: expire at once; past 30 days: sent as an absolute Unix time).

Values are stored as pymemcache's `pickle_serde` stores them (`shoal.values`), so a site moving
from `PyMemcacheCache` keeps its cache and both can share it.
"""

from django.core.cache.backends.memcached import BaseMemcachedCache

import shoal
from shoal.values import Client, address


class ShoalCache(BaseMemcachedCache):
    """Django's cache API on Shoal (or any memcached server, read over the network)."""

    def __init__(self, server, params):
        # shoal.Client answers None for a missing key's incr/decr and raises nothing for it:
        # an empty tuple of exception types catches nothing.
        super().__init__(server, params, library=shoal, value_not_found_exception=())
        self._class = Client

    @property
    def client_servers(self):
        """LOCATION's servers as shoal.Client takes them: `unix:/path` and `/path` are unix
        sockets; a host without a port gets memcached's, 11211."""
        return [address(server) for server in self._servers]

    def close(self, **kwargs):
        # The connection (and the region's mapping) is kept for the next request: shoal.Client
        # reconnects by itself after a failure, and mapping the region again costs far more
        # than the request's reads.
        pass
