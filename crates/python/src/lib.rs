//! # shoal (Python): `shoal.Client`, a pymemcache-like client over shoal-client
//!
//! Owns the Python face of the client (docs/design/client.md): argument conversion (keys as `str` or
//! `bytes`, values as `bytes` or `str`), pymemcache's return conventions, and exceptions.
//! Every call copies its arguments out of Python objects and then releases the interpreter
//! lock while shoal-client talks to the server (or reads its shared memory):
//!
//! ```text
//!   Python ──► Client.get(key) ──► key bytes ──► detach (no GIL) ──► shoal_client::Client
//!                                                                    ├─► region (local read)
//!   value / None ◄── bytes object ◄── attach ◄──────────────────────┴─► socket (network)
//! ```
//!
//! Multigets (`many.rs`) read what shared memory answers first, with the lock held: each value
//! is copied from the region straight into its `bytes` object; the rest go as above.
//!
//! `mr` is `shoal.mr`'s native half: MapReduce jobs whose map and combine are Python
//! functions, on shoal-mapreduce's elastic engine (docs/MAPREDUCE.md, "From Python").

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use shoal_client::{
    Error as ClientError, FillOptions, Hashing, Hits, Item, Lease, LeaseStored, Options, Pool, PoolOptions,
    Stored,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod invalidation;
mod many;
mod mr;

create_exception!(shoal, Error, PyException, "Base class of every error shoal.Client raises.");
create_exception!(shoal, IllegalInput, Error, "A key or argument the protocol cannot carry.");
create_exception!(shoal, ServerError, Error, "The server refused the request (its answer is the message).");
create_exception!(
    shoal,
    ConnectionFailed,
    Error,
    "The connection failed, broke or timed out; the next call connects again."
);
create_exception!(shoal, ProtocolError, Error, "The server answered something unexpected.");

pub(crate) fn raise(e: ClientError) -> PyErr {
    let message = e.to_string();
    match e {
        ClientError::InvalidKey(_) | ClientError::Address(_) | ClientError::Pool(_) => {
            IllegalInput::new_err(message)
        }
        ClientError::Server(_) => ServerError::new_err(message),
        ClientError::Io(_) | ClientError::Down(_) => ConnectionFailed::new_err(message),
        ClientError::Protocol(_) => ProtocolError::new_err(message),
        ClientError::Invalidation(_) | ClientError::Provisioning(_) => IllegalInput::new_err(message),
    }
}

/// Key bytes from a `str` (UTF-8) or `bytes`.
pub(crate) fn key_bytes<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    text_or_bytes(key, "keys")
}

/// Value bytes from `bytes` or a `str` (UTF-8).
fn value_bytes(value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    text_or_bytes(value, "values").map(Cow::into_owned)
}

/// The bytes of a `bytes` object, or the UTF-8 of a `str` (which Python caches in the
/// object), borrowed: a batch of keys is read without copying any.
fn text_or_bytes<'a>(object: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    // `str` first: Python code names its keys with text far more often than with bytes.
    if let Ok(s) = object.cast::<PyString>() {
        Ok(Cow::Borrowed(s.to_str()?.as_bytes()))
    } else if let Ok(b) = object.cast::<PyBytes>() {
        Ok(Cow::Borrowed(b.as_bytes()))
    } else {
        let type_name = object.get_type().name()?;
        Err(PyTypeError::new_err(format!("{what} are bytes or str, not {type_name}")))
    }
}

/// `host:port` (or `host:port:weight`) or a unix socket path from `("host", port)`,
/// `("host", port, weight)` or a string.
fn address(server: &Bound<'_, PyAny>) -> PyResult<String> {
    let host_port = |host: &str, port: u16| {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    };
    if let Ok((host, port)) = server.extract::<(String, u16)>() {
        return Ok(host_port(&host, port));
    }
    if let Ok((host, port, weight)) = server.extract::<(String, u16, f64)>() {
        return Ok(format!("{}:{weight}", host_port(&host, port)));
    }
    server.extract::<String>().map_err(|_| {
        PyTypeError::new_err(
            "a server is (host, port), (host, port, weight), \"host:port\" or a unix socket path",
        )
    })
}

/// A client for one memcached-protocol server, or for a pool of them. Reads come from a
/// server's shared memory when it runs on this host and offers it (see `is_local()`);
/// everything else, and reads of any other server, go over the network.
///
/// `Client(server, connect_timeout=5.0, timeout=5.0, local=True)`: one server, given as
/// `("host", port)`, `"host:port"` or a unix socket path; timeouts in seconds (None: wait
/// forever); `local=False` keeps every read on the network. Errors raise.
///
/// `Client(servers=[...], hashing="ketama_weighted", gutter=None, gutter_ttl=10,
/// dead_timeout=1.0, ...)`: a pool, with pymemcache's `HashClient` calls. Each key goes to
/// the server `hashing` names (`ketama_weighted`, `ketama`, `pymemcache`, `memcached_proxy`,
/// `ch3`, `weighted_ch3`, `jump`, `rendezvous`, `proteus`, `modulo`; servers may carry a
/// weight: `("host", port, weight)` or `"host:port:weight"`); multigets and `set_many` /
/// `delete_many` go to every server at once. A server that fails is skipped for
/// `dead_timeout` seconds: its keys' reads miss and its writes raise, or with
/// `gutter=[servers]` both go to that Gutter pool (fills with their TTL clamped to
/// `gutter_ttl` seconds). `udp=True` sends gets that are not local over UDP (to each
/// server's port number): a lost or reordered answer is a miss. `hot_replicas=R` spreads hot
/// keys (learned from the servers' `stats hotkeys` every `hot_refresh` seconds) over R
/// replicas, the owner and its successors (0: every server), as `shoal router` and the Rust
/// pool place them: reads ask one, writes delete the copies, and a write that stored refills
/// them (docs/design/hotkeys.md).
#[pyclass(module = "shoal", frozen)]
struct Client {
    inner: Mutex<Option<Pool>>,
    /// Where a multiget gathers its hits without the interpreter, kept for the next one (a
    /// batch of 100 small values would otherwise regrow its buffer a dozen times).
    hits: Mutex<Hits>,
    /// A pool (`servers=`) rather than one server: `stats()` and `version()` answer per server.
    pooled: bool,
}

/// The time in seconds an optional float names.
fn seconds(value: Option<f64>) -> PyResult<Option<Duration>> {
    value
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|e| IllegalInput::new_err(format!("timeout {s}: {e}")))
        })
        .transpose()
}

impl Client {
    /// Runs `call` on the client without the interpreter lock.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut Pool) -> shoal_client::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard: MutexGuard<'_, _> = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(client) => call(client).map_err(raise),
                None => Err(Error::new_err("the client is closed")),
            }
        })
    }

    fn store(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        store: impl FnOnce(&mut Pool, &[u8], &[u8]) -> shoal_client::Result<Stored> + Send,
    ) -> PyResult<Stored> {
        let (key, value) = (key_bytes(key)?, value_bytes(value)?);
        self.call(py, |c| store(c, &key, &value))
    }
}

fn bytes<'py>(py: Python<'py>, value: &[u8]) -> Bound<'py, PyAny> {
    PyBytes::new(py, value).into_any()
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (server=None, connect_timeout=Some(5.0), timeout=Some(5.0), local=true, *,
                        servers=None, hashing=None, gutter=None, gutter_ttl=10, dead_timeout=1.0, udp=false,
                        hot_replicas=None, hot_refresh=5.0))]
    #[allow(clippy::too_many_arguments)] // keyword arguments, as pymemcache's
    fn new(
        py: Python<'_>,
        server: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<f64>,
        timeout: Option<f64>,
        local: bool,
        servers: Option<Vec<Bound<'_, PyAny>>>,
        hashing: Option<&str>,
        gutter: Option<Vec<Bound<'_, PyAny>>>,
        gutter_ttl: u32,
        dead_timeout: f64,
        udp: bool,
        hot_replicas: Option<usize>,
        hot_refresh: f64,
    ) -> PyResult<Client> {
        let client =
            Options { connect_timeout: seconds(connect_timeout)?, io_timeout: seconds(timeout)?, local };
        let addresses = |list: Vec<Bound<'_, PyAny>>| list.iter().map(address).collect::<PyResult<Vec<_>>>();
        let (addresses, options) = match (server, servers) {
            (Some(server), None) => {
                // One server: errors raise, and the next call simply tries again.
                let options = PoolOptions {
                    hashing: Hashing::Jump,
                    client,
                    retry_interval: Duration::ZERO,
                    miss_when_down: false,
                    ..PoolOptions::default()
                };
                (vec![address(server)?], options)
            }
            (None, Some(servers)) => {
                let hashing = match hashing {
                    Some(name) => Hashing::parse(name).map_err(|e| IllegalInput::new_err(e.to_string()))?,
                    None => PoolOptions::default().hashing,
                };
                let retry_interval = seconds(Some(dead_timeout))?.unwrap_or_default();
                let gutter = gutter.map(addresses).transpose()?.unwrap_or_default();
                let options = PoolOptions {
                    hashing,
                    client,
                    retry_interval,
                    gutter,
                    gutter_ttl,
                    udp_gets: udp,
                    hot: match hot_replicas {
                        None => None,
                        Some(replicas) => Some(shoal_client::pool::HotOptions {
                            replicas,
                            refresh: seconds(Some(hot_refresh))?.unwrap_or_default(),
                            ..Default::default()
                        }),
                    },
                    ..PoolOptions::default()
                };
                (addresses(servers)?, options)
            }
            _ => return Err(PyTypeError::new_err("give either server (one) or servers=[...] (a pool)")),
        };
        let pooled = options.miss_when_down;
        let pool = py
            .detach(|| {
                let mut pool = Pool::new(&addresses, options)?;
                if !pooled {
                    pool.connect()?;
                }
                Ok(pool)
            })
            .map_err(raise)?;
        Ok(Client { inner: Mutex::new(Some(pool)), hits: Mutex::default(), pooled })
    }

    /// The server that owns `key` (`host:port` or a socket path).
    fn server_for(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<String> {
        let key = key_bytes(key)?;
        self.call(py, |c| c.server_for(&key).map(str::to_string))
    }

    /// The servers that hold `key` when it is hot: its owner first, then its replicas (the
    /// owner alone without `hot_replicas`).
    fn replicas_for(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let key = key_bytes(key)?;
        self.call(py, |c| c.replicas_for(&key))
    }

    /// Asks every server for its hot keys now (a server that fails or answers garbage keeps
    /// its last good list); the hot keys, hottest first, as `(key, requests per second)`.
    fn refresh_hot_keys<'py>(&self, py: Python<'py>) -> PyResult<Vec<(Bound<'py, PyAny>, f64)>> {
        let keys = self.call(py, |c| {
            c.refresh_hot_keys();
            Ok(c.hot_keys())
        })?;
        Ok(keys.iter().map(|(k, rate)| (bytes(py, k), *rate)).collect())
    }

    /// A `proteus` pool: turns on only the first `n` servers, starting a transition in which
    /// reads that miss on a key's new owner ask its old one (and copy what they find).
    fn set_active(&self, py: Python<'_>, n: usize) -> PyResult<()> {
        self.call(py, |c| c.set_active(n))
    }

    /// Ends a `set_active` transition: only the new owners are asked from now on.
    fn finish_transition(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |c| {
            c.finish_transition();
            Ok(())
        })
    }

    /// Follows the state file of `shoal provision --state`: a changed active count starts a
    /// transition, the end of the file's transition ends this pool's (call it every second or so).
    fn follow_provisioning(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        self.call(py, |c| c.follow_provisioning(&path))
    }

    /// The servers whose reads come from shared memory right now.
    fn local_servers(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.call(py, |c| Ok(c.local_servers()))
    }

    /// Whether reads are served from the server's shared memory right now.
    fn is_local(&self, py: Python<'_>) -> PyResult<bool> {
        self.call(py, |c| Ok(c.is_local()))
    }

    /// The value under `key` (bytes), or `default`.
    #[pyo3(signature = (key, default=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = key_bytes(key)?;
        Ok(match self.call(py, |c| c.get(&key))? {
            Some(item) => Some(bytes(py, &item.value)),
            None => default,
        })
    }

    /// `(value, cas)` for `key`, or `(default, cas_default)`.
    #[pyo3(signature = (key, default=None, cas_default=None))]
    fn gets<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        default: Option<Bound<'py, PyAny>>,
        cas_default: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let key = key_bytes(key)?;
        match self.call(py, |c| c.get(&key))? {
            Some(item) => (bytes(py, &item.value), item.cas).into_pyobject(py),
            None => (default, cas_default).into_pyobject(py),
        }
    }

    /// `{key: value}` for the keys that exist, keyed as given.
    fn get_many<'py>(&self, py: Python<'py>, keys: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        self.many(py, keys, |value, _, _| Ok(value.into_any()))
    }

    /// `{key: (value, cas)}` for the keys that exist, keyed as given.
    fn gets_many<'py>(&self, py: Python<'py>, keys: Vec<Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyDict>> {
        self.many(py, keys, |value, _, cas| Ok((value, cas).into_pyobject(py)?.into_any()))
    }

    /// `(value, flags)` for `key`, or None: the value with the client flags it was stored with,
    /// which say how to decode it (`shoal.django` stores pickles and integers under flags).
    fn get_flagged<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let key = key_bytes(key)?;
        let item = self.call(py, |c| c.get(&key))?;
        item.map(|item| (bytes(py, &item.value), item.flags).into_pyobject(py)).transpose()
    }

    /// `{key: (value, flags)}` for the keys that exist, keyed as given.
    fn get_many_flagged<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.many(py, keys, |value, flags, _| Ok((value, flags).into_pyobject(py)?.into_any()))
    }

    /// A meta get, `mg <key> <flags>` (`flags` as memcached takes them: `"v c f"`, `"v t"`):
    /// `(line, value)`, the answer's status line (`"VA 2 c7 f0"`, `"HD"`, `"EN"`) and its value
    /// (bytes, with `v`; else None), or None for a quiet (`q`) miss. A pool reads a hot key
    /// whose flags a copy answers as its owner would (`v c f s k O q u`) from one of its
    /// replicas, as `get` does. The key is given as itself (UTF-8), never base64 (`b`).
    #[pyo3(signature = (key, flags="v"))]
    fn meta_get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        flags: &str,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let key = key_bytes(key)?;
        let reply = self.call(py, |c| c.meta_get(&key, flags))?;
        reply.map(|r| (r.line, r.value.map(|v| bytes(py, &v))).into_pyobject(py)).transpose()
    }

    /// Stores `value` under `key`; True.
    #[pyo3(signature = (key, value, expire=0, noreply=None, flags=None))]
    fn set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<bool> {
        let _ = noreply; // every call waits for its answer, so results are always real
        let stored = self.store(py, key, value, |c, k, v| c.set(k, v, flags.unwrap_or(0), expire))?;
        Ok(stored == Stored::Stored)
    }

    /// Stores every `{key: value}`, on every server at once; the keys that were not stored (a
    /// list).
    #[pyo3(signature = (values, expire=0, noreply=None, flags=None))]
    fn set_many<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyDict>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let _ = noreply;
        let objects: Vec<Bound<'py, PyAny>> = values.keys().iter().collect();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = values
            .iter()
            .map(|(k, v)| Ok((key_bytes(&k)?.into_owned(), value_bytes(&v)?)))
            .collect::<PyResult<_>>()?;
        let failed = self.call(py, |c| {
            let items: Vec<(&[u8], &[u8])> =
                pairs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())).collect();
            c.set_many(&items, flags.unwrap_or(0), expire)
        })?;
        let by_bytes: HashMap<&[u8], &Bound<'py, PyAny>> =
            pairs.iter().zip(&objects).map(|((k, _), o)| (k.as_slice(), o)).collect();
        Ok(failed.iter().filter_map(|k| by_bytes.get(k.as_slice()).map(|o| (*o).clone())).collect())
    }

    /// Stores only if `key` is absent; whether it was stored.
    #[pyo3(signature = (key, value, expire=0, noreply=None, flags=None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<bool> {
        let _ = noreply;
        Ok(self.store(py, key, value, |c, k, v| c.add(k, v, flags.unwrap_or(0), expire))? == Stored::Stored)
    }

    /// Stores only if `key` is present; whether it was stored.
    #[pyo3(signature = (key, value, expire=0, noreply=None, flags=None))]
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<bool> {
        let _ = noreply;
        Ok(self.store(py, key, value, |c, k, v| c.replace(k, v, flags.unwrap_or(0), expire))?
            == Stored::Stored)
    }

    /// Appends to an existing value; whether there was one.
    #[pyo3(signature = (key, value, expire=0, noreply=None, flags=None))]
    fn append(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<bool> {
        let _ = (expire, noreply, flags); // memcached ignores them for append
        Ok(self.store(py, key, value, |c, k, v| c.append(k, v))? == Stored::Stored)
    }

    /// Prepends to an existing value; whether there was one.
    #[pyo3(signature = (key, value, expire=0, noreply=None, flags=None))]
    fn prepend(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<bool> {
        let _ = (expire, noreply, flags);
        Ok(self.store(py, key, value, |c, k, v| c.prepend(k, v))? == Stored::Stored)
    }

    /// Stores if the item's unique is still `cas`: True stored, False changed meanwhile,
    /// None no such key.
    #[pyo3(signature = (key, value, cas, expire=0, noreply=None, flags=None))]
    #[allow(clippy::too_many_arguments)] // pymemcache's signature
    fn cas(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        cas: u64,
        expire: i64,
        noreply: Option<bool>,
        flags: Option<u32>,
    ) -> PyResult<Option<bool>> {
        let _ = noreply;
        Ok(match self.store(py, key, value, |c, k, v| c.cas(k, v, flags.unwrap_or(0), expire, cas))? {
            Stored::Stored => Some(true),
            Stored::Exists | Stored::NotStored => Some(false),
            Stored::NotFound => None,
        })
    }

    /// Marks `key` as written from this (replica) region until the invalidation of the write
    /// arrives, or `ttl` seconds pass (Scaling Memcache's remote markers). Call before writing
    /// the master database; delete the key after.
    #[pyo3(signature = (key, ttl=0))]
    fn set_remote_marker(&self, py: Python<'_>, key: &Bound<'_, PyAny>, ttl: i64) -> PyResult<()> {
        let key = key_bytes(key)?;
        self.call(py, |c| c.set_remote_marker(&key, ttl))
    }

    /// Whether `key` carries a remote marker: after a miss, read the master database then.
    fn has_remote_marker(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = key_bytes(key)?;
        self.call(py, |c| c.has_remote_marker(&key))
    }

    /// Deletes `key`; whether it existed. `hold=N` (a Shoal extension) also refuses `add` of
    /// the key for N seconds.
    #[pyo3(signature = (key, noreply=None, hold=0))]
    fn delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        noreply: Option<bool>,
        hold: u32,
    ) -> PyResult<bool> {
        let _ = noreply;
        let key = key_bytes(key)?;
        match hold {
            0 => self.call(py, |c| c.delete(&key)),
            seconds => self.call(py, |c| c.delete_hold(&key, seconds)),
        }
    }

    /// Facebook's lease read: `("hit", value, None)`, `("token", stale_or_None, token)` when
    /// this caller holds the key's lease, or `("hot", stale_or_None, None)` when another does.
    /// Stale values come only with `stale=True`.
    #[pyo3(signature = (key, stale=false))]
    fn lease_get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        stale: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let key = key_bytes(key)?;
        let value = |item: Option<Item>| item.map(|i| bytes(py, &i.value));
        match self.call(py, |c| c.lease_get(&key, stale))? {
            Lease::Hit(item) => ("hit", value(Some(item)), None::<u64>).into_pyobject(py),
            Lease::Token { token, stale } => ("token", value(stale), Some(token)).into_pyobject(py),
            Lease::HotMiss { stale } => ("hot", value(stale), None::<u64>).into_pyobject(py),
        }
    }

    /// Stores `value` under the lease `token` from `lease_get`: `"stored"`, `"stale_stored"`
    /// (the token was void but a stale value was replaced) or `"not_stored"`.
    #[pyo3(signature = (key, token, value, expire=0, flags=0))]
    fn lease_set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        token: u64,
        value: &Bound<'_, PyAny>,
        expire: i64,
        flags: u32,
    ) -> PyResult<&'static str> {
        let (key, value) = (key_bytes(key)?, value_bytes(value)?);
        Ok(match self.call(py, |c| c.lease_set(&key, token, &value, flags, expire))? {
            LeaseStored::Stored => "stored",
            LeaseStored::StaleStored => "stale_stored",
            LeaseStored::NotStored => "not_stored",
        })
    }

    /// The look-aside read with leases: the cached value; or, if this caller wins the key's
    /// lease, `fill()`'s value (bytes or str), stored; or the value another caller's fill
    /// stores, waited for up to `max_wait` seconds (a stale value instead if `stale_ok`).
    /// `fill` must not use this same client (the client is busy with this call).
    #[pyo3(signature = (key, fill, expire=0, stale_ok=false, max_wait=2.0))]
    fn get_or_fill<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        fill: Py<PyAny>,
        expire: i64,
        stale_ok: bool,
        max_wait: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = key_bytes(key)?;
        let max_wait = seconds(Some(max_wait))?.unwrap_or_default();
        let options = FillOptions { exptime: expire, accept_stale: stale_ok, max_wait };
        let filled = self.call(py, |c| {
            c.get_or_fill(&key, options, || Python::attach(|py| value_bytes(fill.bind(py).call0()?.as_any())))
        })?;
        Ok(bytes(py, &filled?))
    }

    /// Deletes every key, on every server at once; True, or ConnectionFailed naming the keys
    /// whose server could not be reached.
    #[pyo3(signature = (keys, noreply=None))]
    fn delete_many(
        &self,
        py: Python<'_>,
        keys: Vec<Bound<'_, PyAny>>,
        noreply: Option<bool>,
    ) -> PyResult<bool> {
        let _ = noreply;
        let raw: Vec<Cow<'_, [u8]>> = keys.iter().map(key_bytes).collect::<PyResult<_>>()?;
        let failed = self.call(py, |c| c.delete_many(&raw.iter().map(|k| &**k).collect::<Vec<_>>()))?;
        match failed.first() {
            None => Ok(true),
            Some(key) => Err(ConnectionFailed::new_err(format!(
                "{} deletes were not carried out (first: {:?}): their servers are down",
                failed.len(),
                String::from_utf8_lossy(key)
            ))),
        }
    }

    /// Adds `value` to a decimal value; the new value, or None without the key.
    #[pyo3(signature = (key, value, noreply=None))]
    fn incr(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: u64,
        noreply: Option<bool>,
    ) -> PyResult<Option<u64>> {
        let _ = noreply;
        let key = key_bytes(key)?;
        self.call(py, |c| c.incr(&key, value))
    }

    /// Subtracts `value` (stopping at 0); the new value, or None without the key.
    #[pyo3(signature = (key, value, noreply=None))]
    fn decr(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: u64,
        noreply: Option<bool>,
    ) -> PyResult<Option<u64>> {
        let _ = noreply;
        let key = key_bytes(key)?;
        self.call(py, |c| c.decr(&key, value))
    }

    /// Gives `key` a new expiry; whether it existed.
    #[pyo3(signature = (key, expire=0, noreply=None))]
    fn touch(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expire: i64,
        noreply: Option<bool>,
    ) -> PyResult<bool> {
        let _ = noreply;
        let key = key_bytes(key)?;
        self.call(py, |c| c.touch(&key, expire))
    }

    /// Invalidates every item, now or after `delay` seconds; True.
    #[pyo3(signature = (delay=0, noreply=None))]
    fn flush_all(&self, py: Python<'_>, delay: u32, noreply: Option<bool>) -> PyResult<bool> {
        let _ = noreply;
        self.call(py, |c| c.flush_all((delay > 0).then_some(delay)))?;
        Ok(true)
    }

    /// `stats [args]` as a dict of str to int, float or str; for a pool, a dict of such
    /// dicts keyed by server (a server that failed maps to None).
    #[pyo3(signature = (*args))]
    fn stats<'py>(&self, py: Python<'py>, args: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        let group = (!args.is_empty()).then(|| args.join(" "));
        let per_server = self.call(py, |c| Ok(c.stats(group.as_deref())))?;
        let to_dict = |stats: Vec<(String, String)>| -> PyResult<Bound<'py, PyDict>> {
            let dict = PyDict::new(py);
            for (name, value) in stats {
                if let Ok(n) = value.parse::<i64>() {
                    dict.set_item(name, n)?;
                } else if let Ok(x) = value.parse::<f64>() {
                    dict.set_item(name, x)?;
                } else {
                    dict.set_item(name, value)?;
                }
            }
            Ok(dict)
        };
        if !self.pooled {
            let (_, stats) = per_server.into_iter().next().expect("one server");
            return Ok(to_dict(stats.map_err(raise)?)?.into_any());
        }
        let all = PyDict::new(py);
        for (server, stats) in per_server {
            all.set_item(server, stats.ok().map(to_dict).transpose()?)?;
        }
        Ok(all.into_any())
    }

    /// The server's version (str); for a pool, a dict of versions keyed by server (None for
    /// a server that failed).
    fn version<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let versions = self.call(py, |c| Ok(c.versions()))?;
        if !self.pooled {
            let (_, version) = versions.into_iter().next().expect("one server");
            return Ok(PyString::new(py, &version.map_err(raise)?).into_any());
        }
        let all = PyDict::new(py);
        for (server, version) in versions {
            all.set_item(server, version.ok())?;
        }
        Ok(all.into_any())
    }

    /// Closes the connection (and unmaps the region); later calls raise.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc: Bound<'_, PyAny>,
        _value: Bound<'_, PyAny>,
        _tb: Bound<'_, PyAny>,
    ) {
        self.close(py);
    }
}

/// The native module, `shoal._shoal`; the `shoal` package (python/shoal/__init__.py) re-exports
/// its names beside the package's Python modules (`shoal.django`).
#[pymodule(name = "_shoal")]
fn shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_function(wrap_pyfunction!(invalidation::invalidation_message, m)?)?;
    m.add_function(wrap_pyfunction!(invalidation::invalidate, m)?)?;
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("IllegalInput", py.get_type::<IllegalInput>())?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    m.add("ConnectionFailed", py.get_type::<ConnectionFailed>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    mr::register(m)?;
    Ok(())
}
