"""Shoal's Python client: `shoal.Client`, pymemcache's calls over the Rust client, reading
through shared memory when the server runs on this host (docs/design/client.md).

The client is the native module `shoal._shoal`; this package re-exports its names and adds
cache backends on it for Django (`shoal.django`) and Flask-Caching (`shoal.flask`), which store
Python values as `shoal.values` says (docs/django.md). `shoal.mr` runs MapReduce jobs whose map
and combine are Python functions on `shoal mr`'s elastic engine (docs/MAPREDUCE.md).
"""

from ._shoal import *  # noqa: F401,F403 (the package's face is the native module's names)
from ._shoal import __version__  # noqa: F401 (a star import leaves out dunder names)
