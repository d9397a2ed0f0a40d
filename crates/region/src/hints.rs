//! Hints: how reads served from shared memory reach the server (DESIGN §3, invariant 7).
//!
//! A reader may not write the region, yet the items it reads must look recently used to
//! eviction and its gets must appear in the server's `stats`. So each client that reads
//! locally owns a small hints area — a memfd it maps read-write and seals against resizing —
//! and hands it to the server (its descriptor over the server's handoff socket, or its path
//! `/proc/<pid>/fd/<n>` when both run as one user); the server maps it read-only and folds it
//! in every 100 ms:
//!
//! ```text
//!  client: HintsWriter::record(lookup)          server: HintsReader::drain, every 100 ms
//!    counters   gets hits misses expired flushed ──► deltas added to cmd_get, get_hits, …
//!    ring[head % 4096] = (bucket, slot, word)   ──► Writer::mark_read(location): the slot's
//!    head += 1 (release)                            accessed bit, as a network get sets it
//! ```
//!
//! Recording costs the client two plain stores per counter or ring entry (it is the only
//! writer, so no atomic read-modify-write). Everything the server reads is untrusted: a
//! counter that goes backwards yields no delta, at most one ring's worth of entries is read
//! per drain, a location is applied only if the slot still holds the very word the client saw,
//! and the memfd must carry `F_SEAL_SHRINK`, so a client cannot make the server fault by
//! truncating the file under its mapping.

use crate::mapping::Mapping;
use crate::region::{Found, Lookup};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

const MAGIC: u64 = u64::from_le_bytes(*b"SHOALHNT");
const VERSION: u64 = 1;
/// Entries in the ring: hits of more distinct items than this per 100 ms lose some marks.
pub const RING_ENTRIES: usize = 4096;
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_COUNTERS: usize = 16;
const COUNTERS: usize = 5;
const OFF_HEAD: usize = OFF_COUNTERS + COUNTERS * 8;
const OFF_RING: usize = 64;
const ENTRY_BYTES: usize = 16;
/// The whole area: a 64-byte header and the ring.
pub const HINTS_BYTES: usize = OFF_RING + RING_ENTRIES * ENTRY_BYTES;
const _: () = assert!(OFF_HEAD + 8 <= OFF_RING);

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

/// The client's side: a sealed memfd mapped read-write.
pub struct HintsWriter {
    map: Mapping,
    path: PathBuf,
    counts: HintCounts,
    head: u64,
}

impl HintsWriter {
    /// Creates a hints area. Its [`path`](HintsWriter::path) (`/proc/<pid>/fd/<n>`) is what
    /// the server opens; it lives as long as this value.
    pub fn create() -> io::Result<HintsWriter> {
        // SAFETY: memfd_create with a valid NUL-terminated name; the result is checked.
        let fd = unsafe {
            libc::memfd_create(c"shoal-hints".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(HINTS_BYTES as u64)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor we own, with an integer argument.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        let map = Mapping::map(file, HINTS_BYTES, true)?;
        map.u64_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
        map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(HintsWriter { map, path, counts: HintCounts::default(), head: 0 })
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

    /// Counts a local lookup, and queues a hit's location for the server to mark as read.
    #[inline]
    pub fn record(&mut self, lookup: &Lookup, location: Option<Location>) {
        let c = &mut self.counts;
        c.gets += 1;
        match lookup {
            Lookup::Hit(_) => c.hits += 1,
            Lookup::Expired => (c.misses, c.expired) = (c.misses + 1, c.expired + 1),
            Lookup::Flushed => (c.misses, c.flushed) = (c.misses + 1, c.flushed + 1),
            _ => c.misses += 1,
        }
        for (i, n) in self.counts.to_array().into_iter().enumerate() {
            self.map.u64_at(OFF_COUNTERS + i * 8).store(n, Ordering::Relaxed);
        }
        if let (Lookup::Hit(_), Some(at)) = (lookup, location) {
            let entry = OFF_RING + (self.head as usize % RING_ENTRIES) * ENTRY_BYTES;
            self.map.u64_at(entry).store(((at.bucket as u64) << 3) | at.slot as u64, Ordering::Relaxed);
            self.map.u64_at(entry + 8).store(at.word, Ordering::Relaxed);
            self.head += 1;
            self.map.u64_at(OFF_HEAD).store(self.head, Ordering::Release);
        }
    }

    /// What was counted so far.
    pub fn counts(&self) -> HintCounts {
        self.counts
    }
}

/// The server's side: a client's hints area mapped read-only, and how far it was read.
pub struct HintsReader {
    map: Mapping,
    counts: HintCounts,
    cursor: u64,
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

    /// Maps `file` if it is a hints area; otherwise says what it is not.
    fn check(file: File) -> Result<HintsReader, String> {
        let meta = file.metadata().map_err(|e| format!("cannot be examined: {e}"))?;
        if !meta.file_type().is_file() || meta.len() != HINTS_BYTES as u64 {
            return Err(format!("is not a hints area of {HINTS_BYTES} bytes"));
        }
        // SAFETY: fcntl on a descriptor we own; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err("is not sealed against shrinking (F_SEAL_SHRINK)".into());
        }
        let map = Mapping::map(file, HINTS_BYTES, false).map_err(|e| format!("cannot be mapped: {e}"))?;
        if map.u64_at(OFF_MAGIC).load(Ordering::Acquire) != MAGIC
            || map.u64_at(OFF_VERSION).load(Ordering::Relaxed) != VERSION
        {
            return Err(format!("has no hints area of version {VERSION}"));
        }
        // Read from the start: what the client counted before registering counts too.
        Ok(HintsReader { map, counts: HintCounts::default(), cursor: 0 })
    }

    fn read_counts(&self) -> HintCounts {
        HintCounts::from_array(std::array::from_fn(|i| {
            self.map.u64_at(OFF_COUNTERS + i * 8).load(Ordering::Relaxed)
        }))
    }

    /// What the client counted since the last drain, and each location it queued since (at
    /// most [`RING_ENTRIES`], the newest), handed to `mark`.
    pub fn drain(&mut self, mut mark: impl FnMut(Location)) -> HintCounts {
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
        for n in self.cursor.max(head.saturating_sub(RING_ENTRIES as u64))..head {
            let entry = OFF_RING + (n as usize % RING_ENTRIES) * ENTRY_BYTES;
            let place = self.map.u64_at(entry).load(Ordering::Relaxed);
            let word = self.map.u64_at(entry + 8).load(Ordering::Relaxed);
            mark(Location { bucket: (place >> 3) as usize, slot: (place & 7) as usize, word });
        }
        self.cursor = head;
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::ItemInfo;

    fn hit() -> Lookup {
        Lookup::Hit(ItemInfo {
            flags: 0,
            cas: 1,
            expiry: 0,
            value_len: 1,
            fetched: false,
            marks: Default::default(),
            last_access: 0,
        })
    }

    #[test]
    fn counts_and_locations_reach_the_reader_once() {
        let mut w = HintsWriter::create().unwrap();
        w.record(&Lookup::Missing, None);
        let mut r = HintsReader::open(w.path()).unwrap();
        let at = Location { bucket: 12345, slot: 6, word: 0xdead_beef };
        w.record(&hit(), Some(at));
        w.record(&Lookup::Expired, None);
        let mut marked = Vec::new();
        let delta = r.drain(|l| marked.push(l));
        assert_eq!(delta, HintCounts { gets: 3, hits: 1, misses: 2, expired: 1, flushed: 0 });
        assert_eq!(marked, [at]);
        assert_eq!(r.drain(|_| panic!("nothing new")), HintCounts::default());
    }

    #[test]
    fn a_flood_of_hits_is_read_at_most_one_ring_at_a_time() {
        let mut w = HintsWriter::create().unwrap();
        let mut r = HintsReader::open(w.path()).unwrap();
        for i in 0..3 * RING_ENTRIES {
            w.record(&hit(), Some(Location { bucket: i, slot: 0, word: i as u64 }));
        }
        let mut seen = Vec::new();
        assert_eq!(r.drain(|l| seen.push(l.bucket)).hits, 3 * RING_ENTRIES as u64);
        assert_eq!(seen, (2 * RING_ENTRIES..3 * RING_ENTRIES).collect::<Vec<_>>());
    }

    #[test]
    fn a_readers_hit_marks_the_item_read_through_the_writer() {
        let w = crate::Writer::create_anonymous(&crate::Config::default(), true).unwrap();
        w.set(b"k", b"v", 0, 0).unwrap();
        let r = crate::Reader::open(w.path()).unwrap();
        let mut v = Vec::new();
        let fetched = |v: &mut Vec<u8>| w.read(b"k", v, false).unwrap().hit().unwrap().fetched;
        let (lookup, at) = r.get_located(b"k", &mut v).unwrap();
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
        w.record(&hit(), None);
        assert_eq!(r.drain(|_| {}).hits, 1);
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
}
