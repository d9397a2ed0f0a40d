//! Handing deletes on: every destination (a router per cluster, or a server) has its own
//! ordered spool on disk (`shoal_spool`), delivered by its own thread as pipelined
//! batches of `delete` requests, and waiting out the destination's absence. What reaches a
//! spool is the invalidator's promise: the commit-log position moves past a transaction only
//! once its deletes are in every destination's spool.
//!
//! A near cache (`--near`) gets each delete twice: at once from its own spool, as any
//! destination, and again from a second spool (`<spools>/near-second/`) whose records are
//! sent only once every other destination (the region's routers) has acknowledged the same
//! deletes. A near cache's miss refetches through a router from the pool: before the pool's
//! copy is deleted that fetch brings the old value back, and only a delete sent after the
//! pool's can remove it (docs/design/invalidation.md, "Near caches").
//!
//! A destination a delivery failed to (unreachable, too slow, or refusing) is *behind* until
//! its spool drains, as a router's destination that missed a change is
//! (docs/design/faults.md): the invalidator sends no reads, so it only says so — on standard
//! error when it falls behind and when it catches up, in `/metrics` and in `/status`.

use crate::source::Commit;
use crate::watch::Progress;
use hdrhistogram::Histogram;
use shoal_client::invalidation::remote_marker_key;
use shoal_spool::{Activity, Delivered, Durability, Mark, Spools, Syncer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often [`Delivery::watch`] looks at the destinations (the spools retry every 250 ms).
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Microseconds since the epoch, now.
pub fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Sends `requests` once over the destination's connection (made if missing) and reads its
/// `answers` lines without looking at them.
fn send_once(
    connections: &mut HashMap<String, std::net::TcpStream>,
    destination: &str,
    requests: &[u8],
    answers: u32,
) -> std::io::Result<()> {
    use std::io::{BufRead, Write};
    if !connections.contains_key(destination) {
        let stream = std::net::TcpStream::connect(destination)?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        connections.insert(destination.to_string(), stream);
    }
    let stream = &connections[destination];
    (&*stream).write_all(requests)?;
    let mut reader = std::io::BufReader::new(stream);
    let mut line = Vec::new();
    for _ in 0..answers {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// One destination's delivery numbers.
#[derive(Debug, Default)]
pub struct DestinationStats {
    /// Deletes acknowledged.
    pub delivered: AtomicU64,
    /// Whether its spool is full right now (the log's position is held until it drains).
    pub full: AtomicBool,
    /// Commit → acknowledgement, in microseconds, per record (a record's stamp is its earliest
    /// commit, so this is the lag of its slowest delete).
    pub lag: Mutex<Option<Histogram<u64>>>,
    /// Since when it has been behind, as [`Delivery::watch`] last saw it.
    pub behind_since: Mutex<Option<Instant>>,
    /// Times it fell behind.
    pub fell_behind: AtomicU64,
    /// When it last acknowledged a late delete (`crate::late`).
    pub late: crate::late::Throttle,
}

/// How far behind a near cache's second delivery is.
#[derive(Debug, Clone, PartialEq)]
pub struct SecondBacklog {
    /// The near cache's invalidation listener.
    pub address: String,
    /// Deletes in its second spool, not acknowledged yet.
    pub owed: u64,
    /// Of those, the deletes still waiting for a destination to acknowledge them.
    pub waiting: u64,
    /// How long the oldest of those has waited (zero when none waits).
    pub waiting_for: Duration,
}

/// How deletes are sent.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Routing prefix put before every key (e.g. `/*/*/` for every cluster behind one router).
    pub prefix: String,
    /// The most deletes in one spool record.
    pub batch_keys: usize,
    /// The most a destination's spool may hold, in bytes.
    pub max_bytes: u64,
    /// Flush the spools to the disk (in groups, off the delivery path: a record is safe once
    /// flushed or acknowledged, and only then is its position confirmed).
    pub durable: bool,
    /// How a spool file is flushed (tests give a slow one).
    pub syncer: Syncer,
    /// `--ack-rule off`: send once and forget, no spool.
    pub fire_and_forget: bool,
    /// Delete each key's remote marker too.
    pub remote_markers: bool,
    /// Destinations that are cold clusters being warmed up (Scaling Memcache §4.3): their
    /// deletes carry a hold-off, `delete <key> hold <cold_hold>`, during which `add` of the
    /// key fails, so a warm cluster's stale copy cannot be added back meanwhile.
    pub cold: Vec<String>,
    /// The hold-off of deletes to cold destinations, in seconds.
    pub cold_hold: u32,
    /// Told of every acknowledgement (for the stall watch).
    pub progress: Arc<Progress>,
    /// Near caches' invalidation listeners: each delete sent at once and again once every
    /// destination has acknowledged it (keys without `prefix`).
    pub near: Vec<String>,
}

/// Where deletes go and how they are doing.
pub struct Delivery {
    spools: Arc<Spools>,
    /// The near caches' second deliveries, each record held until every destination has
    /// acknowledged its deletes.
    second: Arc<Spools>,
    /// Routers (or servers) and cold destinations, then near caches.
    destinations: Vec<String>,
    options: Options,
    /// `--ack-rule off`: send once and forget, no spool (one connection per destination).
    fire_and_forget: Option<Mutex<HashMap<String, std::net::TcpStream>>>,
    /// Numbers by destination address.
    pub stats: Arc<HashMap<String, DestinationStats>>,
    /// The near caches' second deliveries' numbers, by address.
    pub second_stats: Arc<HashMap<String, DestinationStats>>,
}

/// An observer counting acknowledged deletes and their lag into `stats`, and telling `progress`.
fn observer(stats: Arc<HashMap<String, DestinationStats>>, progress: Arc<Progress>) -> shoal_spool::Observer {
    Arc::new(move |address: &str, delivered: Delivered| {
        progress.delivered();
        let Some(stats) = stats.get(address) else { return };
        stats.delivered.fetch_add(u64::from(delivered.answers), Ordering::Relaxed);
        if delivered.stamp > 0 {
            let lag = now_micros().saturating_sub(delivered.stamp).max(1);
            let age = Duration::from_micros(lag);
            if age > crate::late::LATE && stats.late.ready() {
                eprintln!("{}", crate::late::acknowledged(address, age));
            }
            let mut histogram = stats.lag.lock().unwrap_or_else(|p| p.into_inner());
            let histogram = histogram.get_or_insert_with(|| {
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
            });
            let _ = histogram.record(lag.min(3_600_000_000));
        }
    })
}

impl Delivery {
    /// Spools for `destinations` and `options.near` in `dir` (the near caches' second
    /// deliveries in `dir/near-second`), sending as `options` say.
    pub fn open(dir: &Path, destinations: &[String], options: Options) -> Result<Delivery, String> {
        let all: Vec<String> = destinations.iter().chain(&options.near).cloned().collect();
        let stats_of = |addresses: &[String]| -> Arc<HashMap<String, DestinationStats>> {
            Arc::new(addresses.iter().map(|d| (d.clone(), DestinationStats::default())).collect())
        };
        let (stats, second_stats) = (stats_of(&all), stats_of(&options.near));
        let durability = if options.durable { Durability::Grouped } else { Durability::Unflushed };
        let opened = |e: std::io::Error, dir: &Path| format!("spool directory {}: {e}", dir.display());
        let spools = Spools::open_durable(
            dir,
            options.max_bytes,
            "shoal invalidator",
            durability,
            options.syncer.clone(),
            Some(observer(stats.clone(), options.progress.clone())),
        )
        .map_err(|e| opened(e, dir))?;
        // Second deliveries an earlier run left wait for everything the destinations' spools
        // hold now (their records of those deletes were written first).
        let ends = destinations
            .iter()
            .map(|d| spools.end_mark(d))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| opened(e, dir))?;
        let second_dir = dir.join("near-second");
        let second = Spools::open_after(
            &second_dir,
            options.max_bytes,
            "shoal invalidator (second deliveries to near caches)",
            durability,
            options.syncer.clone(),
            Some(observer(second_stats.clone(), options.progress.clone())),
            ends,
        )
        .map_err(|e| opened(e, &second_dir))?;
        Ok(Delivery {
            spools,
            second,
            destinations: all,
            fire_and_forget: options.fire_and_forget.then(|| Mutex::new(HashMap::new())),
            options,
            stats,
            second_stats,
        })
    }

    /// Puts the deletes of `commits` into every destination's spool, in order (written, not
    /// flushed: each destination's thread sends them at once), then each near cache's two
    /// (the second held until every destination has acknowledged them); waits (telling the
    /// operator) while a spool is full. Returns the deletes spooled per destination and the
    /// mark of each spool's last record ([`Delivery::safe`] says when all are flushed or
    /// acknowledged), or `Err` once `stop` is set while waiting.
    pub fn spool(&self, commits: &[Commit], stop: &AtomicBool) -> Result<(usize, Vec<Mark>), ()> {
        let prefix = &self.options.prefix;
        let plain = self.records(commits, prefix, 0);
        let held = if self.options.cold.is_empty() {
            Vec::new()
        } else {
            self.records(commits, prefix, self.options.cold_hold)
        };
        // A near cache's listener takes bare keys: the routing prefix is the routers'.
        let near = if self.options.near.is_empty() { Vec::new() } else { self.records(commits, "", 0) };
        let records_for = |destination: &String| {
            if self.options.near.contains(destination) {
                &near
            } else if self.options.cold.contains(destination) {
                &held
            } else {
                &plain
            }
        };
        let deletes = plain.iter().map(|r| r.1 as usize).sum();
        if let Some(connections) = &self.fire_and_forget {
            let mut connections = connections.lock().unwrap_or_else(|p| p.into_inner());
            for destination in &self.destinations {
                for (requests, answers, _) in records_for(destination) {
                    if send_once(&mut connections, destination, requests, *answers).is_err() {
                        connections.remove(destination);
                    }
                }
            }
            return Ok((deletes, Vec::new()));
        }
        // Every destination's spool (the near caches' first), the routers' before the near
        // caches' second spools, whose records wait for the routers' marks.
        let mut marks = Vec::with_capacity(self.destinations.len() + self.options.near.len());
        for destination in &self.destinations {
            let records = records_for(destination);
            marks.extend(append_all(
                &self.spools,
                &self.stats[destination],
                destination,
                records,
                &[],
                stop,
            )?);
        }
        let routers: Vec<Mark> =
            marks.iter().filter(|m| !self.options.near.iter().any(|n| n == m.address())).cloned().collect();
        for near in &self.options.near {
            let stats = &self.second_stats[near];
            marks.extend(append_all(&self.second, stats, near, records_for(near), &routers, stop)?);
        }
        Ok((deletes, marks))
    }

    /// Whether every record `marks` end is safe: flushed to the disk (or not asked to be:
    /// `--no-fsync`) or acknowledged by its destination. Spools are appended to in order, so
    /// a destination's last mark covers its earlier records.
    pub fn safe(marks: &[Mark]) -> bool {
        marks.iter().all(Mark::is_safe)
    }

    /// The records for `commits`: `(requests, answers, stamp)`, at most `batch_keys` deletes
    /// each, every key after `prefix`, with a hold-off of `hold` seconds (0: none).
    fn records(&self, commits: &[Commit], prefix: &str, hold: u32) -> Vec<(Vec<u8>, u32, u64)> {
        let hold = if hold > 0 { format!(" hold {hold}") } else { String::new() };
        let mut records = Vec::new();
        let mut requests = Vec::new();
        let (mut answers, mut stamp) = (0u32, u64::MAX);
        for commit in commits {
            for key in &commit.keys {
                let prefix = prefix.as_bytes();
                for target in [
                    Some(key.as_bytes().to_vec()),
                    self.options.remote_markers.then(|| remote_marker_key(key.as_bytes())),
                ]
                .into_iter()
                .flatten()
                {
                    requests.extend_from_slice(b"delete ");
                    requests.extend_from_slice(prefix);
                    requests.extend_from_slice(&target);
                    requests.extend_from_slice(hold.as_bytes());
                    requests.extend_from_slice(b"\r\n");
                    answers += 1;
                }
                stamp = stamp.min(commit.micros.unwrap_or(u64::MAX));
                if answers as usize >= self.options.batch_keys.max(1) {
                    let stamp = std::mem::replace(&mut stamp, u64::MAX);
                    records.push((std::mem::take(&mut requests), std::mem::take(&mut answers), stamp));
                }
            }
        }
        if answers > 0 {
            records.push((requests, answers, stamp));
        }
        // No known commit time: stamp 0 (lag not measured).
        records.iter_mut().filter(|r| r.2 == u64::MAX).for_each(|r| r.2 = 0);
        records
    }

    /// Deletes waiting per destination.
    pub fn backlog(&self) -> Vec<(String, u64)> {
        let depths = self.spools.depths();
        self.destinations
            .iter()
            .map(|d| (d.clone(), depths.iter().find(|(a, _)| a == d).map_or(0, |(_, n)| *n)))
            .collect()
    }

    /// How far behind each near cache's second delivery is.
    pub fn second_backlog(&self) -> Vec<SecondBacklog> {
        let depths = self.second.depths();
        self.options
            .near
            .iter()
            .map(|near| {
                let (waiting, oldest) = self.second.held_back(near).unwrap_or((0, None));
                SecondBacklog {
                    address: near.clone(),
                    owed: depths.iter().find(|(a, _)| a == near).map_or(0, |(_, n)| *n),
                    waiting,
                    waiting_for: oldest.unwrap_or(Duration::ZERO),
                }
            })
            .collect()
    }

    /// Spool flushes done by the group syncers.
    pub fn syncs(&self) -> u64 {
        self.spools.syncs.load(Ordering::Relaxed) + self.second.syncs.load(Ordering::Relaxed)
    }

    /// Deliveries a destination answered with something other than an acknowledgement (they
    /// are sent again).
    pub fn refusals(&self) -> u64 {
        self.spools.refused.load(Ordering::Relaxed) + self.second.refused.load(Ordering::Relaxed)
    }

    /// Whether `destination` is behind: a delivery to it failed (or a spool an earlier run
    /// left for it was not drained) and its spool has not drained since.
    pub fn is_behind(&self, destination: &str) -> bool {
        self.fire_and_forget.is_none()
            && (self.spools.is_failing(destination) || self.spools.is_behind(destination))
    }

    /// How long `destination` has been behind (`None`: it is not).
    pub fn behind_for(&self, destination: &str) -> Option<Duration> {
        if !self.is_behind(destination) {
            return None;
        }
        let since = *self.stats.get(destination)?.behind_since.lock().unwrap_or_else(|p| p.into_inner());
        Some(since.map_or(Duration::ZERO, |s| s.elapsed()))
    }

    /// Follows every destination's state for as long as the process runs, saying on standard
    /// error when one falls behind and when it catches up.
    pub fn watch(self: Arc<Self>) -> std::io::Result<()> {
        std::thread::Builder::new().name("behind".into()).spawn(move || loop {
            for destination in &self.destinations {
                self.look_at(destination);
            }
            std::thread::sleep(WATCH_EVERY);
        })?;
        Ok(())
    }

    /// One look at `destination`: a change of state is recorded and told.
    fn look_at(&self, destination: &str) {
        let Some(stats) = self.stats.get(destination) else { return };
        let behind = self.is_behind(destination);
        let mut since = stats.behind_since.lock().unwrap_or_else(|p| p.into_inner());
        match (*since, behind) {
            (None, true) => {
                *since = Some(Instant::now());
                stats.fell_behind.fetch_add(1, Ordering::Relaxed);
                let waiting = self.backlog().into_iter().find(|(d, _)| d == destination).map_or(0, |b| b.1);
                eprintln!(
                    "shoal invalidator: {destination} is behind: a delivery to it failed and {waiting} \
                     deletes wait in its spool (sent again until it takes them: what it refused every 250 ms, what it did not answer \
                     with the next connection, tried every 100 ms); \
                     a server it invalidates must not serve reads meanwhile (--rejoin-hold, or reads through \
                     a router that spools for it too); unix time {:.3}",
                    crate::late::unix_now()
                );
            }
            (Some(from), false) => {
                *since = None;
                eprintln!(
                    "shoal invalidator: {destination} caught up: its spool is delivered (it was behind for {:.1} s); \
                     unix time {:.3}",
                    from.elapsed().as_secs_f64(),
                    crate::late::unix_now()
                );
            }
            _ => {}
        }
    }

    /// What `destination`'s delivery thread is doing, for how long, and the deletes it holds
    /// to send again.
    pub fn activity(&self, destination: &str) -> Option<(Activity, Duration, u64)> {
        self.spools.activity(destination)
    }

    /// The destinations, in the order given.
    pub fn destinations(&self) -> &[String] {
        &self.destinations
    }
}

/// Appends `records` to `destination`'s spool in `spools`, each held until `after` is
/// acknowledged (none: sent at once), `stats` saying while it is full. The last record's
/// mark, or `Err` once `stop` is set while waiting.
fn append_all(
    spools: &Arc<Spools>,
    stats: &DestinationStats,
    destination: &str,
    records: &[(Vec<u8>, u32, u64)],
    after: &[Mark],
    stop: &AtomicBool,
) -> Result<Option<Mark>, ()> {
    let mut last = None;
    for (requests, answers, stamp) in records {
        let mut warned = false;
        loop {
            let e = match spools.append_after(destination, requests, *answers, *stamp, after.to_vec()) {
                Ok(mark) => {
                    last = Some(mark);
                    break;
                }
                Err(e) => e,
            };
            if !warned {
                eprintln!(
                    "shoal invalidator: {e}; the commit log is held (nothing is lost) until it \
                     drains; raise --backlog-max-mb or bring {destination} back"
                );
                warned = true;
            }
            stats.full.store(true, Ordering::Relaxed);
            if stop.load(Ordering::Relaxed) {
                return Err(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        stats.full.store(false, Ordering::Relaxed);
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_become_records_of_at_most_batch_keys_deletes() {
        let dir = std::env::temp_dir().join(format!("shoal-delivery-test-{}", std::process::id()));
        let options =
            Options { prefix: "/*/*/".into(), batch_keys: 3, max_bytes: 1 << 20, ..Options::default() };
        let delivery = Delivery::open(&dir, &["127.0.0.1:1".into()], options.clone()).unwrap();
        let commits = [
            Commit { keys: vec!["a".into(), "b".into()], micros: Some(50), lsn: 0 },
            Commit { keys: vec!["c".into(), "d".into()], micros: Some(40), lsn: 0 },
            Commit { keys: vec!["e".into()], micros: None, lsn: 0 },
        ];
        let records = delivery.records(&commits, "/*/*/", 0);
        let shape: Vec<_> = records.iter().map(|r| (r.1, r.2)).collect();
        assert_eq!(shape, [(3, 40), (2, 40)]);
        assert_eq!(records[0].0, b"delete /*/*/a\r\ndelete /*/*/b\r\ndelete /*/*/c\r\n");
        assert_eq!(delivery.records(&commits[2..], "/*/*/", 0).iter().map(|r| r.2).collect::<Vec<_>>(), [0]);
        assert_eq!(delivery.records(&commits[2..], "/*/*/", 2)[0].0, b"delete /*/*/e hold 2\r\n");
        // With remote markers, each key's marker is deleted right after it.
        drop(delivery);
        let marked =
            Delivery::open(&dir, &["127.0.0.1:1".into()], Options { remote_markers: true, ..options })
                .unwrap();
        assert_eq!(
            marked.records(&commits[2..], "/*/*/", 0)[0].0,
            b"delete /*/*/e\r\ndelete /*/*/__shoal_rm:e\r\n"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
