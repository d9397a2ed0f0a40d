//! Hot keys spread over replicas by the pool client, against real `shoal server`s that detect
//! them (`stats hotkeys`): the pool learns the hot set, reads a hot key from each of its
//! replicas in turn, and a write is seen through every replica; a server whose answer is
//! malformed or huge leaves the pool with its last good hot set. Every replica holds its copy
//! with the owner's CAS unique, so `gets` from any replica hands out the owner's unique; a `cas`
//! with it succeeds once and a second one fails, and after a `cas`, `set` or `delete` no replica
//! serves the old value.

mod common;

use common::{eventually, scripted_server, Server};
use shoal_client::pool::HotOptions;
use shoal_client::{Hashing, Item, Options, Pool, PoolOptions, Stored};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn options(hashing: Hashing, replicas: usize) -> PoolOptions {
    PoolOptions {
        hashing,
        client: Options {
            connect_timeout: Some(Duration::from_secs(5)),
            io_timeout: Some(Duration::from_secs(5)),
            local: false,
        },
        retry_interval: Duration::from_millis(1),
        // Refreshed by the tests when they want, not on a clock.
        hot: Some(HotOptions { replicas, refresh: Duration::from_secs(3600), cap: 16, ttl: 30 }),
        ..PoolOptions::default()
    }
}

/// Three servers counting every read (`hotkeys_sample=1`).
fn servers(test: &str) -> Vec<Server> {
    (0..3).map(|i| Server::shoal(&format!("{test}-{i}"), 0, &["-o", "hotkeys_sample=1"])).collect()
}

/// The value and CAS unique each server holds under `key` (`None`: no copy there), asked
/// directly.
fn held_with_cas(servers: &[Server], key: &[u8]) -> Vec<Option<(Vec<u8>, u64)>> {
    servers
        .iter()
        .map(|s| {
            let mut c =
                shoal_client::Client::connect(&s.address(), Options { local: false, ..Options::default() })
                    .unwrap();
            c.get(key).unwrap().map(|item| (item.value, item.cas))
        })
        .collect()
}

/// The value each server holds under `key` (`None`: no copy there), asked directly.
fn held(servers: &[Server], key: &[u8]) -> Vec<Option<Vec<u8>>> {
    held_with_cas(servers, key).into_iter().map(|held| held.map(|(value, _)| value)).collect()
}

/// Reads `key` through the pool until the servers list it hot and the pool learned it.
fn make_hot(pool: &mut Pool, key: &[u8]) {
    assert!(
        eventually(60, || {
            for _ in 0..200 {
                pool.get(key).unwrap();
            }
            pool.refresh_hot_keys().iter().all(|(_, r)| r.is_ok())
                && pool.hot_keys().iter().any(|(k, _)| k == key)
        }),
        "{:?} never became hot: {:?}",
        String::from_utf8_lossy(key),
        pool.hot_keys()
    );
}

#[test]
fn a_hot_key_is_read_from_every_replica_and_a_write_is_seen_through_each() {
    let servers = servers("hot-replicas");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    for hashing in [Hashing::KetamaWeighted, Hashing::Proteus] {
        let mut pool = Pool::new(&addresses, options(hashing, 3)).unwrap();
        pool.flush_all(None).unwrap();
        let key = format!("hot:{hashing}").into_bytes();
        pool.set(&key, b"v1", 0, 0).unwrap();
        make_hot(&mut pool, &key);
        // Round-robin: three reads in a row ask three replicas; the copies fill from the owner.
        for _ in 0..6 {
            assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v1");
        }
        assert!(pool.counters().hot_copy_hits >= 2, "{:?}", pool.counters());
        assert_eq!(held(&servers, &key), vec![Some(b"v1".to_vec()); 3], "every replica holds a copy");

        pool.set(&key, b"v2", 0, 0).unwrap();
        // No replica holds the old value after the write returned; every read sees the new one.
        assert!(held(&servers, &key).iter().all(|v| v.as_deref() != Some(b"v1")));
        for _ in 0..6 {
            assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v2");
        }
        pool.delete(&key).unwrap();
        assert_eq!(held(&servers, &key), vec![None; 3], "a delete reaches every replica");
        for _ in 0..3 {
            assert!(pool.get(&key).unwrap().is_none());
        }
    }
}

#[test]
fn replicas_are_the_owner_and_its_successors_and_cold_keys_stay_on_their_owner() {
    let servers = servers("hot-placement");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump, 2)).unwrap();
    pool.flush_all(None).unwrap();
    let (hot, cold) = (b"hot:placed".as_slice(), b"cold:placed".as_slice());
    pool.set(hot, b"h", 0, 0).unwrap();
    pool.set(cold, b"c", 0, 0).unwrap();
    make_hot(&mut pool, hot);
    for _ in 0..4 {
        pool.get(hot).unwrap();
        pool.get(cold).unwrap();
    }
    let replicas = pool.replicas_for(hot).unwrap();
    assert_eq!(replicas.len(), 2);
    assert_eq!(replicas[0], pool.server_for(hot).unwrap());
    let owner = addresses.iter().position(|a| *a == replicas[0]).unwrap();
    assert_eq!(replicas[1], addresses[(owner + 1) % 3], "the copy is on the owner's successor");
    // Both sides sorted: the servers' ephemeral ports need not come in string order.
    let mut holders: Vec<String> = held(&servers, hot)
        .iter()
        .zip(&addresses)
        .filter_map(|(v, a)| v.as_ref().map(|_| a.clone()))
        .collect();
    holders.sort();
    let mut expected = replicas.clone();
    expected.sort();
    assert_eq!(holders, expected);
    let cold_holders = held(&servers, cold).iter().filter(|v| v.is_some()).count();
    assert_eq!(cold_holders, 1, "a cold key is never copied");
}

#[test]
fn a_malformed_or_huge_hot_key_answer_keeps_the_last_good_hot_set() {
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    let (address, _) = scripted_server(move |_, line| {
        if line != "stats hotkeys" {
            return Some(b"ERROR\r\n".to_vec());
        }
        Some(match count.fetch_add(1, Ordering::SeqCst) {
            0 => b"STAT planted 120.500\r\nSTAT other 3.000\r\nEND\r\n".to_vec(),
            1 => b"STAT planted\r\nEND\r\n".to_vec(),
            2 => b"STAT up 1.000\r\nSTAT planted 9.000\r\nEND\r\n".to_vec(),
            3 => (0..5000).flat_map(|i| format!("STAT k{i} 1.000\r\n").into_bytes()).collect(),
            _ => b"\x00\xffgarbage".repeat(1000),
        })
    });
    let mut pool = Pool::new(&[address], options(Hashing::Jump, 2)).unwrap();
    let outcomes = pool.refresh_hot_keys();
    assert!(outcomes[0].1.as_ref().is_ok_and(|&n| n == 2), "{outcomes:?}");
    let good = pool.hot_keys();
    assert_eq!(good, vec![(b"planted".to_vec(), 120.5), (b"other".to_vec(), 3.0)]);
    // Each bad answer: refused, the set unchanged. The member is marked down for 1 ms after
    // each, so ask until the server has been asked again.
    for answered in 2..=5 {
        assert!(
            eventually(30, || {
                let outcome = pool.refresh_hot_keys();
                asked.load(Ordering::SeqCst) >= answered && outcome[0].1.is_err()
            }),
            "answer {answered} was not refused"
        );
        assert_eq!(pool.hot_keys(), good, "answer {answered} changed the hot set");
    }
}

#[test]
fn memcached_without_the_extension_has_no_hot_keys() {
    let memcached = Server::memcached("hot-memcached", 0);
    let mut pool = Pool::new(&[memcached.address()], options(Hashing::Jump, 2)).unwrap();
    let outcomes = pool.refresh_hot_keys();
    assert!(outcomes[0].1.as_ref().is_ok_and(|&n| n == 0), "{outcomes:?}");
    pool.set(b"k", b"v", 0, 0).unwrap();
    assert_eq!(pool.get(b"k").unwrap().unwrap().value, b"v");
}

/// Each server's `get_hits`, asked directly.
fn get_hits(servers: &[Server]) -> Vec<u64> {
    stat(servers, "get_hits")
}

/// Each server's counter `name` from `stats`, asked directly.
fn stat(servers: &[Server], name: &str) -> Vec<u64> {
    servers
        .iter()
        .map(|s| {
            let mut c =
                shoal_client::Client::connect(&s.address(), Options { local: false, ..Options::default() })
                    .unwrap();
            let stats = c.stats(None).unwrap();
            stats.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| v.parse().unwrap())
        })
        .collect()
}

#[test]
fn a_write_of_a_hot_key_refills_its_copies_with_one_read_of_its_owner() {
    let servers = servers("hot-refill");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump, 0)).unwrap();
    pool.flush_all(None).unwrap();
    let (key, cold) = (b"hot:refill".as_slice(), b"cold:refill".as_slice());
    pool.set(key, b"v1", 0, 0).unwrap();
    make_hot(&mut pool, key);
    let owner = addresses.iter().position(|a| a == pool.server_for(key).unwrap()).unwrap();
    for (write, value) in [("set", b"v2"), ("replace", b"v3"), ("cas", b"v4")] {
        let (gets, made) = (stat(&servers, "cmd_get"), pool.counters().hot_copies_made);
        let stored = match write {
            "set" => pool.set(key, value, 5, 0),
            "replace" => pool.replace(key, value, 5, 0),
            _ => {
                let unique = pool.get(key).unwrap().expect("there").cas;
                pool.cas(key, value, 5, 0, unique)
            }
        };
        assert_eq!(stored.unwrap(), Stored::Stored, "{write}");
        // The owner was read once (the cas's own read aside), the copies not at all; every
        // replica holds the new value with the owner's flags and unique.
        let read = stat(&servers, "cmd_get").iter().zip(&gets).map(|(a, b)| a - b).collect::<Vec<_>>();
        let asked = if write == "cas" { read.iter().sum::<u64>() - 1 } else { read.iter().sum() };
        assert!(read[owner] >= 1 && asked == 1, "{write}: reads {read:?}, owner {owner}");
        let (_, unique) = held_with_cas(&servers, key)[owner].clone().expect("the owner holds it");
        assert_eq!(held_with_cas(&servers, key), vec![Some((value.to_vec(), unique)); 3], "{write}");
        assert_eq!(pool.counters().hot_copies_made, made + 2, "{write}");
        let hits = pool.counters().hot_copy_hits;
        for _ in 0..6 {
            let item = pool.get(key).unwrap().expect("there");
            assert_eq!((item.value.as_slice(), item.flags, item.cas), (value.as_slice(), 5, unique));
        }
        assert_eq!(pool.counters().hot_copy_hits, hits + 4, "{write}: every copy's read hit");
    }
    // Nothing stored, nothing refilled: an add of a key that is there, a delete; a cold key's
    // write makes no copy.
    let made = pool.counters().hot_copies_made;
    assert_eq!(pool.add(key, b"v5", 0, 0).unwrap(), Stored::NotStored);
    assert!(held(&servers, key).iter().all(|v| v.as_deref() != Some(b"v5")));
    assert!(pool.delete(key).unwrap());
    assert_eq!(held(&servers, key), vec![None; 3], "a delete reaches every replica");
    assert_eq!(pool.counters().hot_copies_made, made);
    pool.set(cold, b"c", 0, 0).unwrap();
    assert_eq!(held(&servers, cold).iter().filter(|v| v.is_some()).count(), 1, "a cold key is never copied");
}

#[test]
fn a_hot_key_in_a_get_many_is_read_from_every_replica() {
    let servers = servers("hot-get-many");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump, 0)).unwrap();
    pool.flush_all(None).unwrap();
    let (hot, cold) = (b"hot:batch".as_slice(), b"cold:batch".as_slice());
    pool.set(hot, b"h1", 0, 0).unwrap();
    pool.set(cold, b"c1", 0, 0).unwrap();
    make_hot(&mut pool, hot);
    // The first batches fill the copies from the owner; then every replica answers in turn.
    for _ in 0..3 {
        pool.get_many(&[hot, cold]).unwrap();
    }
    let before = get_hits(&servers);
    let mut uniques = Vec::new();
    for _ in 0..30 {
        let mut found = pool.get_many(&[cold, hot, b"absent:batch"]).unwrap();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].0.as_slice(), found[0].1.value.as_slice()), (cold, b"c1".as_slice()));
        assert_eq!((found[1].0.as_slice(), found[1].1.value.as_slice()), (hot, b"h1".as_slice()));
        uniques.push(found[1].1.cas);
    }
    let after = get_hits(&servers);
    let cold_owner = addresses.iter().position(|a| a == pool.server_for(cold).unwrap()).unwrap();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let hot_reads = a - b - if i == cold_owner { 30 } else { 0 };
        assert_eq!(hot_reads, 10, "server {i} answered {hot_reads} of the hot key's 30 reads");
    }
    // Copies answer with their owner's CAS unique (hot_gets.rs tests `cas` with it).
    assert!(uniques.iter().all(|&c| c != 0 && c == uniques[0]), "{uniques:?}");
    assert!(pool.counters().hot_copy_hits >= 20, "{:?}", pool.counters());

    // A write is seen by every batch after it, whichever replica answers.
    pool.set(hot, b"h2", 0, 0).unwrap();
    for _ in 0..6 {
        let found = pool.get_many(&[hot, cold]).unwrap();
        assert!(found.iter().any(|(k, item)| k == hot && item.value == b"h2"), "{found:?}");
    }
    assert_eq!(held(&servers, hot), vec![Some(b"h2".to_vec()); 3], "the copies refilled from the owner");
    pool.delete(hot).unwrap();
    for _ in 0..3 {
        assert!(pool.get_many(&[hot]).unwrap().is_empty());
    }
}

/// A key whose copy with 3 servers on is on a server that holds none of its replicas with 4
/// on: the copy a write made after turning the 4th server on must still delete.
fn key_whose_copy_moves(addresses: &[String]) -> Vec<u8> {
    let servers: Vec<shoal_route::Server> =
        addresses.iter().map(|a| shoal_route::Server::parse(a).unwrap()).collect();
    let placement = shoal_route::Placement::new(Hashing::Proteus, servers).unwrap();
    (0..)
        .map(|i| format!("hot:moves:{i}").into_bytes())
        .find(|key| {
            let (three, four) =
                (placement.replicas(Some(3), key, 2).unwrap(), placement.replicas(Some(4), key, 2).unwrap());
            let moves = three.copies().any(|c| !four.contains(c));
            moves
        })
        .expect("some key")
}

#[test]
fn a_transition_moves_a_hot_keys_replicas_and_no_read_is_stale_after_a_write() {
    let mut servers: Vec<Server> = (0..4)
        .map(|i| Server::shoal(&format!("hot-transition-{i}"), 0, &["-o", "hotkeys_sample=1"]))
        .collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Proteus, 2)).unwrap();
    pool.flush_all(None).unwrap();
    let key = key_whose_copy_moves(&addresses);
    let index = |address: &String| addresses.iter().position(|a| a == address).unwrap();
    // Three servers on; the key hot, its two replicas both holding v1.
    pool.set_active(3).unwrap();
    pool.finish_transition();
    pool.set(&key, b"v1", 0, 0).unwrap();
    make_hot(&mut pool, &key);
    for _ in 0..4 {
        assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v1");
    }
    let on_three: Vec<usize> = pool.replicas_for(&key).unwrap().iter().map(index).collect();
    assert!(on_three.iter().all(|&s| s < 3), "{on_three:?}");
    for &s in &on_three {
        assert_eq!(held(&servers, &key)[s].as_deref(), Some(b"v1".as_slice()), "replica {s}");
    }

    // The fourth server turned on: the replicas move with the active set.
    pool.set_active(4).unwrap();
    let on_four: Vec<usize> = pool.replicas_for(&key).unwrap().iter().map(index).collect();
    assert_ne!(on_three, on_four);
    // A write during the transition leaves no server with the old value: the copies of the
    // active set before it included.
    pool.set(&key, b"v2", 0, 0).unwrap();
    assert!(held(&servers, &key).iter().all(|v| v.as_deref() != Some(b"v1")), "{:?}", held(&servers, &key));
    for _ in 0..4 {
        assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v2");
        assert_eq!(pool.get_many(&[&key]).unwrap()[0].1.value, b"v2");
    }
    pool.finish_transition();

    // Turned off again (within the copies' TTL): reads go back to the first replicas, and
    // none of them answers with v1.
    pool.set_active(3).unwrap();
    assert_eq!(pool.replicas_for(&key).unwrap().iter().map(index).collect::<Vec<_>>(), on_three);
    for _ in 0..4 {
        assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v2");
        assert_eq!(pool.get_many(&[&key]).unwrap()[0].1.value, b"v2");
    }
    pool.set(&key, b"v3", 0, 0).unwrap();
    assert!(held(&servers, &key).iter().all(|v| v.as_deref() != Some(b"v2")), "{:?}", held(&servers, &key));
    pool.finish_transition();
    // The fourth server stops: the pool reads from the three on, and deletes a copy it
    // cannot reach without failing the write.
    servers.pop().unwrap().stop_with("TERM");
    pool.set(&key, b"v4", 0, 0).unwrap();
    for _ in 0..4 {
        assert_eq!(pool.get(&key).unwrap().unwrap().value, b"v4");
        assert_eq!(pool.get_many(&[&key]).unwrap()[0].1.value, b"v4");
    }
    assert!(pool.counters().hot_copy_hits > 0, "{:?}", pool.counters());
}

/// Reads `key` through `pool` once per replica and a round more (single gets, then a
/// `get_many`); every answer is `(value, cas)`.
fn read_every_replica(pool: &mut Pool, key: &[u8], replicas: usize) -> Vec<(Vec<u8>, u64)> {
    let mut seen = Vec::new();
    for _ in 0..2 * replicas {
        let Item { value, cas, .. } = pool.get(key).unwrap().expect("a hot key that is there");
        seen.push((value, cas));
    }
    for _ in 0..replicas {
        let many = pool.get_many(&[key]).unwrap();
        assert_eq!(many.len(), 1, "a get_many of a key that is there");
        seen.push((many[0].1.value.clone(), many[0].1.cas));
    }
    seen
}

#[test]
fn every_replica_hands_out_the_owners_unique_and_a_cas_with_it_succeeds_once() {
    let servers = servers("hot-gets");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut counting = Pool::new(&addresses, options(Hashing::Jump, 0)).unwrap();
    counting.flush_all(None).unwrap();
    for (n, local) in [false, true].into_iter().enumerate() {
        let mut pool = Pool::new(
            &addresses,
            PoolOptions {
                client: Options { local, ..options(Hashing::Jump, 0).client },
                ..options(Hashing::Jump, 0)
            },
        )
        .unwrap();
        let key = format!("hot:gets:{n}").into_bytes();
        pool.set(&key, b"v1", 7, 0).unwrap();
        make_hot(&mut counting, &key);
        pool.refresh_hot_keys();
        assert!(pool.hot_keys().iter().any(|(k, _)| *k == key), "{:?}", pool.hot_keys());
        let owner = addresses.iter().position(|a| a == pool.server_for(&key).unwrap()).unwrap();

        // Every replica (counted by the copies it answered) hands out the owner's unique.
        let copy_hits = pool.counters().hot_copy_hits;
        let seen = read_every_replica(&mut pool, &key, 3);
        let (_, unique) = held_with_cas(&servers, &key)[owner].clone().expect("the owner holds it");
        assert!(
            seen.iter().all(|(v, cas)| v == b"v1" && *cas == unique),
            "local {local}: {seen:?} vs {unique}"
        );
        assert!(pool.counters().hot_copy_hits >= copy_hits + 4, "{:?}", pool.counters());
        assert_eq!(
            held_with_cas(&servers, &key),
            vec![Some((b"v1".to_vec(), unique)); 3],
            "every replica holds the owner's value and unique"
        );

        // A cas with that unique succeeds once; the second, with the same unique, fails
        // however many replicas the reads went to, and the copies are gone or fresh.
        assert_eq!(pool.cas(&key, b"v2", 7, 0, unique).unwrap(), Stored::Stored);
        for _ in 0..3 {
            assert_eq!(pool.cas(&key, b"v3", 7, 0, unique).unwrap(), Stored::Exists);
        }
        assert!(
            held_with_cas(&servers, &key).iter().flatten().all(|(v, _)| v == b"v2"),
            "no replica serves the old value after the cas: {:?}",
            held_with_cas(&servers, &key)
        );
        let seen = read_every_replica(&mut pool, &key, 3);
        let (_, new_unique) = held_with_cas(&servers, &key)[owner].clone().expect("the owner holds it");
        assert_ne!(new_unique, unique);
        assert!(seen.iter().all(|(v, cas)| v == b"v2" && *cas == new_unique), "{seen:?} vs {new_unique}");
        assert_eq!(held_with_cas(&servers, &key), vec![Some((b"v2".to_vec(), new_unique)); 3]);
        assert_eq!(pool.cas(&key, b"v3", 7, 0, new_unique).unwrap(), Stored::Stored);

        // A set and a delete: no replica keeps the value before either.
        pool.set(&key, b"v4", 7, 0).unwrap();
        assert!(
            held_with_cas(&servers, &key).iter().flatten().all(|(v, _)| v == b"v4"),
            "{:?}",
            held_with_cas(&servers, &key)
        );
        assert!(read_every_replica(&mut pool, &key, 3).iter().all(|(v, _)| v == b"v4"));
        assert!(pool.delete(&key).unwrap());
        assert_eq!(held_with_cas(&servers, &key), vec![None; 3], "a delete reaches every replica");
        for _ in 0..3 {
            assert!(pool.get(&key).unwrap().is_none());
        }
    }
}

/// A key whose owner stays when a third server is turned on, and one that moves (Proteus).
fn kept_and_moved_keys(addresses: &[String]) -> (Vec<u8>, Vec<u8>) {
    let servers: Vec<shoal_route::Server> =
        addresses.iter().map(|a| shoal_route::Server::parse(a).unwrap()).collect();
    let placement = shoal_route::Placement::new(Hashing::Proteus, servers).unwrap();
    let ring = placement.proteus().unwrap();
    let find = |moves: bool| {
        (0..)
            .map(|i| format!("hot:judged:{moves}:{i}").into_bytes())
            .find(|key| (ring.owner_with(2, key).unwrap() != ring.owner_with(3, key).unwrap()) == moves)
            .expect("some key")
    };
    (find(false), find(true))
}

#[test]
fn in_a_transition_a_kept_owners_key_is_copied_and_a_moved_one_only_from_its_new_owner() {
    let servers = servers("hot-judged");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Proteus, 0)).unwrap();
    pool.flush_all(None).unwrap();
    let (kept, moved) = kept_and_moved_keys(&addresses);
    let index = |address: &str| addresses.iter().position(|a| a == address).unwrap();
    // Two servers on; both keys hot, then deleted (every replica) and written by a pool without
    // hot keys (a hot pool's write would refill the copies), so only their owners hold them.
    let mut plain = Pool::new(&addresses, PoolOptions { hot: None, ..options(Hashing::Proteus, 0) }).unwrap();
    for p in [&mut pool, &mut plain] {
        p.set_active(2).unwrap();
        p.finish_transition();
    }
    for key in [&kept, &moved] {
        pool.set(key, b"v1", 0, 0).unwrap();
        make_hot(&mut pool, key);
        pool.delete(key).unwrap();
        plain.set(key, b"v2", 0, 0).unwrap();
    }
    let old_owner = index(pool.server_for(&moved).unwrap());
    for (key, holder) in [(&kept, index(pool.server_for(&kept).unwrap())), (&moved, old_owner)] {
        let held = held(&servers, key);
        assert!(held.iter().enumerate().all(|(s, v)| v.is_some() == (s == holder)), "{held:?}");
    }

    // The third server turned on; the transition runs until finish_transition.
    pool.set_active(3).unwrap();
    let kept_owner = index(pool.server_for(&kept).unwrap());
    let new_owner = index(pool.server_for(&moved).unwrap());
    assert_ne!(old_owner, new_owner);
    let read = |pool: &mut Pool, key: &[u8]| {
        for _ in 0..3 {
            assert_eq!(pool.get(key).unwrap().unwrap().value, b"v2");
            assert_eq!(pool.get_many(&[key]).unwrap()[0].1.value, b"v2");
        }
    };
    // The kept owner's key: copied from its owner, with its unique, onto every replica.
    let made = pool.counters().hot_copies_made;
    read(&mut pool, &kept);
    assert!(pool.counters().hot_copies_made > made, "{:?}", pool.counters());
    let unique = held_with_cas(&servers, &kept)[kept_owner].clone().expect("the owner holds it").1;
    assert_eq!(held_with_cas(&servers, &kept), vec![Some((b"v2".to_vec(), unique)); 3]);
    // The moved key: its first miss finds it on its old owner and migrates it to the new one,
    // uncopied (the old owner's unique is that server's); a later miss of a copy reads the new
    // owner itself, which is copied with that server's unique. The old owner, a replica too
    // with every server on, keeps its own item (a copy's `add` fails there).
    let (made, migrated) = (pool.counters().hot_copies_made, pool.counters().migrated);
    read(&mut pool, &moved);
    assert_eq!(pool.counters().migrated, migrated + 1, "{:?}", pool.counters());
    assert!(pool.counters().hot_copies_made > made, "{:?}", pool.counters());
    let unique = held_with_cas(&servers, &moved)[new_owner].clone().expect("migrated").1;
    for (s, held) in held_with_cas(&servers, &moved).into_iter().enumerate() {
        let (value, cas) = held.expect("every replica holds it");
        assert_eq!(value, b"v2", "server {s}");
        assert!(s == old_owner || cas == unique, "server {s} (old owner {old_owner}, new {new_owner})");
    }

    // Once the transition is over the moved key is read from every replica as before.
    pool.finish_transition();
    read(&mut pool, &moved);
    assert_eq!(held(&servers, &moved), vec![Some(b"v2".to_vec()); 3]);
}

#[test]
fn a_hot_keys_meta_get_is_read_from_every_replica_and_sees_every_write() {
    let servers = servers("hot-meta");
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump, 0)).unwrap();
    pool.flush_all(None).unwrap();
    let key = b"hot:meta".as_slice();
    pool.set(key, b"m1", 7, 0).unwrap();
    make_hot(&mut pool, key);
    let owner = addresses.iter().position(|a| a == pool.server_for(key).unwrap()).unwrap();
    let (_, unique) = held_with_cas(&servers, key)[owner].clone().expect("the owner holds it");
    let mg = |pool: &mut Pool, flags: &str| {
        let reply = pool.meta_get(key, flags).unwrap().expect("an answer");
        (reply.line, reply.value)
    };

    // No copy yet: the copies' first reads miss, ask the owner for the item (`v f c` added) and
    // answer as the caller's own `mg` would have; the copies hold the owner's item after.
    for _ in 0..3 {
        assert_eq!(mg(&mut pool, "v"), ("VA 2".to_string(), Some(b"m1".to_vec())));
    }
    assert_eq!(pool.counters().hot_copies_made, 2, "{:?}", pool.counters());
    assert_eq!(held_with_cas(&servers, key), vec![Some((b"m1".to_vec(), unique)); 3]);

    // Then every replica answers a third of the reads, each with the owner's flags and unique.
    let (before, copy_hits) = (get_hits(&servers), pool.counters().hot_copy_hits);
    let whole = format!("VA 2 c{unique} f7 s2 khot:meta Oab");
    for _ in 0..30 {
        assert_eq!(mg(&mut pool, "v c f s k Oab"), (whole.clone(), Some(b"m1".to_vec())));
    }
    let read: Vec<u64> = get_hits(&servers).iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(read, [10, 10, 10], "each replica answers a third of the mg reads");
    assert_eq!(pool.counters().hot_copy_hits, copy_hits + 20);

    // A copy that lost its item: the owner's answer, without the flags the pool added.
    for (i, address) in addresses.iter().enumerate().filter(|(i, _)| *i != owner) {
        let mut direct = shoal_client::Client::connect(address, options(Hashing::Jump, 0).client).unwrap();
        assert!(direct.delete(key).unwrap(), "server {i} held a copy");
    }
    for _ in 0..3 {
        assert_eq!(mg(&mut pool, "k s"), ("HD khot:meta s2".to_string(), None));
        assert_eq!(mg(&mut pool, ""), ("HD".to_string(), None));
    }
    assert_eq!(held_with_cas(&servers, key), vec![Some((b"m1".to_vec(), unique)); 3], "refilled");

    // A write is seen through every replica; a delete leaves every replica's mg a miss.
    pool.set(key, b"m2", 7, 0).unwrap();
    for _ in 0..6 {
        assert_eq!(mg(&mut pool, "v f").1, Some(b"m2".to_vec()));
    }
    // An mg with a flag a copy cannot answer alike (`t`: the copies' TTL is their own) goes to
    // the owner, every time.
    let before = get_hits(&servers);
    for _ in 0..6 {
        assert_eq!(mg(&mut pool, "v t"), ("VA 2 t-1".to_string(), Some(b"m2".to_vec())));
    }
    let read: Vec<u64> = get_hits(&servers).iter().zip(&before).map(|(a, b)| a - b).collect();
    let expected: Vec<u64> = (0..3).map(|i| if i == owner { 6 } else { 0 }).collect();
    assert_eq!(read, expected, "the owner ({owner}) answers every mg with t");
    assert!(pool.delete(key).unwrap());
    for _ in 0..3 {
        assert_eq!(mg(&mut pool, "v Oq"), ("EN Oq".to_string(), None));
        assert!(pool.meta_get(key, "v q").unwrap().is_none(), "a quiet miss");
    }
    assert!(pool.meta_get(b"bad key", "v").is_err() && pool.meta_get(key, "b v").is_err());
}
