"""A Flask-Caching backend on `shoal.Client`: Flask-Caching's own MemcachedCache (the key rule,
`CACHE_KEY_PREFIX` and timeouts it applies for pylibmc) over `shoal.values.Client`, so reads
come from the server's shared memory when it runs on this host (docs/django.md).

    cache = Cache(app, config={
        "CACHE_TYPE": "shoal.flask.ShoalCache",
        "CACHE_MEMCACHED_SERVERS": ["127.0.0.1:11211"],   # several: a pool
        "CACHE_SHOAL_OPTIONS": {"timeout": 1.0},          # keyword arguments of shoal.Client
    })

Values are stored as shoal.django and pymemcache store them (`shoal.values`).
"""

from flask_caching.backends.memcache import MemcachedCache

from shoal.values import Client, address


class ShoalCache(MemcachedCache):
    @classmethod
    def factory(cls, app, config, args, kwargs):
        servers = [address(server) for server in config["CACHE_MEMCACHED_SERVERS"]]
        # MemcachedCache takes a ready client where it would otherwise take server names.
        args.append(Client(servers, **config.get("CACHE_SHOAL_OPTIONS", {})))
        kwargs.update(key_prefix=config["CACHE_KEY_PREFIX"])
        return cls(*args, **kwargs)
