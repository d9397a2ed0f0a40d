//! Hot keys spread over replicas by `shoal router` (a pool's `"hot_replicas"`), against real
//! `shoal server`s that detect them: the router learns the hot set by polling, reads a hot key
//! from each replica in turn, a write through it is seen through every replica (and refills
//! them), and its replicas are the ones a Rust pool client with the same pool names.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::Router;
use common::{eventually, Server};
use shoal_client::pool::HotOptions;
use shoal_client::{Client, Hashing, Options, Pool, PoolOptions};
use std::time::Duration;

/// Three servers counting every read (`hotkeys_sample=1`).
fn servers(test: &str) -> Vec<Server> {
    (0..3).map(|i| Server::shoal(&format!("{test}-{i}"), 0, &["-o", "hotkeys_sample=1"])).collect()
}

fn router(test: &str, servers: &[Server], hash: &str, replicas: &str) -> Router {
    let list = servers.iter().map(|s| format!("\"{}\"", s.address())).collect::<Vec<_>>().join(", ");
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": [{list}], "hot_replicas": {replicas}, "hot_refresh_secs": 1 }} }},
             "route": {{ "type": "PoolRoute", "pool": "main", "hash": "{hash}" }} }}"#
    );
    Router::start(test, &config)
}

/// The servers (by address) holding a copy of `key`, asked directly.
fn holders(servers: &[Server], key: &[u8]) -> Vec<(String, Vec<u8>)> {
    servers
        .iter()
        .filter_map(|s| {
            let mut c =
                Client::connect(&s.address(), Options { local: false, ..Options::default() }).unwrap();
            c.get(key).unwrap().map(|item| (s.address(), item.value))
        })
        .collect()
}

/// A text `get` of `key` through the router (`gets` is spread too: hot_gets.rs).
fn get(router: &Router, key: &[u8]) -> String {
    router.raw(&[b"get ", key, b"\r\n"].concat(), b"END\r\n")
}

/// Reads `key` through the router until `want` servers hold a copy of it.
fn read_until_copied(router: &Router, servers: &[Server], key: &[u8], want: usize) {
    assert!(
        eventually(60, || {
            for _ in 0..100 {
                get(router, key);
            }
            holders(servers, key).len() == want
        }),
        "{:?} was not copied to {want} servers: {:?}",
        String::from_utf8_lossy(key),
        holders(servers, key)
    );
}

#[test]
fn a_write_through_the_router_is_seen_through_every_replica() {
    let servers = servers("router-hot-write");
    let router = router("router-hot-write", &servers, "jump", "\"all\"");
    let mut c = router.client();
    let key = b"hot:router";
    assert!(eventually(30, || c.set(key, b"v1", 0, 0).is_ok()));
    read_until_copied(&router, &servers, key, 3);
    assert!(holders(&servers, key).iter().all(|(_, v)| v == b"v1"));

    c.set(key, b"v2", 0, 0).unwrap();
    // The copies were deleted, then refilled from the owner before the set was answered.
    assert!(
        holders(&servers, key).iter().all(|(_, v)| v == b"v2"),
        "a copy kept the old value: {:?}",
        holders(&servers, key)
    );
    assert_eq!(holders(&servers, key).len(), 3, "the write refilled every copy");
    for _ in 0..9 {
        assert_eq!(get(&router, key), "VALUE hot:router 0 2\r\nv2\r\nEND\r\n");
    }
    assert!(c.delete(key).unwrap());
    assert_eq!(holders(&servers, key), vec![], "the delete reached every replica");
    for _ in 0..6 {
        assert_eq!(get(&router, key), "END\r\n");
    }
}

#[test]
fn the_router_and_a_rust_pool_put_a_hot_key_on_the_same_replicas() {
    let servers = servers("router-hot-agree");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    for (hashing, key) in [(Hashing::Jump, b"agree:jump".as_slice()), (Hashing::Proteus, b"agree:proteus")] {
        let router = router(&format!("router-hot-agree-{hashing}"), &servers, hashing.name(), "2");
        let mut c = router.client();
        assert!(eventually(30, || c.set(key, b"v", 0, 0).is_ok()));
        read_until_copied(&router, &servers, key, 2);
        let mut copied: Vec<String> = holders(&servers, key).into_iter().map(|(a, _)| a).collect();
        let pool = Pool::new(
            &addresses,
            PoolOptions {
                hashing,
                hot: Some(HotOptions {
                    replicas: 2,
                    refresh: Duration::from_secs(3600),
                    ..HotOptions::default()
                }),
                ..PoolOptions::default()
            },
        )
        .unwrap();
        let mut replicas = pool.replicas_for(key).unwrap();
        copied.sort();
        replicas.sort();
        assert_eq!(copied, replicas, "{hashing}: the router's copies are where the pool puts them");
    }
}
