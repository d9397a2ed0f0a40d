//! The pool client against real servers: mixed pools of `shoal server`s and Debian's
//! memcached, local reads from several regions in one `get_many`, a server killed mid-run
//! (its keys miss or go to Gutter, the others keep hitting, nothing hangs past the timeout),
//! a server that stops answering (the window shrinks, then grows back), leases per owner.

mod common;

use common::Server;
use shoal_client::{Error, FillOptions, Hashing, Options, Pool, PoolOptions, Stored, WindowOptions};
use std::collections::HashMap;
use std::time::{Duration, Instant};

fn options(hashing: Hashing) -> PoolOptions {
    PoolOptions {
        hashing,
        client: Options {
            // Generous: a loaded machine answers slowly, and a killed server refuses at once.
            connect_timeout: Some(Duration::from_secs(5)),
            io_timeout: Some(Duration::from_secs(5)),
            local: true,
        },
        retry_interval: Duration::from_millis(300),
        ..PoolOptions::default()
    }
}

fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("pool:key:{i}").into_bytes()).collect()
}

fn refs(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    keys.iter().map(Vec::as_slice).collect()
}

/// Which server (by address) holds each key, asked of every server directly.
fn holders(servers: &[Server], keys: &[Vec<u8>]) -> HashMap<Vec<u8>, String> {
    let mut found = HashMap::new();
    for s in servers {
        let mut c =
            shoal_client::Client::connect(&s.address(), Options { local: false, ..Options::default() })
                .unwrap();
        for (k, _) in c.get_many(&refs(keys)).unwrap() {
            assert!(found.insert(k, s.address()).is_none(), "a key on two servers");
        }
    }
    found
}

#[test]
fn a_mixed_pool_places_every_key_on_its_owner_and_reads_them_back() {
    let servers = vec![
        Server::shoal("pool-mixed-0", 0, &[]),
        Server::memcached("pool-mixed-1", 0),
        Server::shoal("pool-mixed-2", 0, &[]),
        Server::memcached("pool-mixed-3", 0),
    ];
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    for hashing in [Hashing::Jump, Hashing::Rendezvous] {
        let mut pool = Pool::new(&addresses, options(hashing)).unwrap();
        pool.flush_all(None).unwrap();
        let keys = keys(1000);
        let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
        assert!(pool.set_many(&items, 7, 0).unwrap().is_empty());
        let placed = holders(&servers, &keys);
        assert_eq!(placed.len(), keys.len());
        for k in &keys {
            assert_eq!(placed[k], pool.server_for(k).unwrap(), "{hashing}");
        }
        let per_server = addresses.iter().map(|a| placed.values().filter(|v| *v == a).count());
        assert!(per_server.clone().all(|n| n > 150), "{hashing}: {:?}", per_server.collect::<Vec<_>>());
        let got = pool.get_many(&refs(&keys)).unwrap();
        assert_eq!(got.len(), keys.len());
        assert!(got.iter().all(|(k, item)| item.value == *k && item.flags == 7));
        // Every shoal server's keys came from its region (the memcached ones over TCP).
        let mut local = pool.local_servers();
        local.sort();
        let mut shoals = vec![addresses[0].clone(), addresses[2].clone()];
        shoals.sort();
        assert_eq!(local, shoals);
        assert!(!pool.is_local());
        let half: Vec<&[u8]> = keys.iter().step_by(2).map(Vec::as_slice).collect();
        assert!(pool.delete_many(&half).unwrap().is_empty());
        assert_eq!(pool.get_many(&refs(&keys)).unwrap().len(), keys.len() / 2);
        assert_eq!(pool.get(&keys[1]).unwrap().unwrap().value, keys[1]);
        assert_eq!(pool.get(&keys[0]).unwrap(), None);
        assert_eq!(pool.add(&keys[1], b"x", 0, 0).unwrap(), Stored::NotStored);
        assert_eq!(pool.incr(b"counter", 1).unwrap(), None);
        pool.set(b"counter", b"41", 0, 0).unwrap();
        assert_eq!(pool.incr(b"counter", 1).unwrap(), Some(42));
        assert_eq!(pool.stats(None).len(), 4);
        assert!(pool.versions().iter().all(|(_, v)| v.is_ok()));
    }
}

#[test]
fn local_reads_come_from_several_regions_in_one_get_many() {
    let servers: Vec<Server> = (0..3).map(|i| Server::shoal(&format!("pool-local-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump)).unwrap();
    let keys = keys(300);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), &b"v"[..])).collect();
    assert!(pool.set_many(&items, 0, 0).unwrap().is_empty());
    let before: Vec<u64> = servers.iter().map(bytes_read).collect();
    assert_eq!(pool.get_many(&refs(&keys)).unwrap().len(), 300);
    assert_eq!(pool.local_servers().len(), 3);
    let after: Vec<u64> = servers.iter().map(bytes_read).collect();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a - b, b"stats\r\n".len() as u64, "local reads send nothing (only our own stats request)");
    }
}

/// The server's `bytes_read`, asked over a new connection.
fn bytes_read(server: &Server) -> u64 {
    let text = String::from_utf8(server.raw(b"stats\r\n", b"END\r\n")).unwrap();
    text.lines().find_map(|l| l.strip_prefix("STAT bytes_read ")).unwrap().trim().parse().unwrap()
}

#[test]
fn a_killed_server_misses_or_goes_to_gutter_and_the_rest_keep_hitting() {
    let mut servers: Vec<Server> = (0..3).map(|i| Server::shoal(&format!("pool-kill-{i}"), 0, &[])).collect();
    let gutter = Server::memcached("pool-kill-gutter", 0);
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let plain_options = PoolOptions {
        client: Options { local: false, ..options(Hashing::Jump).client },
        ..options(Hashing::Jump)
    };
    let mut plain = Pool::new(&addresses, plain_options.clone()).unwrap();
    let mut guttered = Pool::new(
        &addresses,
        PoolOptions { gutter: vec![gutter.address()], gutter_ttl: 10, ..plain_options },
    )
    .unwrap();
    let keys = keys(600);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
    assert!(plain.set_many(&items, 0, 0).unwrap().is_empty());
    let victim = servers.remove(1);
    let victim_address = victim.address();
    drop(victim); // SIGKILL
    let victim_keys: Vec<&[u8]> =
        keys.iter().filter(|k| plain.server_for(k).unwrap() == victim_address).map(Vec::as_slice).collect();
    assert!(victim_keys.len() > 100);

    let started = Instant::now();
    let got = plain.get_many(&refs(&keys)).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "a killed server is not waited for");
    assert_eq!(got.len(), keys.len() - victim_keys.len(), "only the dead server's keys miss");
    assert!(got.iter().all(|(k, _)| plain.server_for(k).unwrap() != victim_address));
    assert!(plain.counters().down_misses >= victim_keys.len() as u64);
    assert_eq!(plain.get(victim_keys[0]).unwrap(), None, "a read of a down server misses");
    assert!(matches!(plain.set(victim_keys[0], b"v", 0, 0), Err(Error::Down(a)) if a == victim_address));
    let failed = plain.set_many(&items, 0, 0).unwrap();
    assert_eq!(
        failed.len(),
        victim_keys.len(),
        "writes of the dead server's keys fail, the others are stored"
    );

    // With a Gutter pool: fills go to Gutter with the clamped TTL and are read back from it;
    // no key of the dead server lands on a live one.
    assert!(guttered.get_many(&victim_keys).unwrap().is_empty(), "Gutter starts empty");
    let fills: Vec<(&[u8], &[u8])> = victim_keys.iter().map(|k| (*k, &b"filled"[..])).collect();
    assert!(guttered.set_many(&fills, 0, 3600).unwrap().is_empty());
    let got = guttered.get_many(&victim_keys).unwrap();
    assert_eq!(got.len(), victim_keys.len());
    assert!(guttered.counters().gutter_reads > 0 && guttered.counters().gutter_writes > 0);
    let ttl = gutter.raw(format!("mg {} t\r\n", String::from_utf8_lossy(victim_keys[0])).as_bytes(), b"\r\n");
    let ttl: i64 = String::from_utf8(ttl).unwrap().trim().strip_prefix("HD t").unwrap().parse().unwrap();
    assert!((1..=10).contains(&ttl), "Gutter TTL clamped to 10 s, got {ttl}");
    for live in &servers {
        let mut direct =
            shoal_client::Client::connect(&live.address(), Options { local: false, ..Options::default() })
                .unwrap();
        assert_eq!(
            direct.get(victim_keys[0]).unwrap().map(|i| i.value).as_deref(),
            None,
            "no rehash onto live servers"
        );
    }
    assert_eq!(guttered.get(victim_keys[1]).unwrap().unwrap().value, b"filled");
}

#[test]
fn a_stalled_server_shrinks_the_window_which_grows_back() {
    let servers: Vec<Server> = (0..4).map(|i| Server::shoal(&format!("pool-window-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut opts = options(Hashing::Jump);
    opts.client.local = false;
    opts.client.io_timeout = Some(Duration::from_secs(2));
    opts.window = WindowOptions { initial: 8, max: 16 };
    let mut pool = Pool::new(&addresses, opts).unwrap();
    let keys = keys(800);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), &b"v"[..])).collect();
    assert!(pool.set_many(&items, 0, 0).unwrap().is_empty());
    pool.get_many(&refs(&keys)).unwrap();
    let wide = pool.window();
    assert!(wide > 8, "answers in time widen the window: {wide}");
    servers[2].pause();
    let got = pool.get_many(&refs(&keys)).unwrap();
    assert!(got.len() < keys.len());
    let narrow = pool.window();
    assert!(narrow < wide, "a timeout halves the window: {wide} -> {narrow}");
    assert!(pool.counters().timeouts >= 1);
    servers[2].resume();
    std::thread::sleep(Duration::from_millis(400)); // past the retry interval
    for _ in 0..3 {
        pool.get_many(&refs(&keys)).unwrap();
    }
    assert!(pool.window() > narrow, "it grows back");
    assert_eq!(pool.get_many(&refs(&keys)).unwrap().len(), keys.len(), "the server is back");
}

#[test]
fn leases_come_from_each_keys_owner() {
    let servers: Vec<Server> = (0..3).map(|i| Server::shoal(&format!("pool-lease-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Jump)).unwrap();
    let mut fills = 0;
    for i in 0..30 {
        let key = format!("lease:{i}");
        let value = pool
            .get_or_fill(key.as_bytes(), FillOptions::default(), || {
                fills += 1;
                Ok::<_, ()>(format!("db:{i}").into_bytes())
            })
            .unwrap()
            .unwrap();
        assert_eq!(value, format!("db:{i}").into_bytes());
        let again = pool.get_or_fill(key.as_bytes(), FillOptions::default(), || Err("cached")).unwrap();
        assert_eq!(again.unwrap(), format!("db:{i}").into_bytes());
        let owner = pool.server_for(key.as_bytes()).unwrap().to_string();
        let server = servers.iter().find(|s| s.address() == owner).unwrap();
        let answer = server.raw(format!("get {key}\r\n").as_bytes(), b"END\r\n");
        assert!(answer.starts_with(b"VALUE "), "the owner holds the filled value");
    }
    assert_eq!(fills, 30);
}

#[test]
fn udp_gets_read_real_servers() {
    let ports = [common::free_port(), common::free_port()];
    let servers = [
        Server::shoal("pool-udp-shoal", ports[0], &["-U", &ports[0].to_string()]),
        Server::memcached_with("pool-udp-memcached", ports[1], &["-U", &ports[1].to_string()]),
    ];
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut opts = options(Hashing::Jump);
    opts.client.local = false;
    let mut tcp = Pool::new(&addresses, opts.clone()).unwrap();
    let mut udp = Pool::new(&addresses, PoolOptions { udp_gets: true, ..opts }).unwrap();
    let keys = keys(300);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
    assert!(tcp.set_many(&items, 3, 0).unwrap().is_empty());
    let got = udp.get_many(&refs(&keys)).unwrap();
    assert_eq!(got.len(), keys.len());
    assert!(got.iter().all(|(k, item)| item.value == *k && item.flags == 3));
    assert_eq!(udp.get(&keys[7]).unwrap().unwrap().value, keys[7]);
    assert_eq!(udp.get(b"absent").unwrap(), None);
    let c = udp.counters();
    assert!(c.udp_requests >= 4 && c.udp_misses == 0, "{c:?}");
}

/// A fake server: a TCP listener nobody answers on (the pool only connects), and a UDP
/// socket on the same port that answers each request as `answer` says.
fn fake_udp_server(
    answer: fn(id: [u8; 2], key: &[u8]) -> Vec<Vec<u8>>,
) -> (String, std::thread::JoinHandle<()>) {
    let port = common::free_port();
    let tcp = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let udp = std::net::UdpSocket::bind(("127.0.0.1", port)).unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let handle = std::thread::spawn(move || {
        let _tcp = tcp;
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf) {
            let request = &buf[8..n];
            let key = request.strip_prefix(b"gets ").unwrap().strip_suffix(b"\r\n").unwrap();
            for datagram in answer([buf[0], buf[1]], key) {
                udp.send_to(&datagram, from).unwrap();
            }
        }
    });
    (format!("127.0.0.1:{port}"), handle)
}

/// The datagrams `(sequence, total, payload)` with request id `id`.
fn datagrams(id: [u8; 2], parts: &[(u16, u16, &[u8])]) -> Vec<Vec<u8>> {
    parts
        .iter()
        .map(|(seq, total, payload)| {
            let mut d = id.to_vec();
            d.extend_from_slice(&seq.to_be_bytes());
            d.extend_from_slice(&total.to_be_bytes());
            d.extend_from_slice(&[0, 0]);
            d.extend_from_slice(payload);
            d
        })
        .collect()
}

#[test]
fn lost_reordered_or_foreign_udp_answers_are_misses_never_wrong_values() {
    let (server, _thread) = fake_udp_server(|id, key| {
        let value = |k: &[u8]| [b"VALUE ", k, b" 0 5 1\r\nright\r\nEND\r\n"].concat();
        match key {
            b"in-order" => {
                let v = value(key);
                let (a, b) = v.split_at(10);
                datagrams(id, &[(0, 2, a), (1, 2, b)])
            }
            b"reordered" => {
                let v = value(key);
                let (a, b) = v.split_at(10);
                datagrams(id, &[(1, 2, b), (0, 2, a)])
            }
            b"lost" => datagrams(id, &[(1, 2, b"rest of it")]),
            b"foreign-id" => datagrams([id[0] ^ 0xff, id[1]], &[(0, 1, &value(key))]),
            b"other-key" => datagrams(id, &[(0, 1, &value(b"not-asked"))]),
            b"garbled" => datagrams(id, &[(0, 1, b"VALUE garbled 0 500 1\r\nshort\r\nEND\r\n")]),
            _ => Vec::new(), // dropped
        }
    });
    let mut opts = options(Hashing::Jump);
    opts.client.local = false;
    opts.client.io_timeout = Some(Duration::from_secs(1));
    let mut pool = Pool::new(&[server], PoolOptions { udp_gets: true, ..opts }).unwrap();
    assert_eq!(pool.get(b"in-order").unwrap().unwrap().value, b"right");
    for key in ["reordered", "lost", "foreign-id", "other-key", "garbled", "dropped"] {
        assert_eq!(pool.get(key.as_bytes()).unwrap(), None, "{key}");
    }
    let c = pool.counters();
    assert_eq!(c.udp_requests, 7);
    assert_eq!(c.udp_misses, 5, "every lost, reordered or garbled answer is counted ({c:?})");
}

#[test]
fn a_proteus_transition_finds_moved_keys_on_their_old_owner_and_never_brings_old_values_back() {
    let servers: Vec<Server> = (0..4).map(|i| Server::shoal(&format!("pool-proteus-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Proteus)).unwrap();
    let keys = keys(400);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
    assert!(pool.set_many(&items, 0, 0).unwrap().is_empty());
    let on_last: Vec<&[u8]> =
        keys.iter().filter(|k| pool.server_for(k).unwrap() == addresses[3]).map(Vec::as_slice).collect();
    assert!(on_last.len() > 60, "server 4 owns about a quarter: {}", on_last.len());

    // Server 4 is turned off: its keys now belong to the first three.
    pool.set_active(3).unwrap();
    assert_eq!(pool.active(), Some(shoal_client::Active { now: 3, before: Some(4) }));
    assert!(keys.iter().all(|k| pool.server_for(k).unwrap() != addresses[3]));
    let (overwritten, deleted) = (on_last[0], on_last[1]);
    pool.set(overwritten, b"new", 0, 0).unwrap();
    pool.delete(deleted).unwrap();
    let got = pool.get_many(&refs(&keys)).unwrap();
    assert_eq!(got.len(), keys.len() - 1, "every key but the deleted one, moved ones from their old owner");
    assert_eq!(pool.counters().migrated as usize, on_last.len() - 2, "each moved key copied once");
    assert_eq!(pool.get(overwritten).unwrap().unwrap().value, b"new", "the write on the new owner wins");
    assert_eq!(pool.get(deleted).unwrap(), None, "the old owner's copy does not come back");
    pool.get_many(&refs(&keys)).unwrap();
    assert_eq!(pool.counters().migrated as usize, on_last.len() - 2, "copies are read from the new owners");
    pool.finish_transition();
    assert_eq!(pool.get_many(&refs(&keys)).unwrap().len(), keys.len() - 1);

    // Only proteus pools have active servers, and only 1..=N of them.
    assert!(matches!(pool.set_active(0), Err(Error::Pool(shoal_route::Error::BadActive { .. }))));
    assert!(matches!(pool.set_active(5), Err(Error::Pool(shoal_route::Error::BadActive { .. }))));
    let mut jump = Pool::new(&addresses, options(Hashing::Jump)).unwrap();
    assert!(matches!(jump.set_active(2), Err(Error::Pool(_))));
}

#[test]
fn a_transition_asks_an_old_owner_only_for_keys_its_digest_may_hold() {
    let servers: Vec<Server> =
        (0..4).map(|i| Server::shoal(&format!("pool-digest-{i}"), 0, &["--digest-keys", "10000"])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Proteus)).unwrap();
    let keys = keys(400);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
    assert!(pool.set_many(&items, 0, 0).unwrap().is_empty());
    let moved: Vec<&[u8]> =
        keys.iter().filter(|k| pool.server_for(k).unwrap() == addresses[3]).map(Vec::as_slice).collect();
    // Keys never stored that would move too: the old owner's digest answers for them.
    let absent: Vec<Vec<u8>> = (0..400)
        .map(|i| format!("absent:{i}").into_bytes())
        .filter(|k| pool.server_for(k).unwrap() == addresses[3])
        .collect();
    pool.set_active(3).unwrap();
    for key in &moved {
        assert_eq!(pool.get(key).unwrap().unwrap().value, *key, "found on the old owner");
    }
    for key in &absent {
        assert_eq!(pool.get(key).unwrap(), None);
    }
    let counters = pool.counters();
    assert_eq!(counters.migrated as usize, moved.len(), "every stored key was asked for and copied");
    // At a false-positive rate of 1e-4, essentially every absent key skips the old owner.
    assert!(
        counters.digest_skips as usize >= absent.len() - 1,
        "{} of {}",
        counters.digest_skips,
        absent.len()
    );
}

#[test]
fn a_pool_follows_the_provisioners_state_file() {
    use shoal_client::provisioning::{State, Transition};
    use std::time::SystemTime;
    let servers: Vec<Server> = (0..3).map(|i| Server::shoal(&format!("pool-follow-{i}"), 0, &[])).collect();
    let addresses: Vec<String> = servers.iter().map(Server::address).collect();
    let mut pool = Pool::new(&addresses, options(Hashing::Proteus)).unwrap();
    let dir = std::env::temp_dir().join(format!("shoal-pool-follow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.json");
    pool.follow_provisioning(&path).unwrap();
    assert_eq!(pool.active(), None, "no file: nothing changes");
    // `from`: a transition from that count, lasting a minute.
    let state = |active, from: Option<usize>| State {
        servers: addresses.clone(),
        active,
        transition: from.map(|from| Transition { from, until: SystemTime::now() + Duration::from_secs(60) }),
    };
    // A first look: the file's count, no transition.
    state(3, None).save(&path).unwrap();
    pool.follow_provisioning(&path).unwrap();
    assert_eq!(pool.active(), Some(shoal_client::Active { now: 3, before: None }));
    let keys = keys(200);
    let items: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (k.as_slice(), k.as_slice())).collect();
    assert!(pool.set_many(&items, 0, 0).unwrap().is_empty());
    // The provisioner turns server 3 off: the pool starts the same transition.
    state(2, Some(3)).save(&path).unwrap();
    pool.follow_provisioning(&path).unwrap();
    assert_eq!(pool.active(), Some(shoal_client::Active { now: 2, before: Some(3) }));
    assert_eq!(pool.get_many(&refs(&keys)).unwrap().len(), keys.len(), "moved keys read from server 3");
    assert!(pool.counters().migrated > 0);
    pool.follow_provisioning(&path).unwrap();
    assert_eq!(pool.active().unwrap().before, Some(3), "unchanged while the file's transition lasts");
    // The transition ends in the file: it ends in the pool.
    state(2, None).save(&path).unwrap();
    pool.follow_provisioning(&path).unwrap();
    assert_eq!(pool.active(), Some(shoal_client::Active { now: 2, before: None }));
    // A file for other servers, or damaged, is an error that changes nothing.
    State { servers: vec!["127.0.0.1:1".into()], active: 1, transition: None }.save(&path).unwrap();
    assert!(
        matches!(pool.follow_provisioning(&path), Err(Error::Provisioning(m)) if m.contains("not this pool's"))
    );
    std::fs::write(&path, "{").unwrap();
    assert!(matches!(pool.follow_provisioning(&path), Err(Error::Provisioning(_))));
    assert_eq!(pool.active(), Some(shoal_client::Active { now: 2, before: None }));
    std::fs::remove_dir_all(&dir).unwrap();
}
