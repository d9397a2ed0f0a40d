//! `shoal bench ycsb`: the look-aside experiment of the Nahanni paper.
//!
//! Clients read records through a cache in front of a datastore, YCSB-style, each at a fixed
//! rate (open loop), and the run reports the **average total read latency** (ATRL): the time
//! spent on datastore reads, cache reads and cache writes, divided by the number of reads.
//!
//! ```text
//!  each client (thread), every 1/rate s:
//!    read:   cache get ──hit──► done
//!               └─miss─► datastore read ──► cache set (with --ttl)
//!    update / insert: datastore write ──► cache delete (with --invalidate)
//!  tallies merged ──► hit rate, ATRL = (Σ datastore reads + Σ cache reads + Σ cache writes)
//!                     / reads, p50/p99 per operation ──► text or --json
//! ```
//!
//! Caches: none; memcached or Shoal over TCP; Shoal through shared memory — all through
//! shoal-client, so only the path differs. Datastores: SQLite (embedded) or PostgreSQL.

mod cache;
pub mod datastore;

use crate::keys::{Distribution, KeyChooser, KeySpace};
use crate::progress::progress_bar;
use crate::random::Rng;
use crate::tally::LatencySummary;
use clap::{Parser, ValueEnum};
use datastore::{Datastore, DatastoreKind};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use shoal_client::{Client, Options};
use shoal_curves::Schedule;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Bytes per YCSB key (`user…`, zero-padded), as YCSB's own keys are about.
pub const KEY_BYTES: usize = 24;

/// YCSB's core workloads as the paper used them, plus a 50/50 mix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// 100 % reads, Zipfian (YCSB C).
    ReadOnly,
    /// 95 % reads, 5 % updates, Zipfian (YCSB B).
    ReadHeavy,
    /// 95 % reads, 5 % inserts, reads favouring the newest records (YCSB D).
    ReadLatest,
    /// 50 % reads, 50 % updates, Zipfian (YCSB A).
    Mix,
}

impl Workload {
    /// The fraction of operations that are reads, and how keys are drawn.
    fn shape(self) -> (f64, Distribution) {
        let zipf = Distribution::Zipf { skew: crate::keys::DEFAULT_SKEW };
        match self {
            Workload::ReadOnly => (1.0, zipf),
            Workload::ReadHeavy => (0.95, zipf),
            Workload::ReadLatest => (0.95, Distribution::Latest { skew: crate::keys::DEFAULT_SKEW }),
            Workload::Mix => (0.5, zipf),
        }
    }
}

/// The cache in front of the datastore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CacheKind {
    /// No cache: every read goes to the datastore.
    None,
    /// A memcached-protocol server over TCP (memcached, or Shoal read over the network).
    Tcp,
    /// Shoal, reads through its shared memory (it must run on this host).
    Shm,
    /// A pool of servers placed by Proteus (`--cache-server` a comma-separated list), following
    /// `--provisioning`, with `--hot-replicas` (cache.rs).
    Pool,
}

/// Options of `shoal bench ycsb`.
#[derive(Parser, Debug, Clone)]
pub struct YcsbOptions {
    /// The workload.
    #[arg(long, value_enum, default_value_t = Workload::ReadLatest)]
    pub workload: Workload,
    /// The cache: none, tcp (memcached or Shoal over the network) or shm (Shoal's shared memory).
    #[arg(long, value_enum, default_value_t = CacheKind::Tcp)]
    pub cache: CacheKind,
    /// The cache server (host:port or unix socket path), for --cache tcp or shm.
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub cache_server: String,
    /// A name for the cache in the report (e.g. memcached, shoal-tcp, shoal-shm).
    #[arg(long)]
    pub label: Option<String>,
    /// The SQLite database file (the default datastore; created if missing).
    #[arg(long, default_value = "target/bench/ycsb.sqlite")]
    pub sqlite: PathBuf,
    /// Use PostgreSQL at this connection string instead of SQLite
    /// (e.g. "host=127.0.0.1 port=5432 user=postgres dbname=postgres").
    #[arg(long)]
    pub postgres: Option<String>,
    /// Records in the table.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Bytes per record.
    #[arg(long, default_value_t = 1000)]
    pub record_size: usize,
    /// Load the records before running (replacing the table's contents).
    #[arg(long)]
    pub load: bool,
    /// Clients, each a thread with its own connections.
    #[arg(long, default_value_t = 3)]
    pub clients: usize,
    /// Operations per second of each client (open loop, on a fixed schedule).
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Measured operations per client.
    #[arg(long, default_value_t = 20_000)]
    pub operations: u64,
    /// Follow a load over time instead of --rate and --operations: a file of `<seconds>
    /// <operations per second, all clients together>` lines (as `shoal provision --schedule`
    /// reads); the run ends at the last line's time.
    #[arg(long, value_name = "FILE")]
    pub rate_schedule: Option<PathBuf>,
    /// Operations per client before the measured ones (they fill the cache).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// How long cached records stay valid, in seconds (0: until evicted or invalidated).
    #[arg(long, default_value_t = 0)]
    pub ttl: i64,
    /// Delete a record from the cache when the datastore's copy changes.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub invalidate: bool,
    /// Leave the cache as it is (by default a run starts by flushing it, cold).
    #[arg(long)]
    pub keep_cache: bool,
    /// --cache pool: the `shoal provision` state file the pool follows (active servers and
    /// transitions).
    #[arg(long, value_name = "FILE")]
    pub provisioning: Option<PathBuf>,
    /// --cache pool: spread hot keys over this many replicas (0: every server on).
    #[arg(long, value_name = "R")]
    pub hot_replicas: Option<usize>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Time spent and operations done by reads, updates and inserts.
#[derive(Clone, Debug)]
pub struct YcsbTally {
    /// Reads.
    pub reads: u64,
    /// Reads the cache answered.
    pub hits: u64,
    /// Updates and inserts.
    pub writes: u64,
    /// Nanoseconds in datastore reads, cache reads and cache writes (all reads together).
    pub datastore_read_ns: u64,
    /// See `datastore_read_ns`.
    pub cache_read_ns: u64,
    /// See `datastore_read_ns`.
    pub cache_write_ns: u64,
    /// Latency of whole reads and whole writes (ns), from their start, or from when they were
    /// due if they started late.
    pub read_latency: Histogram<u64>,
    /// See `read_latency`.
    pub write_latency: Histogram<u64>,
    /// Cache requests that failed (a server down, a router's error): a failed read is a miss
    /// (the look-aside client goes to the datastore), a failed fill or invalidation is dropped.
    pub cache_errors: u64,
    /// Datastore reads in each second since the measured operations began (the database's
    /// read rate over time: what a cache failure does to it).
    pub datastore_reads_per_second: Vec<u64>,
    /// Read latency in each second since the measured operations began (a transition's
    /// latency spike over time).
    pub read_latency_per_second: Vec<Histogram<u64>>,
}

/// A latency histogram in nanoseconds.
fn latency_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits")
}

impl Default for YcsbTally {
    fn default() -> Self {
        let histogram = latency_histogram;
        YcsbTally {
            reads: 0,
            hits: 0,
            writes: 0,
            datastore_read_ns: 0,
            cache_read_ns: 0,
            cache_write_ns: 0,
            read_latency: histogram(),
            write_latency: histogram(),
            cache_errors: 0,
            datastore_reads_per_second: Vec::new(),
            read_latency_per_second: Vec::new(),
        }
    }
}

impl YcsbTally {
    fn merge(&mut self, other: &YcsbTally) {
        self.reads += other.reads;
        self.hits += other.hits;
        self.writes += other.writes;
        self.datastore_read_ns += other.datastore_read_ns;
        self.cache_read_ns += other.cache_read_ns;
        self.cache_write_ns += other.cache_write_ns;
        self.read_latency.add(&other.read_latency).expect("same histogram shape");
        self.write_latency.add(&other.write_latency).expect("same histogram shape");
        self.cache_errors += other.cache_errors;
        let timeline = &mut self.datastore_reads_per_second;
        if timeline.len() < other.datastore_reads_per_second.len() {
            timeline.resize(other.datastore_reads_per_second.len(), 0);
        }
        for (sum, n) in timeline.iter_mut().zip(&other.datastore_reads_per_second) {
            *sum += n;
        }
        let latencies = &mut self.read_latency_per_second;
        if latencies.len() < other.read_latency_per_second.len() {
            latencies.resize_with(other.read_latency_per_second.len(), latency_histogram);
        }
        for (sum, h) in latencies.iter_mut().zip(&other.read_latency_per_second) {
            sum.add(h).expect("same histogram shape");
        }
    }

    /// ATRL and its parts, in microseconds per read: (total, datastore, cache read, cache write).
    pub fn atrl_us(&self) -> (f64, f64, f64, f64) {
        let per_read = |ns: u64| if self.reads == 0 { 0.0 } else { ns as f64 / self.reads as f64 / 1e3 };
        let (d, r, w) =
            (per_read(self.datastore_read_ns), per_read(self.cache_read_ns), per_read(self.cache_write_ns));
        (d + r + w, d, r, w)
    }

    /// Reads the cache answered, as a fraction.
    pub fn hit_rate(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.hits as f64 / self.reads as f64
        }
    }
}

/// A run's report.
#[derive(Debug)]
pub struct YcsbReport {
    /// What was run.
    pub options: YcsbOptions,
    /// What was measured.
    pub tally: YcsbTally,
    /// Measured operations that started later than scheduled by more than a millisecond.
    pub behind_schedule: u64,
}

/// One client's cache connection (or none).
struct Cache(Option<cache::Conn>);

impl Cache {
    fn open(o: &YcsbOptions) -> Result<Cache, String> {
        let local = match o.cache {
            CacheKind::None => return Ok(Cache(None)),
            CacheKind::Tcp => false,
            CacheKind::Shm => true,
            CacheKind::Pool => return Ok(Cache(Some(cache::Conn::pool(o)?))),
        };
        let mut client = Client::connect(&o.cache_server, Options { local, ..Options::default() })
            .map_err(|e| format!("cannot connect to the cache at {}: {e}", o.cache_server))?;
        if local && !client.is_local() {
            return Err(format!(
                "{} offers no shared memory to this process (is it `shoal server` on this host?)",
                o.cache_server
            ));
        }
        Ok(Cache(Some(cache::Conn::One(Box::new(client)))))
    }
}

/// Runs the workload; loads the records first with `--load`.
pub fn run_ycsb(o: &YcsbOptions) -> Result<YcsbReport, String> {
    if o.clients == 0 || o.operations == 0 || o.records == 0 || o.rate.is_nan() || o.rate <= 0.0 {
        return Err("--clients, --operations, --records and --rate must be positive".into());
    }
    let kind = match &o.postgres {
        Some(conn) => DatastoreKind::Postgres(conn.clone()),
        None => {
            if let Some(dir) = o.sqlite.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            DatastoreKind::Sqlite(o.sqlite.clone())
        }
    };
    let space = KeySpace::new(o.records, KEY_BYTES)?;
    if o.load {
        let bar = progress_bar("load", None);
        bar.set_message(format!("{} records of {} B into {kind}", o.records, o.record_size));
        Datastore::open(&kind)?.load((0..o.records).map(|i| space.key(i).as_bytes().to_vec()), |k| {
            record(k, 0, o.record_size)
        })?;
        bar.finish_and_clear();
    }
    if let (Some(client), false) = (Cache::open(o)?.0.as_mut(), o.keep_cache) {
        client.flush_all(None).map_err(|e| format!("flush_all on the cache: {e}"))?;
        // every run starts cold
    }
    let (read_ratio, distribution) = o.workload.shape();
    let chooser = KeyChooser::new(distribution, o.records);
    let schedule = o.rate_schedule.as_deref().map(|p| Schedule::read(p, "--rate-schedule")).transpose()?;
    let bar = match &schedule {
        Some(_) => progress_bar("ycsb", None),
        None => progress_bar("ycsb", Some(o.operations * o.clients as u64)),
    };
    let schedule = schedule.as_ref();
    let results = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..o.clients)
            .map(|i| {
                let (kind, chooser, bar) = (kind.clone(), chooser.clone(), bar.clone());
                scope.spawn(move || {
                    let mut client = ClientRun {
                        options: o,
                        datastore: Datastore::open(&kind)?,
                        cache: Cache::open(o)?,
                        space,
                        chooser,
                        read_ratio,
                        rng: Rng::new(0x7c5b_0000 + i as u64),
                        version: 0,
                        measured_since: None,
                        schedule,
                    };
                    client.run(&bar)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a ycsb client panicked"))
            .collect::<Result<Vec<_>, String>>()
    })?;
    bar.finish_and_clear();
    let mut tally = YcsbTally::default();
    let mut behind_schedule = 0;
    for (t, behind) in &results {
        tally.merge(t);
        behind_schedule += behind;
    }
    Ok(YcsbReport { options: o.clone(), tally, behind_schedule })
}

/// The bytes of a record: its key and version, then filler up to `size`.
fn record(key: &[u8], version: u64, size: usize) -> Vec<u8> {
    let mut value = format!("{}@{version}:", String::from_utf8_lossy(key)).into_bytes();
    value.resize(size.max(value.len()), b'r');
    value
}

/// One client's state.
struct ClientRun<'a> {
    options: &'a YcsbOptions,
    datastore: Datastore,
    cache: Cache,
    space: KeySpace,
    chooser: KeyChooser,
    read_ratio: f64,
    rng: Rng,
    /// Counts this client's writes, so written records differ from loaded ones.
    version: u64,
    /// When the measured operations began (for the datastore's reads per second).
    measured_since: Option<Instant>,
    /// The load to follow, if any (--rate-schedule).
    schedule: Option<&'a Schedule>,
}

impl ClientRun<'_> {
    /// Warm-up, then the measured operations on the fixed schedule; the tally and how many
    /// operations started late.
    fn run(&mut self, bar: &indicatif::ProgressBar) -> Result<(YcsbTally, u64), String> {
        let mut discard = YcsbTally::default();
        for _ in 0..self.options.warmup {
            self.operation(Instant::now(), &mut discard)?;
        }
        let mut tally = YcsbTally::default();
        let start = Instant::now();
        self.measured_since = Some(start);
        let mut behind = 0;
        let mut pace = Pace::new(self.options, self.schedule);
        while let Some(offset) = pace.next_due() {
            let due = start + offset;
            let now = Instant::now();
            // An operation that had to wait for its turn is timed from when it woke (the
            // sleep's overshoot is not the system's); one that is late is timed from when it
            // was due, so queueing behind slow operations counts (no coordinated omission).
            let from = if due > now {
                std::thread::sleep(due - now);
                Instant::now()
            } else {
                behind += u64::from(now - due > Duration::from_millis(1));
                due
            };
            self.operation(from, &mut tally)?;
            if pace.done.is_multiple_of(256) {
                bar.inc(256);
            }
        }
        Ok((tally, behind))
    }

    /// One read or write, timed from `from`.
    fn operation(&mut self, from: Instant, tally: &mut YcsbTally) -> Result<(), String> {
        if self.rng.next_f64() < self.read_ratio {
            let key = self.space.key(self.chooser.next_get(&mut self.rng));
            self.read(key.as_bytes(), tally)?;
            tally.reads += 1;
            record_latency(&mut tally.read_latency, from);
            if let Some(since) = self.measured_since {
                let second = from.saturating_duration_since(since).as_secs() as usize;
                let per_second = &mut tally.read_latency_per_second;
                if per_second.len() <= second {
                    per_second.resize_with(second + 1, latency_histogram);
                }
                record_latency(&mut per_second[second], from);
            }
        } else {
            let key = self.space.key(self.chooser.next_set(&mut self.rng));
            self.version += 1;
            let value = record(key.as_bytes(), self.version, self.options.record_size);
            self.datastore.write(key.as_bytes(), &value)?;
            if let (Some(cache), true) = (self.cache.0.as_mut(), self.options.invalidate) {
                tally.cache_errors += u64::from(cache.delete(key.as_bytes()).is_err());
            }
            tally.writes += 1;
            record_latency(&mut tally.write_latency, from);
        }
        Ok(())
    }

    /// The look-aside read: cache, then datastore and cache fill on a miss.
    fn read(&mut self, key: &[u8], tally: &mut YcsbTally) -> Result<(), String> {
        if let Some(cache) = self.cache.0.as_mut() {
            let began = Instant::now();
            let cached = cache.get(key).unwrap_or_else(|_| {
                tally.cache_errors += 1;
                None
            });
            tally.cache_read_ns += began.elapsed().as_nanos() as u64;
            if cached.is_some() {
                tally.hits += 1;
                return Ok(());
            }
        }
        let began = Instant::now();
        let value = self.datastore.read(key)?.ok_or_else(|| {
            format!("record {} is not in the datastore: load it first (--load)", String::from_utf8_lossy(key))
        })?;
        tally.datastore_read_ns += began.elapsed().as_nanos() as u64;
        if let Some(since) = self.measured_since {
            let second = since.elapsed().as_secs() as usize;
            let timeline = &mut tally.datastore_reads_per_second;
            if timeline.len() <= second {
                timeline.resize(second + 1, 0);
            }
            timeline[second] += 1;
        }
        if let Some(cache) = self.cache.0.as_mut() {
            let began = Instant::now();
            tally.cache_errors += u64::from(cache.set(key, &value, 0, self.options.ttl).is_err());
            tally.cache_write_ns += began.elapsed().as_nanos() as u64;
        }
        Ok(())
    }
}

/// When each of a client's measured operations is due: every 1/--rate seconds for
/// --operations, or following --rate-schedule (this client's share of it) to its end.
struct Pace<'a> {
    operations: u64,
    interval: Duration,
    schedule: Option<&'a Schedule>,
    clients: f64,
    /// Seconds from the start to the next operation under a schedule.
    next: f64,
    /// Operations handed out so far.
    done: u64,
}

impl<'a> Pace<'a> {
    fn new(o: &YcsbOptions, schedule: Option<&'a Schedule>) -> Pace<'a> {
        Pace {
            operations: o.operations,
            interval: Duration::from_secs_f64(1.0 / o.rate),
            schedule,
            clients: o.clients as f64,
            next: 0.0,
            done: 0,
        }
    }

    /// The next operation's time after the start, or `None` when the run is over.
    fn next_due(&mut self) -> Option<Duration> {
        let due = match self.schedule {
            None if self.done >= self.operations => return None,
            None => self.interval * self.done as u32,
            Some(schedule) => loop {
                if self.next >= schedule.end() {
                    return None;
                }
                let rate = schedule.rate_at(self.next) / self.clients;
                if rate > 0.0 {
                    let due = Duration::from_secs_f64(self.next);
                    self.next += 1.0 / rate;
                    break due;
                }
                // Nothing to do until the next step.
                self.next = schedule.next_step_after(self.next).unwrap_or(f64::INFINITY);
            },
        };
        self.done += 1;
        Some(due)
    }
}

fn record_latency(histogram: &mut Histogram<u64>, from: Instant) {
    histogram.record((from.elapsed().as_nanos() as u64).max(1)).expect("an unbounded histogram");
}

impl YcsbReport {
    /// The cache's name in tables.
    pub fn label(&self) -> String {
        self.options.label.clone().unwrap_or_else(|| format!("{:?}", self.options.cache).to_lowercase())
    }

    /// Everything as JSON.
    pub fn to_json(&self) -> Value {
        let (o, t) = (&self.options, &self.tally);
        let (atrl, datastore, cache_read, cache_write) = t.atrl_us();
        json!({
            "workload": format!("{:?}", o.workload), "cache": self.label(),
            "datastore": if o.postgres.is_some() { "postgres" } else { "sqlite" },
            "records": o.records, "record_size": o.record_size, "clients": o.clients, "rate": o.rate,
            "operations": o.operations * o.clients as u64, "ttl": o.ttl, "invalidate": o.invalidate,
            "reads": t.reads, "writes": t.writes, "hits": t.hits, "hit_rate": t.hit_rate(),
            "atrl_us": atrl,
            "per_read_us": {"datastore_read": datastore, "cache_read": cache_read, "cache_write": cache_write},
            "read_latency_us": LatencySummary::of(&t.read_latency).to_json(),
            "write_latency_us": LatencySummary::of(&t.write_latency).to_json(),
            "behind_schedule": self.behind_schedule,
            "cache_errors": t.cache_errors,
            "datastore_reads_per_second": t.datastore_reads_per_second,
            "read_p999_us_per_second": t.read_latency_per_second.iter()
                .map(|h| h.value_at_quantile(0.999) as f64 / 1e3).collect::<Vec<_>>(),
            "rate_schedule": o.rate_schedule,
        })
    }
}

impl fmt::Display for YcsbReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (o, t) = (&self.options, &self.tally);
        let (atrl, datastore, cache_read, cache_write) = t.atrl_us();
        let (read, write) = (LatencySummary::of(&t.read_latency), LatencySummary::of(&t.write_latency));
        writeln!(
            f,
            "{:?} with cache {} over {}: {} clients × {} ops at {} ops/s, {} records of {} B",
            o.workload,
            self.label(),
            if o.postgres.is_some() { "PostgreSQL" } else { "SQLite" },
            o.clients,
            o.operations,
            o.rate,
            o.records,
            o.record_size
        )?;
        writeln!(
            f,
            "  reads       {} ({} hits, hit rate {:.3}), writes {}",
            t.reads,
            t.hits,
            t.hit_rate(),
            t.writes
        )?;
        writeln!(
            f,
            "  ATRL        {atrl:.2} µs per read = datastore {datastore:.2} + cache read {cache_read:.2} + cache write {cache_write:.2}"
        )?;
        writeln!(f, "  read  µs    p50 {:.1}  p99 {:.1}", read.p50, read.p99)?;
        writeln!(f, "  write µs    p50 {:.1}  p99 {:.1}", write.p50, write.p99)?;
        writeln!(f, "  late starts {} (more than 1 ms behind schedule)", self.behind_schedule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_schedule_paces_each_client_by_its_share() {
        let o = YcsbOptions::parse_from(["ycsb", "--clients", "3", "--rate", "10", "--operations", "4"]);
        let fixed: Vec<Duration> = std::iter::from_fn({
            let mut pace = Pace::new(&o, None);
            move || pace.next_due()
        })
        .collect();
        assert_eq!(fixed, [0, 100, 200, 300].map(Duration::from_millis));
        // 300/s for a second (100/s per client), nothing for a second, 600/s for a second.
        let schedule = Schedule::parse("0 300\n1 0\n2 600\n3 0\n", "test").unwrap();
        let mut pace = Pace::new(&o, Some(&schedule));
        let dues: Vec<f64> = std::iter::from_fn(|| pace.next_due()).map(|d| d.as_secs_f64()).collect();
        assert_eq!(dues.iter().filter(|&&t| t < 1.0).count(), 100);
        assert_eq!(dues.iter().filter(|&&t| (1.0..2.0).contains(&t)).count(), 0);
        assert!((199..=201).contains(&dues.iter().filter(|&&t| (2.0..3.0).contains(&t)).count()));
        assert!(dues.iter().all(|&t| t <= 3.0), "{:?}", &dues[dues.len() - 3..]);
    }

    #[test]
    fn timelines_and_errors_add_up_across_clients() {
        let mut a =
            YcsbTally { datastore_reads_per_second: vec![1, 2], cache_errors: 3, ..YcsbTally::default() };
        let b = YcsbTally {
            datastore_reads_per_second: vec![10, 20, 30],
            cache_errors: 1,
            ..YcsbTally::default()
        };
        a.merge(&b);
        assert_eq!(a.datastore_reads_per_second, vec![11, 22, 30]);
        assert_eq!(a.cache_errors, 4);
    }

    #[test]
    fn atrl_is_all_read_time_over_reads() {
        let mut t = YcsbTally { reads: 4, hits: 3, ..YcsbTally::default() };
        t.cache_read_ns = 4 * 1_000; // four cache reads of 1 µs
        t.datastore_read_ns = 100_000; // one miss: 100 µs in the datastore
        t.cache_write_ns = 2_000; // and 2 µs to fill the cache
        let (atrl, d, r, w) = t.atrl_us();
        assert_eq!((d, r, w), (25.0, 1.0, 0.5));
        assert_eq!(atrl, 26.5);
        assert_eq!(t.hit_rate(), 0.75);
        assert_eq!(YcsbTally::default().atrl_us(), (0.0, 0.0, 0.0, 0.0));
    }

    #[test]
    fn workloads_have_ycsb_shapes() {
        assert_eq!(Workload::ReadOnly.shape().0, 1.0);
        assert_eq!(Workload::ReadHeavy.shape().0, 0.95);
        assert!(matches!(Workload::ReadLatest.shape().1, Distribution::Latest { .. }));
        assert_eq!(Workload::Mix.shape().0, 0.5);
    }

    #[test]
    fn records_carry_their_key_and_version_and_size() {
        let r = record(b"key:1", 7, 100);
        assert!(r.starts_with(b"key:1@7:") && r.len() == 100);
        assert_eq!(record(b"a-long-key", 1, 4), b"a-long-key@1:");
    }
}
