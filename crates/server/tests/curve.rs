//! `shoal server --hit-curve`: the `curve` command's hit-ratio curve after a look-aside
//! workload, against the hit ratio the server itself counted (the release binary).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use shoal_client::{Client, Options};

#[test]
fn the_curve_ends_at_the_hit_ratio_of_a_cache_big_enough() {
    let server = Server::shoal("curve", 0, &["--hit-curve", "-m", "64"]);
    let mut c = Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    let value = vec![b'v'; 1000];
    let mut state = 88172645463325252u64;
    for _ in 0..30_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Skewed: half the reads go to 100 keys, the rest to 3 000.
        let key =
            if state % 2 == 0 { format!("hot:{}", state % 100) } else { format!("cold:{}", state % 3000) };
        if c.get(key.as_bytes()).unwrap().is_none() {
            c.set(key.as_bytes(), &value, 0, 0).unwrap();
        }
    }
    let stats = String::from_utf8_lossy(&server.raw(b"stats\r\n", b"END\r\n")).into_owned();
    let stat = |name: &str| -> f64 {
        stats.lines().find_map(|l| l.strip_prefix(&format!("STAT {name} "))?.parse().ok()).unwrap()
    };
    let measured = stat("get_hits") / stat("cmd_get");
    let answer = String::from_utf8_lossy(&server.raw(b"curve\r\n", b"END\r\n")).into_owned();
    let points: Vec<(u64, f64)> = answer
        .lines()
        .filter_map(|l| l.strip_prefix("STAT hit_ratio "))
        .map(|l| {
            let (bytes, ratio) = l.split_once(' ').unwrap();
            (bytes.parse().unwrap(), ratio.parse().unwrap())
        })
        .collect();
    assert_eq!(points.len(), 257, "{answer}");
    assert!(points.windows(2).all(|w| w[0].1 <= w[1].1 && w[0].0 < w[1].0), "monotone");
    let at_full = points.last().unwrap().1;
    assert!((at_full - measured).abs() < 0.02, "curve {at_full} vs measured {measured}");
    // 3 100 keys of about 1 KB: most of the hits come within the first few MB.
    let at = |bytes: u64| points.iter().rev().find(|p| p.0 <= bytes).unwrap().1;
    assert!(at(4 << 20) > 0.9 * at_full, "{}", at(4 << 20));
    assert!(at(64 << 10) < at_full, "a tiny cache hits less");
}

#[test]
fn without_hit_curve_the_command_says_how_to_turn_it_on() {
    let server = Server::shoal("no-curve", 0, &[]);
    let answer = String::from_utf8_lossy(&server.raw(b"curve\r\n", b"\r\n")).into_owned();
    assert_eq!(answer, "SERVER_ERROR hit-ratio curves are off: start the server with --hit-curve\r\n");
}
