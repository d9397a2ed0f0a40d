//! `stats hotkeys` and the hot-key series of `/metrics`, against the release binary on
//! loopback: a seeded stream of reads finds its planted hot keys in order, every read command
//! counts and writes do not, and detection is on by default.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::{eventually, shoal_bin, Server};
use shoal_proto::{parse_hotkeys, HotKey};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One connection kept open: a request, and its answer up to a known ending.
struct Conn(TcpStream);

impl Conn {
    fn open(server: &Server) -> Conn {
        let stream = TcpStream::connect(server.address()).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Conn(stream)
    }

    /// Sends `request` and reads until the answer is `done`.
    fn exchange(&mut self, request: &[u8], done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        self.0.write_all(request).unwrap();
        let (mut answer, mut buf) = (Vec::new(), [0u8; 4096]);
        while !done(&answer) {
            let n = self.0.read(&mut buf).unwrap();
            assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
        answer
    }

    /// Sends `request` and reads the answer up to `until`.
    fn ask(&mut self, request: &[u8], until: &[u8]) -> Vec<u8> {
        self.exchange(request, |answer| answer.ends_with(until))
    }

    /// Sends `requests`, gets all, and reads their `n` answers (each ending `END\r\n`).
    fn gets(&mut self, requests: &[u8], n: usize) {
        self.exchange(requests, |answer| answer.windows(5).filter(|w| w == b"END\r\n").count() == n);
    }

    fn hotkeys(&mut self) -> Vec<HotKey> {
        let answer = self.ask(b"stats hotkeys\r\n", b"END\r\n");
        parse_hotkeys(&answer, shoal_proto::MAX_HOTKEYS).expect("a well-formed hot-key answer")
    }
}

fn keys(hot: &[HotKey]) -> Vec<String> {
    hot.iter().map(|h| String::from_utf8(h.key.clone()).unwrap()).collect()
}

/// The planted keys, hottest first; the second and third hold a quote and a backslash, which
/// `/metrics` must escape.
const PLANTED: [&str; 5] = ["hot:0", "hot\"1", "hot\\2", "hot:3", "hot:4"];

/// A seeded stream of `len` keys: the planted ones take 10, 8, 6, 4 and 2 % of it, the rest
/// is spread evenly over 1000 background keys (0.07 % each).
fn stream(seed: u64, len: usize) -> Vec<String> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 1000
    };
    (0..len)
        .map(|_| {
            let pick = next();
            let edges = [100, 180, 240, 280, 300];
            match edges.iter().position(|&edge| pick < edge) {
                Some(planted) => PLANTED[planted].to_string(),
                None => format!("bg:{}", next()),
            }
        })
        .collect()
}

fn metrics(port: u16) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

#[test]
fn a_seeded_stream_lists_its_planted_keys_in_order_in_stats_and_metrics() {
    let metrics_port = common::free_port();
    let listen = format!("127.0.0.1:{metrics_port}");
    let server = Server::shoal(
        "hotkeys-stream",
        0,
        &["-o", "hotkeys=8,hotkeys_sample=1", "--metrics-listen", &listen],
    );
    let mut c = Conn::open(&server);
    for key in PLANTED.iter().map(|k| k.to_string()).chain((0..1000).map(|i| format!("bg:{i}"))) {
        c.ask(format!("set {key} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n");
    }
    // 30 000 gets, in pipelined batches of 100.
    for batch in stream(42, 30_000).chunks(100) {
        let requests: String = batch.iter().map(|k| format!("get {k}\r\n")).collect();
        c.gets(requests.as_bytes(), batch.len());
    }
    let hot = c.hotkeys();
    assert!(hot.len() <= 8, "at most K = 8 listed: {:?}", keys(&hot));
    assert_eq!(keys(&hot[..5]), PLANTED, "the planted keys, hottest first");
    assert!(hot.windows(2).all(|w| w[0].rate >= w[1].rate) && hot[4].rate > 0.0);

    // /metrics: one series per rank, at most 10, the keys escaped.
    assert!(eventually(30, || metrics(metrics_port).contains("shoal_hotkey_requests_per_second")));
    let page = metrics(metrics_port);
    let series: Vec<&str> =
        page.lines().filter(|l| l.starts_with("shoal_hotkey_requests_per_second{")).collect();
    assert!(!series.is_empty() && series.len() <= 8, "{series:?}");
    for (rank, key) in [(1, "hot:0"), (2, r#"hot\"1"#), (3, r"hot\\2"), (4, "hot:3"), (5, "hot:4")] {
        let labels = format!("shoal_hotkey_requests_per_second{{rank=\"{rank}\",key=\"{key}\"}} ");
        let line = series
            .iter()
            .find(|l| l.starts_with(&labels))
            .unwrap_or_else(|| panic!("{labels} in {series:?}"));
        let rate: f64 = line[labels.len()..].trim().parse().unwrap();
        assert!(rate > 0.0, "{line}");
    }
}

/// A binary-protocol get of `key`, as a packet.
fn binary_get(key: &[u8]) -> Vec<u8> {
    let mut packet = vec![0x80, 0x00];
    packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
    packet.extend_from_slice(&[0, 0, 0, 0]); // extras, data type, vbucket
    packet.extend_from_slice(&(key.len() as u32).to_be_bytes());
    packet.extend_from_slice(&[0; 12]); // opaque, cas
    packet.extend_from_slice(key);
    packet
}

#[test]
fn every_read_command_counts_and_writes_do_not() {
    let server = Server::shoal("hotkeys-commands", 0, &["-o", "hotkeys=16,hotkeys_sample=1"]);
    let mut c = Conn::open(&server);
    for key in ["g", "gs", "ga", "m", "l", "b", "w"] {
        c.ask(format!("set {key} 0 0 1\r\nv\r\n").as_bytes(), b"STORED\r\n");
    }
    // Read counts 60, 50, …, 10 by command; `w` is written 100 times and read never.
    for _ in 0..60 {
        c.ask(b"get g\r\n", b"END\r\n");
    }
    for _ in 0..50 {
        c.ask(b"gets gs\r\n", b"END\r\n");
    }
    for _ in 0..40 {
        c.ask(b"gat 0 ga\r\n", b"END\r\n");
    }
    for _ in 0..30 {
        c.ask(b"mg m v\r\n", b"\r\nv\r\n");
    }
    for _ in 0..20 {
        c.ask(b"lease-get l\r\n", b"END\r\n");
    }
    let mut binary = Conn::open(&server);
    for _ in 0..10 {
        // The answer: a 24-byte header, 4 bytes of flags, the value `v`.
        let answer = binary.exchange(&binary_get(b"b"), |answer| answer.len() == 29);
        assert_eq!((answer[0], answer[28]), (0x81, b'v'));
    }
    for _ in 0..100 {
        c.ask(b"set w 0 0 1\r\nv\r\n", b"STORED\r\n");
    }
    c.ask(b"delete w\r\n", b"DELETED\r\n");
    assert_eq!(keys(&c.hotkeys()), ["g", "gs", "ga", "m", "l", "b"]);
}

#[test]
fn on_by_default_and_off_with_zero() {
    let server = Server::shoal("hotkeys-default", 0, &[]);
    let mut c = Conn::open(&server);
    c.ask(b"set only 0 0 1\r\nv\r\n", b"STORED\r\n");
    // One read in 64 is counted, at random: 5000 reads leave it no chance to be missed.
    let batch = "get only\r\n".repeat(100);
    for _ in 0..50 {
        c.gets(batch.as_bytes(), 100);
    }
    assert_eq!(keys(&c.hotkeys()), ["only"]);

    let off = Server::shoal("hotkeys-off", 0, &["-o", "hotkeys=0"]);
    let mut c = Conn::open(&off);
    c.ask(b"set only 0 0 1\r\nv\r\nget only\r\n", b"END\r\n");
    assert_eq!(c.ask(b"stats hotkeys\r\n", b"END\r\n"), b"END\r\n");
}

#[test]
fn a_bad_option_says_what_to_give() {
    for (option, says) in [("hotkeys=2000", "0 (off) to 1024"), ("hotkeys_sample=0", "N ≥ 1")] {
        let out = std::process::Command::new(shoal_bin()).args(["server", "-o", option]).output().unwrap();
        assert!(!out.status.success(), "{option} refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(option) && err.contains(says), "{option}: {err}");
    }
}
