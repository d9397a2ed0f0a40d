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
//! In-process state (free list, FIFO of sealed segments, active segment per time class, when
//! each segment was last used) is rebuilt from the segment table at attach, which is
//! O(segments), independent of the number of items: a warm restart serves every item at once.
//!
//! Files: `attach.rs` (create, open, recover), `ops.rs` (the operations and `execute`),
//! `index.rs` (bucket locks and slots), `segments.rs` (item space and eviction), `policy.rs`
//! (which segment eviction takes), `limit.rs` (the memory limit), `values.rs` (counter and
//! expiry rules shared with the server), `walk.rs` (a read-only walk of the live items).

use crate::error::{OpError, RegionError};
use crate::expiry::{absolute_expiry, is_expired, TimeClasses};
use crate::hints::Location;
use crate::key::check_key;
use crate::layout::{
    filler_size, fillers, item_bytes, max_value_len, state, ItemHeader, Layout, Marks, SegmentMeta, Slot,
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
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

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
    /// Segments the memory limit holds back (not in use, memory given back).
    pub segments_parked: usize,
    /// Size of one segment.
    pub segment_bytes: usize,
    /// Size of the index.
    pub index_bytes: usize,
    /// Size of the whole region (the memory limit).
    pub region_bytes: usize,
}

/// Another region's counts added in (a server with several tenants reports their sum). Every
/// field is named, so a new one cannot be forgotten here; `segment_bytes` is a size, not a
/// count, and stays.
impl std::ops::AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, other: &Stats) {
        let Stats {
            items,
            bytes,
            total_items,
            evictions,
            evicted_unfetched,
            expired_unfetched,
            reclaimed,
            index_evictions,
            segments_evicted,
            segments_reclaimed,
            segments,
            segments_free,
            segments_parked,
            segment_bytes: _,
            index_bytes,
            region_bytes,
        } = *other;
        self.items += items;
        self.bytes += bytes;
        self.total_items += total_items;
        self.evictions += evictions;
        self.evicted_unfetched += evicted_unfetched;
        self.expired_unfetched += expired_unfetched;
        self.reclaimed += reclaimed;
        self.index_evictions += index_evictions;
        self.segments_evicted += segments_evicted;
        self.segments_reclaimed += segments_reclaimed;
        self.segments += segments;
        self.segments_free += segments_free;
        self.segments_parked += segments_parked;
        self.index_bytes += index_bytes;
        self.region_bytes += region_bytes;
    }
}

const NO_SEGMENT: u32 = u32::MAX;

/// Process-local segment bookkeeping, rebuilt from the segment table at attach.
struct Pool {
    free: Vec<usize>,
    /// Free segments held back by the memory limit ([`Writer::set_limit`]), their pages given
    /// back to the system.
    parked: Vec<usize>,
    /// Sealed segments, oldest first: `fifo`'s eviction order (`lru` picks among them).
    fifo: VecDeque<usize>,
    /// Sealed segments of [`TimeClasses::TEMPORARY`], oldest first: never evicted, reclaimed
    /// when their items expire.
    temporary: VecDeque<usize>,
    /// Where read items evicted from the FIFO's head get their second chance (`fifo` only).
    retained: Option<usize>,
    /// Server time of the last flush that took effect: its segments wait [`DEAD_GRACE`].
    flushed_at: u32,
}

/// Seconds of server time a segment that died by flush or expiry is left in place before a
/// tick reclaims it, so that a read soon after finds its items and counts them flushed or
/// expired (memcached's `get_flushed`, `get_expired`). A store that needs the space does not
/// wait.
const DEAD_GRACE: u32 = 2;

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

/// Locks on a key's candidate buckets, taken in index order: each bucket's version and the
/// odd value it was locked at; released on drop. The second is unused when `count` is 1.
struct BucketLocks<'a> {
    held: [(&'a AtomicU32, u32); 2],
    count: usize,
}

impl Drop for BucketLocks<'_> {
    fn drop(&mut self) {
        for &(version, v) in &self.held[..self.count] {
            write_unlock(version, v);
        }
    }
}

/// The writer face of a region. Share it between threads by reference (`&Writer` is `Sync`).
pub struct Writer {
    region: Region,
    path: PathBuf,
    evict: bool,
    pool: Mutex<Pool>,
    /// The time classes in force, as [`TimeClasses::merge`] (they follow the memory limit,
    /// and memcached's `temporary_ttl`: `classes.rs`).
    class_merge: AtomicUsize,
    /// memcached's `-o temporary_ttl`: items living at most this many seconds go to
    /// [`TimeClasses::TEMPORARY`] (0: off).
    temporary_ttl: AtomicU32,
    /// The open segment of each time class ([`TimeClasses::TEMPORARY`] last).
    active: Box<[AtomicU32]>,
    /// Server time of each index slot's last write or read (for meta's `l`), in process
    /// memory: 4 bytes a slot that would cost every item room in the region. Moves with its
    /// item; 0 (unknown) after a restart.
    last_access: Box<[AtomicU32]>,
    /// Told of every key that enters or leaves the index (the server's Proteus digest).
    observer: OnceLock<Box<dyn KeyObserver>>,
    /// Told of every live item evicted (the server's `watch evictions`).
    evictions: OnceLock<Box<dyn EvictionObserver>>,
    /// The eviction policy and when each segment was last used (`policy.rs`).
    recency: Recency,
    /// How the region's previous writer left it.
    previous_stop: PreviousStop,
}

/// How a region's previous writer left it, as its header says at attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreviousStop {
    /// None: the region was created by this writer.
    None,
    /// It detached (a server stopped by a signal, or a writer dropped).
    Clean,
    /// It died attached (`kill -9`, a crash, the machine going down): recovered at attach.
    Unclean,
}

impl PreviousStop {
    /// `none`, `clean` or `unclean` (the server's `stats`).
    pub fn name(self) -> &'static str {
        match self {
            PreviousStop::None => "none",
            PreviousStop::Clean => "clean",
            PreviousStop::Unclean => "unclean",
        }
    }
}

/// Told, with the bucket lock held, whenever a key takes a slot of the index (`key_added`) or
/// its slot is cleared because it left the region — deleted, evicted, or its dead item
/// reclaimed (`key_removed`). Overwriting a key, and moving its item or slot, tell nothing: a
/// key occupies at most one slot, so the keys added and not removed are exactly the keys the
/// index holds (expired and flushed ones included until they are reclaimed). Calls must be
/// quick and must not call the writer.
pub trait KeyObserver: Send + Sync {
    /// `key` now has a slot.
    fn key_added(&self, key: &[u8]);
    /// `key`'s slot was cleared.
    fn key_removed(&self, key: &[u8]);
}

/// Told, with the bucket lock held, of each live item dropped to make room (memory or index
/// full), before it goes. Calls must be quick and must not call the writer.
pub trait EvictionObserver: Send + Sync {
    /// Whether it wants to hear now: when not, the evicted item is not even read for it.
    fn listening(&self) -> bool;
    /// `item` is being evicted; `now` is the region's clock.
    fn item_evicted(&self, item: &IndexedItem<'_>, now: u32);
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

mod attach;
mod classes;
mod index;
mod limit;
mod ops;
mod policy;
mod segments;
mod values;
mod walk;

pub use limit::{LimitError, MIN_LIMIT_SEGMENTS};
use policy::Recency;
pub use policy::{Eviction, UnknownEviction};
use values::{counter_change, never_if_zero};
pub use values::{counter_text, parse_counter, touch_expiry, visible};
pub use walk::{IndexedItem, Swept};

/// Deterministic pseudo-random numbers for the writer's tests (xorshift64): the same trace on
/// every run, so a failure reproduces.
#[cfg(test)]
struct TestRng(u64);

#[cfg(test)]
impl TestRng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.region.header().clean.store(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::Stats;

    #[test]
    fn stats_of_two_regions_add_up_but_keep_the_segment_size() {
        let one = Stats {
            items: 3,
            evictions: 1,
            segments: 4,
            segment_bytes: 1 << 20,
            region_bytes: 4 << 20,
            ..Stats::default()
        };
        let two = Stats {
            items: 5,
            evictions: 2,
            segments: 2,
            segment_bytes: 1 << 20,
            region_bytes: 2 << 20,
            ..Stats::default()
        };
        let mut sum = one.clone();
        sum += &two;
        assert_eq!(
            sum,
            Stats {
                items: 8,
                evictions: 3,
                segments: 6,
                segment_bytes: 1 << 20,
                region_bytes: 6 << 20,
                ..Stats::default()
            }
        );
    }
}
