//! What every thread shares: the tenants and their regions, the settings, the clock, the
//! counters, the connections `stats conns` lists, and how the server is asked to stop.
//!
//! The bottom of the crate: it holds the parts ([`Tenants`], [`Hints`], [`Logs`], …) but
//! calls up into nothing, so every module above (the launcher, the listeners, the connections,
//! the executors) can take a [`Shared`] without a circle back.

use crate::auth::Users;
use crate::config::Settings;
use crate::counters::Counters;
use crate::digest::ServerDigest;
use crate::hints::{Hints, LocalReads};
use crate::tenants::{TenantCounters, Tenants};
use crate::tls::Tls;
use crate::watch::Logs;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The server clock: Unix time plus the offset `debugtime` added (test mode only).
pub struct Clock {
    started: u32,
    offset: AtomicU32,
}

fn unix_now() -> u32 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as u32)
}

impl Clock {
    /// A clock starting now, with no offset.
    pub(crate) fn new() -> Clock {
        Clock { started: unix_now(), offset: AtomicU32::new(0) }
    }

    /// Server time in Unix seconds.
    pub fn now(&self) -> u32 {
        unix_now().wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// When the server started.
    pub fn started(&self) -> u32 {
        self.started
    }

    /// Moves the clock forward and lets the regions see it at once.
    pub fn advance(&self, seconds: u32, tenants: &Tenants) {
        self.offset.fetch_add(seconds, Ordering::Relaxed);
        tenants.tick(self.now());
    }
}

/// How the server is asked to stop.
pub mod stop {
    pub const RUNNING: u8 = 0;
    /// SIGINT, SIGTERM, `shutdown`.
    pub const NOW: u8 = 1;
    /// SIGUSR1, `shutdown graceful`.
    pub const GRACEFUL: u8 = 2;
}

/// What a connection is doing, as memcached's `stats conns` names its states.
pub mod conn_state {
    /// Accepted; nothing received yet.
    pub const NEW_CMD: u8 = 0;
    /// Waiting for the next request (or the rest of a command line).
    pub const READ: u8 = 1;
    /// Executing requests: what the connection asking `stats conns` shows.
    pub const PARSE_CMD: u8 = 2;
    /// Its command line is in, the value block it announced is still arriving.
    pub const NREAD: u8 = 3;
    /// Waiting for the client to take its answers.
    pub const MWRITE: u8 = 4;
    /// A watcher, or a key dump in progress.
    pub const WATCH: u8 = 5;

    /// memcached's name of a state.
    pub fn name(state: u8) -> &'static str {
        match state {
            NEW_CMD => "conn_new_cmd",
            READ => "conn_read",
            PARSE_CMD => "conn_parse_cmd",
            NREAD => "conn_nread",
            MWRITE => "conn_mwrite",
            _ => "conn_watch",
        }
    }
}

/// One open connection, as `stats conns` shows it.
pub struct ConnInfo {
    pub addr: String,
    /// The listening address it came in on (`tcp:…`, `unix:…`).
    pub listen_addr: String,
    /// Server time of its last command.
    pub last_cmd: AtomicU64,
    /// What it is doing, as `stats conns` names it ([`conn_state`]).
    pub state: AtomicU8,
}

impl ConnInfo {
    /// A connection just accepted, that has sent nothing yet.
    pub fn new(addr: String, listen_addr: String, now: u32) -> ConnInfo {
        ConnInfo {
            addr,
            listen_addr,
            last_cmd: AtomicU64::new(u64::from(now)),
            state: AtomicU8::new(conn_state::NEW_CMD),
        }
    }
}

/// What every thread shares.
pub struct Shared {
    /// The partitions of memory and their regions (one, `default`, without `--tenants`).
    pub tenants: Tenants,
    /// Per-tenant counters, laid out as [`Shared::counters`]: one row per worker, UDP and
    /// local reads, one entry per tenant.
    pub tenant_counters: Vec<Box<[TenantCounters]>>,
    pub settings: Settings,
    pub clock: Clock,
    /// One set per worker, one for UDP, and one for reads clients served themselves through
    /// shared memory (see [`Shared::local_reads`]).
    pub counters: Vec<Counters>,
    /// Clients' hints areas: what they read through shared memory.
    pub hints: Hints,
    /// The listening sockets, for `stats conns`: descriptor and address.
    pub listening: Vec<(u64, String)>,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub verbosity: AtomicU32,
    /// The memory limit `cache_memlimit` set, in bytes (0: none, the region's size).
    pub memlimit: AtomicU64,
    pub conns: Mutex<BTreeMap<u64, Arc<ConnInfo>>>,
    /// A [`stop`] value.
    pub stop: AtomicU8,
    /// Who may authenticate with SASL (`-S`).
    pub sasl_users: Users,
    /// Who may authenticate with an ascii token (`-Y`).
    pub ascii_users: Users,
    /// The keys held, as a Proteus digest (`--digest-keys`).
    pub digest: Option<Arc<ServerDigest>>,
    /// TLS for TCP connections (`-Z`).
    pub tls: Option<Arc<Tls>>,
    /// `watch` connections and the lines waiting for them.
    pub logs: Arc<Logs>,
    /// Whether `lru_crawler metadump` and `crawl` may run (`lru_crawler enable`/`disable`).
    pub crawler_enabled: AtomicBool,
    /// The keys read most (`stats hotkeys`, `-o hotkeys`).
    pub hotkeys: crate::hotkeys::HotKeys,
    /// `stats detail`'s per-prefix counts (`-D`, `stats detail on`).
    pub prefixes: crate::detail::PrefixStats,
    /// The near cache's upstream (`--upstream`; [`crate::upstream`]).
    pub upstream: Option<Box<crate::upstream::Upstream>>,
    /// The data path's counts (`stats shoal`; [`crate::uring_options`]).
    pub io: crate::uring_options::IoStats,
}

impl Shared {
    /// Asks every thread to stop.
    pub fn request_stop(&self, how: u8) {
        let _ = self.stop.compare_exchange(stop::RUNNING, how, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The counters that clients' reads through shared memory are folded into: the last row.
    pub fn local_reads(&self) -> LocalReads<'_> {
        let row = self.settings.threads + 1;
        LocalReads { counters: &self.counters[row], tenant_counters: &self.tenant_counters[row] }
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) != stop::RUNNING
    }
}
