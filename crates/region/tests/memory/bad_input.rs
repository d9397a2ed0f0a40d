//! Bad input, and corrupt region files.

use super::*;

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
    let noise = noise(0x1234_5678_9abc_def0, 1 << 20);
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
    let noise = noise(0x0dd_ba11, 5 * segment_bytes);
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
