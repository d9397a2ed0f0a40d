//! End to end: `shoal bench load` and `fill` against a real memcached, started on loopback
//! by each test and killed when it ends. Where memcached is not installed the tests say so
//! and pass (install it with `apt-get install memcached`).

use clap::Parser;
use shoal_bench::fill::{run_fill, FillOptions, FillStop};
use shoal_bench::load::{run_load, LoadOptions, LoadReport};
use shoal_bench::ycsb::{run_ycsb, YcsbOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A memcached process, killed on drop.
struct Memcached {
    child: Child,
    /// `127.0.0.1:<port>`, or the unix socket path.
    address: String,
    scratch: PathBuf,
}

const MEMCACHED: &str = "/usr/bin/memcached";

impl Memcached {
    /// Starts memcached with one worker thread and `memory_mb` of memory, on an ephemeral
    /// loopback port, or on a unix socket when `unix` is set; `None` if it is not installed.
    fn start(test: &str, memory_mb: u32, unix: bool) -> Option<Self> {
        if !Path::new(MEMCACHED).exists() {
            eprintln!("SKIPPED {test}: {MEMCACHED} is not installed (apt-get install memcached)");
            return None;
        }
        let scratch = std::env::temp_dir().join(format!("shoal-bench-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        let port_file = scratch.join("ports");
        let socket = scratch.join("memcached.sock");
        let mut command = Command::new(MEMCACHED);
        command.args(["-U", "0", "-t", "1", "-m", &memory_mb.to_string()]);
        if unix {
            command.arg("-s").arg(&socket);
        } else {
            command.args(["-l", "127.0.0.1", "-p", "-1"]).env("MEMCACHED_PORT_FILENAME", &port_file);
        }
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            command.args(["-u", "root"]);
        }
        let child = command.stdout(Stdio::null()).spawn().expect("memcached starts");
        let mut server = Memcached { child, address: String::new(), scratch };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.address.is_empty() {
            assert!(Instant::now() < deadline, "memcached did not start listening");
            std::thread::sleep(Duration::from_millis(10));
            if unix {
                if socket.exists() {
                    server.address = socket.display().to_string();
                }
            } else if let Ok(ports) = std::fs::read_to_string(&port_file) {
                if let Some(port) = ports.lines().find_map(|line| line.strip_prefix("TCP INET: ")) {
                    server.address = format!("127.0.0.1:{port}");
                }
            }
        }
        Some(server)
    }

    fn load(&self, args: &[&str]) -> LoadReport {
        let argv = ["load", "--server", &self.address].into_iter().chain(args.iter().copied());
        run_load(&LoadOptions::try_parse_from(argv).unwrap()).unwrap()
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

#[test]
fn prefilled_multigets_over_threads_and_pipelines_all_hit() {
    let Some(memcached) = Memcached::start("multiget", 64, false) else { return };
    let report = memcached.load(&[
        "--prefill",
        "--keys",
        "1000",
        "--get-ratio",
        "1",
        "--multiget",
        "10",
        "--pipeline",
        "4",
        "--connections",
        "4",
        "--threads",
        "2",
        "--requests",
        "2000",
    ]);
    let tally = &report.tally;
    assert_eq!((tally.gets, tally.sets, tally.errors), (2000, 0, 0));
    assert_eq!((tally.hits, tally.misses), (20_000, 0));
    assert!(report.server_cpu_us_per_request().is_some_and(|us| us > 0.0), "{report}");
    let latency = tally.latency();
    assert!(latency.p50 > 0.0 && latency.p50 <= latency.p99 && latency.p99 <= latency.max, "{latency:?}");
    assert_eq!(report.to_json()["hits"], 20_000);
}

#[test]
fn meta_protocol_mix_counts_every_key_once() {
    let Some(memcached) = Memcached::start("meta", 64, false) else { return };
    let report = memcached.load(&[
        "--protocol",
        "meta",
        "--keys",
        "500",
        "--get-ratio",
        "0.5",
        "--multiget",
        "3",
        "--distribution",
        "zipf",
        "--value-size",
        "10-2000",
        "--duration",
        "0.5",
    ]);
    let tally = &report.tally;
    assert!(tally.gets > 100 && tally.sets > 100, "{report}");
    assert_eq!(tally.errors, 0);
    assert_eq!(tally.hits + tally.misses, tally.gets * 3);
    assert!(tally.hits > 0, "sets of zipf-popular keys are read back");
}

#[test]
fn open_loop_keeps_to_its_rate() {
    let Some(memcached) = Memcached::start("open-loop", 64, false) else { return };
    let report = memcached.load(&[
        "--rate",
        "2000",
        "--duration",
        "1",
        "--connections",
        "2",
        "--pipeline",
        "8",
        "--get-ratio",
        "0.9",
    ]);
    // Two connections take turns every 0.5 ms: 2000 requests are due within the second, and
    // each was either sent (however late) or is counted as behind schedule.
    let tally = &report.tally;
    assert_eq!(tally.requests() + tally.behind_schedule, 2000, "{report}");
    assert!(tally.behind_schedule < 200, "{report}");
    assert!(report.requests_per_second() < 2100.0, "{report}");
}

#[test]
fn unix_sockets_are_loaded_like_tcp() {
    let Some(memcached) = Memcached::start("unix", 64, true) else { return };
    let report = memcached.load(&["--requests", "500", "--get-ratio", "0"]);
    assert_eq!((report.tally.sets, report.tally.errors), (500, 0));
}

#[test]
fn fill_stops_when_memcached_starts_evicting() {
    let Some(memcached) = Memcached::start("fill", 8, false) else { return };
    let argv = ["fill", "--server", &memcached.address, "--batch", "5000", "--max-sets", "1000000"];
    let report = run_fill(&FillOptions::try_parse_from(argv).unwrap()).unwrap();
    assert_eq!(report.stop, FillStop::Evictions, "{report}");
    assert_eq!(report.limit_bytes, Some(8 << 20));
    // 8 MiB of 16-byte keys and 100-byte values (memcached's items are 160-192 bytes here).
    assert!((20_000..60_000).contains(&report.items), "{report}");
}

#[test]
fn a_tiny_ycsb_run_over_sqlite_reads_through_memcached() {
    let Some(memcached) = Memcached::start("ycsb", 64, false) else { return };
    let sqlite = memcached.scratch.join("ycsb.sqlite");
    let argv = [
        "ycsb",
        "--load",
        "--cache",
        "tcp",
        "--cache-server",
        &memcached.address,
        "--sqlite",
        sqlite.to_str().unwrap(),
        "--records",
        "300",
        "--operations",
        "400",
        "--clients",
        "2",
        "--rate",
        "20000",
        "--workload",
        "read-heavy",
    ];
    let report = run_ycsb(&YcsbOptions::try_parse_from(argv).unwrap()).unwrap();
    let t = &report.tally;
    assert_eq!(t.reads + t.writes, 800);
    assert!(t.reads > 700 && t.hits > 0 && t.hits < t.reads, "{report}");
    let (atrl, datastore, cache_read, cache_write) = t.atrl_us();
    assert!(datastore > 0.0 && cache_read > 0.0 && cache_write > 0.0, "{report}");
    assert!((atrl - (datastore + cache_read + cache_write)).abs() < 1e-9);
    assert_eq!(report.to_json()["hits"], t.hits);
}
