use super::*;
use std::collections::HashMap;

/// splitmix64: a reproducible stream without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random inserts and removes (of inserted keys only) against a model multiset; returns
/// whether any counter ever saturated and how many checkpoints compared counters exactly.
fn run_against_model(counters: u64, hashes: u32, universe: u64, ops: usize, seed: u64) -> (bool, usize) {
    let mut rng = Rng(seed);
    let mut digest = Digest::new(counters, hashes, seed).unwrap();
    let mut model: HashMap<u64, u32> = HashMap::new();
    let (mut ever_saturated, mut exact_checks) = (false, 0);
    for op in 0..ops {
        let id = rng.below(universe);
        let key = format!("key:{id}");
        if rng.below(2) == 0 {
            digest.insert(key.as_bytes());
            *model.entry(id).or_default() += 1;
        } else if let Some(count) = model.get_mut(&id) {
            assert!(digest.remove(key.as_bytes()), "an inserted {key} looked absent");
            *count -= 1;
            if *count == 0 {
                model.remove(&id);
            }
        }
        let saturated = digest.saturated_counters() > 0;
        ever_saturated |= saturated;
        if op % 97 == 0 || op == ops - 1 {
            for id in model.keys() {
                assert!(
                    digest.may_contain(format!("key:{id}").as_bytes()),
                    "false negative key:{id} at {op}"
                );
            }
            if !saturated {
                // Unsaturated counters are exact: the same multiset inserted afresh matches.
                let mut fresh = Digest::new(counters, hashes, seed).unwrap();
                for (id, &count) in &model {
                    for _ in 0..count {
                        fresh.insert(format!("key:{id}").as_bytes());
                    }
                }
                assert_eq!(fresh, digest, "counters drifted from the model at op {op}");
                exact_checks += 1;
            }
        }
    }
    (ever_saturated, exact_checks)
}

#[test]
fn never_a_false_negative_against_a_model_multiset() {
    for seed in 1..=4 {
        let (_, exact_checks) = run_against_model(16_000, 4, 1000, 6000, seed);
        assert!(exact_checks >= 50, "only {exact_checks} checkpoints before a counter saturated");
    }
    // A tiny digest saturates; saturated counters still never cause a false negative.
    let (saturated, _) = run_against_model(64, 3, 200, 4000, 9);
    assert!(saturated, "expected saturation in a 64-counter digest");
}

#[test]
fn removing_a_certainly_absent_key_changes_nothing() {
    let mut digest = Digest::new(1000, 5, 7).unwrap();
    for i in 0..50 {
        digest.insert(format!("in:{i}").as_bytes());
    }
    let before = digest.clone();
    let mut refused = 0;
    for i in 0..200 {
        let key = format!("out:{i}");
        if !digest.may_contain(key.as_bytes()) {
            assert!(!digest.remove(key.as_bytes()));
            assert_eq!(digest, before);
            refused += 1;
        }
    }
    assert!(refused > 150, "only {refused} of 200 absent keys looked absent");
    for i in 0..50 {
        assert!(digest.remove(format!("in:{i}").as_bytes()));
    }
    assert_eq!(digest, Digest::new(1000, 5, 7).unwrap());
}

#[test]
fn sized_for_1e_4_measures_below_2e_4() {
    let (m, k) = Digest::geometry(50_000, 1e-4).unwrap();
    assert_eq!((m, k), (958_506, 13));
    let mut digest = Digest::sized(50_000, 1e-4).unwrap();
    for i in 0..50_000 {
        digest.insert(format!("present:{i}").as_bytes());
    }
    let bound = digest.overflow_bound(50_000);
    assert!(bound > 0.0 && bound < 1e-8, "overflow bound {bound}");
    assert_eq!(digest.saturated_counters(), 0);
    let read_back = Digest::from_snapshot(&digest.to_snapshot()).unwrap();
    for i in 0..50_000 {
        assert!(read_back.may_contain(format!("present:{i}").as_bytes()));
    }
    let false_positives =
        (0..1_000_000).filter(|i| read_back.may_contain(format!("absent:{i}").as_bytes())).count();
    let rate = false_positives as f64 / 1e6;
    assert!(rate < 2e-4, "false-positive rate {rate}");
}

#[test]
fn refuses_bad_sizes() {
    for (n, p) in [(0, 0.01), (10, 0.0), (10, 1.0), (10, -0.5), (10, f64::NAN), (u64::MAX, 1e-9)] {
        let err = Digest::sized(n, p).unwrap_err();
        assert!(matches!(err, Error::BadDigest(_)), "{err}");
    }
    let err = Digest::sized(10, 1.5).unwrap_err().to_string();
    assert!(err.contains("1.5"), "{err}");
    assert!(Digest::new(0, 3, 0).unwrap_err().to_string().contains("0 counters"));
    assert!(Digest::new(10, 65, 0).unwrap_err().to_string().contains("65 hash"));
    assert_eq!(Digest::new(10, 3, 0).unwrap().overflow_bound(5), 0.0);
}

#[test]
fn snapshots_round_trip_exactly() {
    for m in [1, 2, 7, 1000, 1001] {
        let mut digest = Digest::new(m, 3, 0xfeed).unwrap();
        for i in 0..40 {
            digest.insert(format!("k{i}").as_bytes());
        }
        let snapshot = digest.to_snapshot();
        assert_eq!(snapshot.len() as u64, HEADER_BYTES as u64 + m.div_ceil(2));
        assert_eq!(&snapshot[..8], b"SHOALDG1");
        let back = Digest::from_snapshot(&snapshot).unwrap();
        assert_eq!(back, digest);
        assert_eq!(back.to_snapshot(), snapshot);
        for i in 0..40 {
            assert!(back.may_contain(format!("k{i}").as_bytes()));
        }
    }
}

fn refused(bytes: &[u8], names: &str) {
    match Digest::from_snapshot(bytes) {
        Err(Error::BadDigest(why)) => assert!(why.contains(names), "{why:?} does not name {names:?}"),
        other => panic!("accepted or wrong error: {other:?}"),
    }
}

#[test]
fn refuses_bad_snapshots() {
    let mut digest = Digest::new(9, 2, 1).unwrap();
    digest.insert(b"a");
    let good = digest.to_snapshot();
    for len in 0..good.len() {
        assert!(Digest::from_snapshot(&good[..len]).is_err(), "accepted a {len}-byte prefix");
    }
    refused(&good[..10], "10 bytes");
    refused(&good[..good.len() - 1], "truncated");
    let mut long = good.clone();
    long.push(0);
    refused(&long, "too long");
    let with = |at: usize, value: &[u8]| {
        let mut bytes = good.clone();
        bytes[at..at + value.len()].copy_from_slice(value);
        bytes
    };
    refused(&with(0, b"SHOALDG2"), "SHOALDG2");
    refused(&with(8, &[2]), "version 2");
    refused(&with(9, &[8]), "8 bits");
    refused(&with(10, &0u16.to_le_bytes()), "0 hash");
    refused(&with(10, &65u16.to_le_bytes()), "65 hash");
    refused(&with(12, &0u64.to_le_bytes()), "0 counters");
    refused(&with(12, &12u64.to_le_bytes()), "12 counters");
    refused(&with(12, &u64::MAX.to_le_bytes()), &u64::MAX.to_string());
    let last = good.len() - 1;
    refused(&with(last, &[good[last] | 0x30]), "unused half");
}

#[test]
fn saturated_counters_never_drop_so_survivors_stay_present() {
    let mut digest = Digest::new(64, 3, 5).unwrap();
    let key = |i: u32| format!("many:{i}");
    for i in 0..400 {
        digest.insert(key(i).as_bytes());
    }
    let saturated = digest.saturated_counters();
    assert!(saturated > 30, "only {saturated} counters saturated");
    for i in 0..390 {
        assert!(digest.remove(key(i).as_bytes()));
        for j in 390..400 {
            assert!(digest.may_contain(key(j).as_bytes()), "{} lost after removing {}", key(j), key(i));
        }
    }
    assert_eq!(digest.saturated_counters(), saturated, "a saturated counter moved");
}
