//! Reclaiming whole segments.

use super::*;

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

    // Expired at t0 + 10; the segments are reclaimed two seconds later (a read meanwhile finds
    // the items and counts them expired, as memcached's get_expired does).
    w.tick(t0 + 12);
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
    // The flushed items stay (read as flushed) until a tick two seconds later reclaims them.
    assert!((0..10).all(|i| read(&r, &key("b", i)).is_none()));
    assert!(w.stats().items > 0);
    w.tick(w.clock() + 2);
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
    w.tick(t0 + 7);
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
