//! The writer face: the one process (the server) that changes a region, from many threads.
//!
//! ```text
//!  op(key) ──► find (optimistic, no lock) ──► decide (memcached semantics)
//!          ──► reserve space in the active segment of the item's time class (atomic bump)
//!          ──► write the item there (invisible: nothing points to it yet)
//!          ──► lock the key's two candidate buckets ──► check nothing changed since `find`
//!          ──► store the slot (publish) ──► unlock ──► release the reservation
//! ```
//!
//! Bucket locks are never held while taking the pool mutex, and space is reserved before any
//! bucket is locked, so eviction (which runs under the pool mutex and takes bucket locks) can
//! never wait on a thread that waits on it.
//!
//! In-process state (free list, FIFO of sealed segments, active segment per time class) is
//! rebuilt from the segment table at attach, which is O(segments), independent of the number
//! of items: a warm restart serves every item at once.

use crate::error::{OpError, RegionError};
use crate::expiry::{absolute_expiry, is_expired, TimeClasses};
use crate::hints::Location;
use crate::key::check_key;
use crate::layout::{
    derived_cas, filler_size, filler_word, item_bytes, state, ItemHeader, Layout, Marks, SegmentMeta, Slot,
    BUCKET_SLOTS, ITEM_CAS_BYTES, ITEM_EXPIRY_OFFSET, ITEM_HEADER_BYTES, MAGIC, MAX_KEY_LEN, NEVER,
    SEALED_OFFSET, SLOT_ACCESSED,
};
use crate::mapping::prefetch_line;
use crate::region::{Found, ItemInfo, KeyHash, Lookup, Region, ValueSink};
use crate::seqlock::{backoff, write_lock, write_try_lock, write_unlock};
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// How to build a new region.
#[derive(Clone, Debug)]
pub struct Config {
    /// Total size of the region file (header, index and segments): the memory limit.
    pub region_bytes: usize,
    /// Largest item (12-byte header, key and value) accepted: memcached's `-I`.
    pub max_item_bytes: usize,
    /// Average item size (key + value + 12) the index is sized for; smaller items than this
    /// fill the index before the segments.
    pub avg_item_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { region_bytes: 64 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 }
    }
}

impl Config {
    /// The layout this configuration produces.
    pub fn layout(&self) -> Result<Layout, RegionError> {
        Layout::plan(self.region_bytes, self.max_item_bytes, self.avg_item_bytes)
    }
}

/// Result of a storage command, with memcached's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// Stored.
    Stored,
    /// A condition (`add`, `replace`, `append`, `prepend`) was not met.
    NotStored,
    /// `cas`: the item changed since the client read it.
    Exists,
    /// `cas`: there is no such item.
    NotFound,
}

/// Result of `incr`/`decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delta {
    /// The new value.
    Value(u64),
    /// No such item.
    NotFound,
    /// The stored value is not a decimal number that fits 64 bits.
    NonNumeric,
}

/// Counters of the store, mostly as memcached's `stats` names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Items the index points to (expired ones until their segment is reclaimed).
    pub items: u64,
    /// Bytes those items occupy in segments.
    pub bytes: u64,
    /// Items ever stored.
    pub total_items: u64,
    /// Live items dropped to make room.
    pub evictions: u64,
    /// Evicted items that were never read.
    pub evicted_unfetched: u64,
    /// Expired items reclaimed without ever being read.
    pub expired_unfetched: u64,
    /// Dead (expired or flushed) items whose memory was reclaimed.
    pub reclaimed: u64,
    /// Live items dropped because both of a new key's buckets were full (included in
    /// `evictions`): the index, not memory, was the limit.
    pub index_evictions: u64,
    /// Segments emptied by eviction.
    pub segments_evicted: u64,
    /// Segments reclaimed whole because everything in them expired, was flushed or deleted.
    pub segments_reclaimed: u64,
    /// Segments in the region.
    pub segments: usize,
    /// Segments holding nothing.
    pub segments_free: usize,
    /// Size of one segment.
    pub segment_bytes: usize,
    /// Size of the index.
    pub index_bytes: usize,
    /// Size of the whole region (the memory limit).
    pub region_bytes: usize,
}

const NO_SEGMENT: u32 = u32::MAX;

/// Process-local segment bookkeeping, rebuilt from the segment table at attach.
struct Pool {
    free: Vec<usize>,
    /// Sealed segments, oldest first: eviction order.
    fifo: VecDeque<usize>,
    /// Where read items evicted from the FIFO's head get their second chance.
    retained: Option<usize>,
}

/// Space reserved for one item.
#[derive(Clone, Copy, Debug)]
struct Reservation {
    segment: usize,
    offset: usize,
    size: usize,
}

/// What an [`Writer::update`] decided to do to a key, given its live item (if any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Change nothing.
    Keep,
    /// Store a new version of the item.
    Store(NewItem),
    /// Remove the item.
    Remove,
    /// Change the live item in place (no new version, same CAS).
    Mark(Mark),
}

/// A new version of an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewItem {
    pub value: Value,
    pub flags: u32,
    /// Absolute expiry (see [`absolute_expiry`]); `None`: expired on arrival, so the key is
    /// removed instead.
    pub expiry: Option<u32>,
    /// An explicit CAS unique; `None` gives the new version a fresh one.
    pub cas: Option<u64>,
    pub marks: Marks,
}

/// Where a new version's value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// The bytes given to the operation.
    Given,
    /// The live item's value, unchanged.
    Current,
    /// The live value, then the given bytes.
    Append,
    /// The given bytes, then the live value.
    Prepend,
    /// These bytes.
    Owned(Vec<u8>),
}

/// An in-place change of the live item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// A new absolute expiry (`Some(1)` for one already passed), or `None` to keep it.
    pub expiry: Option<u32>,
    pub marks: Marks,
    /// Mark it as read (memcached's `ITEM_FETCHED`, which also earns a second chance).
    pub fetched: bool,
}

/// What an update saw: the live item and its value (if the update asked for it).
#[derive(Clone, Copy, Debug)]
pub struct Current<'a> {
    pub info: ItemInfo,
    pub value: &'a [u8],
}

/// An internal decision: the change and the answer to give once it is carried out.
type Plan<T> = (Change, T);

/// What the index must hold for an operation's decision to still be right.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Anything: the operation does not depend on the current item (`set`).
    Any,
    /// Exactly the state `find` saw: absent, or this (bucket, slot, word, generation).
    Exactly(Option<(usize, usize, u64, u64)>),
}

fn state_of(f: &Found) -> (usize, usize, u64, u64) {
    (f.bucket, f.slot_index, f.word & !SLOT_ACCESSED, f.segment_gen)
}

/// Locks on a key's candidate buckets, taken in index order; released on drop.
struct BucketLocks<'a> {
    region: &'a Region,
    held: [(usize, u32); 2],
    count: usize,
}

impl Drop for BucketLocks<'_> {
    fn drop(&mut self) {
        for &(b, v) in &self.held[..self.count] {
            write_unlock(&self.region.bucket(b).version, v);
        }
    }
}

/// The writer face of a region. Share it between threads by reference (`&Writer` is `Sync`).
pub struct Writer {
    region: Region,
    path: PathBuf,
    evict: bool,
    pool: Mutex<Pool>,
    classes: TimeClasses,
    /// The open segment of each time class.
    active: Box<[AtomicU32]>,
    /// Server time of each index slot's last write or read (for meta's `l`), in process
    /// memory: 4 bytes a slot that would cost every item room in the region. Moves with its
    /// item; 0 (unknown) after a restart.
    last_access: Box<[AtomicU32]>,
}

/// memcached refreshes an item's access time on a read at most once a minute.
const ACCESS_UPDATE_INTERVAL: u32 = 60;

fn io_err<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(std::io::Error) -> RegionError + 'a {
    move |source| RegionError::Io { path: path.to_owned(), action, source }
}

fn random_u64s() -> std::io::Result<[u64; 2]> {
    let mut b = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok([u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap())])
}

fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as u32)
        .unwrap_or(0)
}

/// Takes the exclusive writer lock on the region file; the kernel drops it when the process
/// dies, which is how a successor tells a crashed writer from a live one.
fn lock_exclusive(file: &File) -> bool {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Size of a region file and whether it must match the header exactly (regular files do;
/// device files such as a PCI BAR may be larger than the region in them).
fn file_size(file: &mut File, path: &Path) -> Result<(usize, bool), RegionError> {
    let meta = file.metadata().map_err(io_err(path, "stat"))?;
    if meta.file_type().is_file() {
        Ok((meta.len() as usize, true))
    } else {
        Ok((file.seek(SeekFrom::End(0)).map_err(io_err(path, "size"))? as usize, false))
    }
}

impl Writer {
    /// Creates a new region file at `path` (which must not exist) and attaches to it.
    pub fn create(path: impl AsRef<Path>, config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        config.layout()?; // an impossible configuration must not leave an empty file behind
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_err(path, "create"))?;
        Self::format_file(file, path, config, evict)
    }

    /// Initialises a region in an existing file or device at `path`, discarding what was there.
    pub fn format(path: impl AsRef<Path>, config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "open"))?;
        Self::format_file(file, path, config, evict)
    }

    /// Creates a region in an anonymous memory file (memfd). Other processes open it through
    /// [`Writer::path`], a `/proc/<pid>/fd/<n>` path valid while this process lives.
    pub fn create_anonymous(config: &Config, evict: bool) -> Result<Writer, RegionError> {
        let name = c"shoal-region";
        // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        if fd < 0 {
            return Err(io_err(&path, "create memfd")(std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Self::format_file(file, &path, config, evict)
    }

    fn format_file(mut file: File, path: &Path, config: &Config, evict: bool) -> Result<Writer, RegionError> {
        if !lock_exclusive(&file) {
            return Err(RegionError::InUse { pid: Self::recorded_pid(&file, path) });
        }
        let mut layout = config.layout()?;
        let (size, regular) = file_size(&mut file, path)?;
        if regular {
            // Truncating to zero first also discards any old contents.
            file.set_len(0).map_err(io_err(path, "resize"))?;
            file.set_len(layout.region_bytes as u64).map_err(io_err(path, "resize"))?;
        } else if size < layout.region_bytes {
            return Err(RegionError::Config(format!(
                "device {} has {size} bytes, fewer than the {} requested",
                path.display(),
                layout.region_bytes
            )));
        }
        let [seed, cookie] = random_u64s().map_err(io_err(Path::new("/dev/urandom"), "read"))?;
        layout.hash_seed = seed;
        layout.cookie = cookie;
        let map =
            crate::mapping::Mapping::map(file, layout.region_bytes, true).map_err(io_err(path, "map"))?;
        if !regular {
            // A device keeps old bytes: clear the header, index and segment table.
            map.write(0, &vec![0u8; layout.segments_offset]);
        }
        let region = Region { map, layout };
        let h = region.header();
        region.layout.store(h);
        let now = unix_now();
        h.clock.store(now, Ordering::Relaxed);
        h.created_unix.store(now, Ordering::Relaxed);
        h.next_segment_gen.store(1, Ordering::Relaxed);
        h.clean.store(1, Ordering::Relaxed);
        // The magic goes last: a region whose creation was interrupted has none.
        h.magic.store(MAGIC, Ordering::Release);
        Self::start(region, path, evict, true)
    }

    /// Attaches to an existing region, recovering it if its last writer crashed.
    pub fn open(path: impl AsRef<Path>, evict: bool) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "open"))?;
        if !lock_exclusive(&file) {
            return Err(RegionError::InUse { pid: Self::recorded_pid(&file, path) });
        }
        let (size, exact) = file_size(&mut file, path)?;
        let region = Region::attach(file, size, true, path, exact)?;
        Self::start(region, path, evict, false)
    }

    /// Attaches to the region at `path` if there is one (it must match `config`), else
    /// creates it: what `shoal server -e <file>` does.
    pub fn open_or_create(
        path: impl AsRef<Path>,
        config: &Config,
        evict: bool,
    ) -> Result<Writer, RegionError> {
        let path = path.as_ref();
        if !path.exists() {
            return Self::create(path, config, evict);
        }
        let writer = Self::open(path, evict)?;
        let want = config.layout()?;
        let have = &writer.region.layout;
        if want.region_bytes != have.region_bytes || want.max_item_bytes != have.max_item_bytes {
            return Err(RegionError::Config(format!(
                "region {} holds {} MiB with items up to {} bytes, but {} MiB and {} bytes were \
                 asked for: start with the region's settings, or remove the file to start afresh",
                path.display(),
                have.region_bytes >> 20,
                have.max_item_bytes,
                want.region_bytes >> 20,
                want.max_item_bytes
            )));
        }
        Ok(writer)
    }

    fn recorded_pid(file: &File, path: &Path) -> u32 {
        let Ok(clone) = file.try_clone() else { return 0 };
        let size = file.metadata().map(|m| m.len() as usize).unwrap_or(0);
        Region::attach(clone, size, false, path, false)
            .map(|r| r.header().writer_pid.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    fn start(region: Region, path: &Path, evict: bool, fresh: bool) -> Result<Writer, RegionError> {
        let h = region.header();
        // Holding the file's exclusive lock proves that no other writer lives, so a locked
        // bucket or a reservation in flight can only be left over (a corrupt file, or a panic
        // while holding a bucket), even in a region marked clean; left as is, they would make
        // this writer wait forever. Recover then too.
        let crashed = !fresh && (h.clean.load(Ordering::Acquire) == 0 || Self::stale_writes(&region));
        h.clean.store(0, Ordering::Release);
        h.writer_pid.store(std::process::id(), Ordering::Relaxed);
        h.generation.fetch_add(1, Ordering::AcqRel);
        let classes = TimeClasses::for_segments(region.layout.segment_count);
        let slots = region.layout.bucket_count * BUCKET_SLOTS;
        let writer = Writer {
            region,
            path: path.to_owned(),
            evict,
            pool: Mutex::new(Pool { free: Vec::new(), fifo: VecDeque::new(), retained: None }),
            classes,
            active: (0..classes.count()).map(|_| AtomicU32::new(NO_SEGMENT)).collect(),
            last_access: (0..slots).map(|_| AtomicU32::new(0)).collect(),
        };
        if crashed {
            writer.recover();
        }
        writer.rebuild_pool();
        writer.tick(unix_now().max(writer.clock()));
        Ok(writer)
    }

    /// True if any bucket is locked or any segment has a reservation in flight: impossible
    /// after a clean detach. O(buckets), one word each.
    fn stale_writes(region: &Region) -> bool {
        let l = &region.layout;
        (0..l.bucket_count).any(|b| region.bucket(b).version.load(Ordering::Relaxed) & 1 == 1)
            || (0..l.segment_count).any(|s| region.meta(s).in_flight.load(Ordering::Relaxed) != 0)
    }

    /// After a crash: release stuck bucket locks, mark segments that may hold torn writes as
    /// not walkable, drop slots that point nowhere, and recount live items. O(index).
    fn recover(&self) {
        let l = &self.region.layout;
        for b in 0..l.bucket_count {
            let v = &self.region.bucket(b).version;
            let now = v.load(Ordering::Relaxed);
            if now & 1 == 1 {
                v.store(now.wrapping_add(1), Ordering::Release);
            }
        }
        for s in 0..l.segment_count {
            let m = self.region.meta(s);
            let st = m.state.load(Ordering::Relaxed);
            if st == state::OPEN || m.in_flight.load(Ordering::Relaxed) != 0 {
                m.walkable.store(0, Ordering::Relaxed);
            }
            if st == state::OPEN {
                m.write_offset.store(SEALED_OFFSET, Ordering::Relaxed);
                m.state.store(state::SEALED, Ordering::Relaxed);
            }
            m.in_flight.store(0, Ordering::Relaxed);
            m.live_items.store(0, Ordering::Relaxed);
            m.live_bytes.store(0, Ordering::Relaxed);
        }
        for b in 0..l.bucket_count {
            for cell in &self.region.bucket(b).slots {
                let Some(slot) = Slot::decode(cell.load(Ordering::Relaxed)) else { continue };
                match self.region.item_header(slot) {
                    Some(h)
                        if self.region.meta(slot.segment).state.load(Ordering::Relaxed) != state::FREE =>
                    {
                        self.account(slot.segment, h.size());
                    }
                    _ => cell.store(0, Ordering::Release),
                }
            }
        }
    }

    /// Rebuilds the free list and FIFO from the segment table; seals segments left open by a
    /// clean shutdown and finishes evictions a crash interrupted.
    fn rebuild_pool(&self) {
        let mut pool = self.pool();
        let mut sealed = Vec::new();
        let mut evicting = Vec::new();
        for s in 0..self.region.layout.segment_count {
            let m = self.region.meta(s);
            match m.state.load(Ordering::Acquire) {
                state::FREE => pool.free.push(s),
                state::OPEN => {
                    self.seal(s);
                    sealed.push(s);
                }
                state::SEALED => sealed.push(s),
                _ => evicting.push(s),
            }
        }
        sealed.sort_by_key(|&s| self.region.meta(s).generation.load(Ordering::Relaxed));
        pool.fifo.extend(sealed);
        for s in evicting {
            self.evict(&mut pool, s, 0);
        }
        // Pop low segment numbers first: a fresh region fills from its start.
        pool.free.reverse();
    }

    fn pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // -----------------------------------------------------------------------------------------
    // Public face

    /// The region file's path (for a memfd, the `/proc` path other processes open).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The region's geometry.
    pub fn layout(&self) -> &Layout {
        &self.region.layout
    }

    /// The locality cookie.
    pub fn cookie(&self) -> u64 {
        self.region.layout.cookie
    }

    /// How many times a writer has attached to this region.
    pub fn generation(&self) -> u64 {
        self.region.header().generation.load(Ordering::Acquire)
    }

    /// The server clock (Unix seconds) that expiry is judged by.
    pub fn clock(&self) -> u32 {
        self.region.header().clock.load(Ordering::Acquire)
    }

    /// Publishes the server clock (call about once a second; tests may jump it), applies a
    /// delayed flush whose time has come, and reclaims segments whose items are all dead.
    pub fn tick(&self, now: u32) {
        let mut pool = self.pool();
        let h = self.region.header();
        let flush_at = h.flush_at.load(Ordering::Acquire);
        if flush_at != 0 && flush_at <= now {
            self.flush_now(&mut pool);
        }
        h.clock.store(now, Ordering::Release);
        self.seal_expired_open_segments(&mut pool, now);
        self.reclaim_dead(&mut pool);
    }

    /// Seals open segments whose items have all expired, so that `reclaim_dead` frees them now
    /// rather than when their class next fills a segment. Pool lock held.
    fn seal_expired_open_segments(&self, pool: &mut Pool, now: u32) {
        for active in self.active.iter() {
            let s = active.load(Ordering::Acquire);
            if s == NO_SEGMENT {
                continue;
            }
            let max_expiry = self.region.meta(s as usize).max_expiry.load(Ordering::Acquire);
            let expired = max_expiry != 0 && max_expiry != NEVER && max_expiry <= now;
            if expired && active.compare_exchange(s, NO_SEGMENT, Ordering::AcqRel, Ordering::Acquire).is_ok()
            {
                self.seal(s as usize);
                pool.fifo.push_back(s as usize);
            }
        }
    }

    /// memcached's `flush_all [delay]`: every item stored before the flush takes effect is
    /// gone. `delay` follows the expiry rules (0 or negative: now).
    pub fn flush(&self, delay: i64) {
        let mut pool = self.pool();
        let h = self.region.header();
        match absolute_expiry(delay, self.clock()).filter(|&at| at != 0) {
            Some(at) => h.flush_at.store(at, Ordering::Release),
            None => {
                self.flush_now(&mut pool);
                self.reclaim_dead(&mut pool);
            }
        }
    }

    /// Reads `key`; on a hit its value is in `value`. Marks the item as read, which gives it
    /// a second chance at eviction.
    pub fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<Lookup, OpError> {
        self.read(key, value, true)
    }

    /// Starts loading the index buckets a lookup of `key` reads first (and this writer's
    /// access times beside them). A multiget calls it several keys ahead of its lookups, then
    /// [`Writer::prefetch_item`] a few keys ahead, so that their memory misses overlap.
    #[inline]
    pub fn prefetch_index(&self, key: &[u8]) {
        self.prefetch_lookup(&self.region.hash(key));
    }

    /// Starts loading what a lookup under `hash` touches before it reaches the item: the
    /// candidate buckets, and their access times (server memory, apart from the region).
    #[inline]
    fn prefetch_lookup(&self, hash: &KeyHash) {
        self.region.prefetch_buckets(hash);
        for &b in hash.candidates() {
            prefetch_line(&self.last_access[b * BUCKET_SLOTS]);
        }
    }

    /// Starts loading the item a lookup of `key` will copy, as its (already loaded) index
    /// buckets point to it.
    #[inline]
    pub fn prefetch_item(&self, key: &[u8]) {
        self.region.prefetch_items(&self.region.hash(key));
    }

    /// Reads `key` like [`Writer::get`]; `bump: false` leaves the item's read mark and access
    /// time as they were (meta's `u`). A hit reports the state before this read.
    pub fn read(&self, key: &[u8], value: &mut dyn ValueSink, bump: bool) -> Result<Lookup, OpError> {
        let hash = self.region.hash(key);
        // The access time is a separate miss: start it with the buckets' rather than after.
        self.prefetch_lookup(&hash);
        let (lookup, found) = self.region.get_hashed(key, &hash, value)?;
        let (Lookup::Hit(mut info), Some(f)) = (lookup, found) else { return Ok(lookup) };
        let access = &self.last_access[f.bucket * BUCKET_SLOTS + f.slot_index];
        info.last_access = access.load(Ordering::Relaxed);
        if bump {
            self.bump(f.bucket, f.slot_index, f.word, info.last_access);
        }
        Ok(Lookup::Hit(info))
    }

    /// Marks the slot read (the accessed bit, if it still holds `word`) and moves its access
    /// time on, at most every [`ACCESS_UPDATE_INTERVAL`] seconds (`last_access` is its current one).
    #[inline]
    fn bump(&self, bucket: usize, slot: usize, word: u64, last_access: u32) {
        if word & SLOT_ACCESSED == 0 {
            // A failed exchange means the slot changed meanwhile: nothing to mark.
            let cell = &self.region.bucket(bucket).slots[slot];
            let _ = cell.compare_exchange(word, word | SLOT_ACCESSED, Ordering::Relaxed, Ordering::Relaxed);
        }
        let now = self.clock();
        if now.saturating_sub(last_access) >= ACCESS_UPDATE_INTERVAL {
            self.last_access[bucket * BUCKET_SLOTS + slot].store(now, Ordering::Relaxed);
        }
    }

    /// Marks the item a reader found at `location` as read, as [`Writer::read`] does for its
    /// own hits (second chance in eviction, `h`, `l`), if the slot still holds what the reader
    /// saw. Locations come from clients' hints areas, so anything out of range is ignored.
    pub fn mark_read(&self, location: Location) {
        if location.bucket >= self.region.layout.bucket_count || location.slot >= BUCKET_SLOTS {
            return;
        }
        let (bucket, slot) = (location.bucket, location.slot);
        let word = self.region.bucket(bucket).slots[slot].load(Ordering::Relaxed);
        if Slot::decode(word).is_some() && word & !SLOT_ACCESSED == location.word & !SLOT_ACCESSED {
            self.bump(
                bucket,
                slot,
                word,
                self.last_access[bucket * BUCKET_SLOTS + slot].load(Ordering::Relaxed),
            );
        }
    }

    /// The general operation behind every other: finds the live item under `key` (its value
    /// too if `need_value`), lets `decide` choose a [`Change`] and an answer, and carries the
    /// change out only if the item is still the one `decide` saw (else it decides again).
    /// `given` is the value for [`Value::Given`], `Append` and `Prepend`.
    ///
    /// Returns the answer and, if a new version was stored, its CAS unique.
    pub fn update<T>(
        &self,
        key: &[u8],
        given: &[u8],
        need_value: bool,
        mut decide: impl FnMut(Option<Current<'_>>) -> (Change, T),
    ) -> Result<(T, Option<u64>), OpError> {
        check_key(key)?;
        let hash = self.region.hash(key);
        let mut current = Vec::new();
        loop {
            let sink: Option<&mut dyn ValueSink> = need_value.then_some(&mut current);
            let found = self.region.find(key, &hash, sink)?;
            let live = found.as_ref().and_then(|f| {
                let mut info = self.region.judge(f).hit()?;
                info.last_access =
                    self.last_access[f.bucket * BUCKET_SLOTS + f.slot_index].load(Ordering::Relaxed);
                Some(info)
            });
            let plan = decide(live.map(|info| Current { info, value: current.as_slice() }));
            let expect = Expect::Exactly(found.as_ref().map(state_of));
            if let Some(done) = self.execute(key, &hash, given, &current, plan, expect)? {
                return Ok(done);
            }
        }
    }

    /// memcached `set`. If it fails for lack of memory or size, the old value is removed.
    pub fn set(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        check_key(key)?;
        let hash = self.region.hash(key);
        let plan = (Change::Store(self.new_item(Value::Given, flags, exptime)), Store::Stored);
        match self.execute(key, &hash, value, &[], plan, Expect::Any) {
            Ok(stored) => Ok(stored.expect("unconditional").0),
            Err(e @ (OpError::ValueTooLarge { .. } | OpError::OutOfMemory)) => {
                // As memcached does for `set` only: a failed set must not leave the old value
                // readable, or the client would keep reading what it just tried to replace.
                self.execute(key, &hash, &[], &[], (Change::Remove, ()), Expect::Any)?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// A new version with a fresh CAS and no marks, expiring by memcached's `exptime` rules.
    fn new_item(&self, value: Value, flags: u32, exptime: i64) -> NewItem {
        let expiry = absolute_expiry(exptime, self.clock());
        NewItem { value, flags, expiry, cas: None, marks: Marks::default() }
    }

    /// Runs `update` for an operation that answers only its decision.
    fn apply<T>(
        &self,
        key: &[u8],
        given: &[u8],
        need_value: bool,
        mut decide: impl FnMut(Option<Current<'_>>) -> Plan<T>,
    ) -> Result<T, OpError> {
        self.update(key, given, need_value, |current| decide(current)).map(|(result, _)| result)
    }

    /// memcached `add`: store only if there is no live item. A lease placeholder or a delete
    /// hold-off (hidden, not stale) refuses it too; a value kept stale after a delete does not.
    pub fn add(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match current {
            Some(c) if c.info.marks.refuses_add() => (Change::Keep, Store::NotStored),
            _ => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `replace`: store only if there is a live item.
    pub fn replace(&self, key: &[u8], value: &[u8], flags: u32, exptime: i64) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match visible(current) {
            None => (Change::Keep, Store::NotStored),
            Some(_) => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `append`: add bytes after the live item's value, keeping its flags and expiry.
    pub fn append(&self, key: &[u8], value: &[u8]) -> Result<Store, OpError> {
        self.concat(key, value, Value::Append)
    }

    /// memcached `prepend`: add bytes before the live item's value.
    pub fn prepend(&self, key: &[u8], value: &[u8]) -> Result<Store, OpError> {
        self.concat(key, value, Value::Prepend)
    }

    fn concat(&self, key: &[u8], value: &[u8], how: Value) -> Result<Store, OpError> {
        self.apply(key, value, true, |current| match visible(current) {
            None => (Change::Keep, Store::NotStored),
            Some(c) => (Change::Store(NewItem::keeping(c.info, how.clone())), Store::Stored),
        })
    }

    /// memcached `cas`: store only if the live item's CAS unique is still `cas`.
    pub fn cas(
        &self,
        key: &[u8],
        value: &[u8],
        flags: u32,
        exptime: i64,
        cas: u64,
    ) -> Result<Store, OpError> {
        let item = self.new_item(Value::Given, flags, exptime);
        self.apply(key, value, false, |current| match visible(current) {
            None => (Change::Keep, Store::NotFound),
            Some(c) if c.info.cas != cas => (Change::Keep, Store::Exists),
            Some(_) => (Change::Store(item.clone()), Store::Stored),
        })
    }

    /// memcached `incr`: adds `delta`, wrapping at 2^64.
    pub fn incr(&self, key: &[u8], delta: u64) -> Result<Delta, OpError> {
        self.apply(key, &[], true, |current| counter_change(current, |n| n.wrapping_add(delta)))
    }

    /// memcached `decr`: subtracts `delta`, stopping at 0.
    pub fn decr(&self, key: &[u8], delta: u64) -> Result<Delta, OpError> {
        self.apply(key, &[], true, |current| counter_change(current, |n| n.saturating_sub(delta)))
    }

    /// memcached `delete`: true if a live item was removed. A lease record (hidden) goes too,
    /// so its token is void, but does not count as an item.
    pub fn delete(&self, key: &[u8]) -> Result<bool, OpError> {
        self.apply(key, &[], false, |current| match current {
            None => (Change::Keep, false),
            Some(c) => (Change::Remove, !c.info.marks.hidden),
        })
    }

    /// memcached `touch`: sets a live item's expiry; true if there was one.
    pub fn touch(&self, key: &[u8], exptime: i64) -> Result<bool, OpError> {
        let expiry = touch_expiry(exptime, self.clock());
        self.apply(key, &[], false, |current| match visible(current) {
            None => (Change::Keep, false),
            Some(c) => {
                (Change::Mark(Mark { expiry: Some(expiry), marks: c.info.marks, fetched: false }), true)
            }
        })
    }

    /// Counters and sizes.
    pub fn stats(&self) -> Stats {
        let l = &self.region.layout;
        let h = self.region.header();
        let (mut items, mut bytes) = (0u64, 0u64);
        for s in 0..l.segment_count {
            let m = self.region.meta(s);
            items += m.live_items.load(Ordering::Relaxed) as u64;
            bytes = bytes.saturating_add(m.live_bytes.load(Ordering::Relaxed)); // damaged tables too
        }
        let r = Ordering::Relaxed;
        Stats {
            items,
            bytes,
            total_items: h.total_items.load(r),
            evictions: h.evictions.load(r),
            evicted_unfetched: h.evicted_unfetched.load(r),
            expired_unfetched: h.expired_unfetched.load(r),
            reclaimed: h.reclaimed.load(r),
            index_evictions: h.index_evictions.load(r),
            segments_evicted: h.segments_evicted.load(r),
            segments_reclaimed: h.segments_expired.load(r),
            segments: l.segment_count,
            segments_free: self.pool().free.len(),
            segment_bytes: l.segment_bytes,
            index_bytes: l.index_bytes(),
            region_bytes: l.region_bytes,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Applying a decision

    /// Carries out a plan: `Ok(None)` if the index no longer matches `expect`, else the answer
    /// and the CAS unique of the version stored, if one was.
    fn execute<T>(
        &self,
        key: &[u8],
        hash: &KeyHash,
        given: &[u8],
        current: &[u8],
        (change, result): Plan<T>,
        expect: Expect,
    ) -> Result<Option<(T, Option<u64>)>, OpError> {
        match change {
            Change::Keep => Ok(Some((result, None))),
            Change::Store(NewItem { expiry: None, .. }) | Change::Remove => {
                let done = self.with_locked(key, hash, expect, |at| {
                    if let Some(f) = at {
                        self.unlink(f.bucket, f.slot_index);
                    }
                });
                Ok(done.then_some((result, None)))
            }
            Change::Mark(mark) => {
                let done = self.with_locked(key, hash, expect, |at| {
                    if let Some(f) = at {
                        self.mark(&f, mark);
                    }
                });
                Ok(done.then_some((result, None)))
            }
            Change::Store(NewItem { value, flags, expiry: Some(expiry), cas, marks }) => {
                let parts: [&[u8]; 2] = match &value {
                    Value::Given => [given, &[]],
                    Value::Current => [current, &[]],
                    Value::Append => [current, given],
                    Value::Prepend => [given, current],
                    Value::Owned(v) => [v, &[]],
                };
                let len = parts[0].len() + parts[1].len();
                let limit = self.region.layout.max_item_bytes;
                if item_bytes(key.len(), len, cas.is_some()) > limit {
                    return Err(OpError::ValueTooLarge { len, max: limit - ITEM_HEADER_BYTES - key.len() });
                }
                let header = ItemHeader {
                    key_len: key.len(),
                    value_len: len,
                    explicit_cas: cas.is_some(),
                    expiry,
                    flags,
                };
                let class = self.classes.of(expiry, self.clock());
                let r = self.reserve(class, header.size())?;
                self.write_item(r, &header, cas, key, parts);
                let new_cas = cas.unwrap_or_else(|| {
                    derived_cas(self.region.meta(r.segment).generation.load(Ordering::Relaxed), r.offset)
                });
                let word = Slot { tag: hash.tag, segment: r.segment, offset: r.offset }.encode();
                let mut linked = false;
                let done = self.with_locked(key, hash, expect, |at| {
                    linked = self.link(hash, at, word, marks);
                    if linked {
                        self.account(r.segment, r.size);
                        self.region.header().total_items.fetch_add(1, Ordering::Relaxed);
                    }
                });
                if !linked {
                    self.write_filler(r.segment, r.offset, r.size);
                }
                self.release(r.segment);
                if done && !linked {
                    return Err(OpError::OutOfMemory);
                }
                Ok(done.then_some((result, Some(new_cas))))
            }
        }
    }

    /// Changes a live item in place: expiry, marks, read mark. Its buckets are locked.
    fn mark(&self, f: &Found, mark: Mark) {
        if let Some(expiry) = mark.expiry {
            let item = self.region.item_offset(f.slot);
            self.region.map.u32_at(item + ITEM_EXPIRY_OFFSET).store(expiry, Ordering::Relaxed);
            self.region.meta(f.slot.segment).max_expiry.fetch_max(never_if_zero(expiry), Ordering::AcqRel);
        }
        let bucket = self.region.bucket(f.bucket);
        let marks = bucket.marks.load(Ordering::Relaxed);
        bucket.marks.store(mark.marks.put(marks, f.slot_index), Ordering::Relaxed);
        if mark.fetched {
            bucket.slots[f.slot_index].fetch_or(SLOT_ACCESSED, Ordering::Relaxed);
            self.last_access[f.bucket * BUCKET_SLOTS + f.slot_index].store(self.clock(), Ordering::Relaxed);
        }
    }

    /// Locks the key's buckets, finds its current slot, and runs `f` if that matches `expect`.
    fn with_locked(&self, key: &[u8], hash: &KeyHash, expect: Expect, f: impl FnOnce(Option<Found>)) -> bool {
        let _locks = self.lock_buckets(hash);
        let at = hash.candidates().iter().find_map(|&b| self.region.scan_bucket(b, key, hash.tag, None));
        let ok = match expect {
            Expect::Any => true,
            Expect::Exactly(state) => at.as_ref().map(state_of) == state,
        };
        if ok {
            f(at);
        }
        ok
    }

    fn lock_buckets(&self, hash: &KeyHash) -> BucketLocks<'_> {
        let mut order = hash.buckets;
        order.sort_unstable();
        let count = if order[0] == order[1] { 1 } else { 2 };
        let mut held = [(0, 0); 2];
        for i in 0..count {
            held[i] = (order[i], write_lock(&self.region.bucket(order[i]).version));
        }
        BucketLocks { region: &self.region, held, count }
    }

    /// Points the index at a new item: over the key's old slot if it has one, else into the
    /// emptier candidate bucket, else over an item evicted from a full bucket. Locks held.
    /// False if there is no room and eviction is disabled.
    fn link(&self, hash: &KeyHash, at: Option<Found>, word: u64, marks: Marks) -> bool {
        let (b, i) = match at {
            Some(f) => {
                self.unlink(f.bucket, f.slot_index);
                (f.bucket, f.slot_index)
            }
            None => match self.free_slot(hash) {
                Some(free) => free,
                None => return false,
            },
        };
        let bucket = self.region.bucket(b);
        bucket.marks.store(marks.put(bucket.marks.load(Ordering::Relaxed), i), Ordering::Relaxed);
        bucket.slots[i].store(word, Ordering::Release);
        self.last_access[b * BUCKET_SLOTS + i].store(self.clock(), Ordering::Relaxed);
        true
    }

    /// A free slot among the candidate buckets (the emptier one), making one if both are full
    /// (by evicting only if eviction is enabled).
    fn free_slot(&self, hash: &KeyHash) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize, usize)> = None; // (occupied, bucket, free slot)
        for &b in hash.candidates() {
            let mut occupied = 0;
            let mut free = None;
            for (i, cell) in self.region.bucket(b).slots.iter().enumerate() {
                match Slot::decode(cell.load(Ordering::Relaxed)) {
                    Some(_) => occupied += 1,
                    None => free = free.or(Some(i)),
                }
            }
            if let Some(i) = free {
                if best.is_none_or(|(o, _, _)| occupied < o) {
                    best = Some((occupied, b, i));
                }
            }
        }
        if let Some((_, b, i)) = best {
            return Some((b, i));
        }
        // Both buckets full: reuse the slot of a dead item, else move a resident to its other
        // bucket, else evict the oldest item not read since written (the index, not memory,
        // is the limit).
        let slots = || hash.candidates().iter().flat_map(|&b| (0..BUCKET_SLOTS).map(move |i| (b, i)));
        let word_at = |(b, i): (usize, usize)| self.region.bucket(b).slots[i].load(Ordering::Relaxed);
        let dead =
            slots().find(|&at| Slot::decode(word_at(at)).is_some_and(|s| self.live_header(s).is_none()));
        if let Some((b, i)) = dead {
            self.count_drop(word_at((b, i)), false);
            self.unlink(b, i);
            return Some((b, i));
        }
        if let Some(freed) = self.relocate_one(hash) {
            return Some(freed);
        }
        if !self.evict {
            return None; // no eviction (`-M`): the caller answers OutOfMemory
        }
        let age = |&at: &(usize, usize)| {
            let word = word_at(at);
            let generation = Slot::decode(word)
                .filter(|s| s.segment < self.region.layout.segment_count)
                .map_or(0, |s| self.region.meta(s.segment).generation.load(Ordering::Relaxed));
            (word & SLOT_ACCESSED != 0, generation)
        };
        let victim = slots().min_by_key(age).expect("a key has at least one bucket");
        self.count_drop(word_at(victim), true);
        self.region.header().index_evictions.fetch_add(1, Ordering::Relaxed);
        self.unlink(victim.0, victim.1);
        Some(victim)
    }

    /// Frees a slot in one of `hash`'s (full, locked) buckets by moving a resident item to its
    /// alternative bucket, if that bucket has room and is not held by another writer (waiting
    /// for it could deadlock: it is outside our lock order). The item is stored in its new
    /// place before it leaves the old one, and readers re-check on a miss (see `Region::find`).
    fn relocate_one(&self, hash: &KeyHash) -> Option<(usize, usize)> {
        let mut key = [0u8; MAX_KEY_LEN];
        for &b in hash.candidates() {
            for i in 0..BUCKET_SLOTS {
                let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                let Some(slot) = Slot::decode(word) else { continue };
                let Some(header) = self.region.item_header(slot) else { continue };
                let key = &mut key[..header.key_len];
                let item = self.region.item_offset(slot);
                self.region.map.read(item + header.key_offset(), key);
                let theirs = self.region.hash(key);
                let Some(&other) = theirs.candidates().iter().find(|&&c| c != b) else { continue };
                if hash.buckets.contains(&other) {
                    continue; // also full, and already ours
                }
                let version = &self.region.bucket(other).version;
                let Some(locked) = write_try_lock(version) else { continue };
                let target = self.region.bucket(other);
                let free =
                    target.slots.iter().position(|c| Slot::decode(c.load(Ordering::Relaxed)).is_none());
                if let Some(j) = free {
                    let source = self.region.bucket(b);
                    let marks = Marks::of(source.marks.load(Ordering::Relaxed), i);
                    target.marks.store(marks.put(target.marks.load(Ordering::Relaxed), j), Ordering::Relaxed);
                    target.slots[j].store(word, Ordering::Release);
                    source.slots[i].store(0, Ordering::Release);
                    let access = self.last_access[b * BUCKET_SLOTS + i].load(Ordering::Relaxed);
                    self.last_access[other * BUCKET_SLOTS + j].store(access, Ordering::Relaxed);
                }
                write_unlock(version, locked);
                if free.is_some() {
                    return Some((b, i));
                }
            }
        }
        None
    }

    /// Clears a slot and takes its item off its segment's live counts. Lock held.
    fn unlink(&self, b: usize, i: usize) {
        let cell = &self.region.bucket(b).slots[i];
        if let Some(slot) = Slot::decode(cell.load(Ordering::Relaxed)) {
            if let Some(h) = self.region.item_header(slot) {
                let m = self.region.meta(slot.segment);
                m.live_items.fetch_sub(1, Ordering::Relaxed);
                m.live_bytes.fetch_sub(h.size() as u64, Ordering::Relaxed);
            }
        }
        cell.store(0, Ordering::Release);
    }

    fn account(&self, segment: usize, size: usize) {
        let m = self.region.meta(segment);
        m.live_items.fetch_add(1, Ordering::Relaxed);
        m.live_bytes.fetch_add(size as u64, Ordering::Relaxed);
    }

    /// The header of the item a slot points to, if the item is alive: not flushed, not expired
    /// by the server clock.
    fn live_header(&self, slot: Slot) -> Option<ItemHeader> {
        let h = self.region.header();
        self.region.item_header(slot).filter(|header| {
            self.region.meta(slot.segment).generation.load(Ordering::Relaxed)
                >= h.flush_gen.load(Ordering::Acquire)
                && !is_expired(header.expiry, h.clock.load(Ordering::Acquire))
        })
    }

    /// Counts an item leaving the index to make room or because it died.
    fn count_drop(&self, word: u64, live: bool) {
        let h = self.region.header();
        let read = word & SLOT_ACCESSED != 0;
        if live {
            h.evictions.fetch_add(1, Ordering::Relaxed);
            if !read {
                h.evicted_unfetched.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            h.reclaimed.fetch_add(1, Ordering::Relaxed);
            if !read {
                h.expired_unfetched.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Segments

    /// Writes an item into reserved space, and raises its segment's latest expiry.
    fn write_item(
        &self,
        r: Reservation,
        header: &ItemHeader,
        cas: Option<u64>,
        key: &[u8],
        value: [&[u8]; 2],
    ) {
        let map = &self.region.map;
        let mut at = self.region.layout.segment_offset(r.segment) + r.offset;
        map.write(at, &header.encode());
        at += ITEM_HEADER_BYTES;
        if let Some(cas) = cas {
            map.write(at, &cas.to_le_bytes());
            at += ITEM_CAS_BYTES;
        }
        for part in [key, value[0], value[1]] {
            map.write(at, part);
            at += part.len();
        }
        self.region.meta(r.segment).max_expiry.fetch_max(never_if_zero(header.expiry), Ordering::AcqRel);
    }

    fn write_filler(&self, segment: usize, offset: usize, size: usize) {
        let at = self.region.layout.segment_offset(segment) + offset;
        self.region.map.write(at, &filler_word(size).to_le_bytes());
    }

    /// Reserves `size` bytes in the active segment of time class `class`, opening a new
    /// segment (and evicting, if need be) when it is full.
    fn reserve(&self, class: usize, size: usize) -> Result<Reservation, OpError> {
        loop {
            let seen = self.active[class].load(Ordering::Acquire);
            if seen != NO_SEGMENT {
                if let Some(r) = self.try_reserve(seen as usize, size) {
                    return Ok(r);
                }
            }
            let mut pool = self.pool();
            if self.active[class].load(Ordering::Acquire) != seen {
                continue; // another thread already rotated
            }
            if seen != NO_SEGMENT {
                self.active[class].store(NO_SEGMENT, Ordering::Release);
                self.seal(seen as usize);
                pool.fifo.push_back(seen as usize);
            }
            let s = self.take_free(&mut pool)?;
            self.open_segment(s);
            self.active[class].store(s as u32, Ordering::Release);
        }
    }

    /// Bump-allocates in segment `s`. The in-flight count is raised first, so an evictor that
    /// sees it at zero after sealing knows no reservation can still succeed.
    fn try_reserve(&self, s: usize, size: usize) -> Option<Reservation> {
        let m = self.region.meta(s);
        m.in_flight.fetch_add(1, Ordering::SeqCst);
        let offset = m.write_offset.fetch_add(size as u64, Ordering::SeqCst);
        let end = self.region.layout.segment_bytes as u64;
        if offset + size as u64 <= end {
            return Some(Reservation { segment: s, offset: offset as usize, size });
        }
        if offset < end {
            // This reservation straddles the end: fill the tail so the segment stays walkable.
            self.write_filler(s, offset as usize, (end - offset) as usize);
        }
        self.release(s);
        None
    }

    fn release(&self, s: usize) {
        self.region.meta(s).in_flight.fetch_sub(1, Ordering::Release);
    }

    fn open_segment(&self, s: usize) {
        let m = self.region.meta(s);
        let gen = self.region.header().next_segment_gen.fetch_add(1, Ordering::AcqRel);
        m.generation.store(gen, Ordering::Release);
        m.live_items.store(0, Ordering::Relaxed);
        m.live_bytes.store(0, Ordering::Relaxed);
        m.max_expiry.store(0, Ordering::Relaxed);
        m.walkable.store(1, Ordering::Relaxed);
        m.state.store(state::OPEN, Ordering::Release);
        m.write_offset.store(0, Ordering::SeqCst);
    }

    /// Stops appends to `s`; the unused tail becomes a filler. Pool lock held.
    fn seal(&self, s: usize) {
        let m = self.region.meta(s);
        let filled = m.write_offset.swap(SEALED_OFFSET, Ordering::SeqCst);
        let end = self.region.layout.segment_bytes as u64;
        if filled < end && filled.is_multiple_of(8) {
            self.write_filler(s, filled as usize, (end - filled) as usize);
        } else if filled < end {
            // Only a damaged segment table gets here: find its items through the index.
            m.walkable.store(0, Ordering::Relaxed);
        }
        m.state.store(state::SEALED, Ordering::Release);
    }

    /// A free segment: from the free list, else by reclaiming dead segments, else by evicting
    /// the oldest sealed segment (FIFO, with a second chance for items read since written).
    fn take_free(&self, pool: &mut Pool) -> Result<usize, OpError> {
        loop {
            if let Some(s) = pool.free.pop() {
                return Ok(s);
            }
            if self.reclaim_dead(pool) > 0 {
                continue;
            }
            if !self.evict {
                return Err(OpError::OutOfMemory);
            }
            let victim = match pool.fifo.pop_front() {
                Some(v) => v,
                None => self.seal_an_open_segment(pool).ok_or(OpError::OutOfMemory)?,
            };
            let budget = if pool.retained.is_some() { self.region.layout.segment_bytes / 2 } else { 0 };
            self.evict(pool, victim, budget);
            self.region.header().segments_evicted.fetch_add(1, Ordering::Relaxed);
            if pool.retained.is_none() && pool.fifo.len() >= 2 {
                if let Some(r) = pool.free.pop() {
                    self.open_segment(r);
                    pool.retained = Some(r);
                }
            }
        }
    }

    /// When every segment is open (a small region with many time classes), seal the oldest.
    fn seal_an_open_segment(&self, pool: &mut Pool) -> Option<usize> {
        let oldest_active = (0..self.active.len())
            .filter_map(|c| {
                let s = self.active[c].load(Ordering::Acquire);
                (s != NO_SEGMENT)
                    .then(|| (self.region.meta(s as usize).generation.load(Ordering::Relaxed), c))
            })
            .min();
        let s = match oldest_active {
            Some((_, c)) => self.active[c].swap(NO_SEGMENT, Ordering::AcqRel) as usize,
            None => pool.retained.take()?,
        };
        self.seal(s);
        Some(s)
    }

    /// Seals every open segment so that all items written so far fall below the new flush
    /// generation. Pool lock held.
    fn flush_now(&self, pool: &mut Pool) {
        let h = self.region.header();
        h.flush_at.store(0, Ordering::Release);
        for c in 0..self.active.len() {
            let s = self.active[c].swap(NO_SEGMENT, Ordering::AcqRel);
            if s != NO_SEGMENT {
                self.seal(s as usize);
                pool.fifo.push_back(s as usize);
            }
        }
        if let Some(r) = pool.retained.take() {
            self.seal(r);
            pool.fifo.push_back(r);
        }
        h.flush_gen.store(h.next_segment_gen.load(Ordering::Acquire), Ordering::Release);
    }

    /// Reclaims, whole, every sealed segment whose items are all dead: flushed, expired (by the
    /// segment's latest expiry, without looking at items one by one), or deleted. Returns how
    /// many segments were freed.
    fn reclaim_dead(&self, pool: &mut Pool) -> usize {
        let h = self.region.header();
        let flush_gen = h.flush_gen.load(Ordering::Acquire);
        let now = h.clock.load(Ordering::Acquire);
        let dead = |s: &usize| {
            let m: &SegmentMeta = self.region.meta(*s);
            // In-flight first: once it reads 0, every reservation made before the seal has
            // published its expiry and live count (and no new one can succeed), so they are
            // current; read before it, they may miss an item being written right now.
            let idle = m.in_flight.load(Ordering::Acquire) == 0;
            let max_expiry = m.max_expiry.load(Ordering::Acquire);
            m.generation.load(Ordering::Acquire) < flush_gen
                || (idle && max_expiry != NEVER && max_expiry <= now)
                || (idle && m.live_items.load(Ordering::Acquire) == 0)
        };
        let (dead, alive): (Vec<usize>, Vec<usize>) = pool.fifo.drain(..).partition(dead);
        pool.fifo.extend(alive);
        for &s in &dead {
            self.evict(pool, s, 0);
            h.segments_expired.fetch_add(1, Ordering::Relaxed);
        }
        dead.len()
    }

    /// Empties sealed segment `s` and frees it. Live items read since written are copied to
    /// the retained segment while `budget` bytes last; the rest leave the index.
    fn evict(&self, pool: &mut Pool, s: usize, mut budget: usize) {
        let l = &self.region.layout;
        let m = self.region.meta(s);
        m.state.store(state::EVICTING, Ordering::Release);
        let mut spins = 0;
        while m.in_flight.load(Ordering::Acquire) != 0 {
            backoff(&mut spins);
        }
        let mut walk = m.walkable.load(Ordering::Acquire) != 0;
        if walk {
            let base = l.segment_offset(s);
            let mut offset = 0;
            let mut key = [0u8; MAX_KEY_LEN];
            while offset + ITEM_HEADER_BYTES <= l.segment_bytes {
                let mut raw = [0u8; ITEM_HEADER_BYTES];
                self.region.map.read(base + offset, &mut raw);
                if let Some(size) = filler_size(u32::from_le_bytes(raw[..4].try_into().unwrap())) {
                    if size == 0 {
                        break; // never written: nothing beyond
                    }
                    offset += size;
                    continue;
                }
                let header = ItemHeader::decode(&raw);
                let size = header.size();
                if offset + size > l.segment_bytes {
                    break;
                }
                if header.key_len > MAX_KEY_LEN {
                    walk = false; // damaged: find the rest of its items through the index
                    break;
                }
                let key = &mut key[..header.key_len];
                self.region.map.read(base + offset + header.key_offset(), key);
                let hash = self.region.hash(key);
                let _locks = self.lock_buckets(&hash);
                for &b in hash.candidates() {
                    for i in 0..BUCKET_SLOTS {
                        let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                        if Slot::decode(word).is_some_and(|x| x.segment == s && x.offset == offset) {
                            self.evict_slot(pool, b, i, word, &mut budget);
                        }
                    }
                }
                offset += size;
            }
        }
        if walk && m.live_items.load(Ordering::Acquire) != 0 {
            walk = false; // the walk missed items (a damaged segment): scan the index for them
        }
        if !walk {
            // Possibly torn by a crash: find its items through the index instead.
            for b in 0..l.bucket_count {
                let version = &self.region.bucket(b).version;
                let locked = write_lock(version);
                for i in 0..BUCKET_SLOTS {
                    let word = self.region.bucket(b).slots[i].load(Ordering::Relaxed);
                    if Slot::decode(word).is_some_and(|x| x.segment == s) {
                        self.evict_slot(pool, b, i, word, &mut budget);
                    }
                }
                write_unlock(version, locked);
            }
        }
        m.live_items.store(0, Ordering::Relaxed);
        m.live_bytes.store(0, Ordering::Relaxed);
        m.state.store(state::FREE, Ordering::Release);
        pool.free.push(s);
    }

    /// Drops, or gives a second chance to, the item in slot `i` of bucket `b`. Lock held.
    fn evict_slot(&self, pool: &mut Pool, b: usize, i: usize, word: u64, budget: &mut usize) {
        let slot = Slot::decode(word).expect("caller checked");
        let live = self.live_header(slot);
        if let Some(header) =
            live.filter(|hd| word & SLOT_ACCESSED != 0 && hd.size() + ITEM_CAS_BYTES <= *budget)
        {
            if let Some(new_word) = self.copy_forward(pool, slot, header) {
                *budget -= header.size() + ITEM_CAS_BYTES;
                self.unlink(b, i);
                self.region.bucket(b).slots[i].store(new_word, Ordering::Release);
                return;
            }
        }
        self.count_drop(word, live.is_some());
        self.unlink(b, i);
    }

    /// Copies an item into the retained segment, keeping its CAS unique (stored explicitly,
    /// since the copy's location differs). Returns the new slot word (not marked read).
    fn copy_forward(&self, pool: &mut Pool, slot: Slot, header: ItemHeader) -> Option<u64> {
        let retained = pool.retained?;
        let moved = ItemHeader { explicit_cas: true, ..header };
        let Some(r) = self.try_reserve(retained, moved.size()) else {
            self.seal(retained);
            pool.fifo.push_back(retained);
            pool.retained = None;
            return None;
        };
        let mut body = vec![0u8; header.key_len + header.value_len];
        self.region.map.read(self.region.item_offset(slot) + header.key_offset(), &mut body);
        let segment_gen = self.region.meta(slot.segment).generation.load(Ordering::Relaxed);
        let cas = self.region.item_cas(slot, &header, segment_gen);
        let (key, value) = body.split_at(header.key_len);
        self.write_item(r, &moved, Some(cas), key, [value, &[]]);
        self.account(r.segment, r.size);
        self.release(r.segment);
        Some(Slot { segment: r.segment, offset: r.offset, ..slot }.encode())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.region.header().clean.store(1, Ordering::Release);
    }
}

/// The absolute expiry `touch` (and meta's `T`) give an item: memcached's `exptime` rules,
/// except that a time already passed is kept as 1, which every clock has passed.
pub fn touch_expiry(exptime: i64, now: u32) -> u32 {
    absolute_expiry(exptime, now).unwrap_or(1)
}

impl NewItem {
    /// A new version of a live item with its flags, expiry and key form (not stale, no token
    /// out, fresh CAS).
    pub fn keeping(info: ItemInfo, value: Value) -> NewItem {
        let marks = Marks { binary_key: info.marks.binary_key, ..Marks::default() };
        NewItem { value, flags: info.flags, expiry: Some(info.expiry), cas: None, marks }
    }
}

/// The live item unless it is a lease record ([`Marks::hidden`]), which the memcached
/// commands other than `add` and `delete` treat as absent.
pub fn visible(current: Option<Current<'_>>) -> Option<Current<'_>> {
    current.filter(|c| !c.info.marks.hidden)
}

/// `incr`/`decr`: the counter's new value, written as memcached does.
fn counter_change(current: Option<Current<'_>>, op: impl Fn(u64) -> u64) -> Plan<Delta> {
    let Some(c) = visible(current) else { return (Change::Keep, Delta::NotFound) };
    let Some(n) = parse_counter(c.value) else { return (Change::Keep, Delta::NonNumeric) };
    let n = op(n);
    (Change::Store(NewItem::keeping(c.info, Value::Owned(counter_text(n, c.value.len())))), Delta::Value(n))
}

/// A counter's new text: memcached rewrites a shorter number in place, padding with spaces to
/// the old length; clients see those spaces, so we keep them too.
pub fn counter_text(n: u64, old_len: usize) -> Vec<u8> {
    let mut text = n.to_string().into_bytes();
    if text.len() < old_len {
        text.resize(old_len, b' ');
    }
    text
}

fn never_if_zero(expiry: u32) -> u32 {
    if expiry == 0 {
        NEVER
    } else {
        expiry
    }
}

/// memcached's reading of a counter (`safe_strtoull`): optional leading white space, an
/// optional sign, decimal digits that fit 64 bits, then the end or white space (anything after
/// that is ignored). A minus sign makes the number wrap, as `strtoull` does, and is refused
/// when the wrapped result reads as negative (so only `-0` passes).
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = value.iter().position(|b| !is_space(b))?;
    let rest = &value[start..];
    let (negative, rest) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let digits = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
    if digits == 0 || !rest[digits..].first().is_none_or(is_space) {
        return None;
    }
    let n =
        rest[..digits].iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add((d - b'0') as u64))?;
    let n = if negative { n.wrapping_neg() } else { n };
    (!(negative && (n as i64) < 0)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_like_memcached() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"9 "), Some(9));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b" 1"), Some(1));
        assert_eq!(parse_counter(b"+7\t"), Some(7));
        assert_eq!(parse_counter(b"12 ab"), Some(12));
        assert_eq!(parse_counter(b"000000000000000000000001"), Some(1));
        assert_eq!(parse_counter(b"1a"), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"  "), None);
    }
}
