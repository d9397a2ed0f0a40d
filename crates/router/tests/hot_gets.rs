//! `gets` of a hot key through `shoal router` (issue #28), against real `shoal server`s: the
//! router spreads `gets` over a hot key's replicas as it spreads `get`, every copy carrying the
//! owner's CAS unique, so each replica answers with the same unique as the owner (and as a Rust
//! pool reading the same servers); a `cas` with it succeeds once and a second fails; after a
//! `cas`, `set` or `delete` no replica serves the old value.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::Router;
use common::{eventually, Server};
use shoal_client::pool::HotOptions;
use shoal_client::{Client, Hashing, Options, Pool, PoolOptions, Stored};
use std::time::Duration;

/// What each server holds under `key`, asked directly with `gets` (`None`: no copy there).
fn held(servers: &[Server], key: &[u8]) -> Vec<Option<(Vec<u8>, u64)>> {
    servers
        .iter()
        .map(|s| {
            let mut c =
                Client::connect(&s.address(), Options { local: false, ..Options::default() }).unwrap();
            c.get(key).unwrap().map(|item| (item.value, item.cas))
        })
        .collect()
}

/// Each server's `get_hits`.
fn get_hits(servers: &[Server]) -> Vec<u64> {
    servers
        .iter()
        .map(|s| {
            let mut c =
                Client::connect(&s.address(), Options { local: false, ..Options::default() }).unwrap();
            let stats = c.stats(None).unwrap();
            stats.iter().find(|(name, _)| name == "get_hits").map_or(0, |(_, v)| v.parse().unwrap())
        })
        .collect()
}

/// Reads `key` through `c` (a client of the router: its gets are `gets`) until every server
/// holds `value` under it with one unique, which it returns.
fn read_until_every_replica_holds(c: &mut Client, servers: &[Server], key: &[u8], value: &[u8]) -> u64 {
    let mut last = Vec::new();
    let copied = eventually(60, || {
        for _ in 0..50 {
            c.get(key).unwrap();
        }
        last = held(servers, key);
        last.iter().all(|h| {
            h.as_ref().is_some_and(|(v, cas)| v == value && Some(cas) == last[0].as_ref().map(|h| &h.1))
        })
    });
    assert!(copied, "{:?} was not copied with one unique: {last:?}", String::from_utf8_lossy(key));
    last[0].as_ref().unwrap().1
}

#[test]
fn gets_through_the_router_hands_out_the_owners_unique_from_every_replica() {
    let servers: Vec<Server> = (0..3)
        .map(|i| Server::shoal(&format!("router-hot-gets-{i}"), 0, &["-o", "hotkeys_sample=1"]))
        .collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let list = addresses.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": [{list}], "hot_replicas": "all", "hot_refresh_secs": 1 }} }},
             "route": {{ "type": "PoolRoute", "pool": "main", "hash": "jump" }} }}"#
    );
    let router = Router::start("router-hot-gets", &config);
    // One connection for the reads and writes: the copies the router makes after a read are
    // sent before the next request on it is taken.
    let mut c = router.client();
    let key = b"hot:gets:router";
    assert!(eventually(60, || c.set(key, b"v1", 5, 0).is_ok()));
    let unique = read_until_every_replica_holds(&mut c, &servers, key, b"v1");

    // Nine gets, three per replica: the same value and unique each time, from every server.
    let before = get_hits(&servers);
    for _ in 0..9 {
        let item = c.get(key).unwrap().unwrap();
        assert_eq!((item.value.as_slice(), item.flags, item.cas), (&b"v1"[..], 5, unique));
    }
    let after = get_hits(&servers);
    assert!(before.iter().zip(&after).all(|(b, a)| a > b), "every replica answered: {before:?} → {after:?}");
    // A plain `get` from a copy or the owner has no unique; a multi-key `gets` has the owner's.
    for _ in 0..3 {
        assert_eq!(
            router.raw(b"get hot:gets:router\r\n", b"END\r\n"),
            "VALUE hot:gets:router 5 2\r\nv1\r\nEND\r\n"
        );
        assert_eq!(
            router.raw(b"gets hot:gets:router nothere\r\n", b"END\r\n"),
            format!("VALUE hot:gets:router 5 2 {unique}\r\nv1\r\nEND\r\n")
        );
    }
    // A Rust pool over the same servers reads the same unique from every replica.
    let mut pool = Pool::new(
        &addresses,
        PoolOptions {
            hashing: Hashing::Jump,
            client: Options { local: false, ..Options::default() },
            hot: Some(HotOptions {
                replicas: 0,
                refresh: Duration::from_secs(3600),
                ..HotOptions::default()
            }),
            ..PoolOptions::default()
        },
    )
    .unwrap();
    pool.refresh_hot_keys();
    assert!(pool.hot_keys().iter().any(|(k, _)| k == key), "{:?}", pool.hot_keys());
    for _ in 0..6 {
        assert_eq!(pool.get(key).unwrap().unwrap().cas, unique);
    }

    // A cas with the unique succeeds once; again with the same unique it fails, each time.
    assert_eq!(c.cas(key, b"v2", 5, 0, unique).unwrap(), Stored::Stored);
    for _ in 0..3 {
        assert_eq!(c.cas(key, b"v3", 5, 0, unique).unwrap(), Stored::Exists);
    }
    let now = held(&servers, key);
    assert!(now.iter().flatten().all(|(v, _)| v == b"v2"), "no replica serves the old value: {now:?}");
    let new_unique = read_until_every_replica_holds(&mut c, &servers, key, b"v2");
    assert_ne!(new_unique, unique);
    for _ in 0..6 {
        let item = c.get(key).unwrap().unwrap();
        assert_eq!((item.value.as_slice(), item.cas), (&b"v2"[..], new_unique));
    }

    // A set and a delete: no replica keeps the value before either.
    c.set(key, b"v4", 5, 0).unwrap();
    let now = held(&servers, key);
    assert!(now.iter().flatten().all(|(v, _)| v == b"v4"), "{now:?}");
    for _ in 0..6 {
        assert_eq!(c.get(key).unwrap().unwrap().value, b"v4");
    }
    assert!(c.delete(key).unwrap());
    assert_eq!(held(&servers, key), vec![None; 3], "the delete reached every replica");
    for _ in 0..3 {
        assert!(c.get(key).unwrap().is_none());
    }
}
