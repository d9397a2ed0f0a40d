//! Items past 8 MiB (memcached's `-I` up to 1 GiB): an extended value length, segments past
//! 16 MiB whose slots give the offset more bits, and layout version 3 for such regions only.

use super::*;
use shoal_region::layout::{max_value_len, SMALL_ITEMS_LAYOUT_VERSION, VALUE_LEN_ESCAPE};

/// 32 MiB items (`-I 32m`) in a region of four 32 MiB segments.
fn large() -> Config {
    Config { region_bytes: 160 << 20, max_item_bytes: 32 << 20, avg_item_bytes: 128 }
}

/// The layout version in a region file's header.
fn version_in(path: &str) -> u32 {
    let mut b = [0u8; 4];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, 8).unwrap();
    u32::from_le_bytes(b)
}

#[test]
fn items_past_8_mib_are_stored_read_overwritten_and_evicted() {
    let file = ShmFile::new("large-items");
    let w = Writer::create(&file.0, &large(), true).unwrap();
    let r = Reader::open(&file.0).unwrap();
    assert_eq!((r.layout().segment_bytes, version_in(&file.0)), (32 << 20, LAYOUT_VERSION));
    let segments = w.stats().segments;
    assert!(segments >= 3, "{segments} segments");

    // Store and read (writer and reader), around the escape and up to the largest value.
    let k = key("big", 0);
    let largest = max_value_len(32 << 20, k.len(), false);
    for len in [VALUE_LEN_ESCAPE - 1, VALUE_LEN_ESCAPE, VALUE_LEN_ESCAPE + 1, 20 << 20, largest] {
        let v = value("big", len, len);
        assert_eq!(w.set(&k, &v, 7, 0), Ok(Store::Stored), "{len}");
        assert_eq!(read(&r, &k), Some(v.clone()), "{len}");
        let mut got = Vec::new();
        let info = w.get(&k, &mut got).unwrap().hit().unwrap();
        assert_eq!((info.value_len, info.flags, got == v), (len, 7, true), "{len}");
    }
    assert_eq!(
        w.set(&k, &value("big", 1, largest + 1), 0, 0),
        Err(OpError::ValueTooLarge { len: largest + 1, max: largest })
    );
    // Overwrite with a shorter value, then grow it across the escape by appending.
    let short = value("big", 2, VALUE_LEN_ESCAPE - 2);
    assert_eq!(w.set(&k, &short, 0, 0), Ok(Store::Stored));
    assert_eq!(w.append(&k, b"12345"), Ok(Store::Stored));
    assert_eq!(read(&r, &k), Some([&short[..], b"12345"].concat()));

    // Small items past the first 16 MiB of a segment: the offsets the default slot split
    // cannot address. Their CAS uniques differ.
    assert_eq!(w.set(&key("big", 1), &value("big", 1, 20 << 20), 0, 0), Ok(Store::Stored));
    let mut cas = Vec::new();
    for i in 0..100 {
        assert_eq!(w.set(&key("s", i), &value("s", i, 100), 0, 0), Ok(Store::Stored));
        cas.push(r.get(&key("s", i), &mut Vec::new()).unwrap().hit().unwrap().cas);
    }
    for i in 0..100 {
        assert_eq!(read(&r, &key("s", i)), Some(value("s", i, 100)), "small item {i}");
    }
    cas.sort_unstable();
    cas.dedup();
    assert_eq!(cas.len(), 100);

    // Read one large item so that eviction gives it a second chance (copied forward with an
    // explicit CAS before its extension), then flood: every hit is intact, the last present.
    let read_before = read(&r, &key("big", 1));
    assert!(w.get(&key("big", 1), &mut Vec::new()).unwrap().hit().is_some());
    let lens = |i: usize| (12 << 20) + i * 8;
    for i in 2..2 + 3 * segments {
        assert_eq!(w.set(&key("big", i), &value("big", i, lens(i)), 0, 0), Ok(Store::Stored), "{i}");
    }
    assert!(w.stats().evictions > 0);
    let last = 1 + 3 * segments;
    assert_eq!(read(&r, &key("big", last)), Some(value("big", last, lens(last))));
    for i in 2..=last {
        if let Some(got) = read(&r, &key("big", i)) {
            assert!(got == value("big", i, lens(i)), "item {i} changed");
        }
    }
    if let Some(got) = read(&r, &key("big", 1)) {
        assert!(Some(got) == read_before, "the copied-forward item changed");
    }
    // A writer attached again (a restart) walks and reads the same items.
    drop(w);
    let w = Writer::open(&file.0, true).unwrap();
    let mut got = Vec::new();
    assert!(w.get(&key("big", last), &mut got).unwrap().hit().is_some());
    assert!(got == value("big", last, lens(last)));
}

#[test]
fn only_regions_of_large_items_take_the_new_layout_version() {
    let small_file = ShmFile::new("large-v2");
    let w = Writer::create(&small_file.0, &Config { max_item_bytes: 8 << 20, ..large() }, true).unwrap();
    assert_eq!(version_in(&small_file.0), SMALL_ITEMS_LAYOUT_VERSION, "8 MiB items fit the old layout");
    drop(w);
    let file = ShmFile::new("large-v3");
    drop(Writer::create(&file.0, &large(), true).unwrap());
    // A region of large items claiming the old version is refused, not misread.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file.0)
        .unwrap()
        .write_all_at(&SMALL_ITEMS_LAYOUT_VERSION.to_le_bytes(), 8)
        .unwrap();
    assert!(matches!(Reader::open(&file.0), Err(RegionError::Corrupt(_))));
    assert!(matches!(Writer::open(&file.0, true), Err(RegionError::Corrupt(_))));
}

#[test]
fn memcacheds_largest_item_size_plans_a_region() {
    let gib = shoal_region::layout::MAX_ITEM_LIMIT;
    let cfg = Config { region_bytes: 2 * gib + (256 << 20), max_item_bytes: gib, avg_item_bytes: 128 };
    let layout = cfg.layout().unwrap();
    assert_eq!((layout.segment_bytes, layout.segment_count, layout.max_item_bytes), (gib, 2, gib));
    assert!(Config { max_item_bytes: gib + 8, ..cfg }.layout().is_err());
}
