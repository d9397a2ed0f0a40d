//! The near cache's way to its upstream (`shoal server --upstream`): a `shoal server` on an
//! application host whose region local clients read through shared memory, and whose misses
//! are fetched from a pool (through its router) and admitted. This module is the plain part —
//! connections, admission, the delete epochs, counters; `exec::near` calls it from the request
//! path (docs/design/near-cache.md).
//!
//! ```text
//!  get/gets/mg miss ──► Upstream::fetch_many ── `mg <key> v f t c k` per key, pipelined
//!        │    (a multiget's misses: one exchange)  ──► router or server (one Link per worker
//!        │    (deadline: --upstream-timeout;            at a time, pooled)
//!        │     down: 1 s of instant misses)
//!        ▼
//!  epoch(key) unchanged since before the fetch? ─no─► answered, not kept (a delete raced it)
//!        │ yes
//!  admits(key): all │ reuse (Ghost: second miss in the window) │ hot (this server's hot keys)
//!        │ yes
//!        ▼
//!  region: the value, the upstream's flags and CAS unique, expiry now + the smaller of
//!          --near-ttl and the upstream's remaining TTL
//!
//!  set/add/…/delete/incr/touch/gat/lease-set ──► invalidate(key) (epoch +1, local copy gone)
//!        ──► forwarded, the upstream's answer relayed ──► invalidate(key) again
//! ```

pub mod admit;
pub mod link;
pub mod listen;
pub mod owed;

use admit::{key_hash, Ghost, HotSnapshot, Policy};
use link::{parse_upstream, Address, Link};
use owed::OwedFile;
use shoal_proto::answer::{Limits, Shape};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an upstream that could not be reached is left alone: reads miss and writes fail
/// at once meanwhile, so a dead upstream costs each worker one timeout per second at most.
pub const DOWN_FOR: Duration = Duration::from_secs(1);

/// Idle connections kept for reuse (a worker holds one at a time, so this many workers).
const MAX_IDLE: usize = 64;

/// Deletes owed to the upstream at most ([`Upstream::owe_delete`]); past it, a delete the
/// upstream cannot take is refused (`SERVER_ERROR`), and nothing fetched is kept for a while.
pub const MAX_OWED: usize = 16_384;

/// How often the owed deletes are tried when no request comes to pay them.
const PAY_EVERY: Duration = Duration::from_millis(250);

/// Slots of the delete epochs (and of the lease epochs, and the lease reads): 512 KiB each.
const EPOCH_SLOTS: usize = 1 << 16;

/// How long a key stays "lease-read here" after its last `lease-get` through this near cache:
/// meanwhile a get's miss of it is not fetched, the `lease-get` that follows is the fill's
/// one pool request ([`Upstream::leaves_to_lease`]).
pub const LEASE_READ_WINDOW: Duration = Duration::from_secs(60);

/// In a lease-read note: the bit saying the upstream lacks the key (below it, the second).
const ABSENT: u32 = 1 << 31;

/// A key's fingerprint in a lease-read note (the note's high 32 bits).
fn lease_print(key: &[u8]) -> u64 {
    key_hash(key) >> 32
}

/// Why `--upstream` refuses the binary protocol: the text commands are the ones forwarded.
pub const TEXT_ONLY: &str = "--upstream: a near cache speaks the text protocol only (not -B binary or -S)";

/// `shoal server`'s near-cache flags.
#[derive(clap::Args, Debug, Clone)]
pub struct NearArgs {
    /// be a near cache in front of this router or server (host:port, or a unix socket path):
    /// a miss is fetched from it and admitted; writes and deletes go through to it
    /// (docs/design/near-cache.md)
    #[arg(long = "upstream", value_name = "ADDR")]
    pub upstream: Option<String>,
    /// which fetched values the near cache keeps: all, reuse (a key missed twice within a
    /// window) or hot (this server's hot keys)
    #[arg(long = "admit", value_name = "POLICY", default_value = "reuse", requires = "upstream")]
    pub admit: String,
    /// seconds an admitted value is kept at most: the bound on staleness if an invalidation
    /// is lost
    #[arg(long = "near-ttl", value_name = "SECONDS", default_value_t = 10, requires = "upstream",
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub near_ttl: u32,
    /// milliseconds an exchange with the upstream may take (connect included); a slower one
    /// is a miss for a read, an error for a write
    #[arg(long = "upstream-timeout", value_name = "MS", default_value_t = 1000, requires = "upstream",
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
    /// file of the deletes acknowledged but not yet taken by the upstream, replayed after a
    /// restart (default: the -e file's name with `.owed` added; without either, kept in memory)
    #[arg(long = "owed-deletes", value_name = "FILE", requires = "upstream")]
    pub owed_deletes: Option<PathBuf>,
    /// also listen on ADDR (host:port) for invalidations alone: a `delete` or `md` there drops
    /// the near copy and is not forwarded upstream (for the invalidator and the routers, which
    /// send the pool its own copy)
    #[arg(long = "invalidation-listen", value_name = "ADDR", requires = "upstream")]
    pub invalidation_listen: Option<String>,
}

/// The near cache's settings, checked.
#[derive(Clone, Debug)]
pub struct NearSettings {
    pub address: Address,
    pub admit: Policy,
    pub near_ttl: u32,
    pub timeout: Duration,
    /// Where owed deletes are kept (`None`: in memory only).
    pub owed_file: Option<PathBuf>,
    /// The invalidation listener's address (`--invalidation-listen`, [`listen`]).
    pub invalidation_listen: Option<String>,
}

impl NearArgs {
    /// The settings, if `--upstream` was given; `region_file` is `-e`'s, beside which owed
    /// deletes are kept unless `--owed-deletes` names a file.
    pub fn settings(&self, region_file: Option<&Path>) -> Result<Option<NearSettings>, String> {
        let Some(upstream) = &self.upstream else { return Ok(None) };
        let beside_region = || {
            region_file.map(|r| {
                let mut name = r.as_os_str().to_owned();
                name.push(".owed");
                PathBuf::from(name)
            })
        };
        Ok(Some(NearSettings {
            address: parse_upstream(upstream)?,
            admit: Policy::parse(&self.admit)?,
            near_ttl: self.near_ttl,
            timeout: Duration::from_millis(self.timeout_ms),
            owed_file: self.owed_deletes.clone().or_else(beside_region),
            invalidation_listen: self.invalidation_listen.clone(),
        }))
    }
}

/// Why the upstream did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpError {
    /// It could not be reached (now, or within the last [`DOWN_FOR`]).
    Unavailable(String),
    /// It answered something that is no answer to the request.
    BadAnswer(String),
}

impl std::fmt::Display for UpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpError::Unavailable(why) => write!(f, "upstream unavailable: {why}"),
            UpError::BadAnswer(why) => write!(f, "bad answer from upstream: {why}"),
        }
    }
}

/// Keys asked for in one exchange at most (a longer multiget takes several): bounds one
/// answer to this many values.
pub const FETCH_BATCH: usize = 64;

/// A value the upstream holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub flags: u32,
    /// Its CAS unique upstream (0: the upstream has CAS off).
    pub cas: u64,
    pub value: Vec<u8>,
    /// The seconds it has left upstream (`None`: it does not expire).
    pub ttl: Option<u32>,
}

impl Fetched {
    /// How long a near copy may live: `--near-ttl`, or less if the upstream's copy expires
    /// sooner (`None`: it expires within the second, not worth keeping).
    pub fn near_ttl(&self, near_ttl: u32) -> Option<u32> {
        let ttl = self.ttl.map_or(near_ttl, |t| t.min(near_ttl));
        (ttl > 0).then_some(ttl)
    }
}

/// The near cache's counters (`stats shoal`).
#[derive(Default)]
pub struct NearCounters {
    /// Misses looked up upstream, and those it held.
    pub fetches: AtomicU64,
    pub fetch_hits: AtomicU64,
    /// Values stored in the region, and those the policy turned away.
    pub admitted: AtomicU64,
    pub not_admitted: AtomicU64,
    /// Values not stored because a write or delete of their key came in meanwhile.
    pub raced: AtomicU64,
    /// Requests forwarded upstream (writes, deletes, leases, gat).
    pub forwarded: AtomicU64,
    /// Misses of keys lease-read here, not fetched: the `lease-get` that follows asks.
    pub left_to_lease: AtomicU64,
    /// Exchanges that failed: unreachable or too slow, and bad answers.
    pub unavailable: AtomicU64,
    pub bad_answers: AtomicU64,
    /// Deletes the upstream did not take when forwarded, and those it took later.
    pub deletes_owed: AtomicU64,
    pub deletes_paid: AtomicU64,
    /// Deletes answered `SERVER_ERROR` because they could not be owed: [`MAX_OWED`] were
    /// owed already, or the owed-deletes file could not be written.
    pub deletes_refused: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The upstream of a near cache.
pub struct Upstream {
    pub settings: NearSettings,
    idle: Mutex<Vec<Link>>,
    started: Instant,
    /// Nanoseconds after `started` until which the upstream is left alone (0: not down).
    down_until: AtomicU64,
    limits: Limits,
    ghost: Ghost,
    hot: HotSnapshot,
    /// Per slot of key hashes: bumped by every write or delete of a key in it.
    epochs: Box<[AtomicU64]>,
    /// Per slot: the epoch a `lease-get` forwarded for a key in it saw.
    leases: Box<[AtomicU64]>,
    /// Deletes forwarded that did not reach the upstream (`delete` requests), sent again before
    /// the next exchange, and their file; `owed_count` is their number (those being paid
    /// included), `paying` one worker sending them.
    owed: Mutex<Owed>,
    owed_count: AtomicUsize,
    paying: Mutex<()>,
    /// Nanoseconds after `started` until which nothing fetched is kept (a delete was refused).
    keep_nothing_until: AtomicU64,
    /// Per slot: the last key lease-read through here, as its fingerprint (high 32 bits),
    /// whether the upstream lacks it ([`ABSENT`]) and the second after `started` it was
    /// lease-read (the low 31 bits, + 1; 0: none).
    lease_reads: Box<[AtomicU64]>,
    pub counters: NearCounters,
    /// The invalidation listener's counters.
    pub invalidations: std::sync::Arc<listen::ListenCounters>,
}

/// The owed deletes.
#[derive(Default)]
struct Owed {
    /// Those not being paid now.
    deletes: Vec<Vec<u8>>,
    /// Those a worker is sending now.
    paying: usize,
    /// The file that keeps them all (`None`: memory only).
    file: Option<OwedFile>,
    /// A delete was refused since the owed deletes were last all paid.
    refused: bool,
}

impl Upstream {
    /// The upstream of `settings`; values of up to `max_value` bytes are accepted from it.
    /// The owed-deletes file an earlier run left is read (its deletes are sent before anything
    /// else); one that is not readable as such is an error naming it.
    pub fn open(settings: NearSettings, max_value: usize) -> Result<Upstream, String> {
        let up = Upstream::new(settings, max_value);
        if let Some(path) = &up.settings.owed_file {
            let (file, left) = OwedFile::open(path, &up.settings.address.to_string(), MAX_OWED)?;
            up.owed_count.store(left.len(), Ordering::Release);
            up.counters.deletes_owed.fetch_add(left.len() as u64, Ordering::Relaxed);
            *up.owed.lock().unwrap_or_else(|p| p.into_inner()) =
                Owed { deletes: left, file: Some(file), ..Owed::default() };
        }
        Ok(up)
    }

    /// The upstream of `settings`, with owed deletes in memory only (tests).
    pub fn new(settings: NearSettings, max_value: usize) -> Upstream {
        let slots = || (0..EPOCH_SLOTS).map(|_| AtomicU64::new(0)).collect();
        Upstream {
            settings,
            idle: Mutex::new(Vec::new()),
            started: Instant::now(),
            down_until: AtomicU64::new(0),
            limits: Limits { stat_lines: 0, ..Limits::values(max_value) },
            ghost: Ghost::default(),
            hot: HotSnapshot::default(),
            epochs: slots(),
            leases: slots(),
            lease_reads: slots(),
            owed: Mutex::new(Owed::default()),
            owed_count: AtomicUsize::new(0),
            paying: Mutex::new(()),
            keep_nothing_until: AtomicU64::new(0),
            counters: NearCounters::default(),
            invalidations: Default::default(),
        }
    }

    /// The upstream `--upstream` names, if any ([`Upstream::open`]).
    pub fn of(settings: Option<NearSettings>, max_value: usize) -> Result<Option<Box<Upstream>>, String> {
        settings.map(|s| Upstream::open(s, max_value).map(Box::new)).transpose()
    }

    /// Sends the owed deletes every [`PAY_EVERY`] while there are any and no request sent
    /// them, until `stopping` says so: the pool gets them soon after the upstream returns
    /// (or this near cache restarts), whether or not anyone reads through here.
    pub fn pay_in_background(&self, stopping: impl Fn() -> bool) {
        while !stopping() {
            std::thread::sleep(PAY_EVERY);
            let _ = self.pay_owed();
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Sends `request` and returns its whole answer of `shape`, on a pooled connection.
    pub fn exchange(&self, request: &[u8], shape: Shape) -> Result<Vec<u8>, UpError> {
        Ok(self.exchange_many(request, 1, shape)?.pop().unwrap_or_default())
    }

    /// Sends `request` (`count` pipelined requests) and returns their `count` answers of
    /// `shape`, on a pooled connection.
    /// Deletes owed from a failed forward are sent first: no answer of the upstream is read
    /// before it took them.
    pub fn exchange_many(&self, request: &[u8], count: usize, shape: Shape) -> Result<Vec<Vec<u8>>, UpError> {
        self.pay_owed()?;
        self.send(request, count, shape)
    }

    /// Fails at once while the upstream is left alone after a failure.
    fn not_down(&self) -> Result<(), UpError> {
        let until = self.down_until.load(Ordering::Relaxed);
        if until != 0 && self.now_ns() < until {
            bump(&self.counters.unavailable);
            return Err(UpError::Unavailable(format!(
                "{} did not answer a moment ago",
                self.settings.address
            )));
        }
        Ok(())
    }

    /// Notes a `delete` (the whole request) that did not reach the upstream: the near copy is
    /// gone and the invalidator's spool moved on, but the pool may still hold the old value,
    /// which a fetch would bring back here and keep until `--near-ttl`. So it is sent again
    /// before any other exchange (which thus never reads the pool before it took the delete),
    /// and kept in the owed-deletes file (flushed to the disk before this returns, so before
    /// the delete is acknowledged) for a restart to send. An error says why it could not be
    /// owed ([`MAX_OWED`] are, or the file failed): the caller refuses the delete.
    pub fn owe_delete(&self, request: &[u8]) -> Result<(), String> {
        let mut owed = self.owed.lock().unwrap_or_else(|p| p.into_inner());
        let refused = if owed.deletes.len() + owed.paying >= MAX_OWED {
            Some(format!(
                "near cache: {MAX_OWED} deletes are owed to the upstream {} already (unreachable too long)",
                self.settings.address
            ))
        } else {
            let written = owed.file.as_mut().map_or(Ok(()), |f| {
                f.append(request)
                    .map_err(|e| format!("near cache: owed-deletes file {}: {e}", f.path().display()))
            });
            written.err()
        };
        if let Some(why) = refused {
            // The delete's own sender tries again; until every owed delete is paid and a near
            // copy's life after, nothing fetched is kept (a fetch could bring the old value).
            owed.refused = true;
            self.keep_nothing_for_a_while();
            bump(&self.counters.deletes_refused);
            return Err(why);
        }
        owed.deletes.push(request.to_vec());
        self.owed_count.store(owed.deletes.len() + owed.paying, Ordering::Release);
        bump(&self.counters.deletes_owed);
        Ok(())
    }

    /// Deletes owed now.
    pub fn owed_now(&self) -> usize {
        self.owed_count.load(Ordering::Acquire)
    }

    /// Whether fetched values may be kept (not while owed deletes were lost for want of room).
    pub fn may_keep(&self) -> bool {
        self.now_ns() >= self.keep_nothing_until.load(Ordering::Relaxed)
    }

    /// Sends the owed deletes, [`FETCH_BATCH`] an exchange, until one fails to reach the
    /// upstream (those stay owed, and the error is returned). Any answer is taken as paid: a
    /// router that cannot pass a delete on spools it and reads nothing from that server until
    /// it has (docs/design/faults.md). One worker at a time: the others wait, so that none
    /// reads the upstream while a delete is on its way.
    fn pay_owed(&self) -> Result<(), UpError> {
        if self.owed_count.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let _paying = self.paying.lock().unwrap_or_else(|p| p.into_inner());
        let mut due = {
            let mut owed = self.owed.lock().unwrap_or_else(|p| p.into_inner());
            owed.paying = owed.deletes.len();
            std::mem::take(&mut owed.deletes)
        };
        let before = due.len();
        let mut result = Ok(());
        while !due.is_empty() {
            let n = due.len().min(FETCH_BATCH);
            if let Err(e) = self.send(&due[..n].concat(), n, Shape::Line) {
                result = Err(e);
                break;
            }
            self.counters.deletes_paid.fetch_add(n as u64, Ordering::Relaxed);
            due.drain(..n);
        }
        let paid = before - due.len();
        let mut owed = self.owed.lock().unwrap_or_else(|p| p.into_inner());
        owed.paying = 0;
        due.append(&mut owed.deletes);
        owed.deletes = due;
        if paid > 0 {
            // Some were paid: the file keeps the rest (a kill before this sends them twice).
            let Owed { deletes, file, .. } = &mut *owed;
            if let Some(Err(e)) = file.as_mut().map(|f| f.rewrite(deletes)) {
                eprintln!("shoal server: near cache: rewriting the owed-deletes file: {e}");
            }
        }
        if owed.deletes.is_empty() && std::mem::take(&mut owed.refused) {
            // A refused delete's sender sends it again now the upstream is back: until then
            // (a near copy's life at most), keep nothing fetched.
            self.keep_nothing_for_a_while();
        }
        self.owed_count.store(owed.deletes.len(), Ordering::Release);
        result
    }

    /// Keeps no fetched value for `--near-ttl` seconds (owed deletes were dropped).
    fn keep_nothing_for_a_while(&self) {
        let until = self.now_ns() + u64::from(self.settings.near_ttl) * 1_000_000_000;
        self.keep_nothing_until.fetch_max(until, Ordering::Relaxed);
    }

    /// One exchange on a pooled connection (no owed deletes first).
    fn send(&self, request: &[u8], count: usize, shape: Shape) -> Result<Vec<Vec<u8>>, UpError> {
        let c = &self.counters;
        self.not_down()?;
        let deadline = Instant::now() + self.settings.timeout;
        let pooled = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let link = match pooled {
            Some(link) => Ok(link),
            None => Link::open(&self.settings.address, self.settings.timeout),
        };
        let result = link.and_then(|mut link| {
            link.exchange(request, count, shape, &self.limits, deadline).map(|answers| (link, answers))
        });
        match result {
            Ok((link, answers)) => {
                self.down_until.store(0, Ordering::Relaxed);
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                if idle.len() < MAX_IDLE && link.is_drained() {
                    idle.push(link);
                }
                Ok(answers)
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                bump(&c.bad_answers);
                Err(UpError::BadAnswer(e.to_string()))
            }
            Err(e) => {
                bump(&c.unavailable);
                let until = self.now_ns() + DOWN_FOR.as_nanos() as u64;
                self.down_until.store(until, Ordering::Relaxed);
                Err(UpError::Unavailable(format!("{}: {e}", self.settings.address)))
            }
        }
    }

    /// Looks `key` up upstream: its value, flags, CAS unique and remaining TTL, or `None`.
    pub fn fetch(&self, key: &[u8]) -> Result<Option<Fetched>, UpError> {
        Ok(self.fetch_many(&[key])?.pop().flatten())
    }

    /// Looks `keys` (at most [`FETCH_BATCH`]) up upstream in one exchange: a meta get each,
    /// pipelined (`mg <key> v f t c k`: value, flags, remaining TTL, CAS unique, and the key,
    /// so that every answer is checked to be of the key asked). In the order asked.
    pub fn fetch_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Fetched>>, UpError> {
        debug_assert!(keys.len() <= FETCH_BATCH);
        let c = &self.counters;
        c.fetches.fetch_add(keys.len() as u64, Ordering::Relaxed);
        let mut request = Vec::with_capacity(keys.iter().map(|k| k.len() + 16).sum());
        for key in keys {
            request.extend_from_slice(b"mg ");
            request.extend_from_slice(key);
            request.extend_from_slice(b" v f t c k\r\n");
        }
        let answers = self.exchange_many(&request, keys.len(), Shape::Meta)?;
        let found: Result<Vec<_>, _> =
            keys.iter().zip(&answers).map(|(key, answer)| read_meta(key, answer)).collect();
        let found = found.inspect_err(|_| bump(&c.bad_answers))?;
        c.fetch_hits.fetch_add(found.iter().flatten().count() as u64, Ordering::Relaxed);
        Ok(found)
    }

    fn slot(key: &[u8]) -> usize {
        (key_hash(key) >> 16) as usize & (EPOCH_SLOTS - 1)
    }

    /// The delete epoch of `key`'s slot: a fetched value is kept only if this did not move
    /// while it was fetched.
    pub fn epoch(&self, key: &[u8]) -> u64 {
        self.epochs[Self::slot(key)].load(Ordering::Acquire)
    }

    /// Notes a write or delete of `key`: fetches in flight for it are not kept.
    pub fn invalidate(&self, key: &[u8]) {
        self.epochs[Self::slot(key)].fetch_add(1, Ordering::AcqRel);
    }

    /// Notes that a `lease-get` of `key` went upstream now.
    pub fn lease_taken(&self, key: &[u8]) {
        let slot = Self::slot(key);
        self.leases[slot].store(self.epochs[slot].load(Ordering::Acquire), Ordering::Release);
    }

    /// Whether no write or delete of `key` came through since its last forwarded `lease-get`.
    pub fn lease_unchanged(&self, key: &[u8]) -> bool {
        let slot = Self::slot(key);
        self.leases[slot].load(Ordering::Acquire) == self.epochs[slot].load(Ordering::Acquire)
    }

    /// Notes that a `lease-get` of `key` went upstream now, and whether the upstream lacked
    /// the value (`absent`: it answered a token or a hot miss): while both hold, its get
    /// misses are left to the `lease-get` that follows, for [`LEASE_READ_WINDOW`].
    pub fn note_lease_read(&self, key: &[u8], absent: bool) {
        let second = self.started.elapsed().as_secs().min(u64::from(ABSENT - 2)) + 1;
        let absent = if absent { u64::from(ABSENT) } else { 0 };
        self.lease_reads[Self::slot(key)].store(lease_print(key) << 32 | absent | second, Ordering::Relaxed);
    }

    /// Notes whether the upstream now lacks `key` (a delete went through: true; a write, a
    /// `lease-set` stored or a fetch that found it: false), if the key is lease-read here.
    pub fn note_absent(&self, key: &[u8], absent: bool) {
        let slot = &self.lease_reads[Self::slot(key)];
        let noted = slot.load(Ordering::Relaxed);
        if noted >> 32 == lease_print(key) {
            let flag = u64::from(ABSENT);
            let new = if absent { noted | flag } else { noted & !flag };
            let _ = slot.compare_exchange(noted, new, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Whether a read's miss of `key` is answered as a miss without a fetch: the key was
    /// lease-read here within [`LEASE_READ_WINDOW`] and the upstream lacks it as far as this
    /// near cache knows, so its reader's `lease-get`, which follows, asks the pool once (a
    /// token, a hot miss, or the value after all) instead of a fetch and a lease. Counted. A
    /// miss is never stale; a key the upstream holds is fetched as usual.
    pub fn leaves_to_lease(&self, key: &[u8]) -> bool {
        let noted = self.lease_reads[Self::slot(key)].load(Ordering::Relaxed);
        let second = noted & u64::from(ABSENT - 1);
        let left = second != 0
            && noted & u64::from(ABSENT) != 0
            && noted >> 32 == lease_print(key)
            && self.started.elapsed().as_secs() + 1 < second + LEASE_READ_WINDOW.as_secs();
        if left {
            bump(&self.counters.left_to_lease);
        }
        left
    }

    /// Whether the policy keeps a value of `key` that was just missed; `hot` lists this
    /// server's hot keys (asked at most once a second).
    pub fn admits(&self, key: &[u8], hot: impl FnOnce() -> Vec<Vec<u8>>) -> bool {
        let admitted = match self.settings.admit {
            Policy::All => true,
            Policy::Reuse => self.ghost.seen_or_note(key_hash(key)),
            Policy::Hot => self.hot.contains(key, hot),
        };
        bump(if admitted { &self.counters.admitted } else { &self.counters.not_admitted });
        admitted
    }

    /// Counts a value not kept because its key changed while it was fetched.
    pub fn raced(&self) {
        bump(&self.counters.raced);
    }

    /// Counts a request forwarded.
    pub fn forwarded(&self) {
        bump(&self.counters.forwarded);
    }

    /// `stats settings` lines: where the upstream is (clients take a local miss to the
    /// server when they see `near_upstream`), the policy and the TTL.
    pub fn settings_stats(&self, out: &mut Vec<u8>) {
        let s = &self.settings;
        let line = format!(
            "STAT near_upstream {}\r\nSTAT near_admit {}\r\nSTAT near_ttl {}\r\nSTAT near_upstream_timeout_ms {}\r\n",
            s.address,
            s.admit.name(),
            s.near_ttl,
            s.timeout.as_millis()
        );
        out.extend_from_slice(line.as_bytes());
        if let Some(address) = &s.invalidation_listen {
            out.extend_from_slice(format!("STAT near_invalidation_listen {address}\r\n").as_bytes());
        }
    }

    /// `stats shoal` lines: the counters.
    pub fn counter_stats(&self, out: &mut Vec<u8>) {
        let c = &self.counters;
        for (name, n) in [
            ("near_fetches", &c.fetches),
            ("near_fetch_hits", &c.fetch_hits),
            ("near_admitted", &c.admitted),
            ("near_not_admitted", &c.not_admitted),
            ("near_raced", &c.raced),
            ("near_forwarded", &c.forwarded),
            ("near_left_to_lease", &c.left_to_lease),
            ("near_deletes_owed", &c.deletes_owed),
            ("near_deletes_paid", &c.deletes_paid),
            ("near_deletes_refused", &c.deletes_refused),
            ("near_upstream_unavailable", &c.unavailable),
            ("near_upstream_bad_answers", &c.bad_answers),
        ] {
            out.extend_from_slice(format!("STAT {name} {}\r\n", n.load(Ordering::Relaxed)).as_bytes());
        }
        out.extend_from_slice(format!("STAT near_deletes_owed_now {}\r\n", self.owed_now()).as_bytes());
        let taken = self.invalidations.deletes.load(Ordering::Relaxed);
        out.extend_from_slice(format!("STAT near_invalidations {taken}\r\n").as_bytes());
    }
}

/// The value of `key` in a framed answer to `mg <key> v f t c k`: `EN` (a miss), or `VA <n>`
/// with every flag asked for, the key the one asked, and the `n`-byte block.
pub fn read_meta(key: &[u8], answer: &[u8]) -> Result<Option<Fetched>, UpError> {
    let bad = |why: &str| {
        UpError::BadAnswer(format!("{why}: {:?}", String::from_utf8_lossy(&answer[..answer.len().min(120)])))
    };
    let end = answer.windows(2).position(|w| w == b"\r\n").ok_or_else(|| bad("no line"))?;
    let line = &answer[..end];
    if shoal_proto::answer::is_error_line(line) {
        return Err(bad("an error"));
    }
    let mut words = line.split(|&b| b == b' ');
    let (mut flags, mut cas, mut ttl, mut named) = (None, None, None, None);
    let size = match words.next() {
        Some(b"EN") => None,
        Some(b"VA") => {
            Some(words.next().and_then(number::<usize>).ok_or_else(|| bad("a VA without a size"))?)
        }
        _ => return Err(bad("unexpected answer")),
    };
    for word in words {
        let (&flag, value) = word.split_first().ok_or_else(|| bad("an empty flag"))?;
        match flag {
            b'f' => flags = Some(number::<u32>(value).ok_or_else(|| bad("bad flags"))?),
            b'c' => cas = Some(number::<u64>(value).ok_or_else(|| bad("bad CAS unique"))?),
            b't' if value == b"-1" => ttl = Some(None),
            b't' => ttl = Some(Some(number::<u32>(value).ok_or_else(|| bad("bad TTL"))?)),
            b'k' => named = Some(value),
            _ => {}
        }
    }
    if named.is_some_and(|k| k != key) {
        return Err(bad("a value of another key"));
    }
    let Some(size) = size else { return Ok(None) };
    if named.is_none() {
        return Err(bad("a value without its key"));
    }
    let (Some(flags), Some(cas), Some(ttl)) = (flags, cas, ttl) else {
        return Err(bad("a value without the flags, CAS unique and TTL asked for"));
    };
    let data = &answer[end + 2..];
    if data.len() != size + 2 || !data.ends_with(b"\r\n") {
        return Err(bad("a value block of another size"));
    }
    Ok(Some(Fetched { flags, cas, value: data[..size].to_vec(), ttl }))
}

fn number<T: std::str::FromStr>(word: &[u8]) -> Option<T> {
    std::str::from_utf8(word).ok()?.parse().ok()
}

#[cfg(test)]
mod tests;
