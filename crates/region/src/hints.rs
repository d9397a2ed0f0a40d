//! Hints: how reads served from shared memory reach the server (docs/design/region.md, invariant 7).
//!
//! A reader may not write the region, yet the items it reads must look recently used to
//! eviction and its gets must appear in the server's `stats`. So each client that reads
//! locally owns a small hints area — a memfd it maps read-write and seals against resizing —
//! and hands it to the server (its descriptor over the server's handoff socket, or its path
//! `/proc/<pid>/fd/<n>` when both run as one user); the server maps it read-only and folds it
//! in every 100 ms:
//!
//! ```text
//!  client: HintsWriter::record(lookup, now)     server: HintsReader::drain, every 100 ms
//!    counters   gets hits misses expired flushed ──► deltas added to cmd_get, get_hits, …
//!      (stored by HintsWriter::publish, after a lookup or a batch of them)
//!    a hit not marked yet this second (filter):  ──► Writer::mark_read(location): the slot's
//!    ring[head % 65536] = (bucket, slot, word)       accessed bit, as a network get sets it
//!    head += 1 (release)
//! ```
//!
//! Recording costs the client plain stores (it is the only writer, so no atomic
//! read-modify-write): the counters are kept in its memory and stored in the area once for a
//! batch of lookups, a ring entry is two stores. A mark's effects are idempotent or kept to the
//! second (the accessed bit; the segment's use stamp and the access time, both in the region
//! clock's seconds), so the client queues each item at most once per region-clock second: a
//! small filter of recent marks, emptied when the clock moves, drops the repeats — a hot key
//! read a million times a second takes one ring entry, not a million. The ring then only has
//! to hold the *distinct* items hit between two folds; 65536 entries (1 MiB, its pages touched
//! only as far as it is used) is 655,360 distinct items a second per client, where version 1's
//! 4096 entries lost marks past 40,960 (the counters were always right).
//!
//! *Sampled reads* (version 3, issue 27): the server's hit-ratio curve samples keys by a hash
//! (SHARDS) and publishes its threshold in the region's header; a local read whose key is in
//! the sample — hit or miss — also goes into a second ring, as (key hash, [`SampledRead`]), which
//! the server feeds to the tenant's curve as it would a network get. Unlike marks these cannot
//! be filtered (every reference counts) and are lost, oldest first, past [`SAMPLE_ENTRIES`]
//! between two drains; the server counts what was lost (as references whose reuse it does not
//! know) and drains every 1–10 ms while a client reads locally, faster as a ring fills.
//!
//! ```text
//!  client: a read whose key hash is below the header's threshold   server: SampleReader::drain
//!    samples[head % 16384] = (hash, kind | bytes | expiry)  ──►  the tenant's curve, as a get
//!    samples_head += 1 (release)
//! ```
//!
//! Everything the server reads is untrusted: a counter that goes backwards yields no delta, at
//! most one ring's worth of entries is read per drain, a location is applied only if the slot
//! still holds the very word the client saw, a sampled read of a kind or size this library
//! never writes is refused ([`SampledRead::decode`]), and the memfd must carry
//! `F_SEAL_SHRINK`, so a client cannot make the server fault by truncating the file under its
//! mapping. The server reads every version of the area (an older client library's rings too).

use crate::layout::SLOT_ACCESSED;
use crate::mapping::Mapping;
use crate::region::{Found, Lookup};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MAGIC: u64 = u64::from_le_bytes(*b"SHOALHNT");
/// Entries in the marks ring: hits of more distinct items than this between two drains
/// (100 ms) lose the oldest marks.
pub const RING_ENTRIES: usize = 65536;
/// Entries in the sampled-reads ring: more sampled local reads than this between two drains
/// lose the oldest (the server counts them, `local_lost`).
pub const SAMPLE_ENTRIES: usize = 16384;
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_COUNTERS: usize = 16;
const COUNTERS: usize = 5;
const OFF_HEAD: usize = OFF_COUNTERS + COUNTERS * 8;
const OFF_RING: usize = 64;
const ENTRY_BYTES: usize = 16;
const _: () = assert!(OFF_HEAD + 8 <= OFF_RING);
/// Entries in the writer's filter of recent marks: this many hot items a second are queued
/// once each (more still are, just more than once).
const FILTER_ENTRIES: usize = 4096;

/// One version of the area: `[header 64 B][marks ring]`, and from version 3
/// `[sampled-reads head, 64 B][sampled-reads ring]` after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Format {
    version: u64,
    ring_entries: usize,
    sample_entries: usize,
}

impl Format {
    /// The size of an area of this version.
    const fn bytes(self) -> usize {
        let marks = OFF_RING + self.ring_entries * ENTRY_BYTES;
        if self.sample_entries == 0 {
            marks
        } else {
            marks + 64 + self.sample_entries * ENTRY_BYTES
        }
    }

    /// Where the sampled-reads head is (version 3 on).
    const fn off_sample_head(self) -> usize {
        OFF_RING + self.ring_entries * ENTRY_BYTES
    }

    /// Where sampled read number `n` goes.
    const fn off_sample(self, n: u64) -> usize {
        self.off_sample_head() + 64 + (n as usize % self.sample_entries) * ENTRY_BYTES
    }
}

/// The version this library writes.
const CURRENT: Format = Format { version: 3, ring_entries: RING_ENTRIES, sample_entries: SAMPLE_ENTRIES };
/// Every version a server reads: the first (a ring of 4096 marks), the second (65536), the
/// current (with sampled reads).
const FORMATS: [Format; 3] = [
    Format { version: 1, ring_entries: 4096, sample_entries: 0 },
    Format { version: 2, ring_entries: RING_ENTRIES, sample_entries: 0 },
    CURRENT,
];
/// The whole area this library writes.
pub const HINTS_BYTES: usize = CURRENT.bytes();

/// Where a lookup found an item: enough for the server to mark that very slot as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub(crate) bucket: usize,
    pub(crate) slot: usize,
    pub(crate) word: u64,
}

impl Location {
    pub(crate) fn of(found: &Found) -> Location {
        Location { bucket: found.bucket, slot: found.slot_index, word: found.word }
    }
}

/// Local lookups by outcome, as the hints area counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HintCounts {
    /// Lookups (memcached's `cmd_get`).
    pub gets: u64,
    /// Hits.
    pub hits: u64,
    /// Misses of every kind (missing, expired, flushed).
    pub misses: u64,
    /// Misses because the item had expired.
    pub expired: u64,
    /// Misses because a flush covered the item.
    pub flushed: u64,
}

impl HintCounts {
    fn to_array(self) -> [u64; COUNTERS] {
        [self.gets, self.hits, self.misses, self.expired, self.flushed]
    }

    fn from_array([gets, hits, misses, expired, flushed]: [u64; COUNTERS]) -> HintCounts {
        HintCounts { gets, hits, misses, expired, flushed }
    }
}

/// A local read of a key in the server's curve sample, as the tenant's curve takes it (what a
/// network get tells it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampledRead {
    /// A hit on an item laid out in `bytes` of the region (`layout::item_bytes`), expiring at
    /// `expiry` (0: never).
    Hit { bytes: u32, expiry: u32 },
    /// No item under the key.
    Miss,
    /// An item the region judged expired or flushed.
    Dead,
}

/// The kinds of sampled read, in the top byte of a record's second word.
const KIND_HIT: u64 = 1;
const KIND_MISS: u64 = 2;
const KIND_DEAD: u64 = 3;
/// A hit's size field: 24 bits, room for every item of a region of the default layout
/// (`layout::SMALL_ITEM_LIMIT`); an item past 16 MiB counts as 16 MiB less 8 bytes (a size
/// items can have).
const SIZE_BITS: u32 = 24;
const _: () = assert!(crate::layout::SMALL_ITEM_LIMIT < 1 << SIZE_BITS);

impl SampledRead {
    /// What a lookup of a key of `key_len` bytes found.
    #[inline]
    pub fn of(lookup: &Lookup, key_len: usize) -> SampledRead {
        match lookup {
            Lookup::Hit(info) => SampledRead::Hit {
                bytes: crate::layout::item_bytes(key_len, info.value_len, false).min((1 << SIZE_BITS) - 8)
                    as u32,
                expiry: info.expiry,
            },
            Lookup::Expired | Lookup::Flushed => SampledRead::Dead,
            Lookup::Missing => SampledRead::Miss,
        }
    }

    /// The record's second word: kind (8 bits), size (24), expiry (32).
    #[inline]
    fn encode(self) -> u64 {
        match self {
            SampledRead::Hit { bytes, expiry } => {
                KIND_HIT << 56 | u64::from(bytes & ((1 << SIZE_BITS) - 1)) << 32 | u64::from(expiry)
            }
            SampledRead::Miss => KIND_MISS << 56,
            SampledRead::Dead => KIND_DEAD << 56,
        }
    }

    /// The read a record's second word says; `None` for a word this library never writes (an
    /// unknown kind, a miss with a size).
    pub fn decode(word: u64) -> Option<SampledRead> {
        let (bytes, expiry) = ((word >> 32) as u32 & ((1 << SIZE_BITS) - 1), word as u32);
        match word >> 56 {
            KIND_HIT => Some(SampledRead::Hit { bytes, expiry }),
            KIND_MISS | KIND_DEAD if word << 8 != 0 => None,
            KIND_MISS => Some(SampledRead::Miss),
            KIND_DEAD => Some(SampledRead::Dead),
            _ => None,
        }
    }
}

/// The client's side: a sealed memfd mapped read-write.
pub struct HintsWriter {
    map: Mapping,
    path: PathBuf,
    counts: HintCounts,
    head: u64,
    /// Sampled reads written so far.
    samples_head: u64,
    /// Items queued in the region-clock second `filter_second`, by `(place, word)` without
    /// the accessed bit (which the server's mark sets); `(0, 0)` is empty (a live slot's word
    /// is never 0).
    recent: Box<[(u64, u64)]>,
    filter_second: u32,
}

impl HintsWriter {
    /// Creates a hints area. Its [`path`](HintsWriter::path) (`/proc/<pid>/fd/<n>`) is what
    /// the server opens; it lives as long as this value.
    pub fn create() -> io::Result<HintsWriter> {
        let map = new_area(CURRENT)?;
        let path = PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), map.file().as_raw_fd()));
        Ok(HintsWriter {
            map,
            path,
            counts: HintCounts::default(),
            head: 0,
            samples_head: 0,
            recent: vec![(0, 0); FILTER_ENTRIES].into_boxed_slice(),
            filter_second: 0,
        })
    }

    /// The path the server opens.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The area's memfd, to hand to the server (`SCM_RIGHTS`) when it cannot open the path.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.map.file().as_fd()
    }

    /// Counts a local lookup, and queues a hit's location for the server to mark as read,
    /// unless it was queued already in this second of the region's clock (`now`,
    /// [`Reader::clock`](crate::Reader::clock)). The counts reach the area at the next
    /// [`HintsWriter::publish`]: once for a batch of lookups, not two stores a key.
    #[inline(always)]
    pub fn record(&mut self, lookup: &Lookup, location: Option<Location>, now: u32) {
        let c = &mut self.counts;
        c.gets += 1;
        match lookup {
            Lookup::Hit(_) => c.hits += 1,
            miss => {
                c.misses += 1;
                match miss {
                    Lookup::Expired => c.expired += 1,
                    Lookup::Flushed => c.flushed += 1,
                    _ => {}
                }
            }
        }
        if let (Lookup::Hit(_), Some(at)) = (lookup, location) {
            let place = ((at.bucket as u64) << 3) | at.slot as u64;
            if !self.marked_this_second(place, at.word & !SLOT_ACCESSED, now) {
                self.queue(place, at.word);
            }
        }
    }

    /// Stores what [`HintsWriter::record`] counted so far in the area, where the server reads
    /// it: after a lookup, or after a batch of them.
    #[inline]
    pub fn publish(&self) {
        for (i, n) in self.counts.to_array().into_iter().enumerate() {
            self.map.u64_at(OFF_COUNTERS + i * 8).store(n, Ordering::Relaxed);
        }
    }

    /// Queues the location of a hit (`place`, the slot's `word`) for the server to mark as
    /// read. Out of line, as is the filter's reset: a repeated read, the common case, is
    /// filtered out before, and the path inlined into every lookup stays short.
    #[cold]
    fn queue(&mut self, place: u64, word: u64) {
        let entry = OFF_RING + (self.head as usize % RING_ENTRIES) * ENTRY_BYTES;
        self.map.u64_at(entry).store(place, Ordering::Relaxed);
        self.map.u64_at(entry + 8).store(word, Ordering::Relaxed);
        self.head += 1;
        self.map.u64_at(OFF_HEAD).store(self.head, Ordering::Release);
    }

    /// Queues a read of the key whose probe hash ([`crate::key_hash`], which the server's
    /// curve knows the key by) is `hash` for the server's curve: call after
    /// [`HintsWriter::record`] counted it, only for keys in the sample (the hash's top 24 bits
    /// below the region's published threshold, [`crate::Reader::curve_threshold`]).
    #[inline]
    pub fn record_sampled(&mut self, hash: u64, read: SampledRead) {
        // The server relies on a read being counted before it is queued (`HintsReader::drain`):
        // the counts go out first (a sampled read is rare, so this costs a batch little).
        self.publish();
        let entry = CURRENT.off_sample(self.samples_head);
        self.map.u64_at(entry).store(hash, Ordering::Relaxed);
        self.map.u64_at(entry + 8).store(read.encode(), Ordering::Relaxed);
        self.samples_head += 1;
        self.map.u64_at(CURRENT.off_sample_head()).store(self.samples_head, Ordering::Release);
    }

    /// Whether the item at `place` holding `word` was queued in second `now` already; notes
    /// that it is now. The filter empties when the second changes.
    #[inline]
    fn marked_this_second(&mut self, place: u64, word: u64, now: u32) -> bool {
        if now != self.filter_second {
            self.start_second(now);
        }
        // `place` leads with the bucket, a hash of the key: its low bits spread well.
        let entry = &mut self.recent[place as usize % FILTER_ENTRIES];
        if *entry == (place, word) {
            return true;
        }
        *entry = (place, word);
        false
    }

    /// Empties the filter for second `now` ([`HintsWriter::marked_this_second`]).
    #[cold]
    fn start_second(&mut self, now: u32) {
        self.recent.fill((0, 0));
        self.filter_second = now;
    }

    /// What was counted so far.
    pub fn counts(&self) -> HintCounts {
        self.counts
    }
}

/// A fresh memfd sealed against resizing and mapped read-write, with the header of a hints
/// area of `format` (magic last, with release: a reader that sees it sees the rest).
fn new_area(format: Format) -> io::Result<Mapping> {
    // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
    let fd =
        unsafe { libc::memfd_create(c"shoal-hints".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let bytes = format.bytes();
    file.set_len(bytes as u64)?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on a descriptor we own, with an integer argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let map = Mapping::map(file, bytes, true)?;
    map.u64_at(OFF_VERSION).store(format.version, Ordering::Relaxed);
    map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
    Ok(map)
}

/// The server's side: a client's hints area mapped read-only, and how far it was read.
pub struct HintsReader {
    map: Arc<Mapping>,
    format: Format,
    counts: HintCounts,
    cursor: u64,
    /// Whether [`HintsReader::samples`] handed the sampled reads out already.
    samples_taken: bool,
    /// Local reads reported as not sampled so far (see [`Drained::unsampled`]).
    unsampled: u64,
}

/// What one drain of an area found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// What the client counted since the last drain.
    pub counts: HintCounts,
    /// Of those, the reads the client did not queue as sampled: references of keys outside
    /// the curve's sample, for its correction. Always 0 for an area without sampled reads (an
    /// older client samples nothing, so its reads are not in the curve at all); sampled reads
    /// a full ring lost are in neither.
    pub unsampled: u64,
}

impl HintsReader {
    /// Opens a client's hints area, refusing anything that is not a sealed area of the right
    /// size and format (the path comes from a client: it may name anything).
    pub fn open(path: &Path) -> Result<HintsReader, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        HintsReader::check(file).map_err(|why| format!("{} {why}", path.display()))
    }

    /// Takes a client's hints area from a descriptor it handed over, refusing anything that is
    /// not a sealed area of the right size and format (the client chose it: it may be anything).
    pub fn from_file(file: File) -> Result<HintsReader, String> {
        HintsReader::check(file).map_err(|why| format!("the descriptor handed over {why}"))
    }

    /// Maps `file` if it is a hints area (of any version); otherwise says what it is not.
    fn check(file: File) -> Result<HintsReader, String> {
        let meta = file.metadata().map_err(|e| format!("cannot be examined: {e}"))?;
        if !meta.file_type().is_file() {
            return Err("is not a hints area: not a regular file".into());
        }
        let versions = || FORMATS.map(|f| f.version.to_string()).join(", ");
        let Some(format) = FORMATS.into_iter().find(|f| f.bytes() as u64 == meta.len()) else {
            let sizes = FORMATS.map(|f| format!("{} (version {})", f.bytes(), f.version)).join(", ");
            return Err(format!("is not a hints area: {} bytes, not one of {sizes}", meta.len()));
        };
        // SAFETY: fcntl on a descriptor we own; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err("is not sealed against shrinking (F_SEAL_SHRINK)".into());
        }
        let bytes = format.bytes();
        let map = Mapping::map(file, bytes, false).map_err(|e| format!("cannot be mapped: {e}"))?;
        if map.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err("is not a hints area: no magic number".into());
        }
        let found = map.u64_at(OFF_VERSION).load(Ordering::Relaxed);
        if found != format.version {
            return Err(format!(
                "is a hints area of version {found} in {bytes} bytes, which should be version {}: \
                 this server reads versions {} (upgrade the server, or use a client library of its release)",
                format.version,
                versions()
            ));
        }
        // Read from the start: what the client counted before registering counts too.
        Ok(HintsReader {
            map: Arc::new(map),
            format,
            counts: HintCounts::default(),
            cursor: 0,
            samples_taken: false,
            unsampled: 0,
        })
    }

    fn read_counts(&self) -> HintCounts {
        HintCounts::from_array(std::array::from_fn(|i| {
            self.map.u64_at(OFF_COUNTERS + i * 8).load(Ordering::Relaxed)
        }))
    }

    /// Sampled reads the client has queued so far (0 in an area without them).
    fn samples_written(&self) -> u64 {
        if self.format.sample_entries == 0 {
            return 0;
        }
        self.map.u64_at(self.format.off_sample_head()).load(Ordering::Acquire)
    }

    /// The area's sampled reads, to be drained by the tenant's curve: handed out once, and
    /// only by an area that has them (version 3).
    pub fn samples(&mut self) -> Option<SampleReader> {
        if self.format.sample_entries == 0 || self.samples_taken {
            return None;
        }
        self.samples_taken = true;
        Some(SampleReader { map: Arc::clone(&self.map), format: self.format, cursor: 0, copied: Vec::new() })
    }

    /// What the client counted since the last drain, and each location it queued since (at
    /// most one ring's worth, the newest), handed to `mark`.
    pub fn drain(&mut self, mut mark: impl FnMut(Location)) -> Drained {
        // The client counts a read before it queues it as sampled: with the queue's head read
        // first, the counts include every read it holds.
        let samples = self.samples_written();
        let now = self.read_counts();
        let before = std::mem::replace(&mut self.counts, now);
        let delta = HintCounts::from_array(std::array::from_fn(|i| {
            // A counter that went backwards (a confused or hostile client) adds nothing.
            now.to_array()[i].saturating_sub(before.to_array()[i])
        }));
        let head = self.map.u64_at(OFF_HEAD).load(Ordering::Acquire);
        if head < self.cursor {
            self.cursor = head;
        }
        for n in self.cursor.max(head.saturating_sub(self.format.ring_entries as u64))..head {
            let entry = OFF_RING + (n as usize % self.format.ring_entries) * ENTRY_BYTES;
            let place = self.map.u64_at(entry).load(Ordering::Relaxed);
            let word = self.map.u64_at(entry + 8).load(Ordering::Relaxed);
            mark(Location { bucket: (place >> 3) as usize, slot: (place & 7) as usize, word });
        }
        self.cursor = head;
        let unsampled = if self.format.sample_entries == 0 {
            0
        } else {
            // Never less than before: a read counted a moment before it was queued is not
            // taken back (one per client thread, at most, is in that moment).
            let total = now.gets.saturating_sub(samples);
            let delta = total.saturating_sub(self.unsampled);
            self.unsampled = self.unsampled.max(total);
            delta
        };
        Drained { counts: delta, unsampled }
    }
}

/// The sampled reads of one client's hints area, for the curve of the tenant whose region the
/// client reads.
pub struct SampleReader {
    map: Arc<Mapping>,
    format: Format,
    cursor: u64,
    /// Records copied out of the ring, before the check that the client did not overwrite them
    /// meanwhile (kept from one drain to the next).
    copied: Vec<(u64, u64)>,
}

/// What one drain of sampled reads found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplesDrained {
    /// Records handed on.
    pub read: u64,
    /// Records the client overwrote before the server read them (a full ring).
    pub lost: u64,
}

impl SampleReader {
    /// Each sampled read queued since the last drain, oldest first, as (probe hash, the read,
    /// or `None` for a record this library never writes); at most one ring's worth, the newest.
    pub fn drain(&mut self, mut each: impl FnMut(u64, Option<SampledRead>)) -> SamplesDrained {
        let entries = self.format.sample_entries as u64;
        let head_at = self.format.off_sample_head();
        let head = self.map.u64_at(head_at).load(Ordering::Acquire);
        if head < self.cursor {
            self.cursor = head; // a confused client: start again from where it says it is
        }
        let first = self.cursor.max(head.saturating_sub(entries));
        let mut lost = first - self.cursor;
        self.copied.clear();
        for n in first..head {
            let entry = self.format.off_sample(n);
            let hash = self.map.u64_at(entry).load(Ordering::Relaxed);
            let word = self.map.u64_at(entry + 8).load(Ordering::Relaxed);
            self.copied.push((hash, word));
        }
        // Records the client may have written over while they were copied are lost too.
        let after = self.map.u64_at(head_at).load(Ordering::Acquire).max(head);
        let overwritten =
            (after.saturating_sub(entries).saturating_sub(first) as usize).min(self.copied.len());
        lost += overwritten as u64;
        for &(hash, word) in &self.copied[overwritten..] {
            each(hash, SampledRead::decode(word));
        }
        self.cursor = head;
        SamplesDrained { read: (self.copied.len() - overwritten) as u64, lost }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::ItemInfo;

    fn hit() -> Lookup {
        hit_lookup(1)
    }

    fn hit_lookup(value_len: usize) -> Lookup {
        Lookup::Hit(ItemInfo {
            flags: 0,
            cas: 1,
            expiry: 0,
            value_len,
            fetched: false,
            marks: Default::default(),
            last_access: 0,
        })
    }

    #[test]
    fn counts_and_locations_reach_the_reader_once() {
        let mut w = HintsWriter::create().unwrap();
        w.record(&Lookup::Missing, None, 1);
        let mut r = HintsReader::open(w.path()).unwrap();
        let at = Location { bucket: 12345, slot: 6, word: 0xdead_beef };
        w.record(&hit(), Some(at), 1);
        w.record(&Lookup::Expired, None, 1);
        w.record(&Lookup::Flushed, None, 1);
        w.publish();
        let mut marked = Vec::new();
        let delta = r.drain(|l| marked.push(l)).counts;
        assert_eq!(delta, HintCounts { gets: 4, hits: 1, misses: 3, expired: 1, flushed: 1 });
        assert_eq!(w.counts(), delta, "the area holds every counter the writer keeps");
        assert_eq!(marked, [at]);
        assert_eq!(r.drain(|_| panic!("nothing new")), Drained::default());
    }

    #[test]
    fn a_flood_of_hits_is_read_at_most_one_ring_at_a_time() {
        let mut w = HintsWriter::create().unwrap();
        let mut r = HintsReader::open(w.path()).unwrap();
        for i in 0..3 * RING_ENTRIES {
            w.record(&hit(), Some(Location { bucket: i, slot: 0, word: i as u64 }), 1);
        }
        w.publish();
        let mut seen = Vec::new();
        assert_eq!(r.drain(|l| seen.push(l.bucket)).counts.hits, 3 * RING_ENTRIES as u64);
        assert_eq!(seen, (2 * RING_ENTRIES..3 * RING_ENTRIES).collect::<Vec<_>>());
    }

    #[test]
    fn a_readers_hit_marks_the_item_read_through_the_writer() {
        let w = crate::Writer::create_anonymous(&crate::Config::default(), true).unwrap();
        w.set(b"k", b"v", 0, 0).unwrap();
        let r = crate::Reader::open(w.path()).unwrap();
        let mut v = Vec::new();
        let fetched = |v: &mut Vec<u8>| w.read(b"k", v, false).unwrap().hit().unwrap().fetched;
        let (lookup, at, _) = r.get_located(b"k", &mut v).unwrap();
        assert!(lookup.hit().is_some() && !fetched(&mut v));
        w.mark_read(at.unwrap());
        assert!(fetched(&mut v));
        // A location the key has moved away from marks nothing; nonsense is ignored.
        w.set(b"k", b"v2", 0, 0).unwrap();
        w.mark_read(at.unwrap());
        w.mark_read(Location { bucket: usize::MAX, slot: 9, word: u64::MAX });
        assert!(!fetched(&mut v));
    }

    #[test]
    fn an_area_handed_over_as_a_descriptor_counts_as_one_opened_by_path() {
        let mut w = HintsWriter::create().unwrap();
        let handed = std::fs::File::from(w.fd().try_clone_to_owned().unwrap());
        let mut r = HintsReader::from_file(handed).unwrap();
        w.record(&hit(), None, 1);
        assert_eq!(r.drain(|_| {}).counts.hits, 0, "not published yet");
        w.publish();
        assert_eq!(r.drain(|_| {}).counts.hits, 1);
        let null = std::fs::File::open("/dev/null").unwrap();
        assert!(HintsReader::from_file(null)
            .err()
            .unwrap()
            .contains("descriptor handed over is not a hints area"));
    }

    #[test]
    fn files_that_are_not_sealed_hints_areas_are_refused() {
        let dir = std::env::temp_dir().join(format!("shoal-hints-test-{}", std::process::id()));
        std::fs::write(&dir, vec![0u8; HINTS_BYTES]).unwrap();
        assert!(HintsReader::open(&dir).err().unwrap().contains("sealed"), "an unsealed file");
        std::fs::remove_file(&dir).unwrap();
        assert!(HintsReader::open(Path::new("/dev/null")).err().unwrap().contains("not a hints area"));
        assert!(HintsReader::open(Path::new("/nonexistent/x")).err().unwrap().contains("cannot open"));

        // A region file (sealed or not) is not a hints area either.
        let w = crate::Writer::create_anonymous(&crate::Config::default(), true).unwrap();
        assert!(HintsReader::open(w.path()).is_err());
    }

    #[test]
    fn a_hot_item_is_queued_once_a_second_however_often_it_is_hit() {
        let mut w = HintsWriter::create().unwrap();
        let mut r = HintsReader::open(w.path()).unwrap();
        let hot = Location { bucket: 77, slot: 3, word: 0x8000_0000_0000_1234 };
        for _ in 0..1_000_000 {
            w.record(&hit(), Some(hot), 5);
        }
        // The server's mark sets the accessed bit: the client then sees the same item so.
        w.record(&hit(), Some(Location { word: hot.word | SLOT_ACCESSED, ..hot }), 5);
        w.publish();
        let mut marks = 0;
        assert_eq!(r.drain(|_| marks += 1).counts.hits, 1_000_001, "every hit is counted");
        assert_eq!(marks, 1, "one mark for a million hits in one second");

        // A new second, or a new item in the same slot, is queued again.
        w.record(&hit(), Some(hot), 6);
        w.record(&hit(), Some(hot), 6);
        w.record(&hit(), Some(Location { word: hot.word + 8, ..hot }), 6);
        let mut marked = Vec::new();
        r.drain(|l| marked.push(l.word));
        assert_eq!(marked, [hot.word, hot.word + 8]);
    }

    #[test]
    fn distinct_items_past_the_old_ring_all_reach_the_reader() {
        let mut w = HintsWriter::create().unwrap();
        let mut r = HintsReader::open(w.path()).unwrap();
        let items = 10 * FORMATS[0].ring_entries;
        for i in 0..items {
            w.record(&hit(), Some(Location { bucket: i, slot: i % 8, word: 1 << 63 | i as u64 }), 1);
        }
        let mut seen = Vec::new();
        r.drain(|l| seen.push(l.bucket));
        assert_eq!(seen, (0..items).collect::<Vec<_>>());
    }

    /// A sealed memfd holding a hints header of `format`, as a client writes it, with
    /// `version` in it.
    fn area_of(format: Format, version: u64) -> (File, Mapping) {
        let map = new_area(Format { version, ..format }).unwrap();
        (map.file().try_clone().unwrap(), map)
    }

    #[test]
    fn an_older_clients_area_is_read_with_its_own_ring() {
        let v1 = FORMATS[0];
        let (file, old) = area_of(v1, 1);
        let mut r = HintsReader::from_file(file).unwrap();
        // As a version-1 writer queues: 5000 hits, the ring wrapped at 4096.
        for n in 0..5000usize {
            let entry = OFF_RING + (n % v1.ring_entries) * ENTRY_BYTES;
            old.u64_at(entry).store((n as u64) << 3, Ordering::Relaxed);
            old.u64_at(entry + 8).store(n as u64, Ordering::Relaxed);
        }
        old.u64_at(OFF_COUNTERS + 8).store(5000, Ordering::Relaxed);
        old.u64_at(OFF_HEAD).store(5000, Ordering::Release);
        let mut seen = Vec::new();
        assert_eq!(r.drain(|l| seen.push(l.bucket)).counts.hits, 5000);
        assert_eq!(seen, (5000 - v1.ring_entries..5000).collect::<Vec<_>>(), "the newest 4096, in order");
    }

    #[test]
    fn an_area_whose_version_does_not_match_its_size_is_refused_clearly() {
        for (format, version) in [(CURRENT, 2), (CURRENT, 4), (FORMATS[0], 3), (FORMATS[1], 1)] {
            let bytes = format.bytes();
            let why = HintsReader::from_file(area_of(format, version).0).err().unwrap();
            assert!(why.contains(&format!("version {version} in {bytes} bytes")), "{why}");
            assert!(why.contains("reads versions 1, 2, 3"), "{why}");
        }
        let (file, _) = area_of(Format { ring_entries: RING_ENTRIES + 1, ..CURRENT }, 3);
        assert!(HintsReader::from_file(file).err().unwrap().contains("not a hints area: "));
    }

    #[test]
    fn sampled_reads_reach_the_curve_side_in_order_and_the_rest_count_as_unsampled() {
        let mut w = HintsWriter::create().unwrap();
        let mut r = HintsReader::open(w.path()).unwrap();
        let mut samples = r.samples().unwrap();
        assert!(r.samples().is_none(), "handed out once");
        let reads = [SampledRead::Hit { bytes: 120, expiry: 77 }, SampledRead::Miss, SampledRead::Dead];
        for (i, read) in reads.into_iter().enumerate() {
            w.record(&Lookup::Missing, None, 1);
            w.record_sampled(i as u64 + 10, read);
        }
        for _ in 0..5 {
            w.record(&Lookup::Missing, None, 1); // not in the sample
        }
        w.publish();
        let drained = r.drain(|_| {});
        assert_eq!((drained.counts.gets, drained.unsampled), (8, 5));
        let mut seen = Vec::new();
        assert_eq!(samples.drain(|h, read| seen.push((h, read))), SamplesDrained { read: 3, lost: 0 });
        assert_eq!(seen, [(10, Some(reads[0])), (11, Some(reads[1])), (12, Some(reads[2]))]);
        assert_eq!(samples.drain(|_, _| panic!("nothing new")), SamplesDrained::default());
        assert_eq!(r.drain(|_| {}), Drained::default());
    }

    #[test]
    fn a_flood_of_sampled_reads_keeps_the_newest_ring_and_counts_the_rest_lost() {
        let mut w = HintsWriter::create().unwrap();
        let mut samples = HintsReader::open(w.path()).unwrap().samples().unwrap();
        let n = 2 * SAMPLE_ENTRIES as u64 + 5;
        for h in 0..n {
            w.record_sampled(h, SampledRead::Miss);
        }
        let mut seen = Vec::new();
        let drained = samples.drain(|h, _| seen.push(h));
        assert_eq!(drained, SamplesDrained { read: SAMPLE_ENTRIES as u64, lost: n - SAMPLE_ENTRIES as u64 });
        assert_eq!(seen, (n - SAMPLE_ENTRIES as u64..n).collect::<Vec<_>>());
    }

    #[test]
    fn records_no_client_writes_are_refused_by_decoding() {
        let hit = SampledRead::Hit { bytes: (1 << SIZE_BITS) - 8, expiry: u32::MAX };
        for read in [hit, SampledRead::Miss, SampledRead::Dead] {
            assert_eq!(SampledRead::decode(read.encode()), Some(read));
        }
        for word in [0, 4 << 56, u64::MAX, KIND_MISS << 56 | 1, KIND_DEAD << 56 | 1 << 40] {
            assert_eq!(SampledRead::decode(word), None, "{word:#x}");
        }
        // A hit's size as the region lays the item out.
        let info = match hit_lookup(5) {
            Lookup::Hit(info) => info,
            _ => unreachable!(),
        };
        assert_eq!(SampledRead::of(&Lookup::Hit(info), 3), SampledRead::Hit { bytes: 24, expiry: 0 });
        assert_eq!(SampledRead::of(&Lookup::Flushed, 3), SampledRead::Dead);
    }

    #[test]
    fn an_older_clients_area_has_no_sampled_reads_and_no_unsampled_ones() {
        let (file, old) = area_of(FORMATS[1], 2);
        let mut r = HintsReader::from_file(file).unwrap();
        assert!(r.samples().is_none());
        old.u64_at(OFF_COUNTERS).store(40, Ordering::Relaxed);
        let drained = r.drain(|_| {});
        assert_eq!((drained.counts.gets, drained.unsampled), (40, 0), "its reads stay out of the curve");
    }
}
