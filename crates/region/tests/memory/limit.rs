//! The memory limit and eviction.

use super::*;

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
