use shoal_region::{Config, Lookup, Reader, Store, Writer};

#[test]
fn smoke() {
    let path = format!("/dev/shm/shoal-smoke-{}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let w = Writer::create(&path, &Config::default(), true).unwrap();
    let mut v = Vec::new();
    assert_eq!(w.set(b"k", b"hello", 5, 0).unwrap(), Store::Stored);
    let info = w.get(b"k", &mut v).unwrap().hit().unwrap();
    assert_eq!((v.as_slice(), info.flags), (&b"hello"[..], 5));
    let r = Reader::open(&path).unwrap();
    assert!(r.get(b"k", &mut v).unwrap().hit().is_some());
    assert_eq!(w.append(b"k", b"!").unwrap(), Store::Stored);
    assert!(w.get(b"k", &mut v).unwrap().hit().is_some());
    assert_eq!(v, b"hello!");
    assert!(w.delete(b"k").unwrap());
    assert_eq!(r.get(b"k", &mut v).unwrap(), Lookup::Missing);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn anonymous_memfd_region_is_readable_through_its_proc_path() {
    let w = Writer::create_anonymous(&Config::default(), true).unwrap();
    assert!(w.path().starts_with("/proc/"), "{}", w.path().display());
    assert_eq!(w.set(b"k", b"in a memfd", 3, 0).unwrap(), Store::Stored);
    let r = Reader::open(w.path()).unwrap();
    let mut v = Vec::new();
    assert_eq!(r.get(b"k", &mut v).unwrap().hit().map(|i| i.flags), Some(3));
    assert_eq!(v, b"in a memfd");
    assert_eq!((r.cookie(), r.generation()), (w.cookie(), w.generation()));
    // A second writer on the same file is refused while the first lives.
    assert!(matches!(Writer::open(w.path(), true), Err(shoal_region::RegionError::InUse { .. })));
}

#[test]
fn an_impossible_configuration_leaves_no_file_behind() {
    let path = format!("/dev/shm/shoal-smoke-tiny-{}", std::process::id());
    let tiny = Config { region_bytes: 1 << 20, ..Config::default() };
    assert!(matches!(Writer::create(&path, &tiny, true), Err(shoal_region::RegionError::Config(_))));
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn prefetching_changes_nothing_a_lookup_sees() {
    let w = Writer::create_anonymous(&Config::default(), true).unwrap();
    let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("key:{i}").into_bytes()).collect();
    for key in keys.iter().step_by(2) {
        w.set(key, key, 0, 0).unwrap();
    }
    for key in keys.iter().step_by(3) {
        w.delete(key).unwrap();
    }
    let mut v = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let hash = w.hash(key);
        w.prefetch_index(&hash);
        w.prefetch_item(&hash);
        let hit = w.read_hashed(key, &hash, &mut v, true, i % 4 >= 2).unwrap().hit().is_some();
        assert_eq!(hit, i % 2 == 0 && i % 3 != 0, "key {i}");
        if hit {
            assert_eq!(&v, key);
        }
    }
    for odd in [&b""[..], &[0xff; 250][..], &[0; 251][..]] {
        let hash = w.hash(odd);
        w.prefetch_index(&hash);
        w.prefetch_item(&hash);
    }
    // A larger region's hashes may name buckets past this index: such a hash is not used (the
    // key is hashed again), so nothing reads outside the region; a lookup under a foreign hash
    // that fits may only miss.
    let larger = Config { region_bytes: Config::default().region_bytes * 8, ..Config::default() };
    let big = Writer::create_anonymous(&larger, true).unwrap();
    for key in &keys {
        let foreign = big.hash(key);
        w.prefetch_index(&foreign);
        w.prefetch_item(&foreign);
        w.read_hashed(key, &foreign, &mut v, false, false).unwrap();
        w.read_hashed(key, &foreign, &mut v, false, true).unwrap();
    }
}

#[test]
fn hidden_items_are_lease_records_only_read_modify_writes_see() {
    use shoal_region::{Change, Marks, NewItem, Value};
    let w = Writer::create_anonymous(&Config::default(), true).unwrap();
    let r = Reader::open(w.path()).unwrap();
    let record = |marks| {
        let item =
            NewItem { value: Value::Owned(b"old".to_vec()), flags: 0, expiry: Some(0), cas: None, marks };
        w.update(b"k", &[], false, |_| (Change::Store(item.clone()), ())).unwrap();
    };
    let mut v = Vec::new();
    // A hold-off (hidden, not stale): plain reads miss, add is refused, delete removes it
    // without counting it as an item.
    record(Marks { hidden: true, ..Marks::default() });
    assert_eq!(r.get(b"k", &mut v).unwrap(), Lookup::Missing);
    assert_eq!(w.get(b"k", &mut v).unwrap(), Lookup::Missing);
    let seen = w.update(b"k", &[], true, |c| (Change::Keep, c.map(|c| c.info.marks.hidden))).unwrap().0;
    assert_eq!(seen, Some(true));
    assert_eq!(w.add(b"k", b"x", 0, 0).unwrap(), Store::NotStored);
    assert_eq!(w.replace(b"k", b"x", 0, 0).unwrap(), Store::NotStored);
    assert_eq!(w.append(b"k", b"x").unwrap(), Store::NotStored);
    assert_eq!(w.cas(b"k", b"x", 0, 0, 1).unwrap(), Store::NotFound);
    assert!(!w.touch(b"k", 100).unwrap());
    assert!(!w.delete(b"k").unwrap());
    assert_eq!(w.add(b"k", b"x", 0, 0).unwrap(), Store::Stored);
    // A value kept stale after a delete: add may replace it.
    record(Marks { hidden: true, stale: true, ..Marks::default() });
    assert_eq!(w.add(b"k", b"y", 0, 0).unwrap(), Store::Stored);
    assert!(r.get(b"k", &mut v).unwrap().hit().is_some());
    assert_eq!(v, b"y");
}
