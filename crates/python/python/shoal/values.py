"""Python values on `shoal.Client`, for the framework caches (`shoal.django`, `shoal.flask`):
`Client` stores any picklable value under flags that say how to read it back, as pymemcache's
`pickle_serde` does, so a cache shared with PyMemcacheCache reads the same both ways
(docs/django.md): bytes as they are (flags 0), str as UTF-8 (16), int as decimal digits (2, so
`incr`/`decr` work on them), anything else pickled with the highest protocol (1).
"""

import logging
import pickle

import shoal

# pymemcache.serde's flags (python-memcached's before it).
FLAG_BYTES = 0
FLAG_PICKLE = 1 << 0
FLAG_INTEGER = 1 << 1
FLAG_LONG = 1 << 2  # python-memcached's Python 2 long: read, never written
FLAG_TEXT = 1 << 4

logger = logging.getLogger(__name__)


def serialize(value):
    """`(data, flags)` for a value, as pymemcache's pickle_serde makes them. Exact types only:
    a subclass of str or int is pickled, so it comes back as itself."""
    kind = type(value)
    if kind is bytes:
        return value, FLAG_BYTES
    if kind is str:
        return value.encode(), FLAG_TEXT
    if kind is int:
        return b"%d" % value, FLAG_INTEGER
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL), FLAG_PICKLE


class Undecodable(Exception):
    """A stored value that cannot be turned back into an object (e.g. a pickle of a class
    this program no longer has)."""


def deserialize(data, flags):
    """The value `serialize` made `(data, flags)` from; unknown flags give the bytes."""
    if flags & FLAG_TEXT:
        return data.decode()
    if flags & (FLAG_INTEGER | FLAG_LONG):
        return int(data)
    if flags & FLAG_PICKLE:
        try:
            return pickle.loads(data)
        except Exception as e:
            raise Undecodable(e) from e
    return data


class Client:
    """`shoal.Client` with Python values: the calls frameworks make on a memcached library's
    client (python-memcached's `get_multi`, `set_multi`, `delete_multi`, `disconnect_all`, ...),
    with values (de)serialized by their flags. A value that cannot be unpickled reads as a miss
    (logged), as pymemcache reads it: the caller computes it again and overwrites it.

    One server gives `shoal.Client(server)`; several give a pool, `shoal.Client(servers=...)`.
    `options` are shoal.Client's keyword arguments."""

    def __init__(self, servers, **options):
        self.servers, self.options = list(servers), options
        self._client = None

    @property
    def client(self):
        """The shoal.Client, connected on first use (again after `disconnect_all`)."""
        if self._client is None:
            if len(self.servers) == 1:
                self._client = shoal.Client(self.servers[0], **self.options)
            else:
                self._client = shoal.Client(servers=self.servers, **self.options)
        return self._client

    def get(self, key, default=None):
        found = self.client.get_flagged(key)
        if found is None:
            return default
        try:
            return deserialize(*found)
        except Undecodable:
            logger.warning("cache key %r: undecodable value read as a miss", key, exc_info=True)
            return default

    def get_multi(self, keys):
        values = {}
        for key, found in self.client.get_many_flagged(list(keys)).items():
            try:
                values[key] = deserialize(*found)
            except Undecodable:
                logger.warning("cache key %r: undecodable value read as a miss", key, exc_info=True)
        return values

    def set(self, key, value, expire=0):
        data, flags = serialize(value)
        return self.client.set(key, data, expire, flags=flags)

    def add(self, key, value, expire=0):
        data, flags = serialize(value)
        return self.client.add(key, data, expire, flags=flags)

    def set_multi(self, mapping, expire=0):
        """Stores every `{key: value}`; the keys that were not stored. One batch per kind of
        value (a batch carries one flags value)."""
        by_flags = {}
        for key, value in mapping.items():
            data, flags = serialize(value)
            by_flags.setdefault(flags, {})[key] = data
        failed = []
        for flags, batch in by_flags.items():
            failed += self.client.set_many(batch, expire, flags=flags)
        return failed

    def touch(self, key, expire=0):
        return self.client.touch(key, expire)

    def delete(self, key):
        return self.client.delete(key)

    def delete_multi(self, keys):
        return self.client.delete_many(list(keys))

    def incr(self, key, delta):
        return self.client.incr(key, delta)

    def decr(self, key, delta):
        return self.client.decr(key, delta)

    def append(self, key, value):
        return self.client.append(key, value)

    def flush_all(self):
        return self.client.flush_all()

    def disconnect_all(self):
        """Closes the connection (and unmaps the region); the next call connects again."""
        if self._client is not None:
            self._client.close()
            self._client = None


def address(server):
    """A server as a framework's settings name it, as shoal.Client takes it: `unix:/path` and
    `/path` are unix sockets; a host without a port gets memcached's, 11211."""
    server = server.removeprefix("unix:")
    _, colon, port = server.rpartition(":")
    if server.startswith("/") or (colon and port.isdigit()):
        return server
    return f"{server}:11211"
