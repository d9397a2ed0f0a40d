//! `shoal server`'s hit-ratio curves move as memcached's semantics say (issue 27): a key
//! deleted (text `delete`, meta `md`, binary delete), flushed or expired is a miss at every
//! size on its next read; and the curve's sizes are the region's own bytes, so a tenant sized
//! at the curve's cliff holds what the curve says it does (the release binary).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::{eventually, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// One connection speaking raw protocol, with what it read past the last answer.
struct Conn(TcpStream, Vec<u8>);

impl Conn {
    fn to(server: &Server) -> Conn {
        let s = TcpStream::connect(server.address()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn(s, Vec::new())
    }

    /// Sends `request` and reads the answer, up to the first `until`.
    fn ask(&mut self, request: &[u8], until: &[u8]) -> Vec<u8> {
        self.0.write_all(request).unwrap();
        self.read_until(until)
    }

    /// The next answer, up to the first `until` (answers to pipelined requests come back to
    /// back: what follows stays for the next call).
    fn read_until(&mut self, until: &[u8]) -> Vec<u8> {
        let mut buf = [0u8; 65536];
        loop {
            if let Some(at) = self.1.windows(until.len()).position(|w| w == until) {
                let rest = self.1.split_off(at + until.len());
                return std::mem::replace(&mut self.1, rest);
            }
            let n = self.0.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&self.1));
            self.1.extend_from_slice(&buf[..n]);
        }
    }

    /// A text get: whether it hit.
    fn get(&mut self, key: &str) -> bool {
        let answer = self.ask(format!("get {key}\r\n").as_bytes(), b"END\r\n");
        answer.starts_with(b"VALUE ")
    }

    fn set(&mut self, key: &str, exptime: u32) {
        let answer = self.ask(format!("set {key} 0 {exptime} 5\r\nvalue\r\n").as_bytes(), b"\r\n");
        assert_eq!(answer, b"STORED\r\n");
    }

    /// A binary-protocol delete (opcode 0x04): its status.
    fn binary_delete(&mut self, key: &str) -> u16 {
        let mut request = vec![0x80, 0x04];
        request.extend_from_slice(&(key.len() as u16).to_be_bytes());
        request.extend_from_slice(&[0, 0, 0, 0]); // extras, data type, vbucket
        request.extend_from_slice(&(key.len() as u32).to_be_bytes());
        request.extend_from_slice(&[0; 12]); // opaque, CAS
        request.extend_from_slice(key.as_bytes());
        self.0.write_all(&request).unwrap();
        let mut header = [0u8; 24];
        self.0.read_exact(&mut header).unwrap();
        let body = u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize;
        let mut rest = vec![0u8; body];
        self.0.read_exact(&mut rest).unwrap();
        u16::from_be_bytes([header[6], header[7]])
    }
}

/// `stats`' value of `name`.
fn stat(server: &Server, name: &str) -> u64 {
    let stats = String::from_utf8(server.raw(b"stats\r\n", b"END\r\n")).unwrap();
    stats.lines().find_map(|l| l.strip_prefix(&format!("STAT {name} "))?.parse().ok()).unwrap()
}

/// The `curve` answer's points, (bytes, hit ratio), for `tenant` (`None`: the default).
fn curve(server: &Server, tenant: Option<&str>) -> Vec<(u64, f64)> {
    let request = tenant.map_or("curve\r\n".to_string(), |t| format!("curve {t}\r\n"));
    let answer = String::from_utf8(server.raw(request.as_bytes(), b"END\r\n")).unwrap();
    answer
        .lines()
        .filter_map(|l| l.strip_prefix("STAT hit_ratio "))
        .map(|l| {
            let (bytes, ratio) = l.split_once(' ').unwrap();
            (bytes.parse().unwrap(), ratio.parse().unwrap())
        })
        .collect()
}

/// The hit ratio of the largest size on the default tenant's curve.
fn top(server: &Server) -> f64 {
    curve(server, None).last().unwrap().1
}

/// For 100 keys: a get (a miss), a set, a get (a hit), then `take_away` (the key goes) and a
/// get, which must be a miss: one hit in three reads. The curve, where every key is in the
/// sample, says the same at its largest size (a re-read counted as a reuse would say 2/3).
fn one_hit_in_three(test: &str, take_away: impl Fn(&Server, &mut Conn, &str)) {
    let server = Server::shoal(test, 0, &["--hit-curve", "-m", "64", "--curve-half-life", "0"]);
    let mut c = Conn::to(&server);
    for i in 0..100 {
        let key = format!("key:{i}");
        assert!(!c.get(&key));
        c.set(&key, 0);
        assert!(c.get(&key));
        take_away(&server, &mut c, &key);
        assert!(!c.get(&key), "{test}: {key} is gone");
    }
    assert_eq!((stat(&server, "cmd_get"), stat(&server, "get_hits")), (300, 100));
    let top = top(&server);
    assert!((top - 1.0 / 3.0).abs() < 0.005, "{test}: the curve's top is {top}, the server hit 1/3");
}

#[test]
fn a_text_delete_makes_the_next_read_a_miss_at_every_size() {
    one_hit_in_three("curve-delete", |_, c, key| {
        assert_eq!(c.ask(format!("delete {key}\r\n").as_bytes(), b"\r\n"), b"DELETED\r\n");
    });
}

#[test]
fn a_meta_delete_makes_the_next_read_a_miss_at_every_size() {
    one_hit_in_three("curve-md", |_, c, key| {
        assert_eq!(c.ask(format!("md {key}\r\n").as_bytes(), b"\r\n"), b"HD\r\n");
    });
}

#[test]
fn a_binary_delete_makes_the_next_read_a_miss_at_every_size() {
    // A connection speaks the protocol of its first byte: the binary delete goes on its own.
    one_hit_in_three("curve-binary-delete", |server, _, key| {
        assert_eq!(Conn::to(server).binary_delete(key), 0)
    });
}

#[test]
fn flush_all_makes_the_next_read_a_miss_at_every_size() {
    one_hit_in_three("curve-flush", |_, c, _| {
        assert_eq!(c.ask(b"flush_all\r\n", b"\r\n"), b"OK\r\n");
    });
}

#[test]
fn an_expired_item_makes_the_next_read_a_miss_at_every_size() {
    // Not aged (the reads before the wait would weigh less than those after).
    let server = Server::shoal("curve-expiry", 0, &["--hit-curve", "-m", "64", "--curve-half-life", "0"]);
    let mut c = Conn::to(&server);
    let keys: Vec<String> = (0..100).map(|i| format!("key:{i}")).collect();
    for key in &keys {
        assert!(!c.get(key));
        c.set(key, 2);
        assert!(c.get(key));
    }
    // Past every item's two seconds, by the server's own clock.
    let expired_at = stat(&server, "time") + 3;
    assert!(eventually(30, || stat(&server, "time") >= expired_at), "the server's clock moves");
    for key in &keys {
        assert!(!c.get(key), "{key} expired");
    }
    assert_eq!((stat(&server, "cmd_get"), stat(&server, "get_hits")), (300, 100));
    let top = top(&server);
    assert!((top - 1.0 / 3.0).abs() < 0.005, "the curve's top is {top}, the server hit 1/3");
}

/// A scan over `keys` keys of 600-byte values, `passes` times, look-aside (a get, then a set
/// after its miss), pipelined; the hits of the last pass over its reads.
fn scan(c: &mut Conn, keys: usize, passes: usize) -> f64 {
    let value = vec![b'v'; 600];
    let mut last = 0.0;
    for _ in 0..passes {
        let mut hits = 0;
        for chunk in (0..keys).collect::<Vec<_>>().chunks(500) {
            let mut request = Vec::new();
            for i in chunk {
                request.extend_from_slice(format!("get scan:{i}\r\n").as_bytes());
            }
            c.0.write_all(&request).unwrap();
            let mut missed = Vec::new();
            for i in chunk {
                // One answer at a time: a hit's value is 'v's, so its END is the answer's end.
                let answer = c.read_until(b"END\r\n");
                if answer.starts_with(b"VALUE ") {
                    hits += 1;
                } else {
                    missed.push(*i);
                }
            }
            let mut sets = Vec::new();
            for i in missed {
                sets.extend_from_slice(format!("set scan:{i} 0 0 {} noreply\r\n", value.len()).as_bytes());
                sets.extend_from_slice(&value);
                sets.extend_from_slice(b"\r\n");
            }
            c.0.write_all(&sets).unwrap();
        }
        last = hits as f64 / keys as f64;
    }
    last
}

#[test]
fn a_tenant_sized_at_its_curves_cliff_holds_its_scan() {
    let dir = std::env::temp_dir().join(format!("shoal-curve-cliff-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tenants = dir.join("tenants.toml");
    std::fs::write(
        &tenants,
        "default = \"scan\"\n[[tenant]]\nname = \"scan\"\nmin_mb = 2\nmax_mb = 40\nsize_mb = 40\n",
    )
    .unwrap();
    let server = Server::shoal("curve-cliff", 0, &["-m", "40", "--tenants", tenants.to_str().unwrap()]);
    let mut c = Conn::to(&server);
    // 30 000 items of about 620 bytes: some 18 MiB of items, in a tenant of 40 MiB.
    let keys = 30_000;
    assert!(scan(&mut c, keys, 3) > 0.99, "40 MiB holds the scan");
    let points = curve(&server, Some("scan"));
    let full = points.last().unwrap().1;
    let cliff = points.iter().find(|p| p.1 >= full / 2.0).unwrap().0;
    // 30 000 items of 624 bytes as the region lays them out: 17.85 MiB.
    assert!((17 * MIB..19 * MIB).contains(&cliff), "the curve's cliff at {} MiB", cliff as f64 / MIB as f64);
    // Sized at the curve's cliff (in whole segments), the tenant holds every key: a pass hits.
    let at = cliff.div_ceil(MIB) * MIB;
    let resize = |bytes: u64| {
        let answer = server.raw(format!("tenant_memlimit scan {bytes}\r\n").as_bytes(), b"\r\n");
        assert_eq!(answer, b"OK\r\n", "{}", String::from_utf8_lossy(&answer));
    };
    resize(at);
    let hits = scan(&mut c, keys, 3);
    eprintln!("cliff {} MiB: sized {} MiB, a pass hits {hits}", cliff as f64 / MIB as f64, at / MIB);
    assert!(hits > 0.98, "at the cliff ({} MiB) a pass hits {hits}", at / MIB);
    // Two segments under it, the scan no longer fits: the cliff is no further either. (The
    // curve's cliff is estimated from a sample the region's random seed draws, so it may sit
    // up to a segment past the items' true 17.85 MiB: one segment under it can still hold them.)
    resize(at - 2 * MIB);
    let hits = scan(&mut c, keys, 3);
    assert!(hits < 0.5, "under the cliff ({} MiB) a pass hits {hits}", at / MIB - 2);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
