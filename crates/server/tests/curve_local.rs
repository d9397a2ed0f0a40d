//! Reads clients serve themselves through shared memory reach the tenants' hit-ratio curves
//! (issue 27), against the release `shoal server` and the real client: a local read of a key in
//! the curve's sample moves the curve as the same read over the network does, a read of a key
//! outside it stays out of the sample, and records no client writes are counted and dropped
//! without moving the curve.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::{eventually, Server};
use shoal_client::{Client, Options};
use shoal_curves::KeyHash;
use shoal_region::hints::{HintsWriter, SampledRead};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The `curve` answer's lines, without `STAT `.
fn curve(server: &Server) -> Vec<String> {
    let answer = String::from_utf8(server.raw(b"curve\r\n", b"END\r\n")).unwrap();
    answer.lines().filter_map(|l| l.strip_prefix("STAT ")).map(str::to_string).collect()
}

/// The `curve` answer's value of `name` (`rate`, `tracked`, `local_sampled`, …).
fn curve_stat(server: &Server, name: &str) -> f64 {
    curve(server).iter().find_map(|l| l.strip_prefix(&format!("{name} "))?.parse().ok()).unwrap()
}

/// The curve's points alone.
fn points(server: &Server) -> Vec<String> {
    curve(server).into_iter().filter(|l| l.starts_with("hit_ratio ")).collect()
}

fn client(server: &Server, local: bool) -> Client {
    let mut c = Client::connect(&server.address(), Options { local, ..Options::default() }).unwrap();
    assert_eq!(c.is_local(), local);
    c
}

/// The server's sampling threshold (its `curve` answer's rate, exact: a power-of-two ratio).
fn threshold(server: &Server) -> u32 {
    (curve_stat(server, "rate") * (1u32 << 24) as f64) as u32
}

/// Waits until the server has published its sampling threshold in the region `c` reads.
fn threshold_published(server: &Server, c: &mut Client) {
    let region = shoal_region::Reader::open(c.local_region_path().unwrap()).unwrap();
    let wanted = threshold(server);
    assert!(eventually(30, || region.curve_threshold() == wanted), "the server publishes {wanted}");
}

/// For 100 keys, look-aside: a get (a miss), a set, a get (a hit), a delete, a get (a miss) —
/// the gets through `reader`, the writes through `writer`.
fn one_hit_in_three(reader: &mut Client, writer: &mut Client) {
    for i in 0..100 {
        let key = format!("key:{i}");
        assert!(reader.get(key.as_bytes()).unwrap().is_none());
        writer.set(key.as_bytes(), b"value", 0, 0).unwrap();
        assert!(reader.get(key.as_bytes()).unwrap().is_some());
        assert!(writer.delete(key.as_bytes()).unwrap());
        assert!(reader.get(key.as_bytes()).unwrap().is_none());
    }
}

#[test]
fn local_reads_move_the_curve_exactly_as_network_reads() {
    let args = ["--hit-curve", "-m", "64", "--curve-half-life", "0"];
    let (near, far) =
        (Server::shoal("curve-local-reads", 0, &args), Server::shoal("curve-network-reads", 0, &args));
    let mut local = client(&near, true);
    threshold_published(&near, &mut local);
    one_hit_in_three(&mut local, &mut client(&near, false));
    let mut network = client(&far, false);
    one_hit_in_three(&mut network, &mut client(&far, false));
    // Every key is in the sample (fewer than the 12 288 it holds): 300 local reads reach the curve, each
    // before the write that followed it — the fill gives the missed key its size, the delete
    // takes the hit key away so that its next read is a miss at every size.
    assert!(eventually(30, || curve_stat(&near, "local_sampled") == 300.0), "{:?}", curve(&near));
    assert_eq!(points(&near), points(&far), "the same curve from local reads as from network reads");
    let top = points(&near).last().unwrap().rsplit(' ').next().unwrap().parse::<f64>().unwrap();
    assert!((top - 1.0 / 3.0).abs() < 0.005, "one hit in three reads: {top}");
    for name in ["local_outside", "local_refused", "local_lost"] {
        assert_eq!(curve_stat(&near, name), 0.0, "{name}");
    }
}

/// Reads 13 000 keys over the network and flushes: the sample overflowed once, so the threshold
/// is below its top, and nothing is tracked any more.
fn lower_the_threshold(server: &Server) {
    let mut s = TcpStream::connect(server.address()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = Vec::new();
    for i in 0..13_000 {
        request.extend_from_slice(format!("get warm:{i}\r\n").as_bytes());
    }
    request.extend_from_slice(b"flush_all\r\n");
    s.write_all(&request).unwrap();
    let mut lines = BufReader::new(s).lines();
    assert!(lines.any(|l| l.unwrap() == "OK"), "flush_all answered");
    assert!(curve_stat(server, "rate") < 1.0);
    assert_eq!(curve_stat(server, "tracked"), 0.0);
}

/// The curve's points and tracked count once two readings a second apart agree: on a loaded
/// machine the server may still be folding earlier traffic when the test first looks.
fn settled_curve(server: &Server) -> (Vec<String>, f64) {
    let read = || (points(server), curve_stat(server, "tracked"));
    let mut last = read();
    for _ in 0..30 {
        std::thread::sleep(Duration::from_secs(1));
        let now = read();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the curve kept changing with no traffic: {last:?}");
}

/// The region `server` serves, read-only (for its keys' probe hashes).
fn region_of(server: &Server) -> shoal_region::Reader {
    shoal_region::Reader::open(client(server, true).local_region_path().unwrap()).unwrap()
}

/// A key in the sample under `threshold` (or out of it), by `region`'s probe hash, which the
/// curve samples by.
fn key_with(region: &shoal_region::Reader, prefix: &str, threshold: u32, sampled: bool) -> String {
    (0..)
        .map(|i| format!("{prefix}:{i}"))
        .find(|k| (KeyHash::from_raw(region.hash(k.as_bytes())).spatial() < u64::from(threshold)) == sampled)
        .unwrap()
}

#[test]
fn a_local_read_of_a_sampled_key_enters_the_curve_and_of_an_unsampled_key_does_not() {
    let server =
        Server::shoal("curve-local-sample", 0, &["--hit-curve", "-m", "64", "--curve-half-life", "0"]);
    lower_the_threshold(&server);
    let (mut local, mut writer) = (client(&server, true), client(&server, false));
    threshold_published(&server, &mut local);
    let threshold = threshold(&server);
    let region = region_of(&server);
    let (inside, outside) =
        (key_with(&region, "in", threshold, true), key_with(&region, "out", threshold, false));
    writer.set(inside.as_bytes(), b"value", 0, 0).unwrap();
    writer.set(outside.as_bytes(), b"value", 0, 0).unwrap();
    let gets = |server: &Server| {
        let stats = String::from_utf8(server.raw(b"stats\r\n", b"END\r\n")).unwrap();
        stats.lines().find_map(|l| l.strip_prefix("STAT cmd_get ")?.parse::<u64>().ok()).unwrap()
    };
    let before = gets(&server);

    for _ in 0..3 {
        assert!(local.get(outside.as_bytes()).unwrap().is_some());
    }
    assert!(eventually(30, || gets(&server) == before + 3), "the reads are counted");
    assert!(eventually(30, || curve_stat(&server, "tracked") == 0.0
        && curve_stat(&server, "local_sampled") == 0.0));

    // 50 reads: the sample is the region's (its hash seed is random), so the SHARDS
    // correction for the warm reads varies by a few references from run to run; 49 reuses
    // stand well above it.
    for _ in 0..50 {
        assert!(local.get(inside.as_bytes()).unwrap().is_some());
    }
    assert!(eventually(30, || curve_stat(&server, "local_sampled") == 50.0), "{:?}", curve(&server));
    assert_eq!(curve_stat(&server, "tracked"), 1.0);
    // 49 reuses out of 50 sampled reads: hits at the smallest size that holds the item.
    let first = points(&server)[1].rsplit(' ').next().unwrap().parse::<f64>().unwrap();
    assert!(first > 0.0, "the sampled key's reuses are hits: {:?}", points(&server));
    assert_eq!(curve_stat(&server, "local_outside"), 0.0);
}

#[test]
fn records_no_client_writes_are_counted_and_dropped_without_moving_the_curve_and_unsampled_keys_stay_out() {
    let server =
        Server::shoal("curve-local-refused", 0, &["--hit-curve", "-m", "64", "--curve-half-life", "0"]);
    lower_the_threshold(&server);
    let mut writer = client(&server, false);
    writer.set(b"some", b"value", 0, 0).unwrap();
    assert!(writer.get(b"some").unwrap().is_some());
    // A client of our own making: its hints area registered by path on a raw connection.
    let mut area = HintsWriter::create().unwrap();
    let mut conn = TcpStream::connect(server.address()).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    conn.write_all(format!("shm hints {}\r\n", area.path().display()).as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(conn.try_clone().unwrap()).read_line(&mut answer).unwrap();
    assert_eq!(answer, "OK\r\n");
    let threshold = threshold(&server);
    let before = settled_curve(&server);

    let region = region_of(&server);
    let inside = region.hash(key_with(&region, "bad", threshold, true).as_bytes());
    let outside = region.hash(key_with(&region, "bad", threshold, false).as_bytes());
    for bytes in [0, 7, 12, 1 << 23] {
        // Smaller than any item, not a multiple of 8, or larger than the server's items (-I 1m).
        area.record_sampled(inside, SampledRead::Hit { bytes, expiry: 0 });
    }
    assert!(eventually(30, || curve_stat(&server, "local_refused") == 4.0), "{:?}", curve(&server));
    assert_eq!((points(&server), curve_stat(&server, "tracked")), before, "the curve did not move");

    // A key outside the sample (a client that read a threshold since lowered): a reference,
    // as its network get would be, but never in the sample.
    area.record_sampled(outside, SampledRead::Miss);
    area.record_sampled(outside, SampledRead::Hit { bytes: 64, expiry: 0 });
    assert!(eventually(30, || curve_stat(&server, "local_outside") == 2.0), "{:?}", curve(&server));
    assert_eq!(curve_stat(&server, "tracked"), before.1);
    assert_eq!(curve_stat(&server, "local_sampled"), 0.0);

    // The same client's valid record is taken.
    area.record_sampled(inside, SampledRead::Hit { bytes: 64, expiry: 0 });
    assert!(eventually(30, || curve_stat(&server, "local_sampled") == 1.0), "{:?}", curve(&server));
    assert_eq!(curve_stat(&server, "tracked"), before.1 + 1.0);
    drop(conn);
}

/// A client that reads faster than the clock thread's 100 ms drain: 200 000 sampled local
/// reads in about half a second (a scan of 10 000 keys, every one in the sample, twenty times;
/// a pause of a millisecond every 500 reads holds it under 500 000 a second, so the `curves`
/// thread, every 10 ms, has 30 ms of slack before a ring of 16 384 overflows). With the
/// queue drained only every 100 ms, more than half the records were lost and the curve showed
/// them as hits at its smallest size (0.5 there instead of 0).
#[test]
fn a_scan_read_locally_faster_than_the_clock_thread_drains_keeps_every_record() {
    const KEYS: usize = 10_000;
    const PASSES: usize = 20;
    let server =
        Server::shoal("curve-local-burst", 0, &["--hit-curve", "-m", "64", "--curve-half-life", "0"]);
    let mut fill = Vec::new();
    for i in 0..KEYS {
        fill.extend_from_slice(format!("set scan:{i} 0 0 100 noreply\r\n{}\r\n", "v".repeat(100)).as_bytes());
    }
    fill.extend_from_slice(b"mn\r\n");
    server.raw(&fill, b"MN\r\n");
    let mut local = client(&server, true);
    threshold_published(&server, &mut local);
    assert_eq!(curve_stat(&server, "rate"), 1.0, "every key in the sample");

    for pass in 0..PASSES {
        for i in 0..KEYS {
            assert!(local.get(format!("scan:{i}").as_bytes()).unwrap().is_some(), "pass {pass}: scan:{i}");
            if i % 500 == 499 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    let reads = (KEYS * PASSES) as f64;
    assert!(
        eventually(30, || curve_stat(&server, "local_sampled") + curve_stat(&server, "local_lost") == reads),
        "{:?}",
        curve(&server)
    );
    assert_eq!(curve_stat(&server, "local_lost"), 0.0, "no record lost");
    // The scan's curve: nothing at its smallest size, below the working set (a lost record,
    // counted as a reference the sample did not see, shows there as a hit: 0.5 before), and
    // every pass after the first above it.
    let ratios: Vec<f64> =
        points(&server).iter().map(|p| p.rsplit(' ').next().unwrap().parse().unwrap()).collect();
    assert!(ratios[1] < 0.01, "no hits at the smallest size: {:?}", &ratios[..8]);
    let top = *ratios.last().unwrap();
    assert!((top - 0.95).abs() < 0.001, "19 reads of 20 reuse: {top}");
}
