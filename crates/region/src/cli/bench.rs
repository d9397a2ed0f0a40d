//! `shoal region bench`: cost of region operations and metadata per item.
//!
//! Rows: writer `set` and `get` (1 and 2 threads, 100 B and 1 KiB values), reader `get` from a
//! second process through a read-only mapping (pinned to another core), metadata bytes per
//! item at full memory, and reader `get` as the item count grows to 10 million. Results go to
//! `docs/BENCHMARKS.md` with this command line. The reader row runs this program again
//! (`shoal region bench --reader-child`) as its second process.

use crate::{Config, Reader, Writer};
use clap::Args;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(Args)]
pub struct BenchArgs {
    /// Region file the benchmark creates (and removes).
    #[arg(long, default_value = "/dev/shm/shoal-bench")]
    path: PathBuf,
    /// Operations per measured row.
    #[arg(long, default_value_t = 2_000_000)]
    ops: usize,
    /// Distinct keys the get/set rows use.
    #[arg(long, default_value_t = 100_000)]
    keys: usize,
    /// Items in the index-scaling run (0 skips it).
    #[arg(long, default_value_t = 10_000_000)]
    scale_items: usize,
    /// Region size in MiB for the metadata-per-item run.
    #[arg(long, default_value_t = 1024)]
    fill_mb: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Internal: run as the reader process.
    #[arg(long, hide = true)]
    reader_child: bool,
    /// Internal: value length the reader child expects.
    #[arg(long, hide = true, default_value_t = 100)]
    value_len: usize,
}

/// Keys in the reader's cache-resident row.
const HOT_KEYS: usize = 1_000;

/// 16-byte keys, as in the benchmark.
fn key(i: usize) -> [u8; 16] {
    let mut k = *b"key:000000000000";
    let mut n = i;
    for b in k[4..].iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// A cheap deterministic key sequence (xorshift), so every run touches the same keys.
struct Keys(u64);
impl Keys {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Pins the calling thread to one CPU (the server/load-generator split of a 2-core machine).
/// Failure (a machine with one CPU) just leaves the thread unpinned.
fn pin_to(cpu: usize) {
    let mut set = CpuSet::new();
    if set.set(cpu % num_cpus()).is_ok() {
        let _ = sched_setaffinity(Pid::from_raw(0), &set);
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

fn progress(label: &str, done: usize, total: usize) {
    if done.is_multiple_of((total / 50).max(1)) || done == total {
        let filled = done * 30 / total.max(1);
        eprint!("\r{label:<28} [{:<30}] {:>3}%", "#".repeat(filled), done * 100 / total.max(1));
        if done == total {
            eprintln!();
        }
        let _ = std::io::stderr().flush();
    }
}

struct Row {
    name: String,
    ns_per_op: f64,
    p99_ns: Option<f64>,
    mops: f64,
}

/// Runs `per_thread(thread, ops)` on `threads` threads pinned to distinct CPUs; returns
/// nanoseconds per operation per thread and aggregate millions of operations per second.
fn timed(threads: usize, ops: usize, per_thread: impl Fn(usize, usize) + Sync) -> (f64, f64) {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &per_thread;
            s.spawn(move || {
                pin_to(t);
                f(t, ops / threads)
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    (secs * 1e9 * threads as f64 / ops as f64, ops as f64 / secs / 1e6)
}

fn fresh(path: &Path, config: &Config) -> Result<Writer, String> {
    let _ = std::fs::remove_file(path);
    Writer::create(path, config, true).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(a: BenchArgs) -> Result<(), String> {
    if a.reader_child {
        return reader_child(&a);
    }
    let mut rows = Vec::new();
    let config = Config { region_bytes: 256 << 20, ..Config::default() };
    for value_len in [100usize, 1024] {
        let writer = fresh(&a.path, &config)?;
        let value = vec![b'v'; value_len];
        for threads in [1, 2] {
            let (ns, mops) = timed(threads, a.ops, |t, n| {
                let mut keys = Keys(0x9e37_79b9 + t as u64);
                for _ in 0..n {
                    writer.set(&key(keys.next(a.keys)), &value, 0, 0).expect("set");
                }
            });
            rows.push(Row {
                name: format!("writer set {value_len} B, {threads} thread(s)"),
                ns_per_op: ns,
                p99_ns: None,
                mops,
            });
        }
        for i in 0..a.keys {
            writer.set(&key(i), &value, 0, 0).expect("set");
        }
        for threads in [1, 2] {
            let (ns, mops) = timed(threads, a.ops, |t, n| {
                let mut keys = Keys(0x85eb_ca6b + t as u64);
                let mut out = Vec::with_capacity(value_len);
                for _ in 0..n {
                    assert!(writer.get(&key(keys.next(a.keys)), &mut out).expect("get").hit().is_some());
                }
            });
            rows.push(Row {
                name: format!("writer get {value_len} B, {threads} thread(s)"),
                ns_per_op: ns,
                p99_ns: None,
                mops,
            });
        }
        pin_to(0);
        // A hot set that stays in the CPU caches, and reads spread over every key.
        for (label, keys) in [("1,000 hot keys", HOT_KEYS.min(a.keys)), ("all keys", a.keys)] {
            let child = reader_in_child(&a, value_len, keys)?;
            rows.push(Row {
                name: format!("reader get {value_len} B, other process, {label}"),
                ns_per_op: child["median_ns"].as_f64().unwrap_or(f64::NAN),
                p99_ns: child["p99_ns"].as_f64(),
                mops: child["mops"].as_f64().unwrap_or(f64::NAN),
            });
        }
        drop(writer);
    }
    let fill = metadata_per_item(&a)?;
    let scale = if a.scale_items > 0 { Some(index_scaling(&a)?) } else { None };
    let _ = std::fs::remove_file(&a.path);
    report(&a, &rows, &fill, scale.as_ref());
    Ok(())
}

/// Spawns this program as a reader process on another core and collects its numbers.
fn reader_in_child(a: &BenchArgs, value_len: usize, keys: usize) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["region", "bench", "--reader-child", "--path"])
        .arg(&a.path)
        .args(["--keys", &keys.to_string(), "--ops", &a.ops.to_string()])
        .args(["--value-len", &value_len.to_string()])
        .output()
        .map_err(|e| format!("cannot start reader process: {e}"))?;
    if !out.status.success() {
        return Err(format!("reader process failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("reader process output: {e}"))
}

/// The reader process: read-only mapping, pinned to CPU 1, batches of 100 gets timed; reports
/// the median and p99 of per-get time over batches.
fn reader_child(a: &BenchArgs) -> Result<(), String> {
    pin_to(1);
    let reader = Reader::open(&a.path).map_err(|e| e.to_string())?;
    let mut keys = Keys(0xc2b2_ae35);
    let mut out = Vec::with_capacity(a.value_len);
    const BATCH: usize = 100;
    let batches = (a.ops / BATCH).max(1);
    let mut per_get = Vec::with_capacity(batches);
    let start = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..BATCH {
            // Keys drawn across the whole key set, as in the writer rows (not a cached subset).
            let k = key(keys.next(a.keys));
            let hit = reader.get(&k, &mut out).map_err(|e| e.to_string())?.hit();
            if hit.is_none() || out.len() != a.value_len {
                return Err(format!("reader missed {}", String::from_utf8_lossy(&k)));
            }
        }
        per_get.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
    }
    let secs = start.elapsed().as_secs_f64();
    per_get.sort_by(f64::total_cmp);
    let pick = |q: f64| per_get[((per_get.len() - 1) as f64 * q) as usize];
    println!(
        "{}",
        json!({"median_ns": pick(0.5), "p99_ns": pick(0.99), "mops": (batches * BATCH) as f64 / secs / 1e6})
    );
    Ok(())
}

/// Writes 1.5× as many items (16-byte keys, 100-byte values) as a region of `fill_mb` can hold,
/// so that it is full and evicting, then reports the items it holds and their metadata bytes
/// (item headers, padding and the index), and how many evictions the index itself caused.
fn metadata_per_item(a: &BenchArgs) -> Result<Value, String> {
    let config = Config { region_bytes: a.fill_mb << 20, ..Config::default() };
    let writer = fresh(&a.path, &config)?;
    let value = [b'v'; 100];
    let total = (a.fill_mb << 20) / 128 * 3 / 2;
    for i in 0..total {
        writer.set(&key(i), &value, 0, 0).map_err(|e| e.to_string())?;
        if i % 10_000 == 0 {
            progress("fill 1.5x past full", i, total);
        }
    }
    progress("fill 1.5x past full", total, total);
    let s = writer.stats();
    let payload = s.items * 116;
    let header_and_padding = (s.bytes - payload) as f64 / s.items as f64;
    let index = s.index_bytes as f64 / s.items as f64;
    Ok(json!({
        "region_mb": a.fill_mb, "items": s.items, "written": total,
        "items_per_gib": s.items as f64 * (1u64 << 30) as f64 / s.region_bytes as f64,
        "metadata_bytes_per_item": header_and_padding + index,
        "item_header_and_padding_bytes": header_and_padding,
        "index_bytes_per_item": index,
        "evictions": s.evictions, "index_evictions": s.index_evictions,
    }))
}

/// Reader get cost at growing item counts, in a region sized for `scale_items` small items.
fn index_scaling(a: &BenchArgs) -> Result<Value, String> {
    // 16-byte key + 8-byte value + 12-byte header → 40-byte items.
    let item = 40;
    let region_bytes = a.scale_items * (item + 12) + (64 << 20);
    let config = Config { region_bytes, avg_item_bytes: item, ..Config::default() };
    let writer = fresh(&a.path, &config)?;
    let reader = Reader::open(&a.path).map_err(|e| e.to_string())?;
    let mut points = Vec::new();
    let mut filled = 0;
    let mut out = Vec::new();
    for target in [a.scale_items / 10, a.scale_items / 2, a.scale_items] {
        while filled < target {
            writer.set(&key(filled), b"12345678", 0, 0).map_err(|e| e.to_string())?;
            filled += 1;
            if filled % 100_000 == 0 {
                progress("fill for index scaling", filled, a.scale_items);
            }
        }
        let mut keys = Keys(0x27d4_eb2f);
        let n = 1_000_000;
        let start = Instant::now();
        let mut hits = 0;
        for _ in 0..n {
            hits += reader.get(&key(keys.next(filled)), &mut out).map_err(|e| e.to_string())?.hit().is_some()
                as usize;
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        points.push(json!({"items": filled, "reader_get_ns": ns, "hit_ratio": hits as f64 / n as f64}));
    }
    progress("fill for index scaling", a.scale_items, a.scale_items);
    Ok(json!({"points": points, "evictions": writer.stats().evictions}))
}

fn report(a: &BenchArgs, rows: &[Row], fill: &Value, scale: Option<&Value>) {
    if a.json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| json!({"name": r.name, "ns_per_op": r.ns_per_op, "p99_ns": r.p99_ns, "mops": r.mops}))
            .collect();
        println!("{:#}", json!({"rows": rows, "metadata": fill, "index_scaling": scale}));
        return;
    }
    println!("| operation | ns/op (median for reader) | p99 ns | Mops/s |");
    println!("|---|---:|---:|---:|");
    for r in rows {
        let p99 = r.p99_ns.map(|p| format!("{p:.0}")).unwrap_or_else(|| "—".into());
        println!("| {} | {:.0} | {p99} | {:.2} |", r.name, r.ns_per_op, r.mops);
    }
    println!();
    println!(
        "metadata at -m {} after {} sets: {} items ({:.0} per GiB), {:.1} bytes of metadata per item \
         ({:.1} header+padding, {:.1} index); {} evictions, {} of them by a full index pair",
        fill["region_mb"],
        fill["written"],
        fill["items"],
        fill["items_per_gib"].as_f64().unwrap_or(0.0),
        fill["metadata_bytes_per_item"].as_f64().unwrap_or(0.0),
        fill["item_header_and_padding_bytes"].as_f64().unwrap_or(0.0),
        fill["index_bytes_per_item"].as_f64().unwrap_or(0.0),
        fill["evictions"],
        fill["index_evictions"]
    );
    if let Some(scale) = scale {
        println!();
        println!("| items | reader get ns | hit ratio |");
        println!("|---:|---:|---:|");
        for p in scale["points"].as_array().into_iter().flatten() {
            println!(
                "| {} | {:.0} | {:.4} |",
                p["items"],
                p["reader_get_ns"].as_f64().unwrap_or(0.0),
                p["hit_ratio"].as_f64().unwrap_or(0.0)
            );
        }
    }
}
