//! A hot key's copies through `shoal router` when a Proteus pool shrinks then grows again
//! through its provisioning state file (3 → 2 → 3 servers on, issue #28): a write after the
//! grow deletes the copies of every replica set the router used within the copies' TTL, so
//! no server is left with the old value.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::Router;
use common::{eventually, free_port, Server};
use shoal_client::{Client, Options};
use shoal_route::{Hashing, Placement};

/// The pool's state file, as `shoal provision --state` writes it, with `active` servers on.
fn write_state(path: &std::path::Path, addresses: &[String], active: usize) {
    let state = serde_json::json!({ "servers": addresses, "active": active, "transition": null });
    let temporary = path.with_extension("new");
    std::fs::write(&temporary, state.to_string()).unwrap();
    std::fs::rename(temporary, path).unwrap();
}

/// The values each server holds under `key`, asked directly (`None`: nothing there).
fn held(servers: &[Server], key: &[u8]) -> Vec<Option<Vec<u8>>> {
    servers
        .iter()
        .map(|s| {
            let mut c =
                Client::connect(&s.address(), Options { local: false, ..Options::default() }).unwrap();
            c.get(key).unwrap().map(|item| item.value)
        })
        .collect()
}

#[test]
fn a_write_after_shrink_then_grow_deletes_the_copies_of_every_replica_set_used() {
    let servers: Vec<Server> = (0..3)
        .map(|i| Server::shoal(&format!("hot-shrink-grow-{i}"), 0, &["-o", "hotkeys_sample=1"]))
        .collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let placement = Placement::from_strings(Hashing::Proteus, &addresses).unwrap();
    // A key with the same owner on 2 and 3 servers whose copy on 2 is no replica on 3.
    let key = (0..)
        .map(|i| format!("hot:shrink:{i}").into_bytes())
        .find(|key| {
            let (two, three) =
                (placement.replicas(Some(2), key, 2).unwrap(), placement.replicas(Some(3), key, 2).unwrap());
            two.owner == three.owner && two.copies().any(|c| !three.contains(c))
        })
        .expect("some key");
    let (two, three) =
        (placement.replicas(Some(2), &key, 2).unwrap(), placement.replicas(Some(3), &key, 2).unwrap());
    let only_on_two = two.copies().find(|&c| !three.contains(c)).unwrap();

    let dir = std::env::temp_dir().join(format!("shoal-router-hot-shrink-grow-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state.json");
    write_state(&state, &addresses, 3);
    let list = addresses.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    let config = format!(
        r#"{{ "pools": {{ "main": {{ "servers": [{list}], "provisioning": "state.json", "hot_replicas": 2,
               "hot_refresh_secs": 1, "hot_ttl_secs": 600 }} }},
             "route": {{ "type": "PoolRoute", "pool": "main", "hash": "proteus" }} }}"#
    );
    std::fs::write(dir.join("config.json"), config).unwrap();
    let router = Router::start_in(dir, free_port());
    let mut c = router.client();
    let on = |active: usize| {
        assert!(
            eventually(60, || router.stat("pool").contains(&format!("active={active} "))),
            "the router follows the state file to {active} on: {}",
            router.stat("pool")
        );
    };
    // Reads until the copy of the replica set with `active` on holds the value.
    let read_until_held = |c: &mut Client, server: usize| {
        assert!(
            eventually(60, || {
                for _ in 0..100 {
                    assert_eq!(c.get(&key).unwrap().unwrap().value, b"v1");
                }
                held(&servers, &key)[server].is_some()
            }),
            "server {server} never held a copy: {:?}",
            held(&servers, &key)
        );
    };
    on(3);
    c.set(&key, b"v1", 0, 0).unwrap();
    let copy_on_three = three.copies().next().unwrap();
    read_until_held(&mut c, copy_on_three);

    // Shrink to two: the key's copy goes to the server that is no replica with three on.
    write_state(&state, &addresses, 2);
    on(2);
    read_until_held(&mut c, only_on_two);

    // Grow back to three, then write: no server keeps v1, the copy made with two on included.
    write_state(&state, &addresses, 3);
    on(3);
    c.set(&key, b"v2", 0, 0).unwrap();
    let after = held(&servers, &key);
    assert!(after.iter().all(|v| v.as_deref() != Some(b"v1".as_slice())), "{after:?}");
    for _ in 0..6 {
        assert_eq!(c.get(&key).unwrap().unwrap().value, b"v2");
    }
}
