//! Power-proportional pools through `shoal router` (issue 17): a `proteus` pool's `active`
//! count and the smooth transition after it changes, on real `shoal server`s with digests.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::Router;
use common::{eventually, Server};
use shoal_client::{Client, Options};
use shoal_route::{Hashing, Placement};
use std::time::{SystemTime, UNIX_EPOCH};

fn direct(server: &Server) -> Client {
    Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap()
}

fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// A router config with one proteus pool over `servers`, `active` of them on, and the
/// transition (`from`, seconds from now until it ends) if given.
fn config(servers: &[Server], active: usize, transition: Option<(usize, f64)>) -> String {
    let list = servers.iter().map(|s| format!("\"{}\"", s.address())).collect::<Vec<_>>().join(", ");
    let transition = transition
        .map(|(from, secs)| {
            format!(r#", "transition": {{ "from": {from}, "until": {} }}"#, unix_now() + secs)
        })
        .unwrap_or_default();
    format!(
        r#"{{ "pools": {{ "A": {{ "servers": [{list}], "active": {active}{transition} }} }},
             "route": {{ "type": "PoolRoute", "pool": "A", "hash": "proteus" }} }}"#
    )
}

fn pool_stat(router: &Router, field: &str) -> u64 {
    let line = router.stat("pool");
    line.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {line:?}"))
}

#[test]
fn turning_a_server_off_moves_its_hot_keys_on_demand_and_writes_win() {
    let servers: Vec<Server> =
        (0..4).map(|i| Server::shoal(&format!("proteus-off-{i}"), 0, &["--digest-keys", "10000"])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let ring = Placement::from_strings(Hashing::Proteus, &addresses).unwrap();
    let ring = ring.proteus().unwrap();
    let router = Router::start("proteus-off", &config(&servers, 4, None));
    let mut c = router.client();
    let keys: Vec<String> = (0..400).map(|i| format!("item:{i}")).collect();
    for key in &keys {
        c.set(key.as_bytes(), format!("v1-{key}").as_bytes(), 0, 0).unwrap();
        let owner = ring.owner_with(4, key.as_bytes()).unwrap();
        assert!(direct(&servers[owner]).get(key.as_bytes()).unwrap().is_some(), "{key} on its owner of 4");
    }
    let moved: Vec<&String> =
        keys.iter().filter(|k| ring.owner_with(4, k.as_bytes()).unwrap() == 3).collect();
    assert!(moved.len() > 50, "server 4 owns about a quarter: {}", moved.len());

    // Server 4 goes off: a transition from 4 to 3 for a minute.
    router.rewrite(&config(&servers, 3, Some((4, 60.0))));
    assert!(eventually(30, || router.stat("config_reloads") == "1"), "reloaded");
    assert!(router.stat("pool").contains("active=3 transition=from=4"), "{}", router.stat("pool"));
    // Every key still hits: the moved ones come from server 4 and are copied to their new owner.
    for key in &keys {
        let item =
            c.get(key.as_bytes()).unwrap().unwrap_or_else(|| panic!("{key} hits during the transition"));
        assert_eq!(item.value, format!("v1-{key}").as_bytes());
    }
    assert_eq!(
        pool_stat(&router, "migrated"),
        moved.len() as u64,
        "each moved key asked of its old owner once"
    );
    for key in &moved {
        let new_owner = ring.owner_with(3, key.as_bytes()).unwrap();
        let copied = || direct(&servers[new_owner]).get(key.as_bytes()).unwrap().is_some();
        assert!(eventually(30, copied), "{key} copied to its new owner");
    }
    // Read again: the new owners answer; nothing more is migrated.
    for key in &moved {
        assert!(c.get(key.as_bytes()).unwrap().is_some());
    }
    assert_eq!(pool_stat(&router, "migrated"), moved.len() as u64);

    // A key that moves and was never stored: server 4's digest says it lacks it, so the
    // router does not ask it.
    let absent = (0..)
        .map(|i| format!("never:{i}"))
        .find(|k| {
            ring.owner_with(4, k.as_bytes()).unwrap() == 3 && ring.owner_with(3, k.as_bytes()).unwrap() != 3
        })
        .unwrap();
    assert!(c.get(absent.as_bytes()).unwrap().is_none());
    assert!(pool_stat(&router, "digest_skips") >= 1, "{}", router.stat("pool"));

    // A write during the transition goes to the new owner, and the old copy is deleted so it
    // cannot come back.
    let key = moved[0];
    c.set(key.as_bytes(), b"v2", 0, 0).unwrap();
    let old_copy_gone = || direct(&servers[3]).get(key.as_bytes()).unwrap().is_none();
    assert!(eventually(30, old_copy_gone), "the old owner's copy is deleted after a write");
    assert_eq!(c.get(key.as_bytes()).unwrap().unwrap().value, b"v2");
    c.delete(key.as_bytes()).unwrap();
    assert!(c.get(key.as_bytes()).unwrap().is_none(), "a delete is not undone by the old owner");
}

#[test]
fn turning_a_server_on_and_the_end_of_the_transition() {
    let servers: Vec<Server> = (0..3).map(|i| Server::shoal(&format!("proteus-on-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let placement = Placement::from_strings(Hashing::Proteus, &addresses).unwrap();
    let ring = placement.proteus().unwrap();
    let router = Router::start("proteus-on", &config(&servers, 2, None));
    let mut c = router.client();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    for key in &keys {
        c.set(key.as_bytes(), key.as_bytes(), 0, 0).unwrap();
    }
    let stats = servers[2].raw(b"stats\r\n", b"END\r\n");
    assert!(String::from_utf8_lossy(&stats).contains("STAT curr_items 0\r\n"), "server 3 is off: no keys");
    // Server 3 comes on (no digests on these servers: the old owner is always asked).
    router.rewrite(&config(&servers, 3, Some((2, 60.0))));
    assert!(eventually(30, || router.stat("config_reloads") == "1"), "reloaded");
    let moving: Vec<&String> =
        keys.iter().filter(|k| ring.owner_with(3, k.as_bytes()).unwrap() == 2).collect();
    assert!(!moving.is_empty());
    for key in &keys {
        assert_eq!(c.get(key.as_bytes()).unwrap().unwrap().value, key.as_bytes(), "{key}");
    }
    assert_eq!(pool_stat(&router, "migrated"), moving.len() as u64);
    // Once the transition is over, old owners are no longer asked: a moved key that was not
    // read during it misses (the database is asked), as without any transition.
    let late =
        keys.iter().map(|k| format!("late-{k}")).find(|k| ring.owner_with(3, k.as_bytes()).unwrap() == 2);
    let late = late.unwrap();
    let old_owner = ring.owner_with(2, late.as_bytes()).unwrap();
    direct(&servers[old_owner]).set(late.as_bytes(), b"old", 0, 0).unwrap();
    router.rewrite(&config(&servers, 3, Some((2, -1.0))));
    assert!(eventually(30, || router.stat("config_reloads") == "2"), "reloaded again");
    assert!(router.stat("pool").contains("transition=none"), "{}", router.stat("pool"));
    assert!(c.get(late.as_bytes()).unwrap().is_none());
}

#[test]
fn bad_provisioning_is_refused_with_its_place() {
    let check = |config: &str, expected: &str| {
        let error = shoal_router::Config::parse(config).unwrap_err().to_string();
        assert!(error.contains(expected), "{error} should say {expected}");
    };
    let pool = |fields: &str, hash: &str| {
        format!(
            r#"{{ "pools": {{ "A": {{ "servers": ["127.0.0.1:1", "127.0.0.1:2"]{fields} }} }},
                 "route": {{ "type": "PoolRoute", "pool": "A", "hash": "{hash}" }} }}"#
        )
    };
    check(&pool(r#", "active": 1"#, "jump"), "need \"hash\": \"proteus\"");
    check(&pool(r#", "active": 0"#, "proteus"), "pools.A.active");
    check(&pool(r#", "active": 3"#, "proteus"), "1 to the pool's 2");
    check(
        &pool(r#", "active": 1, "transition": { "from": 5, "until": 1 }"#, "proteus"),
        "pools.A.transition.from",
    );
    check(&pool(r#", "active": 1, "transition": { "from": 2 }"#, "proteus"), "pools.A.transition.until");
    check(&pool(r#", "transition": { "from": 2, "until": 1 }"#, "proteus"), "needs the pool's \"active\"");
    check(
        &pool(r#", "active": 1, "transition": { "from": 2, "until": 1, "x": 0 }"#, "proteus"),
        "transition.x",
    );
    assert!(shoal_router::Config::parse(&pool(r#", "active": 1"#, "proteus")).is_ok());
}

#[test]
fn under_load_a_write_during_a_transition_is_never_undone_by_the_old_owner() {
    let servers: Vec<Server> =
        (0..3).map(|i| Server::shoal(&format!("proteus-load-{i}"), 0, &["--digest-keys", "10000"])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let placement = Placement::from_strings(Hashing::Proteus, &addresses).unwrap();
    let ring = placement.proteus().unwrap();
    let router = Router::start("proteus-load", &config(&servers, 3, None));
    // Keys that move when server 3 goes off, each written once before the transition.
    let moved: Vec<String> = (0..)
        .map(|i| format!("hot:{i}"))
        .filter(|k| ring.owner_with(3, k.as_bytes()).unwrap() == 2)
        .take(40)
        .collect();
    let mut c = router.client();
    for key in &moved {
        c.set(key.as_bytes(), b"0", 0, 0).unwrap();
    }
    router.rewrite(&config(&servers, 2, Some((3, 60.0))));
    assert!(eventually(30, || router.stat("config_reloads") == "1"), "reloaded");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Readers keep migrating: every miss on a new owner asks server 3 and copies what it has.
        for _ in 0..3 {
            scope.spawn(|| {
                let mut reader = router.client();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for key in &moved {
                        reader.get(key.as_bytes()).unwrap();
                    }
                }
            });
        }
        // The writer: after each acknowledged set, its own read sees that version or later.
        let mut writer = router.client();
        for version in 1..=30u32 {
            for key in &moved {
                writer.set(key.as_bytes(), version.to_string().as_bytes(), 0, 0).unwrap();
                let seen = writer.get(key.as_bytes()).unwrap().expect("a key just written is there");
                let seen: u32 = String::from_utf8(seen.value).unwrap().parse().unwrap();
                assert!(seen >= version, "{key}: wrote {version}, read {seen} back from an old copy");
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for key in &moved {
        assert_eq!(c.get(key.as_bytes()).unwrap().unwrap().value, b"30", "{key} ends at its last write");
        assert!(direct(&servers[2]).get(key.as_bytes()).unwrap().is_none(), "{key}: the old copy is gone");
    }
}
