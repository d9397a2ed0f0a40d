//! Sizes.

use super::*;

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
