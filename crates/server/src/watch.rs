//! memcached's `watch`: connections that turned into streams of log lines (items fetched,
//! stored, evicted), in memcached's line formats.
//!
//! Events come in as plain data: the executors call [`Logs::fetched`] and [`Logs::stored`]
//! (with a [`StoreEvent`] built only when someone watches), the regions call [`EvictionLog`].
//! Nothing here knows the executors.
//!
//! ```text
//!  worker executing a request ──► Logs::wants(kind)? ──no──► nothing (one relaxed load)
//!                                        │ yes
//!                                        ▼
//!            format the line once ──► each watcher of that kind: its queue (≤ 256 KiB),
//!                                     or `skipped` + 1 if full (a slow watcher never blocks)
//!  the watcher's own worker, every few ms ──► queue ──► socket
//! ```

use shoal_proto::crawler::{push_uriencoded, watch};
use shoal_proto::push_u64;
use shoal_region::{EvictionObserver, IndexedItem, Lookup, OpError, Writer};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lines a watcher may have waiting (memcached's `LOGGER_WATCHER_BUF_SIZE`); past it, lines
/// for it are dropped and counted.
pub const WATCHER_BUFFER: usize = 256 << 10;
/// Watchers at once (memcached's `WATCHER_LIMIT`).
pub const WATCHER_LIMIT: usize = 20;

/// One watcher: the kinds it asked for and the lines waiting for it.
pub struct Watcher {
    kinds: u16,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    lines: Vec<u8>,
    /// Lines dropped since the last one queued: announced as `skipped=<n>` before the next.
    skipped: u64,
}

impl Watcher {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves the waiting lines to the end of `out`.
    pub fn take(&self, out: &mut Vec<u8>) {
        let mut queue = self.queue();
        if out.is_empty() {
            std::mem::swap(out, &mut queue.lines);
        } else {
            out.extend_from_slice(&queue.lines);
            queue.lines.clear();
        }
    }
}

/// Every watcher, and the counters `stats` reports (`log_watchers`, `log_watcher_sent`,
/// `log_watcher_skipped`).
#[derive(Default)]
pub struct Logs {
    /// The kinds some watcher asked for: all a request pays when nobody watches is this load.
    kinds: AtomicU32,
    watchers: Mutex<Vec<Arc<Watcher>>>,
    /// The number of the next line (memcached's `gid`).
    gid: AtomicU64,
    sent: AtomicU64,
    skipped: AtomicU64,
}

impl Logs {
    fn watchers(&self) -> MutexGuard<'_, Vec<Arc<Watcher>>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether some watcher wants lines of `kind`.
    #[inline]
    pub fn wants(&self, kind: u16) -> bool {
        self.kinds.load(Ordering::Relaxed) & u32::from(kind) != 0
    }

    /// A new watcher of `kinds`, or memcached's answer when there are too many.
    pub fn add(&self, kinds: u16) -> Result<Arc<Watcher>, &'static str> {
        let mut all = self.watchers();
        if all.len() >= WATCHER_LIMIT {
            return Err("WATCHER_TOO_MANY log watcher limit reached");
        }
        let watcher = Arc::new(Watcher { kinds, queue: Mutex::default() });
        all.push(watcher.clone());
        self.kinds.fetch_or(u32::from(kinds), Ordering::Relaxed);
        Ok(watcher)
    }

    /// Forgets a watcher (its connection closed).
    pub fn remove(&self, watcher: &Arc<Watcher>) {
        let mut all = self.watchers();
        all.retain(|w| !Arc::ptr_eq(w, watcher));
        let kinds = all.iter().fold(0, |k, w| k | u32::from(w.kinds));
        self.kinds.store(kinds, Ordering::Relaxed);
    }

    /// `(log_watchers, log_watcher_sent, log_watcher_skipped)`.
    pub fn counts(&self) -> (usize, u64, u64) {
        (self.watchers().len(), self.sent.load(Ordering::Relaxed), self.skipped.load(Ordering::Relaxed))
    }

    /// Queues a line of `kind` for every watcher of it: `ts=<s>.<µs> gid=<n> ` then what
    /// `body` writes, then `\n`.
    pub fn log(&self, kind: u16, body: impl FnOnce(&mut Vec<u8>)) {
        let mut line = Vec::with_capacity(160);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        // memcached prints the microseconds without leading zeros (`%d`): so does this.
        line.extend_from_slice(b"ts=");
        push_u64(&mut line, now.as_secs());
        line.push(b'.');
        push_u64(&mut line, u64::from(now.subsec_micros()));
        line.extend_from_slice(b" gid=");
        push_u64(&mut line, self.gid.fetch_add(1, Ordering::Relaxed) + 1);
        line.push(b' ');
        body(&mut line);
        line.push(b'\n');
        for watcher in self.watchers().iter().filter(|w| w.kinds & kind != 0) {
            let mut queue = watcher.queue();
            if queue.lines.len() + line.len() + 32 > WATCHER_BUFFER {
                queue.skipped += 1;
                self.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if queue.skipped > 0 {
                let skipped = std::mem::take(&mut queue.skipped);
                queue.lines.extend_from_slice(b"skipped=");
                push_u64(&mut queue.lines, skipped);
                queue.lines.push(b'\n');
            }
            queue.lines.extend_from_slice(&line);
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Logs a read for `watch fetchers`: `type=item_get key=… status=found|not_found|flushed|
    /// expired clsid=… cfd=… size=…` (clsid 1, the one class, for an item found; 0 otherwise).
    /// `conn`: the connection that read (`None` for a datagram).
    #[inline]
    pub fn fetched(&self, conn: Option<u64>, key: &[u8], found: &Result<Lookup, OpError>) {
        // Only the check is on every read's path; the line is made out of line.
        if self.wants(watch::FETCHERS) {
            self.log_fetched(conn, key, found);
        }
    }

    #[cold]
    fn log_fetched(&self, conn: Option<u64>, key: &[u8], found: &Result<Lookup, OpError>) {
        let (status, size): (&[u8], usize) = match found {
            Ok(Lookup::Hit(info)) => (b"found", info.value_len),
            Ok(Lookup::Flushed) => (b"flushed", 0),
            Ok(Lookup::Expired) => (b"expired", 0),
            Ok(Lookup::Missing) | Err(_) => (b"not_found", 0),
        };
        self.log(watch::FETCHERS, |line| {
            line.extend_from_slice(b"type=item_get ");
            push_key(line, key);
            line.extend_from_slice(b" status=");
            line.extend_from_slice(status);
            line.extend_from_slice(if size > 0 || status == b"found" { b" clsid=1" } else { b" clsid=0" });
            push_cfd(line, conn);
            line.extend_from_slice(b" size=");
            push_u64(line, size as u64);
        });
    }

    /// Logs, for `watch fetchers`, the lookup memcached's stores make before storing (its
    /// `do_store_item` reads the key first, without bumping it): `key` looked up in `writer`
    /// only when someone watches.
    pub fn store_lookup(&self, conn: Option<u64>, key: &[u8], writer: &Writer) {
        if self.wants(watch::FETCHERS) {
            self.fetched(conn, key, &writer.read(key, &mut Vec::new(), false));
        }
    }

    /// Logs a store for `watch mutations`: `type=item_store key=… status=… cmd=… ttl=… clsid=1
    /// cfd=… size=…`; `ttl` is seconds left (0: never expires; 4294967295 for one that
    /// expires on arrival). `event` is asked for only if someone watches.
    #[inline]
    pub fn stored<'k>(&self, conn: Option<u64>, event: impl FnOnce() -> StoreEvent<'k>) {
        if !self.wants(watch::MUTATIONS) {
            return;
        }
        let event = event();
        let ttl = match event.expiry {
            Some(0) => 0,
            Some(at) => at.wrapping_sub(event.now),
            None => u32::MAX,
        };
        self.log(watch::MUTATIONS, |line| {
            line.extend_from_slice(b"type=item_store ");
            push_key(line, event.key);
            line.extend_from_slice(b" status=");
            line.extend_from_slice(event.status.name());
            line.extend_from_slice(b" cmd=");
            line.extend_from_slice(event.cmd);
            line.extend_from_slice(b" ttl=");
            push_u64(line, u64::from(ttl));
            line.extend_from_slice(b" clsid=1");
            push_cfd(line, conn);
            line.extend_from_slice(b" size=");
            push_u64(line, event.size as u64);
        });
    }
}

impl Logs {
    /// Logs a connection opened or closed for `watch connevents`, as memcached does:
    /// `type=conn_new rip=… rport=… transport=local|tcp cfd=…`, and for a close `type=conn_close`
    /// with ` reason=…` before `cfd`. `peer`: the client's address (`None`: a unix socket, which
    /// memcached shows as `rip=unix rport=0`).
    pub fn connection(&self, event: ConnEvent, peer: Option<SocketAddr>, cfd: u64) {
        if !self.wants(watch::CONNEVENTS) {
            return;
        }
        self.log(watch::CONNEVENTS, |line| {
            line.extend_from_slice(match event {
                ConnEvent::Opened => b"type=conn_new rip=",
                ConnEvent::Closed(_) => b"type=conn_close rip=",
            });
            match peer {
                Some(addr) => {
                    line.extend_from_slice(addr.ip().to_string().as_bytes());
                    line.extend_from_slice(b" rport=");
                    push_u64(line, u64::from(addr.port()));
                    line.extend_from_slice(b" transport=tcp");
                }
                None => line.extend_from_slice(b"unix rport=0 transport=local"),
            }
            if let ConnEvent::Closed(reason) = event {
                line.extend_from_slice(b" reason=");
                line.extend_from_slice(reason.name());
            }
            push_cfd(line, Some(cfd));
        });
    }
}

/// A connection event for [`Logs::connection`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnEvent {
    Opened,
    Closed(CloseReason),
}

/// Why a connection closed, as memcached's `conn_close` line names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloseReason {
    /// A protocol error, or the socket failed (memcached's default reason).
    #[default]
    Error,
    /// The client closed or sent `quit`.
    Normal,
    /// Kicked by `-o idle_timeout`.
    IdleTimeout,
    /// `shutdown`, or the server stopping.
    Shutdown,
}

impl CloseReason {
    fn name(self) -> &'static [u8] {
        match self {
            CloseReason::Error => b"error",
            CloseReason::Normal => b"normal",
            CloseReason::IdleTimeout => b"idle_timeout",
            CloseReason::Shutdown => b"shutdown",
        }
    }
}

/// `key=<uri-encoded key>`.
fn push_key(line: &mut Vec<u8>, key: &[u8]) {
    line.extend_from_slice(b"key=");
    push_uriencoded(line, key);
}

/// `cfd=<descriptor>`: the connection's (0 for a datagram's).
fn push_cfd(line: &mut Vec<u8>, conn: Option<u64>) {
    line.extend_from_slice(b" cfd=");
    push_u64(line, conn.unwrap_or(0));
}

/// What a store did, as `watch mutations` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreStatus {
    Stored,
    NotStored,
    Exists,
    NotFound,
    TooLarge,
    NoMemory,
}

impl StoreStatus {
    /// The status of a store the region refused.
    pub fn of_error(e: &OpError) -> StoreStatus {
        match e {
            OpError::ValueTooLarge { .. } => StoreStatus::TooLarge,
            _ => StoreStatus::NoMemory,
        }
    }

    fn name(self) -> &'static [u8] {
        match self {
            StoreStatus::Stored => b"stored",
            StoreStatus::NotStored => b"not_stored",
            StoreStatus::Exists => b"exists",
            StoreStatus::NotFound => b"not_found",
            StoreStatus::TooLarge => b"too_large",
            StoreStatus::NoMemory => b"no_memory",
        }
    }
}

/// A store, for [`Logs::stored`].
pub struct StoreEvent<'a> {
    pub key: &'a [u8],
    /// memcached's command name: `set add replace append prepend cas`.
    pub cmd: &'a [u8],
    pub status: StoreStatus,
    /// The new item's absolute expiry (0: never; `None`: expired on arrival).
    pub expiry: Option<u32>,
    /// The region's clock, which the TTL is counted from.
    pub now: u32,
    /// The value's length.
    pub size: usize,
}

/// Logs evictions for `watch evictions`: `type=eviction key=… fetch=yes|no ttl=<seconds left,
/// -1: never> la=<seconds since last access> clsid=1 size=<value length>`. Installed on every
/// tenant's region; costs one load per eviction while nobody watches.
pub struct EvictionLog(pub Arc<Logs>);

impl EvictionObserver for EvictionLog {
    fn listening(&self) -> bool {
        self.0.wants(watch::EVICTIONS)
    }

    fn item_evicted(&self, item: &IndexedItem<'_>, now: u32) {
        let info = &item.info;
        self.0.log(watch::EVICTIONS, |line| {
            line.extend_from_slice(b"type=eviction ");
            push_key(line, item.key);
            line.extend_from_slice(if info.fetched { b" fetch=yes" } else { b" fetch=no" });
            line.extend_from_slice(b" ttl=");
            if info.expiry == 0 {
                line.extend_from_slice(b"-1");
            } else {
                push_u64(line, u64::from(info.expiry.saturating_sub(now)));
            }
            line.extend_from_slice(b" la=");
            // An access time the writer does not know (before a restart) counts as now.
            let last_access = if info.last_access == 0 { now } else { info.last_access };
            push_u64(line, u64::from(now.saturating_sub(last_access)));
            line.extend_from_slice(b" clsid=1 size=");
            push_u64(line, info.value_len as u64);
        });
    }
}
