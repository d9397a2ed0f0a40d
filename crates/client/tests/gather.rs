//! `Pool::get_many_local` (issue #29): the part of a multiget that shared memory answers, each
//! value copied once into a caller's `Gather`, against real servers: it answers exactly what
//! `get_many_each` does for the keys of servers read locally, leaves every other key (a
//! memcached's, a server not connected yet) for the network path, takes a miss as final, and
//! hands out no value it has not judged a hit.

mod common;

use common::Server;
use shoal_client::{Gather, Hashing, ItemInfo, Options, Pool, PoolOptions, ValueSink};
use std::collections::HashMap;

/// A gatherer that keeps each value in a vector of its own (as Python keeps a `bytes`).
#[derive(Default)]
struct Owned {
    pending: Option<Vec<u8>>,
    found: HashMap<usize, (Vec<u8>, u32, u64)>,
    discarded: usize,
    spare: Vec<u8>,
}

impl ValueSink for Owned {
    fn append_to(&mut self, _item: &ItemInfo) -> &mut Vec<u8> {
        &mut self.spare
    }

    fn fill(&mut self, item: &ItemInfo, copy: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut value = vec![0; item.value_len];
        copy(&mut value);
        self.pending = Some(value);
        true
    }
}

impl Gather for Owned {
    fn hit(&mut self, index: usize, flags: u32, cas: u64) {
        let value = self.pending.take().expect("a hit's value was filled");
        assert!(self.found.insert(index, (value, flags, cas)).is_none(), "key {index} answered twice");
    }

    fn discard(&mut self) {
        self.pending = None;
        self.discarded += 1;
    }
}

fn options() -> PoolOptions {
    PoolOptions {
        hashing: Hashing::Jump,
        client: Options { local: true, ..Options::default() },
        ..PoolOptions::default()
    }
}

#[test]
fn local_keys_are_gathered_as_get_many_reads_them_and_the_rest_are_left() {
    let servers = [
        Server::shoal("gather-0", 0, &[]),
        Server::memcached("gather-1", 0),
        Server::shoal("gather-2", 0, &[]),
    ];
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options()).unwrap();
    let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("gather:{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..300).map(|i| vec![b'a' + (i % 26) as u8; i * 7 % 700]).collect();
    for (i, (key, value)) in keys.iter().zip(&values).enumerate().filter(|(i, _)| i % 10 != 0) {
        pool.set(key, value, i as u32, 0).unwrap();
    }
    let mut refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    refs.push(b"gather:absent");

    // A pool not connected yet reads nothing locally, and connects nothing here.
    let mut fresh = Pool::new(&addresses, options()).unwrap();
    let mut gather = Owned::default();
    let mut rest = fresh.get_many_local(&refs, &mut gather).unwrap();
    rest.sort_unstable(); // grouped by server
    assert_eq!(rest, (0..refs.len()).collect::<Vec<_>>());
    assert!(gather.found.is_empty() && fresh.local_servers().is_empty());

    pool.connect().unwrap();
    assert_eq!(pool.local_servers(), [addresses[0].clone(), addresses[2].clone()]);
    let mut gather = Owned::default();
    let mut rest = pool.get_many_local(&refs, &mut gather).unwrap();
    rest.sort_unstable();
    let memcached = addresses[1].as_str();
    let on_memcached: Vec<usize> =
        (0..refs.len()).filter(|&i| pool.server_for(refs[i]).unwrap() == memcached).collect();
    assert_eq!(rest, on_memcached, "the memcached's keys are left, every other key is answered");
    let mut expected = HashMap::new();
    pool.get_many_each(&refs, |i, item| _ = expected.insert(i, (item.value.to_vec(), item.flags, item.cas)))
        .unwrap();
    expected.retain(|i, _| !on_memcached.contains(i));
    assert!(!expected.is_empty() && expected.len() < 300);
    assert_eq!(gather.found, expected, "values, flags and CAS uniques as get_many_each reads them");
    let local_misses =
        (0..refs.len()).filter(|i| !on_memcached.contains(i) && !expected.contains_key(i)).count();
    assert!(local_misses > 0 && gather.discarded >= local_misses, "each miss dropped what it was given");
}

#[test]
fn bad_keys_are_refused_before_anything_is_read() {
    let server = Server::shoal("gather-bad", 0, &[]);
    let mut pool = Pool::new(&[server.address()], options()).unwrap();
    pool.connect().unwrap();
    let mut gather = Owned::default();
    assert!(pool.get_many_local(&[b"fine", b"not fine"], &mut gather).is_err());
    assert!(gather.found.is_empty());
}
