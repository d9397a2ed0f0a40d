//! mcrouter's own Ch3 expectations (`tests/vectors/ch3.txt`, from
//! `mcrouter/lib/test/Ch3HashTest.cpp`) against `shoal_route::furc::furc_hash` and a `ch3`
//! placement.

use shoal_route::furc::furc_hash;
use shoal_route::{Hashing, Placement, Server};

fn hex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

#[test]
fn ch3_matches_mcrouter_tests() {
    let text = include_str!("vectors/ch3.txt");
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let pool: u32 = fields[1].parse().expect("pool size");
        match fields[0] {
            "bucket" => {
                let want: u32 = fields[3].parse().expect("bucket");
                assert_eq!(furc_hash(&hex(fields[2]), pool), want, "{line}");
            }
            "counts" => {
                let keys: u32 = fields[2].parse().expect("key count");
                let want: Vec<usize> = fields[3].split(',').map(|c| c.parse().expect("count")).collect();
                let servers = (0..pool).map(|i| Server::tcp("127.0.0.1", 20000 + i as u16)).collect();
                let placement = Placement::new(Hashing::Ch3, servers).expect("placement");
                let mut counts = vec![0; pool as usize];
                for k in 0..keys {
                    counts[placement.owner(k.to_string().as_bytes())] += 1;
                }
                assert_eq!(counts, want, "{line}");
            }
            other => panic!("unknown vector kind {other:?}"),
        }
        checked += 1;
    }
    assert_eq!(checked, 10);
}
