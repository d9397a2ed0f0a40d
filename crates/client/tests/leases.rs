//! The client's lease calls against a real `shoal server`: tokens, hot misses, stale values,
//! the hold-off, and `get_or_fill` under a herd.

mod common;

use common::Server;
use shoal_client::{Client, FillOptions, Lease, LeaseStored, Options};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn client(server: &Server) -> Client {
    Client::connect(&server.address(), Options::default()).unwrap()
}

#[test]
fn a_token_then_hot_misses_and_a_delete_voids_the_token() {
    let server = Server::shoal("lease-token", 0, &[]);
    let (mut a, mut b) = (client(&server), client(&server));
    let Lease::Token { token, stale: None } = a.lease_get(b"k", false).unwrap() else {
        panic!("a miss gives a token")
    };
    assert_eq!(b.lease_get(b"k", false).unwrap(), Lease::HotMiss { stale: None });
    assert_eq!(a.get(b"k").unwrap(), None, "a lease placeholder is no item, locally too");
    assert_eq!(a.lease_set(b"k", token, b"filled", 3, 0).unwrap(), LeaseStored::Stored);
    let Lease::Hit(item) = b.lease_get(b"k", false).unwrap() else { panic!("filled") };
    assert_eq!((item.value.as_slice(), item.flags), (&b"filled"[..], 3));
    assert!(a.delete(b"k").unwrap());
    let Lease::Token { token: second, .. } = b.lease_get(b"k", false).unwrap() else { panic!("a new token") };
    assert_eq!(
        a.lease_set(b"k", token, b"late", 0, 0).unwrap(),
        LeaseStored::NotStored,
        "the old token is void"
    );
    assert_eq!(b.lease_set(b"k", second, b"fresh", 0, 0).unwrap(), LeaseStored::Stored);
    assert_eq!(a.get(b"k").unwrap().unwrap().value, b"fresh");
}

#[test]
fn stale_values_and_the_hold_off() {
    let server = Server::shoal("lease-stale", 0, &["--stale-ttl", "30"]);
    let mut c = client(&server);
    c.set(b"k", b"old", 5, 0).unwrap();
    c.delete(b"k").unwrap();
    let Lease::Token { stale: Some(old), .. } = c.lease_get(b"k", true).unwrap() else {
        panic!("stale with the token")
    };
    assert_eq!((old.value.as_slice(), old.flags), (&b"old"[..], 5));
    let Lease::HotMiss { stale: Some(_) } = c.lease_get(b"k", true).unwrap() else {
        panic!("stale with a hot miss")
    };
    assert!(c.delete_hold(b"h", 30).is_ok());
    assert_eq!(c.add(b"h", b"x", 0, 0).unwrap(), shoal_client::Stored::NotStored, "held off");
    assert_eq!(c.set(b"h", b"x", 0, 0).unwrap(), shoal_client::Stored::Stored);
}

#[test]
fn get_or_fill_fills_once_for_a_herd_and_reads_hits_locally() {
    let server = Server::shoal("lease-herd", 0, &[]);
    let fills = AtomicU32::new(0);
    let options = FillOptions { exptime: 0, accept_stale: false, max_wait: Duration::from_secs(5) };
    for round in 0..3 {
        client(&server).delete(b"hot").unwrap();
        fills.store(0, Ordering::SeqCst);
        std::thread::scope(|scope| {
            for _ in 0..20 {
                let (server, fills) = (&server, &fills);
                scope.spawn(move || {
                    let mut c = client(server);
                    let value = c
                        .get_or_fill(b"hot", options, || {
                            fills.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(50)); // the database
                            Ok::<_, ()>(format!("value {round}").into_bytes())
                        })
                        .unwrap()
                        .unwrap();
                    assert_eq!(value, format!("value {round}").into_bytes());
                });
            }
        });
        assert_eq!(fills.load(Ordering::SeqCst), 1, "round {round}: one fill per invalidation");
    }
    let mut c = client(&server);
    assert!(c.is_local());
    let before = c.stats(None).unwrap();
    let value = c.get_or_fill(b"hot", options, || Err::<Vec<u8>, _>("no fill for a hit")).unwrap().unwrap();
    assert_eq!(value, b"value 2");
    let after = c.stats(None).unwrap();
    let bytes_read = |s: &[(String, String)]| -> u64 {
        s.iter().find(|(n, _)| n == "bytes_read").unwrap().1.parse().unwrap()
    };
    assert_eq!(
        bytes_read(&after) - bytes_read(&before),
        b"stats\r\n".len() as u64,
        "a local hit sends the server nothing"
    );
}

#[test]
fn a_stale_value_can_stand_in_on_a_hot_miss() {
    let server = Server::shoal("lease-stale-fill", 0, &["--stale-ttl", "30"]);
    let mut c = client(&server);
    c.set(b"k", b"old", 0, 0).unwrap();
    c.delete(b"k").unwrap();
    let Lease::Token { .. } = c.lease_get(b"k", false).unwrap() else { panic!("someone holds the lease") };
    let options = FillOptions { accept_stale: true, ..FillOptions::default() };
    let value = c.get_or_fill(b"k", options, || Err::<Vec<u8>, _>("the lease is taken")).unwrap().unwrap();
    assert_eq!(value, b"old");
}
