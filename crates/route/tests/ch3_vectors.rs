//! mcrouter's own Ch3 and WeightedCh3 expectations (`tests/vectors/ch3.txt` from
//! `mcrouter/lib/test/Ch3HashTest.cpp`, `tests/vectors/weighted_ch3.txt` from
//! `mcrouter/lib/test/WeightedCh3HashFuncTest.cpp`) and SpookyHash V2's own table
//! (`tests/vectors/spooky_v2.txt` from folly's `SpookyHashV2Test.cpp`).

use shoal_route::furc::{furc_hash, weighted_ch3};
use shoal_route::{spooky, Hashing, Placement, Server};

fn hex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

/// The data lines of a vector file, split into fields.
fn vectors(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// `w` or `w*count`, comma-separated.
fn weights(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for item in text.split(',') {
        let (w, count) = item.split_once('*').unwrap_or((item, "1"));
        let (w, count): (f64, usize) = (w.parse().expect("weight"), count.parse().expect("count"));
        out.resize(out.len() + count, w);
    }
    out
}

fn counts(text: &str) -> Vec<usize> {
    text.split(',').map(|c| c.parse().expect("count")).collect()
}

fn pool(n: usize) -> Vec<Server> {
    (0..n).map(|i| Server::tcp("127.0.0.1", 20000 + i as u16)).collect()
}

#[test]
fn ch3_matches_mcrouter_tests() {
    let lines = vectors(include_str!("vectors/ch3.txt"));
    assert_eq!(lines.len(), 10);
    for fields in lines {
        let n: u32 = fields[1].parse().expect("pool size");
        match fields[0] {
            "bucket" => assert_eq!(furc_hash(&hex(fields[2]), n).to_string(), fields[3], "{fields:?}"),
            "counts" => {
                let placement = Placement::new(Hashing::Ch3, pool(n as usize)).expect("placement");
                let mut seen = vec![0; n as usize];
                for k in 0..fields[2].parse::<u32>().expect("keys") {
                    seen[placement.owner(k.to_string().as_bytes())] += 1;
                }
                assert_eq!(seen, counts(fields[3]), "{fields:?}");
            }
            other => panic!("unknown vector kind {other:?}"),
        }
    }
}

#[test]
fn weighted_ch3_matches_mcrouter_tests() {
    let lines = vectors(include_str!("vectors/weighted_ch3.txt"));
    assert_eq!(lines.len(), 33);
    for fields in lines {
        let w = weights(fields[1]);
        match fields[0] {
            "bucket" => assert_eq!(weighted_ch3(&hex(fields[2]), &w).to_string(), fields[3], "{fields:?}"),
            "counts" => {
                // Through a placement, with the weights on the servers.
                let servers =
                    pool(w.len()).into_iter().zip(&w).map(|(s, &w)| s.with_weight(w).unwrap()).collect();
                let placement = Placement::new(Hashing::WeightedCh3, servers).expect("placement");
                let mut seen = vec![0; w.len()];
                for k in 0..fields[2].parse::<u32>().expect("keys") {
                    seen[placement.owner(k.to_string().as_bytes())] += 1;
                }
                assert_eq!(seen, counts(fields[3]), "{fields:?}");
            }
            "checksum" => {
                let mut acc: u32 = 0;
                for k in 0..fields[3].parse::<u32>().expect("keys") {
                    let bucket = weighted_ch3(format!("{}{k}", fields[2]).as_bytes(), &w);
                    acc = acc.wrapping_mul(31).wrapping_add(bucket);
                    if w.iter().all(|&x| x == 1.0) {
                        assert_eq!(bucket, furc_hash(format!("{}{k}", fields[2]).as_bytes(), w.len() as u32));
                    }
                }
                assert_eq!(acc.to_string(), fields[4], "{fields:?}");
            }
            other => panic!("unknown vector kind {other:?}"),
        }
    }
}

#[test]
fn spooky_v2_matches_its_own_table() {
    let expected: Vec<u32> = include_str!("vectors/spooky_v2.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| u32::from_str_radix(l.trim_start_matches("0x"), 16).expect("hex"))
        .collect();
    assert_eq!(expected.len(), 512);
    let buf: Vec<u8> = (0..512).map(|j| (j + 128) as u8).collect();
    for (i, &want) in expected.iter().enumerate() {
        assert_eq!(spooky::hash32(&buf[..i], 0), want, "length {i}");
    }
}

#[test]
fn weighted_ch3_refuses_weights_above_one() {
    let servers = vec![Server::tcp("a", 1), Server::tcp("b", 2).with_weight(1.5).unwrap()];
    let err = Placement::new(Hashing::WeightedCh3, servers).unwrap_err();
    assert!(err.to_string().contains("1.5"), "{err}");
}
