//! A rejoin hold (`Writer::hold`, `shoal server --rejoin-hold`): what a warm restart kept reads
//! as absent, to the writer and to readers, until the hold ends; a change to a held item drops
//! it first, so a delete during the hold is not undone when it ends.

use shoal_region::{Config, Lookup, PreviousStop, Reader, Store, Writer};

#[test]
fn a_hold_hides_what_the_region_kept_until_it_ends_and_deletes_during_it_stick() {
    let path = format!("/dev/shm/shoal-hold-{}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let w = Writer::create(&path, &Config::default(), true).unwrap();
    assert_eq!(w.previous_stop(), PreviousStop::None);
    for key in [&b"kept"[..], b"deleted", b"appended", b"replaced"] {
        assert_eq!(w.set(key, b"old", 0, 0).unwrap(), Store::Stored);
    }
    drop(w);
    let w = Writer::open(&path, true).unwrap();
    assert_eq!(w.previous_stop(), PreviousStop::Clean);
    let now = w.clock();
    w.hold(10);
    assert_eq!(w.hold_remaining(), 10);
    let r = Reader::open(&path).unwrap();
    let mut v = Vec::new();
    assert_eq!(w.get(b"kept", &mut v).unwrap(), Lookup::Flushed, "held from the server");
    assert_eq!(r.get(b"kept", &mut v).unwrap(), Lookup::Flushed, "and from local readers");
    assert!(!w.delete(b"deleted").unwrap(), "a held item is not there to delete");
    assert_eq!(w.append(b"appended", b"+").unwrap(), Store::NotStored, "nothing builds on a held item");
    assert_eq!(w.set(b"replaced", b"new", 0, 0).unwrap(), Store::Stored);
    assert_eq!(r.get(b"replaced", &mut v).unwrap().hit().map(|_| v.clone()), Some(b"new".to_vec()));
    w.tick(now + 10);
    assert_eq!(w.hold_remaining(), 0);
    assert!(r.get(b"kept", &mut v).unwrap().hit().is_some(), "served again after the hold");
    assert_eq!(v, b"old");
    for gone in [&b"deleted"[..], b"appended"] {
        assert_eq!(r.get(gone, &mut v).unwrap(), Lookup::Missing, "changed during the hold: gone for good");
    }
    assert_eq!(w.get(b"replaced", &mut v).unwrap().hit().map(|_| v.clone()), Some(b"new".to_vec()));
    drop(r);
    drop(w);
    std::fs::remove_file(&path).unwrap();
}
