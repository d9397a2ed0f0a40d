//! Deterministic tests of the region's memory behaviour: the memory limit, eviction and the
//! no-eviction mode, the second chance for items that are read, whole-segment reclamation of
//! expired, flushed and deleted items, the index as a limit, and refusal of bad input and of
//! corrupt region files.

use shoal_region::layout::{COOKIE_OFFSET, HEADER_BYTES, LAYOUT_VERSION};
use shoal_region::{Config, Delta, LimitError, Lookup, OpError, Reader, RegionError, Store, Writer};
use std::os::unix::fs::FileExt;

// ---------------------------------------------------------------------------------------------
// Helpers

/// A region file under /dev/shm, removed on drop (also when a test fails).
struct ShmFile(String);

impl ShmFile {
    fn new(tag: &str) -> ShmFile {
        let path = format!("/dev/shm/shoal-memory-{tag}-{}", std::process::id());
        let _ = std::fs::remove_file(&path);
        ShmFile(path)
    }

    fn len(&self) -> u64 {
        std::fs::metadata(&self.0).unwrap().len()
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// 8 MiB: seven 1 MiB segments.
fn small() -> Config {
    Config { region_bytes: 8 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 }
}

/// Keys of at most 12 bytes: a prefix of up to 3 bytes, a dash and 8 digits.
fn key(prefix: &str, i: usize) -> Vec<u8> {
    assert!(prefix.len() <= 3, "longer keys would not fit ITEM");
    format!("{prefix}-{i:08}").into_bytes()
}

/// A value that names its key and index, so a value of another key or a torn value shows.
fn value(prefix: &str, i: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let seed = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ prefix.len() as u64;
    let mut x = seed;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    if len >= 8 {
        v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    }
    v
}

/// Reads `key` through the reader (which marks nothing); the value if it is a hit.
fn read(r: &Reader, key: &[u8]) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    r.get(key, &mut v).unwrap().hit().map(|_| v)
}

/// Bytes one 1 KiB test item takes in a segment: 12-byte header, key of 10 to 12 bytes, value,
/// padding to 8.
const ITEM: usize = (12 + 12 + 1024usize).div_ceil(8) * 8;

// ---------------------------------------------------------------------------------------------
// The memory limit and eviction

#[test]
fn memory_limit_is_honoured_by_evicting_oldest_first() {
    let file = ShmFile::new("limit");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let size = file.len();
    assert_eq!(size as usize, w.layout().region_bytes);
    let stats = w.stats();
    let capacity = stats.segments * stats.segment_bytes;
    assert!(stats.segments >= 5 && (size as usize) <= 8 << 20, "{stats:?}");

    // 100 MB of 1 KiB values into 8 MiB.
    let n = 100_000;
    for i in 0..n {
        let got = w.set(&key("k", i), &value("k", i, 1024), i as u32, 0);
        assert_eq!(got, Ok(Store::Stored), "set {i}");
        if i % 1000 == 999 {
            let s = w.stats();
            assert_eq!(file.len(), size, "the region file changed size");
            assert!(s.bytes as usize <= capacity, "{} bytes live in {capacity}", s.bytes);
            assert!(s.items as usize * ITEM <= capacity);
        }
    }
    let s = w.stats();
    assert!(s.evictions > 0 && s.segments_evicted > 0, "{s:?}");
    assert_eq!(s.total_items, n as u64);
    assert_eq!(s.index_evictions, 0, "the index is sized for these items: {s:?}");
    // Nothing was read, so everything evicted was unfetched.
    assert_eq!(s.evicted_unfetched, s.evictions);
    assert_eq!(file.len(), size);

    // FIFO: exactly a suffix of the keys is left, every one of them intact, and it holds most
    // of the memory: at least all but two segments' worth (the open and the retained one).
    let present: Vec<bool> = (0..n).map(|i| read(&r, &key("k", i)).is_some()).collect();
    let first = present.iter().position(|&p| p).expect("something is left");
    assert!(present[first..].iter().all(|&p| p), "survivors are not the most recent keys");
    let left = n - first;
    assert_eq!(s.items as usize, left);
    assert_eq!(s.bytes as usize, left * ITEM);
    assert_eq!(s.evictions as usize, first);
    let per_segment = s.segment_bytes / ITEM;
    assert!(left >= (s.segments - 2) * per_segment, "only {left} items left in {} segments", s.segments);
    let mut v = Vec::new();
    for i in first..n {
        let info = w.get(&key("k", i), &mut v).unwrap().hit().unwrap();
        assert_eq!(v, value("k", i, 1024), "value of key {i}");
        assert_eq!(info.flags, i as u32);
    }
}

#[test]
fn the_limit_moves_at_run_time_keeping_what_fits_and_giving_memory_back() {
    use std::os::unix::fs::MetadataExt;
    let file = ShmFile::new("setlimit");
    let config = Config { region_bytes: 32 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 128 };
    let w = Writer::create(&file.0, &config, true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let s = w.stats();
    let (segments, segment) = (s.segments, s.segment_bytes);
    assert_eq!(w.limit_bytes(), segments * segment, "every segment usable at first");
    let allocated = || std::fs::metadata(&file.0).unwrap().blocks() * 512;
    let n = 40_000; // ~41 MB of 1 KiB values: every segment in use, the oldest evicted
    for i in 0..n {
        assert_eq!(w.set(&key("k", i), &value("k", i, 1024), 0, 0), Ok(Store::Stored));
    }
    let full = allocated();
    let before = w.stats().items as usize;

    // Down to 8 segments: the oldest go, the newest stay intact, the memory goes back.
    assert_eq!(w.set_limit(8 * segment + 1000), Ok(8 * segment), "whole segments");
    let s = w.stats();
    assert_eq!((w.limit_bytes(), s.segments_parked), (8 * segment, segments - 8));
    assert!(s.items as usize * ITEM <= 8 * segment && (s.items as usize) < before, "{s:?}");
    assert!(
        allocated() + ((segments - 8 - 1) * segment) as u64 <= full,
        "{} of {full} bytes still allocated",
        allocated()
    );
    let present: Vec<bool> = (0..n).map(|i| read(&r, &key("k", i)).is_some()).collect();
    let first = present.iter().position(|&p| p).expect("the newest items stay");
    assert!(present[first..].iter().all(|&p| p), "what stays is the most recent keys");
    assert_eq!(n - first, s.items as usize);
    for i in first..n {
        assert_eq!(read(&r, &key("k", i)).unwrap(), value("k", i, 1024), "value of key {i}");
    }
    // Writing on stays within the limit.
    for i in n..n + 20_000 {
        assert_eq!(w.set(&key("k", i), &value("k", i, 1024), 0, 0), Ok(Store::Stored));
    }
    let s = w.stats();
    assert_eq!(s.segments_parked, segments - 8);
    assert!(s.items as usize * ITEM <= 8 * segment, "{s:?}");

    // Back up: the parked segments are used again, and nothing is lost on the way.
    let kept = s.items;
    assert_eq!(w.set_limit(segments * segment), Ok(segments * segment));
    assert_eq!((w.stats().segments_parked, w.stats().items), (0, kept));
    for i in n + 20_000..n + 40_000 {
        assert_eq!(w.set(&key("k", i), &value("k", i, 1024), 0, 0), Ok(Store::Stored));
    }
    assert!(w.stats().items > kept + 15_000, "the room came back: {:?}", w.stats());

    // Limits it cannot keep are refused, changing nothing.
    assert!(matches!(w.set_limit(segment), Err(LimitError::TooSmall { .. })));
    assert!(matches!(w.set_limit((segments + 1) * segment), Err(LimitError::TooLarge { .. })));
    assert!(w.set_limit(segment).unwrap_err().to_string().contains("two segments"));
    assert_eq!(w.limit_bytes(), segments * segment);
}

#[test]
fn no_eviction_mode_answers_out_of_memory_and_keeps_everything() {
    let file = ShmFile::new("noevict");
    let w = Writer::create(&file.0, &small(), false).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let s0 = w.stats();
    let per_segment = s0.segment_bytes / ITEM;

    let mut stored = 0;
    let err = loop {
        assert!(stored < 20_000, "a full region never refused a set");
        match w.set(&key("k", stored), &value("k", stored, 1024), 1, 0) {
            Ok(Store::Stored) => stored += 1,
            Ok(other) => panic!("set answered {other:?}"),
            Err(e) => break e,
        }
    };
    assert_eq!(err, OpError::OutOfMemory);
    assert!(!err.to_string().is_empty());
    // All memory was used before refusing.
    assert_eq!(stored, s0.segments * per_segment, "refused early: {:?}", w.stats());
    let s = w.stats();
    assert_eq!((s.evictions, s.segments_evicted, s.segments_free), (0, 0, 0), "{s:?}");
    assert_eq!(s.items as usize, stored);

    // Everything refuses to grow now; nothing is lost or changed by the refusals.
    assert_eq!(w.set(&key("new", 0), b"x", 0, 0), Err(OpError::OutOfMemory));
    assert_eq!(w.add(&key("new", 1), b"x", 0, 0), Err(OpError::OutOfMemory));
    assert_eq!(w.append(&key("k", 0), b"x"), Err(OpError::OutOfMemory));
    assert_eq!(w.prepend(&key("k", 1), b"x"), Err(OpError::OutOfMemory));
    assert_eq!(w.replace(&key("k", 2), b"x", 0, 0), Err(OpError::OutOfMemory));
    // A `set` that cannot be stored removes the old value, as memcached does, so that the
    // client does not keep reading what it tried to replace. (Only `set`: the calls above
    // left their items alone.)
    assert_eq!(w.set(&key("k", 3), b"x", 0, 0), Err(OpError::OutOfMemory));
    assert_eq!(read(&r, &key("k", 3)), None);
    assert_eq!(w.set(&b"c"[..], b"1", 0, 0), Err(OpError::OutOfMemory));
    assert_eq!(w.incr(&key("k", 4), 1), Ok(Delta::NonNumeric));
    // Operations that need no memory still work.
    assert_eq!(w.touch(&key("k", 5), 0), Ok(true));
    for i in (0..stored).filter(|&i| i != 3) {
        assert_eq!(read(&r, &key("k", i)), Some(value("k", i, 1024)), "key {i}");
    }
    assert_eq!(read(&r, &key("new", 0)), None);

    // Deleting whole segments' worth of items gives their memory back.
    let freed = 3 * per_segment;
    for i in 0..freed {
        assert_eq!(w.delete(&key("k", i)), Ok(i != 3), "key {i}");
    }
    let mut more = 0;
    while w.set(&key("mor", more), &value("mor", more, 1024), 2, 0).is_ok() {
        more += 1;
        assert!(more <= freed, "stored more than was freed");
    }
    assert_eq!(more, freed, "deleted memory was not reused: {:?}", w.stats());
    for i in freed..stored {
        assert_eq!(read(&r, &key("k", i)), Some(value("k", i, 1024)), "key {i}");
    }
    for i in 0..more {
        assert_eq!(read(&r, &key("mor", i)), Some(value("mor", i, 1024)), "key more-{i}");
    }
    assert_eq!(w.stats().evictions, 0);
}

#[test]
fn items_read_get_a_second_chance() {
    let file = ShmFile::new("second");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let mut v = Vec::new();

    // Warm up until the region is full and evicting, so that a retained segment (where read
    // items are copied) exists. (The very first evictions cannot give a second chance: there is
    // no free segment to copy into yet.)
    for i in 0..10_000 {
        w.set(&key("wrm", i), &value("wrm", i, 1024), 0, 0).unwrap();
    }
    assert!(w.stats().segments_evicted > 0);

    // Hot and cold keys written at the same time, into the same segments.
    let n = 200;
    let mut hot_cas = Vec::new();
    for i in 0..n {
        w.set(&key("hot", i), &value("hot", i, 1024), 1, 0).unwrap();
        w.set(&key("cld", i), &value("cld", i, 1024), 2, 0).unwrap();
    }
    for i in 0..n {
        hot_cas.push(w.get(&key("hot", i), &mut v).unwrap().hit().unwrap().cas);
    }
    // Then a lot of other traffic (four times the region), reading the hot keys now and then.
    for i in 0..30_000 {
        w.set(&key("jnk", i), &value("jnk", i, 1024), 0, 0).unwrap();
        if i % 1000 == 0 {
            for h in 0..n {
                w.get(&key("hot", h), &mut v).unwrap();
            }
        }
    }
    let hot = (0..n).filter(|&i| read(&r, &key("hot", i)).is_some()).count();
    let cold = (0..n).filter(|&i| read(&r, &key("cld", i)).is_some()).count();
    assert!(hot >= n * 95 / 100 && cold <= n / 20, "hot survived {hot}/{n}, cold {cold}/{n}");
    // Survivors were copied whole, kept their flags and their CAS unique (a client holding it
    // can still `cas`).
    for (i, &cas) in hot_cas.iter().enumerate() {
        let Lookup::Hit(info) = w.get(&key("hot", i), &mut v).unwrap() else { continue };
        assert_eq!(v, value("hot", i, 1024));
        assert_eq!((info.flags, info.cas), (1, cas), "hot key {i}");
    }
    let survivor = (0..n).find(|&i| read(&r, &key("hot", i)).is_some()).unwrap();
    assert_eq!(w.cas(&key("hot", survivor), b"new", 3, 0, hot_cas[survivor]), Ok(Store::Stored));
    assert_eq!(read(&r, &key("hot", survivor)).as_deref(), Some(&b"new"[..]));
    let s = w.stats();
    assert!(s.evictions > 0 && s.evicted_unfetched > 0, "{s:?}");
}

#[test]
fn second_chance_with_more_hot_items_than_fit_stays_correct() {
    // More read items than the retained segment takes: copies fail over to sealing it and
    // opening another. Whatever survives must be intact; read items still fare better.
    let file = ShmFile::new("second-big");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let mut v = Vec::new();
    let n = 2500;
    for round in 0..4 {
        for i in 0..n {
            w.set(&key("hot", i), &value("hot", i, 1024), 1, 0).unwrap();
            w.set(&key("cld", i), &value("cld", i, 1024), 2, 0).unwrap();
            if i % 4 == 0 {
                w.get(&key("hot", i / 2), &mut v).unwrap();
            }
        }
        for i in 0..n {
            if i % 3 == round % 3 {
                w.get(&key("hot", i), &mut v).unwrap();
            }
        }
    }
    for i in 0..20_000 {
        w.set(&key("jnk", i), &value("jnk", i, 1024), 0, 0).unwrap();
        if i % 500 == 0 {
            for h in (0..n).step_by(7) {
                w.get(&key("hot", h), &mut v).unwrap();
            }
        }
    }
    let mut hot = 0;
    for i in 0..n {
        if let Some(got) = read(&r, &key("hot", i)) {
            assert_eq!(got, value("hot", i, 1024), "hot key {i}");
            hot += 1;
        }
        if let Some(got) = read(&r, &key("cld", i)) {
            assert_eq!(got, value("cld", i, 1024), "cold key {i}");
        }
    }
    let hot_frequent = (0..n).step_by(7).filter(|&i| read(&r, &key("hot", i)).is_some()).count();
    let s = w.stats();
    assert!(hot > 0 && hot_frequent * 2 > n / 7, "{hot} hot, {hot_frequent} frequently read: {s:?}");
    assert!(s.bytes as usize <= s.segments * s.segment_bytes);
}

// ---------------------------------------------------------------------------------------------
// Reclaiming whole segments

/// A small region, a reader beside its writer, and how many 1 KiB items fill a segment.
struct Small {
    _file: ShmFile,
    w: Writer,
    r: Reader,
    segments: usize,
    per_segment: usize,
}

impl Small {
    fn new(tag: &str) -> Small {
        let file = ShmFile::new(tag);
        let w = Writer::create(&file.0, &small(), true).unwrap();
        let r = Reader::open(&file.0).unwrap();
        let (segments, per_segment) = (w.stats().segments, w.stats().segment_bytes / ITEM);
        Small { _file: file, w, r, segments, per_segment }
    }
}

/// Fills with `count` 1 KiB items of expiry `exptime`.
fn fill(w: &Writer, prefix: &str, count: usize, exptime: i64) {
    for i in 0..count {
        assert_eq!(w.set(&key(prefix, i), &value(prefix, i, 1024), 0, exptime), Ok(Store::Stored));
    }
}

#[test]
fn expired_segments_are_reclaimed_whole() {
    let Small { _file, w, r, segments, per_segment } = Small::new("expire");
    let n = 4 * per_segment + per_segment / 2; // four sealed segments and half an open one
    let t0 = w.clock();
    fill(&w, "ttl", n, 10);
    let s = w.stats();
    assert_eq!((s.items as usize, s.evictions, s.segments_free), (n, 0, segments - 5), "{s:?}");

    w.tick(t0 + 9);
    assert!((0..n).all(|i| read(&r, &key("ttl", i)).is_some()), "expired early");
    assert_eq!(w.stats().segments_reclaimed, 0);

    w.tick(t0 + 10);
    let mut v = Vec::new();
    for i in 0..n {
        let got = r.get(&key("ttl", i), &mut v).unwrap();
        assert!(matches!(got, Lookup::Expired | Lookup::Missing), "key {i}: {got:?}");
        assert_eq!(w.get(&key("ttl", i), &mut v).unwrap(), got);
    }
    let s = w.stats();
    assert_eq!(s.segments_reclaimed, 5, "{s:?}");
    assert_eq!(s.reclaimed, n as u64, "{s:?}");
    assert_eq!(s.expired_unfetched, s.reclaimed, "nothing was read through the writer");
    // The segment still open for this time class is sealed and reclaimed as well.
    assert_eq!((s.items, s.bytes, s.segments_free), (0, 0, segments), "{s:?}");
    assert_eq!(s.evictions, 0);

    // The memory is there to use again, without evicting.
    fill(&w, "nev", (segments - 1) * per_segment, 0);
    assert_eq!(w.stats().evictions, 0, "{:?}", w.stats());
    assert!((0..(segments - 1) * per_segment).all(|i| read(&r, &key("nev", i)).is_some()));
}

#[test]
fn flush_reclaims_every_segment() {
    let Small { _file, w, r, segments, per_segment } = Small::new("flush");
    let n = 4 * per_segment + 10;
    fill(&w, "a", n, 0);
    fill(&w, "b", 10, 100); // another time class, another open segment
    w.flush(0);
    let s = w.stats();
    assert_eq!((s.items, s.bytes, s.segments_free), (0, 0, segments), "{s:?}");
    assert!(s.segments_reclaimed >= 6, "{s:?}");
    assert_eq!(s.evictions, 0);
    assert!((0..n).all(|i| read(&r, &key("a", i)).is_none()));
    assert!((0..10).all(|i| read(&r, &key("b", i)).is_none()));

    // Delayed: nothing happens until the clock reaches it; then everything written before goes.
    let t0 = w.clock();
    fill(&w, "c", n, 0);
    w.flush(5);
    fill(&w, "d", 10, 0);
    w.tick(t0 + 4);
    assert!((0..n).all(|i| read(&r, &key("c", i)).is_some()), "flushed early");
    assert!((0..10).all(|i| read(&r, &key("d", i)).is_some()), "flushed early");
    w.tick(t0 + 5);
    assert!((0..n).all(|i| read(&r, &key("c", i)).is_none()));
    assert!((0..10).all(|i| read(&r, &key("d", i)).is_none()));
    let s = w.stats();
    assert_eq!((s.items, s.segments_free), (0, segments), "{s:?}");
    fill(&w, "e", 10, 0);
    assert!((0..10).all(|i| read(&r, &key("e", i)).is_some()), "items after the flush must stay");

    // All of it usable again without eviction.
    w.flush(0);
    fill(&w, "f", segments * per_segment, 0);
    assert_eq!(w.stats().evictions, 0);
}

#[test]
fn deleted_segments_are_reclaimed_whole() {
    let Small { _file, w, r, segments, per_segment } = Small::new("delete");
    let n = 5 * per_segment + 10;
    fill(&w, "a", n, 0);
    for i in 0..n {
        assert_eq!(w.delete(&key("a", i)), Ok(true));
        assert_eq!(w.delete(&key("a", i)), Ok(false));
    }
    assert_eq!((w.stats().items, w.stats().bytes), (0, 0));
    w.tick(w.clock());
    let s = w.stats();
    assert!(s.segments_reclaimed >= 5 && s.segments_free >= segments - 1, "{s:?}");
    assert!((0..n).all(|i| read(&r, &key("a", i)).is_none()));
    // Overwritten items free their segments the same way.
    fill(&w, "b", 3 * per_segment, 0);
    fill(&w, "b", 3 * per_segment, 0);
    fill(&w, "b", 3 * per_segment, 0);
    let s = w.stats();
    assert_eq!((s.items as usize, s.evictions), (3 * per_segment, 0), "{s:?}");
    assert!((0..3 * per_segment).all(|i| read(&r, &key("b", i)) == Some(value("b", i, 1024))));
}

// ---------------------------------------------------------------------------------------------
// Sizes

#[test]
fn values_up_to_the_maximum_item_size_round_trip() {
    for max_item in [1usize << 20, 4 << 20] {
        let file = ShmFile::new(&format!("large-{max_item}"));
        let cfg = Config { region_bytes: 16 << 20, max_item_bytes: max_item, avg_item_bytes: 128 };
        let w = Writer::create(&file.0, &cfg, true).unwrap();
        let r = Reader::open(&file.0).unwrap();
        let k = key("big", 0);
        let largest = max_item - 12 - k.len();
        let big = value("big", 0, largest);
        assert_eq!(w.set(&k, &big, 9, 0), Ok(Store::Stored));
        assert_eq!(read(&r, &k), Some(big.clone()));
        assert_eq!(
            w.set(&key("big", 1), &value("big", 1, largest + 1), 0, 0),
            Err(OpError::ValueTooLarge { len: largest + 1, max: largest })
        );
        assert_eq!(w.append(&k, b"!"), Err(OpError::ValueTooLarge { len: largest + 1, max: largest }));
        assert_eq!(read(&r, &k), Some(big.clone()), "a refused append changed the item");
        // A longer key leaves less room for the value.
        let long_key = vec![b'k'; 250];
        assert!(matches!(
            w.set(&long_key, &value("big", 0, largest), 0, 0),
            Err(OpError::ValueTooLarge { max, .. }) if max == max_item - 12 - 250
        ));
        // Many items of near the maximum: whole segments each, evicted oldest first.
        let segments = w.stats().segments;
        for i in 0..3 * segments {
            let len = largest - (i % 3) * 8;
            assert_eq!(w.set(&key("big", i), &value("big", i, len), 0, 0), Ok(Store::Stored), "{i}");
        }
        assert!(w.stats().evictions > 0);
        let last = 3 * segments - 1;
        assert_eq!(read(&r, &key("big", last)), Some(value("big", last, largest - (last % 3) * 8)));
        for i in 0..3 * segments {
            if let Some(got) = read(&r, &key("big", i)) {
                assert_eq!(got, value("big", i, largest - (i % 3) * 8), "item {i}");
            }
        }
    }
}

#[test]
fn empty_values_work() {
    let file = ShmFile::new("empty");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let mut v = b"jnk".to_vec();
    assert_eq!(w.set(b"e", b"", 42, 0), Ok(Store::Stored));
    let info = w.get(b"e", &mut v).unwrap().hit().unwrap();
    assert_eq!((v.len(), info.value_len, info.flags), (0, 0, 42));
    let mut rv = b"jnk".to_vec();
    assert_eq!(r.get(b"e", &mut rv).unwrap().hit().map(|i| (i.cas, i.flags)), Some((info.cas, 42)));
    assert!(rv.is_empty());
    assert_eq!(w.incr(b"e", 1), Ok(Delta::NonNumeric));
    assert_eq!(w.append(b"e", b""), Ok(Store::Stored));
    assert_eq!(read(&r, b"e").as_deref(), Some(&b""[..]));
    assert_eq!(w.append(b"e", b"x"), Ok(Store::Stored));
    assert_eq!(w.prepend(b"e", b""), Ok(Store::Stored));
    assert_eq!(read(&r, b"e").as_deref(), Some(&b"x"[..]));
    assert_eq!(w.add(b"e2", b"", 0, 0), Ok(Store::Stored));
    assert_eq!(read(&r, b"e2").as_deref(), Some(&b""[..]));
}

/// An 8 MiB region whose index is planned for 4 KiB items, so tiny items fill the index long
/// before the segments; returns it with a reader and its number of index slots.
fn small_index(tag: &str, evict: bool) -> (ShmFile, Writer, Reader, usize) {
    let file = ShmFile::new(tag);
    let cfg = Config { region_bytes: 8 << 20, max_item_bytes: 1 << 20, avg_item_bytes: 4096 };
    let w = Writer::create(&file.0, &cfg, evict).unwrap();
    let r = Reader::open(&file.0).unwrap();
    let slots = w.layout().bucket_count * shoal_region::layout::BUCKET_SLOTS;
    (file, w, r, slots)
}

#[test]
fn a_small_index_evicts_by_index_and_stays_correct() {
    // The index is planned for 4 KiB items; tiny items fill it long before the segments.
    let (_file, w, r, slots) = small_index("index", true);
    let n = 50_000;
    assert!(n > 10 * slots, "index of {slots} slots is not small");
    let hot = 100;
    let mut v = Vec::new();
    for i in 0..n {
        assert_eq!(w.set(&key("t", i), &(i as u64).to_le_bytes(), i as u32, 0), Ok(Store::Stored));
        if i >= hot && i % 100 == 0 {
            for h in 0..hot {
                w.get(&key("t", h), &mut v).unwrap();
            }
        }
    }
    let s = w.stats();
    assert!(s.evictions > 0 && s.index_evictions == s.evictions, "{s:?}");
    assert_eq!(s.segments_evicted, 0, "memory was not the limit: {s:?}");
    // Every new key either found a slot or pushed exactly one item out.
    assert_eq!(s.items + s.index_evictions, n as u64, "{s:?}");
    assert!(s.items as usize <= slots);
    assert!(s.items as usize >= slots * 3 / 4, "the index filled only {}/{slots} slots", s.items);
    let mut present = 0;
    for i in 0..n {
        let got = r.get(&key("t", i), &mut v).unwrap();
        if let Lookup::Hit(info) = got {
            assert_eq!((v.as_slice(), info.flags), (&(i as u64).to_le_bytes()[..], i as u32), "key {i}");
            present += 1;
        } else {
            assert_eq!(got, Lookup::Missing);
        }
    }
    assert_eq!(present as u64, s.items, "stats disagree with what is readable");
    assert!(read(&r, &key("t", n - 1)).is_some(), "the newest key is gone");
    let hot_left = (0..hot).filter(|&h| read(&r, &key("t", h)).is_some()).count();
    assert!(hot_left >= hot * 9 / 10, "only {hot_left}/{hot} read keys survived index eviction");
}

#[test]
fn no_eviction_mode_never_drops_items_for_a_full_index_either() {
    // A full index pair must not push a live item out when eviction is disabled (memcached's
    // `-M`): the new item is refused instead, and everything stored stays.
    let (_file, w, r, slots) = small_index("index-noevict", false);
    let mut stored = Vec::new();
    let mut refused = 0;
    for i in 0..4 * slots {
        match w.set(&key("t", i), &(i as u64).to_le_bytes(), 0, 0) {
            Ok(Store::Stored) => stored.push(i),
            Err(OpError::OutOfMemory) => refused += 1,
            other => panic!("set {i}: {other:?}"),
        }
    }
    let s = w.stats();
    assert!(refused > 0, "{s:?}");
    assert_eq!((s.evictions, s.index_evictions), (0, 0), "{s:?}");
    assert_eq!(s.items as usize, stored.len());
    assert_eq!(s.total_items as usize, stored.len(), "refused items were counted as stored");
    for &i in &stored {
        assert_eq!(read(&r, &key("t", i)), Some((i as u64).to_le_bytes().to_vec()), "key {i}");
    }
    // Overwriting a stored key needs no new slot; deleting one makes room for a new key.
    let last = *stored.last().unwrap();
    assert_eq!(w.set(&key("t", last), b"again", 0, 0), Ok(Store::Stored));
    assert_eq!(read(&r, &key("t", last)).as_deref(), Some(&b"again"[..]));
    for &i in &stored {
        assert_eq!(w.delete(&key("t", i)), Ok(true));
    }
    for i in 0..stored.len() / 2 {
        assert_eq!(w.set(&key("u", i), b"x", 0, 0), Ok(Store::Stored), "after deletes, set {i}");
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[test]
fn bad_keys_and_values_are_refused_without_side_effects() {
    let file = ShmFile::new("bad");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    assert_eq!(w.set(b"good", b"value", 5, 0), Ok(Store::Stored));
    let mut v = Vec::new();
    let before = w.get(b"good", &mut v).unwrap().hit().map(|i| i.cas);
    let intact = || {
        let mut v = Vec::new();
        assert_eq!(r.get(b"good", &mut v).unwrap().hit().map(|i| i.cas), before);
        assert_eq!(v, b"value");
    };

    let long = vec![b'a'; 251];
    for (k, err) in [(&b""[..], OpError::KeyEmpty), (&long[..], OpError::KeyTooLong(251))] {
        let e = Err(err.clone());
        assert_eq!(w.set(k, b"v", 0, 0), e);
        assert_eq!(w.set(k, b"v", 0, -1), e);
        assert_eq!(w.add(k, b"v", 0, 0), e);
        assert_eq!(w.replace(k, b"v", 0, 0), e);
        assert_eq!(w.append(k, b"v"), e);
        assert_eq!(w.prepend(k, b"v"), e);
        assert_eq!(w.cas(k, b"v", 0, 0, 1), e);
        assert_eq!(w.incr(k, 1), Err(err.clone()));
        assert_eq!(w.decr(k, 1), Err(err.clone()));
        assert_eq!(w.delete(k), Err(err.clone()));
        assert_eq!(w.touch(k, 0), Err(err.clone()));
        assert_eq!(w.get(k, &mut v), Err(err.clone()));
        assert_eq!(r.get(k, &mut v), Err(err.clone()));
        assert!(!err.to_string().is_empty());
        intact();
    }
    assert_eq!(w.set(&[b'a'; 250], b"longest key", 0, 0), Ok(Store::Stored));
    assert_eq!(read(&r, &[b'a'; 250]).as_deref(), Some(&b"longest key"[..]));

    let max = w.layout().max_item_bytes - 12 - 4;
    let too_large = OpError::ValueTooLarge { len: max + 1, max };
    assert!(too_large.to_string().contains("too large"));
    let too_big = Err(too_large);
    assert_eq!(w.replace(b"good", &vec![0; max + 1], 0, 0), too_big);
    assert_eq!(w.cas(b"good", &vec![0; max + 1], 0, 0, before.unwrap()), too_big);
    assert_eq!(w.add(b"gone", &vec![0; max + 1], 0, 0), too_big);
    assert_eq!(w.append(b"good", &vec![0; max + 1 - 5]), too_big);
    assert_eq!(w.prepend(b"good", &vec![0; max + 1 - 5]), too_big);
    assert_eq!(read(&r, b"gone"), None);
    intact();
    assert_eq!(w.stats().items, 2);
    // A `set` too large for the cache removes the old value, as memcached's does.
    assert_eq!(w.set(b"good", &vec![0; max + 1], 0, 0), too_big);
    assert_eq!(read(&r, b"good"), None);
    assert_eq!(w.stats().items, 1);
}

// ---------------------------------------------------------------------------------------------
// Corrupt region files

/// Header fields, by offset (`layout::RawHeader`, repr(C)).
const HASH_ID: u64 = 12;
const REGION_BYTES: u64 = 16;
const SEGMENT_BYTES: u64 = 24;
const SEGMENT_COUNT: u64 = 28;
const BUCKET_COUNT: u64 = 32;
const INDEX_OFFSET: u64 = 40;
const TABLE_OFFSET: u64 = 48;
const SEGMENTS_OFFSET: u64 = 56;
const MAX_ITEM_BYTES: u64 = 80;

/// Both faces refuse the file at `path`; returns the writer's error.
fn refused(path: &str) -> RegionError {
    let reader_err = Reader::open(path).err().expect("reader attached to a bad region");
    let writer_err = Writer::open(path, true).err().expect("writer attached to a bad region");
    assert_eq!(reader_err.to_string(), writer_err.to_string());
    let msg = writer_err.to_string();
    assert!(msg.contains("remove"), "message does not say what to do: {msg}");
    writer_err
}

/// A valid region with one item, closed cleanly; returns its bytes.
fn valid_region(file: &ShmFile) -> Vec<u8> {
    let w = Writer::create(&file.0, &small(), true).unwrap();
    assert_eq!(w.set(b"k", b"still here", 3, 0), Ok(Store::Stored));
    drop(w);
    std::fs::read(&file.0).unwrap()
}

fn patch(path: &str, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

#[test]
fn corrupt_region_files_are_refused_clearly() {
    assert_eq!(COOKIE_OFFSET, 72, "header offsets in this test are stale");
    let file = ShmFile::new("corrupt");
    let good = valid_region(&file);
    let path = file.0.as_str();
    let restore = || std::fs::write(path, &good).unwrap();

    // Random bytes, a short file, an empty file.
    let mut x = 0x1234_5678_9abc_def0u64;
    let noise: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for bytes in [&noise[..], &noise[..100], &noise[..HEADER_BYTES], &[][..]] {
        std::fs::write(path, bytes).unwrap();
        assert!(matches!(refused(path), RegionError::BadMagic), "{} bytes", bytes.len());
    }

    // Another layout version.
    restore();
    patch(path, 8, &(LAYOUT_VERSION + 1).to_le_bytes());
    match refused(path) {
        RegionError::UnsupportedVersion { found, supported } => {
            assert_eq!((found, supported), (LAYOUT_VERSION + 1, LAYOUT_VERSION))
        }
        e => panic!("{e:?}"),
    }

    // Truncated, extended.
    for delta in [-4096i64, -(good.len() as i64) / 2, 4096] {
        restore();
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len((good.len() as i64 + delta) as u64).unwrap();
        drop(f);
        match refused(path) {
            RegionError::SizeMismatch { header, file } => {
                assert_eq!((header as i64, file as i64), (good.len() as i64, good.len() as i64 + delta))
            }
            e => panic!("{delta}: {e:?}"),
        }
    }

    // Scrambled geometry.
    let len = good.len() as u64;
    let cases: Vec<(&str, u64, Vec<u8>)> = vec![
        ("hash function", HASH_ID, 99u32.to_le_bytes().to_vec()),
        ("segment size not a multiple of 8", SEGMENT_BYTES, 12345u32.to_le_bytes().to_vec()),
        ("segment size 0", SEGMENT_BYTES, 0u32.to_le_bytes().to_vec()),
        ("too many segments", SEGMENT_COUNT, u32::MAX.to_le_bytes().to_vec()),
        ("segments beyond the end", SEGMENT_COUNT, 100u32.to_le_bytes().to_vec()),
        ("no segments", SEGMENT_COUNT, 0u32.to_le_bytes().to_vec()),
        ("huge bucket count", BUCKET_COUNT, u64::MAX.to_le_bytes().to_vec()),
        ("index over the table", BUCKET_COUNT, (len / 64).to_le_bytes().to_vec()),
        ("index offset", INDEX_OFFSET, 0u64.to_le_bytes().to_vec()),
        ("table offset misaligned", TABLE_OFFSET, (HEADER_BYTES as u64 + 4097).to_le_bytes().to_vec()),
        ("segments past the end", SEGMENTS_OFFSET, len.to_le_bytes().to_vec()),
        ("segments overflow", SEGMENTS_OFFSET, u64::MAX.to_le_bytes().to_vec()),
        ("max item too small", MAX_ITEM_BYTES, 100u32.to_le_bytes().to_vec()),
        ("max item over a segment", MAX_ITEM_BYTES, (2u32 << 20).to_le_bytes().to_vec()),
    ];
    for (what, offset, bytes) in cases {
        restore();
        patch(path, offset, &bytes);
        assert!(matches!(refused(path), RegionError::Corrupt(_)), "{what}");
    }
    // A header claiming more bytes than the file has.
    restore();
    patch(path, REGION_BYTES, &(len * 2).to_le_bytes());
    assert!(matches!(refused(path), RegionError::SizeMismatch { .. }));

    // A missing file.
    let _ = std::fs::remove_file(path);
    assert!(matches!(Reader::open(path), Err(RegionError::Io { .. })));
    assert!(matches!(Writer::open(path, true), Err(RegionError::Io { .. })));
    assert!(!Writer::open(path, true).err().unwrap().to_string().is_empty());

    // Untouched, the region is fine: the refusals were about the damage.
    restore();
    let r = Reader::open(path).unwrap();
    assert_eq!(read(&r, b"k").as_deref(), Some(&b"still here"[..]));
    let w = Writer::open(path, true).unwrap();
    let mut v = Vec::new();
    assert_eq!(w.get(b"k", &mut v).unwrap().hit().map(|i| i.flags), Some(3));
}

#[test]
fn garbage_in_segments_never_crashes_readers_or_the_writer() {
    // A valid header, index and segment table over item bytes that are noise: lookups miss,
    // and the writer keeps working, evicting the damaged segments as it needs room.
    let file = ShmFile::new("garbage");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let per_segment = w.stats().segment_bytes / ITEM;
    let n = 5 * per_segment;
    fill(&w, "k", n, 0);
    let segments_offset = w.layout().segments_offset as u64;
    let segment_bytes = w.layout().segment_bytes;
    drop(w);
    let mut x = 0x0dd_ba11u64;
    let noise: Vec<u8> = (0..5 * segment_bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    patch(&file.0, segments_offset, &noise);

    let r = Reader::open(&file.0).unwrap();
    let w = Writer::open(&file.0, true).unwrap();
    let mut v = Vec::new();
    for i in 0..n {
        assert_eq!(r.get(&key("k", i), &mut v), Ok(Lookup::Missing), "key {i}");
        assert_eq!(w.get(&key("k", i), &mut v), Ok(Lookup::Missing), "key {i}");
    }
    // Overwrite some, write many more (evicting every damaged segment), read back.
    for i in 0..n / 2 {
        assert_eq!(w.set(&key("k", i), &value("k", i, 1024), 0, 0), Ok(Store::Stored));
    }
    for i in 0..20_000 {
        assert_eq!(w.set(&key("new", i), &value("new", i, 1024), 0, 0), Ok(Store::Stored));
    }
    assert!(w.stats().segments_evicted > 5);
    for i in 0..20_000 {
        if let Some(got) = read(&r, &key("new", i)) {
            assert_eq!(got, value("new", i, 1024));
        }
    }
    assert!(read(&r, &key("new", 19_999)).is_some());
}

#[test]
fn oversized_key_lengths_in_segments_never_crash_the_writer() {
    // Item headers carry an 8-bit key length; a damaged one may say 251..=255. Walking such a
    // segment (to evict it) must not index past the 250-byte key buffer.
    let file = ShmFile::new("keylen");
    let w = Writer::create(&file.0, &small(), true).unwrap();
    let per_segment = w.stats().segment_bytes / ITEM;
    fill(&w, "k", 2 * per_segment, 0);
    let base = w.layout().segments_offset as u64;
    let segment_bytes = w.layout().segment_bytes as u64;
    drop(w);
    // The first item of segment 0 and the 10th item of segment 1 claim 255-byte keys.
    patch(&file.0, base, &[255]);
    patch(&file.0, base + segment_bytes + 10 * ITEM as u64, &[255]);
    let w = Writer::open(&file.0, true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    assert_eq!(read(&r, &key("k", 0)), None);
    assert_eq!(read(&r, &key("k", 1)), Some(value("k", 1, 1024)));
    for i in 0..20_000 {
        assert_eq!(w.set(&key("new", i), &value("new", i, 1024), 0, 0), Ok(Store::Stored));
    }
    assert!(w.stats().segments_evicted >= 2);
    assert!((0..2 * per_segment).all(|i| read(&r, &key("k", i)).is_none()));
    assert_eq!(read(&r, &key("new", 19_999)), Some(value("new", 19_999, 1024)));
}

/// Items held by a default-sized region after writing twice its capacity of 100-byte values,
/// with expiry times drawn from `exptimes` (none of which pass during the test).
fn items_held_with_exptimes(tag: &str, exptimes: impl Fn(usize) -> i64) -> u64 {
    let file = ShmFile::new(tag);
    let w = Writer::create(&file.0, &Config::default(), true).unwrap();
    let n = 2 * (64 << 20) / 128;
    for i in 0..n {
        assert_eq!(w.set(&key("mix", i), &[b'v'; 100], 0, exptimes(i)), Ok(Store::Stored));
    }
    w.stats().items
}

#[test]
fn mixed_expiry_times_do_not_strand_memory_in_open_segments() {
    // Every time class keeps a segment open; a small region must not have so many classes
    // that open segments crowd out everything else.
    let baseline = items_held_with_exptimes("ttl-none", |_| 0);
    let spread = items_held_with_exptimes("ttl-spread", |i| 1 + (i as i64 * 7919) % (30 * 86_400));
    assert!(spread * 10 >= baseline * 8, "{spread} items with mixed TTLs vs {baseline} without");
}
