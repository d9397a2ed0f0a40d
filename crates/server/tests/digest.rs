//! `shoal server --digest-keys`: the `digest` command's snapshot against a digest built from
//! exactly the keys the server holds, after sets, overwrites, deletes, expiry, flush and
//! eviction (the release binary, on loopback).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::Server;
use shoal_client::{Client, Options};
use shoal_route::digest::Digest;

fn digest_of(server: &Server) -> Digest {
    let answer = server.raw(b"digest\r\n", b"\r\nEND\r\n");
    let header_end = answer.windows(2).position(|w| w == b"\r\n").unwrap();
    let header = String::from_utf8_lossy(&answer[..header_end]).into_owned();
    let length: usize = header.strip_prefix("VALUE digest 0 ").expect("a VALUE line").parse().unwrap();
    let snapshot = &answer[header_end + 2..header_end + 2 + length];
    Digest::from_snapshot(snapshot).unwrap()
}

fn stat(server: &Server, name: &str) -> u64 {
    // The digest's fields are Shoal's own, in `stats shoal`.
    [&b"stats\r\n"[..], b"stats shoal\r\n"]
        .iter()
        .find_map(|request| {
            let stats = String::from_utf8_lossy(&server.raw(request, b"END\r\n")).into_owned();
            stats.lines().find_map(|l| l.strip_prefix(&format!("STAT {name} "))?.parse().ok())
        })
        .unwrap()
}

#[test]
fn the_digest_holds_every_key_the_server_answers_and_forgets_deleted_ones() {
    let server = Server::shoal("digest", 0, &["--digest-keys", "20000", "-m", "4"]);
    let mut c = Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    let value = vec![b'v'; 1500];
    // Enough to evict from a 4 MB region; overwrites and deletes besides. (Expiry is left to
    // the region's own test: an item expiring between the reads below and `stats` would make
    // the counts race.)
    for i in 0..6000 {
        c.set(format!("k:{i}").as_bytes(), &value, 0, 0).unwrap();
    }
    for i in (0..6000).step_by(3) {
        c.set(format!("k:{i}").as_bytes(), b"again", 0, 0).unwrap();
    }
    for i in (0..6000).step_by(5) {
        c.delete(format!("k:{i}").as_bytes()).unwrap();
    }
    assert!(stat(&server, "evictions") > 0, "the region evicted");
    let served = digest_of(&server);
    // The keys the server still answers must all be in the digest: no false negative.
    let held: Vec<String> =
        (0..6000).map(|i| format!("k:{i}")).filter(|k| c.get(k.as_bytes()).unwrap().is_some()).collect();
    assert!(!held.is_empty());
    for key in &held {
        assert!(served.may_contain(key.as_bytes()), "{key} is held but not in the digest");
    }
    // Counted once each, however often overwritten: exactly the keys the server answers.
    assert_eq!(stat(&server, "digest_keys"), held.len() as u64);
    // Deleted keys left it: almost all of them answer "absent" (false positives aside).
    let deleted_present =
        (0..6000).step_by(5).filter(|i| served.may_contain(format!("k:{i}").as_bytes())).count();
    assert!(deleted_present < 10, "{deleted_present} deleted keys still look present");
    // After flush_all and the reclaim that follows, the digest empties as the index does.
    assert!(String::from_utf8_lossy(&server.raw(b"flush_all\r\n", b"\r\n")).starts_with("OK"));
    for i in 0..3000 {
        c.set(format!("after:{i}").as_bytes(), &value, 0, 0).unwrap();
    }
    let after = digest_of(&server);
    for i in 0..3000 {
        let key = format!("after:{i}");
        if c.get(key.as_bytes()).unwrap().is_some() {
            assert!(after.may_contain(key.as_bytes()), "{key}");
        }
    }
    assert!(stat(&server, "digest_keys") <= 6000 + 3000);
    assert_eq!(stat(&server, "digest_saturated_counters"), 0, "sized for 20 000 keys");
}

#[test]
fn without_digest_keys_the_command_says_how_to_turn_it_on() {
    let server = Server::shoal("no-digest", 0, &[]);
    let answer = String::from_utf8_lossy(&server.raw(b"digest\r\n", b"\r\n")).into_owned();
    assert_eq!(
        answer,
        "SERVER_ERROR digests are off: start the server with --digest-keys <expected keys>\r\n"
    );
    assert_eq!(String::from_utf8_lossy(&server.raw(b"digest now\r\n", b"\r\n")), "ERROR\r\n");
}
