//! Reads through shared memory against a real `shoal server`: the same answers as the network,
//! by the server's clock, across restarts and replacements, counted at the server.

mod common;

use common::{eventually, Server};
use shoal_client::{Client, Options, Stored};

fn local(server: &Server) -> Client {
    let mut c = Client::connect(&server.address(), Options::default()).unwrap();
    assert!(c.is_local(), "a client on the server's host reads locally");
    c
}

fn network(server: &Server) -> Client {
    let mut c = Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    assert!(!c.is_local());
    c
}

/// A small deterministic generator (xorshift), so a failing sequence can be replayed.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn a_local_and_a_network_client_see_the_same_answers() {
    let server = Server::shoal("differential", 0, &["-m", "64"]);
    let (mut near, mut far) = (local(&server), network(&server));
    let mut dice = Dice(0x5eed_1234_abcd);
    let keys: Vec<Vec<u8>> = (0..40).map(|i| format!("key:{i}").into_bytes()).collect();
    for step in 0..4000 {
        let key = &keys[dice.roll(keys.len() as u64) as usize];
        let value = format!("v{step}").into_bytes();
        // Writes go through either client (both write over the network).
        let writer = if dice.roll(2) == 0 { &mut near } else { &mut far };
        match dice.roll(9) {
            0 | 1 => {
                let _ = writer.set(key, &value, step as u32, 0).unwrap();
            }
            2 => {
                let _ = writer.add(key, &value, 1, 0).unwrap();
            }
            3 => {
                let _ = writer.replace(key, &value, 2, 0).unwrap();
            }
            4 => {
                let _ = writer.append(key, b"+").unwrap();
            }
            5 => {
                let _ = writer.delete(key).unwrap();
            }
            6 => {
                let _ = writer.incr(key, 3).unwrap_or(None);
            }
            7 => {
                if let Some(item) = writer.get(key).unwrap() {
                    let cas = if dice.roll(2) == 0 { item.cas } else { item.cas + 1 };
                    let _ = writer.cas(key, b"swapped", 7, 0, cas).unwrap();
                }
            }
            _ => {
                let _ = writer.touch(key, 1000).unwrap();
            }
        }
        assert_eq!(
            near.get(key).unwrap(),
            far.get(key).unwrap(),
            "step {step}, key {}",
            String::from_utf8_lossy(key)
        );
        if step % 100 == 0 {
            let all: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            assert_eq!(near.get_many(&all).unwrap(), far.get_many(&all).unwrap(), "step {step}");
        }
    }
    assert!(near.is_local());
}

#[test]
fn expiry_and_delayed_flush_follow_the_servers_clock() {
    let server = Server::shoal("clock", 0, &["--test-mode"]);
    let mut c = local(&server);
    assert_eq!(c.set(b"soon", b"1", 0, 100).unwrap(), Stored::Stored);
    assert_eq!(c.set(b"later", b"1", 0, 0).unwrap(), Stored::Stored);
    assert!(c.get(b"soon").unwrap().is_some());
    server.raw(b"debugtime 101\r\n", b"\r\n");
    assert!(eventually(30, || c.get(b"soon").unwrap().is_none()), "expired by the server's clock");
    c.flush_all(Some(10)).unwrap();
    assert!(c.get(b"later").unwrap().is_some(), "a delayed flush has not happened yet");
    server.raw(b"debugtime 11\r\n", b"\r\n");
    assert!(
        eventually(30, || c.get(b"later").unwrap().is_none()),
        "flushed when the server's clock got there"
    );
    assert!(c.is_local());
}

#[test]
fn local_hits_count_in_the_servers_stats() {
    let server = Server::shoal("stats", 0, &[]);
    let mut c = local(&server);
    c.set(b"k", b"v", 0, 0).unwrap();
    let count = |c: &mut Client, name: &str| -> u64 {
        c.stats(None).unwrap().into_iter().find(|(n, _)| n == name).unwrap().1.parse().unwrap()
    };
    let (hits, misses) = (count(&mut c, "get_hits"), count(&mut c, "get_misses"));
    for _ in 0..500 {
        assert!(c.get(b"k").unwrap().is_some());
        assert!(c.get(b"absent").unwrap().is_none());
    }
    assert!(eventually(30, || count(&mut c, "get_hits") == hits + 500), "hits folded in");
    assert_eq!(count(&mut c, "get_misses"), misses + 500);
}

#[test]
fn a_warm_restart_is_noticed_and_reads_stay_correct() {
    let region = std::env::temp_dir().join(format!("shoal-client-warm-{}.region", std::process::id()));
    let region_arg = region.to_str().unwrap();
    let server = Server::shoal("warm", 0, &["-e", region_arg, "-m", "64"]);
    let port = server.port;
    let mut c = local(&server);
    c.set(b"kept", b"1", 0, 0).unwrap();
    server.stop_with("USR1");
    // The region says no writer is attached: reads go back to the server, which is gone.
    assert!(c.get(b"kept").is_err());
    let server = Server::shoal("warm2", port, &["-e", region_arg, "-m", "64"]);
    assert_eq!(c.get(b"kept").unwrap().map(|i| i.value), Some(b"1".to_vec()));
    assert!(c.is_local(), "local again, on the restarted server's generation");
    c.set(b"new", b"2", 0, 0).unwrap();
    assert!(c.get(b"new").unwrap().is_some());
    drop(server);
    let _ = std::fs::remove_file(&region);
}

#[test]
fn stock_memcached_replacing_the_server_gets_network_reads() {
    let server = Server::shoal("replaced", 0, &[]);
    let port = server.port;
    let mut c = local(&server);
    c.set(b"k", b"from shoal", 0, 0).unwrap();
    server.stop_with("TERM");
    let memcached = Server::memcached("replacement", port);
    let _ = c.get(b"k"); // may fail once: the old connection is gone
    assert_eq!(c.get(b"k").unwrap(), None, "memcached's (empty) answer, never the old region's");
    assert!(!c.is_local());
    c.set(b"k", b"from memcached", 0, 0).unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"from memcached");
    drop(memcached);
}

#[test]
fn memcached_gets_every_call_over_the_network() {
    let server = Server::memcached("memcached", 0);
    let mut c = Client::connect(&server.address(), Options::default()).unwrap();
    assert!(!c.is_local(), "memcached answers shm with ERROR");
    assert_eq!(c.set(b"a", b"1", 5, 0).unwrap(), Stored::Stored);
    assert_eq!(c.add(b"a", b"2", 0, 0).unwrap(), Stored::NotStored);
    let item = c.get(b"a").unwrap().unwrap();
    assert_eq!((item.value.as_slice(), item.flags), (&b"1"[..], 5));
    assert_eq!(c.cas(b"a", b"3", 0, 0, item.cas + 1).unwrap(), Stored::Exists);
    assert_eq!(c.cas(b"a", b"3", 0, 0, item.cas).unwrap(), Stored::Stored);
    assert_eq!(c.incr(b"n", 1).unwrap(), None);
    assert!(c.version().unwrap().starts_with("1."));
}

#[test]
fn a_write_through_the_mapping_faults_in_the_client_only() {
    if std::env::var_os("SHOAL_WRITE_THROUGH_REGION").is_some() {
        return write_through_the_region(); // the child's part
    }
    let server = Server::shoal("readonly", 0, &[]);
    let mut c = local(&server);
    c.set(b"k", b"safe", 0, 0).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_write_through_the_mapping_faults_in_the_client_only", "--nocapture"])
        .env("SHOAL_WRITE_THROUGH_REGION", server.address())
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(child.status.signal(), Some(libc::SIGSEGV), "{}", String::from_utf8_lossy(&child.stderr));
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"safe", "the server and its items are unharmed");
    assert_eq!(c.set(b"k", b"still serving", 0, 0).unwrap(), Stored::Stored);
}

/// Finds this process's mapping of the region in /proc/self/maps and writes to it.
fn write_through_the_region() {
    let address = std::env::var("SHOAL_WRITE_THROUGH_REGION").unwrap();
    let mut c = Client::connect(&address, Options::default()).unwrap();
    let path = c.local_region_path().expect("local");
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let line = maps.lines().find(|l| l.ends_with(path.to_str().unwrap())).expect("the region is mapped");
    let mut fields = line.split_whitespace();
    let start = usize::from_str_radix(fields.next().unwrap().split('-').next().unwrap(), 16).unwrap();
    assert_eq!(fields.next(), Some("r--s"), "mapped read-only, shared");
    // SAFETY: deliberately not: this child exists to show that the write faults.
    unsafe { std::ptr::write_volatile(start as *mut u8, 0xff) };
    unreachable!("the write through a PROT_READ mapping went through");
}

/// A server that answers `shm` with `answer`, and every `gets` with `END`: what a client must
/// do with a region it cannot use.
fn fake_server(answer: String) -> String {
    let shm = format!("{answer}\r\n").into_bytes();
    common::scripted_server(move |_, line| {
        Some(if line == "shm" { shm.clone() } else { b"END\r\n".to_vec() })
    })
    .0
}

#[test]
fn a_region_that_cannot_be_used_means_network_reads() {
    let server = Server::shoal("unusable", 0, &[]);
    let shm = String::from_utf8(server.raw(b"shm\r\n", b"\r\n")).unwrap();
    let (path, offset, cookie) = {
        let f: Vec<&str> = shm.trim_end().split(' ').collect();
        (f[1].to_string(), f[2].parse::<u64>().unwrap(), f[3].parse::<u64>().unwrap())
    };
    for (why, answer) in [
        ("a cookie that does not match", format!("SHM {path} {offset} {}", cookie ^ 1)),
        ("another layout's cookie offset", format!("SHM {path} {} {cookie}", offset + 8)),
        ("a path that cannot be opened", format!("SHM /nonexistent/region {offset} {cookie}")),
        ("a file that is not a region", format!("SHM /etc/hostname {offset} {cookie}")),
        ("a garbled answer", "SHM".to_string()),
    ] {
        let mut c = Client::connect(&fake_server(answer), Options::default()).unwrap();
        assert!(!c.is_local(), "{why}");
        assert_eq!(c.get(b"k").unwrap(), None, "{why}: answered over the network");
    }
}

/// A look-aside workload (get; set on a miss) over skewed keys on a server too small for
/// them all; returns the hit ratio.
fn look_aside_hit_ratio(c: &mut Client) -> f64 {
    let mut dice = Dice(0x00c0_ffee_1234_5678);
    let value = vec![b'v'; 2000];
    let (mut hits, rounds) = (0u32, 40_000u32);
    for _ in 0..rounds {
        // Skewed: the cube of a uniform draw puts most reads on the low keys.
        let u = dice.roll(1 << 20) as f64 / (1 << 20) as f64;
        let key = format!("key:{}", (u * u * u * 40_000.0) as u32);
        match c.get(key.as_bytes()).unwrap() {
            Some(_) => hits += 1,
            None => drop(c.set(key.as_bytes(), &value, 0, 0).unwrap()),
        }
    }
    f64::from(hits) / f64::from(rounds)
}

#[test]
fn reads_through_shared_memory_keep_the_hit_ratio_of_network_reads() {
    let small = ["-m", "16"];
    let over_network = look_aside_hit_ratio(&mut network(&Server::shoal("ratio-net", 0, &small)));
    let server = Server::shoal("ratio-local", 0, &small);
    let through_memory = look_aside_hit_ratio(&mut local(&server));
    let evictions: u64 = server
        .raw(b"stats\r\n", b"END\r\n")
        .split(|&b| b == b'\n')
        .find_map(|l| std::str::from_utf8(l.strip_prefix(b"STAT evictions ")?).ok()?.trim().parse().ok())
        .unwrap();
    eprintln!(
        "hit ratio: network {over_network:.4}, shared memory {through_memory:.4}, evictions {evictions}"
    );
    assert!(evictions > 0, "the workload does not fit, so eviction decides the hit ratio");
    assert!(
        (over_network - through_memory).abs() < 0.02,
        "network {over_network}, shared memory {through_memory}"
    );
}

#[test]
fn a_region_this_user_may_not_read_means_network_reads() {
    if let Ok(address) = std::env::var("SHOAL_READ_AS_NOBODY") {
        // The child's part, running as nobody: the region file is root's, mode 0600.
        let mut c = Client::connect(&address, Options::default()).unwrap();
        assert!(!c.is_local(), "a region this user may not read is not used");
        assert_eq!(c.get(b"k").unwrap().unwrap().value, b"over the network");
        return;
    }
    if std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).ok() != Some(0) {
        eprintln!("SKIPPED: needs root to run a client as another user (CI runs as root)");
        return;
    }
    let server = Server::shoal("permissions", 0, &[]);
    let mut owner = local(&server);
    owner.set(b"k", b"over the network", 0, 0).unwrap();
    // nobody may not be able to reach this checkout (under /root, say): run a copy from /tmp.
    let copy = std::env::temp_dir().join(format!("shoal-client-as-nobody-{}", std::process::id()));
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let child = std::process::Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(&copy)
        .args(["--exact", "a_region_this_user_may_not_read_means_network_reads", "--nocapture"])
        .env("SHOAL_READ_AS_NOBODY", server.address())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&copy);
    assert!(
        child.status.success(),
        "{}{}",
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
}

#[test]
fn a_server_killed_outright_is_noticed_within_a_connection_check() {
    let server = Server::shoal("killed", 0, &[]);
    let mut c = local(&server);
    c.set(b"k", b"v", 0, 0).unwrap();
    server.stop_with("KILL"); // no detach: the region file stays, unchanged, clock frozen
    std::thread::sleep(shoal_client::local::CONNECTION_CHECK * 2);
    assert!(c.get(b"k").is_err(), "a dead server's region is not read");
}

#[test]
fn without_cas_local_reads_show_cas_zero_like_the_server() {
    let server = Server::shoal("no-cas", 0, &["-C"]);
    let (mut near, mut far) = (local(&server), network(&server));
    near.set(b"k", b"v", 0, 0).unwrap();
    assert_eq!(near.get(b"k").unwrap().unwrap().cas, 0);
    assert_eq!(near.get(b"k").unwrap(), far.get(b"k").unwrap());
}

#[test]
fn a_unix_socket_server_is_read_locally_too() {
    let dir = std::env::temp_dir().join(format!("shoal-client-unix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("shoal.sock");
    let mut child = std::process::Command::new(common::shoal_bin())
        .args(["server", "-U", "0", "-s"])
        .arg(&socket)
        .spawn()
        .unwrap();
    // The socket's file appears at bind, before the server listens: a connect in between is
    // refused, so wait for a connect that succeeds (CI once connected in that gap).
    let connect = || Client::connect(socket.to_str().unwrap(), Options::default());
    assert!(eventually(60, || connect().is_ok()), "the server listens on its socket");
    let mut c = connect().unwrap();
    assert!(c.is_local());
    c.set(b"k", b"over a unix socket", 0, 0).unwrap();
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"over a unix socket");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_frozen_server_stops_local_reads_once_its_clock_stands_still() {
    let server = Server::shoal("frozen", 0, &[]);
    let options = Options { io_timeout: Some(std::time::Duration::from_millis(300)), ..Options::default() };
    let mut c = Client::connect(&server.address(), options).unwrap();
    c.set(b"k", b"v", 0, 0).unwrap();
    server.pause();
    // The connection stays open and the region unchanged, but the clock stops moving: within
    // STALE_CLOCK (and the second the clock was in) reads leave the region for the network,
    // which times out.
    let gave_up = eventually(shoal_client::local::STALE_CLOCK.as_secs() + 3, || c.get(b"k").is_err());
    server.resume();
    assert!(gave_up, "a server that stopped moving its clock is not read locally forever");
    assert_eq!(c.get(b"k").unwrap().unwrap().value, b"v", "and once it runs again, reads work");
}

/// How many of `keys` the server has marked read (`mg <key> h`: `h1`), asked over the network
/// (which marks them too, so each key is asked once).
fn marked_read(c: &mut Client, keys: &[String]) -> usize {
    let hit_before = |c: &mut Client, key: &str| c.meta(&format!("mg {key} h"), None).unwrap().unwrap().line;
    keys.iter().filter(|key| hit_before(c, key).contains(" h1")).count()
}

#[test]
fn a_burst_of_local_hits_on_distinct_keys_marks_every_item_read() {
    // More distinct hits than the old ring (4096 entries) held, read as fast as the client can:
    // well within one fold interval (100 ms) on this machine.
    const KEYS: usize = 50_000;
    let server = Server::shoal("marks", 0, &["-m", "64"]);
    let (mut near, mut far) = (local(&server), network(&server));
    let keys: Vec<String> = (0..KEYS).map(|i| format!("burst-{i}")).collect();
    for key in &keys {
        assert_eq!(far.set(key.as_bytes(), b"v", 0, 0).unwrap(), Stored::Stored);
    }
    let started = std::time::Instant::now();
    for key in &keys {
        assert!(near.get(key.as_bytes()).unwrap().is_some());
    }
    let took = started.elapsed();
    assert!(near.is_local(), "every read came from shared memory");
    std::thread::sleep(std::time::Duration::from_millis(300)); // at least two folds
    let marked = marked_read(&mut far, &keys);
    eprintln!("{KEYS} distinct local hits in {took:?}: {marked} marked read");
    assert_eq!(marked, KEYS, "every item read locally is marked read ({KEYS} hits in {took:?})");
}
