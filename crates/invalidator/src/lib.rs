//! # shoal-invalidator: deletes from the database's commit log (mcsqueal; docs/design/invalidation.md)
//!
//! Owns `shoal invalidator`: a daemon that follows a database's commit log, takes the keys
//! each committed transaction names (written into that transaction with
//! `shoal_client::invalidation`), and deletes them in every cluster through the clusters'
//! routers, batched, never losing one.
//!
//! ```text
//!   PostgreSQL slot (test_decoding) ─┐ read (peek)        ┌─► spool dest A ──► router A ──► cluster A
//!   SQLite outbox table ─────────────┴─► Source ─► keys ──┼─► spool dest B ──► router B ──► cluster B
//!          ▲                                              │   (a file each, delivery thread each,
//!          └──── confirm position ◄── every spool has ◄───┘    pipelined `delete` batches)
//!                                     the deletes
//! ```
//!
//! **The rule**: a transaction's deletes are written to every destination's spool (not
//! flushed: each destination's thread sends them at once) and the log's position moves past
//! the transaction only once, in every destination's spool, they are flushed to the disk (a
//! group syncer, one fsync per spool per round, off the delivery path) or acknowledged; a
//! spool record is dropped only after the destination acknowledged every delete in it
//! (`DELETED` or `NOT_FOUND`). A `kill -9`, or the machine going down, at any moment therefore
//! re-sends (deletes are idempotent: from the spool, or read again from the log) and never
//! loses, and a slow disk delays only the confirmation, never a delete (issue #26). A
//! destination that is down keeps its spool (bounded by `--backlog-max-mb`); a full spool
//! holds the log's position — the database keeps the rest — and says so, in the log and in
//! `/metrics`. A destination a delivery failed to is *behind* until its spool drains (said in
//! the log, `/metrics` and `/status`; docs/design/faults.md).
//!
//! **A replica region** (`--wait-for-replica`, `replica.rs`) hands a commit's deletes on only
//! once its region's replica has replayed the commit, and (`--hold-replica`, `hold.rs`) pauses
//! that replica's replay while it could replay what the commit log has not given yet.
//!
//! **Near caches** (`--near`, issue #28) get each delete twice: at once, and again from a
//! second spool once every destination has acknowledged it (delivery.rs), so a near cache
//! that refetched the old value from the pool before the pool's delete is cleaned again; the
//! second spools are held to the same rule (and what a killed run owed is sent after a
//! restart, once the destinations' spools drain), and `/status` says how far behind they are.

mod decoding;
mod delivery;
mod hold;
mod late;
mod metrics;
mod postgres;
mod replica;
mod replication;
mod rules;
#[cfg(test)]
mod slow_disk_tests;
mod snapshots;
mod source;
mod sqlite;
mod watch;

pub use decoding::{parse as parse_decoding_row, Row};
pub use rules::Rule;

use clap::Parser;
use delivery::Delivery;
use source::{Fault, Problem, Source};
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `shoal invalidator`.
#[derive(Debug, Parser)]
#[command(
    about = "Follow a database's commit log and delete the keys of every committed transaction in every cluster",
    after_help = "Writers name the keys in the same transaction as their data:\n  \
        PostgreSQL: SELECT pg_logical_emit_message(true, 'shoal', 'user:7 feed:7')\n  \
        SQLite:     INSERT INTO shoal_outbox (keys) VALUES ('user:7 feed:7')\n\
        (the Rust and Python clients have helpers). Examples:\n  \
        shoal invalidator --postgres 'host=db user=app dbname=app' --destination router-a:5000 --destination router-b:5000\n  \
        shoal invalidator --sqlite app.db --destination 127.0.0.1:11211\n  \
        shoal invalidator --postgres 'host=db user=app dbname=app' -d router-a:5000 --near app-1:11312 --near app-2:11312"
)]
pub struct InvalidatorArgs {
    /// PostgreSQL to follow (a libpq connection string); needs wal_level=logical.
    #[arg(long, value_name = "CONNINFO", conflicts_with = "sqlite", required_unless_present = "sqlite")]
    pub postgres: Option<String>,
    /// SQLite database whose `shoal_outbox` table to follow (created if missing).
    #[arg(long, value_name = "FILE")]
    pub sqlite: Option<PathBuf>,
    /// The replication slot to create and read (PostgreSQL).
    #[arg(long, default_value = "shoal_invalidator")]
    pub slot: String,
    /// After the slot was dropped and the caches flushed: create it again.
    #[arg(long)]
    pub recreate_slot: bool,
    /// How often to log a standby snapshot on the primary (a temporary logical slot created
    /// and dropped), so that the slot's restart point moves and a restarted stream re-decodes
    /// about that much WAL, not PostgreSQL's 15 s; 0: never (PostgreSQL).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub snapshot_every_ms: u64,
    /// Also delete keys for row changes: TABLE=TEMPLATE, e.g. users=user:{id} (repeatable).
    #[arg(long = "rule", value_name = "TABLE=TEMPLATE")]
    pub rules: Vec<String>,
    /// Where deletes go: a router (or server) per cluster, host:port or a unix socket path
    /// (repeatable; each gets its own ordered spool).
    #[arg(
        long = "destination",
        short = 'd',
        value_name = "ADDRESS",
        required_unless_present = "cold_destinations"
    )]
    pub destinations: Vec<String>,
    /// A cold cluster's router, being warmed up from a warm cluster (WarmUpRoute): its deletes
    /// carry a hold-off (`delete <key> hold <--cold-hold>`) during which the warm cluster's
    /// possibly stale copy cannot be added (repeatable).
    #[arg(long = "cold-destination", value_name = "ADDRESS")]
    pub cold_destinations: Vec<String>,
    /// A near cache's invalidation listener (`shoal server --upstream … --invalidation-listen`):
    /// each delete is sent to it at once, and again once every --destination and
    /// --cold-destination has acknowledged it (a near cache that refetched through a router
    /// before the pool's copy was deleted would otherwise keep the old value); keys go
    /// without --prefix (repeatable; two spools each).
    #[arg(long = "near", value_name = "ADDRESS")]
    pub near: Vec<String>,
    /// The hold-off of deletes to cold destinations, in seconds (Facebook uses 2).
    #[arg(long, default_value_t = 2)]
    pub cold_hold: u32,
    /// Put this routing prefix before every key (e.g. `/*/*/` for every cluster behind one router).
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Spools and the slot's record live here (default: $STATE_DIRECTORY, the directory
    /// systemd's StateDirectory= makes, else /var/lib/shoal/invalidator).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The most each destination's spool may hold, in megabytes.
    #[arg(long, default_value_t = 256)]
    pub backlog_max_mb: u64,
    /// Deletes per batch sent to a destination in one write.
    #[arg(long, default_value_t = 1000)]
    pub batch_keys: usize,
    /// Changes read from the log at a time.
    #[arg(long, default_value_t = 10_000)]
    pub read_changes: usize,
    /// How long a read waits for new changes, in milliseconds (SQLite's polling interval).
    #[arg(long, default_value_t = 5)]
    pub poll_ms: u64,
    /// Spools are not flushed to the disk (a `kill -9` still loses nothing; a machine crash
    /// may): the log's position is confirmed once the deletes are written.
    #[arg(long)]
    pub no_fsync: bool,
    /// `off` moves the log's position as soon as it is read and sends each batch once, without
    /// waiting for acknowledgement or retrying: a destination that is down, or a kill, loses
    /// deletes. For the consistency benchmark's control run; never in production.
    #[arg(long, value_parser = ["on", "off"], default_value = "on")]
    pub ack_rule: String,
    /// A replica region's invalidator: hold each batch until this streaming replica (the
    /// region's database) has replayed its commits (PostgreSQL only).
    #[arg(long, value_name = "CONNINFO")]
    pub wait_for_replica: Option<String>,
    /// With --wait-for-replica: pause that replica's replay (`pg_wal_replay_pause()`) while it
    /// could replay what the commit log has not given (the log has not given what the master
    /// wrote the replica's `recovery_min_apply_delay` ago, or the master cannot be asked), at
    /// most SECONDS at a time, so that the region's reads never find rows newer than their
    /// deletes (after a cut of the WAN the replica catches up faster than the master decodes).
    /// Needs a superuser, or EXECUTE on pg_wal_replay_pause() and pg_wal_replay_resume().
    #[arg(long, value_name = "SECONDS", requires = "wait_for_replica",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub hold_replica: Option<u64>,
    /// Also delete each key's remote marker (`shoal_client::invalidation::remote_marker_key`).
    #[arg(long)]
    pub remote_markers: bool,
    /// Serve Prometheus metrics at /metrics and a JSON summary at /status on this address.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
}

/// What the invalidator has done, for `/metrics` and `/status`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Committed transactions with keys.
    pub transactions: AtomicU64,
    /// Deletes spooled (per destination).
    pub deletes: AtomicU64,
    /// Failed reads of the log.
    pub source_errors: AtomicU64,
    problems: Mutex<HashMap<&'static str, u64>>,
    /// The last confirmed position.
    pub position: Mutex<String>,
    /// Batches read and spooled whose position waits to be confirmed until their deletes are
    /// flushed or acknowledged in every spool.
    pub unconfirmed: AtomicU64,
    /// `--hold-replica`: times the replica's replay was paused, for how long in all
    /// (microseconds), and how many holds were released at the bound.
    pub replica_holds: AtomicU64,
    pub replica_held_micros: AtomicU64,
    pub replica_releases: AtomicU64,
    /// How far the log has given, which `--hold-replica` keeps the replica behind.
    pub replica_front: hold::Front,
}

impl Counters {
    fn problem(&self, problem: &Problem) {
        *self.problems.lock().unwrap_or_else(|p| p.into_inner()).entry(problem.kind()).or_default() += 1;
    }

    /// Problems by kind.
    pub fn problems(&self) -> Vec<(&'static str, u64)> {
        let mut all: Vec<_> =
            self.problems.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, n)| (*k, *n)).collect();
        all.sort();
        all
    }
}

/// Runs `shoal invalidator` until it is killed, or a fault needs an operator.
pub fn run(args: InvalidatorArgs) -> Result<(), String> {
    let rules = args
        .rules
        .iter()
        .map(|r| Rule::parse(r).map_err(|e| format!("--rule {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if args.sqlite.is_some() && !rules.is_empty() {
        return Err("--rule needs --postgres: SQLite has no commit log to read row changes from".into());
    }
    if args.sqlite.is_some() && args.wait_for_replica.is_some() {
        return Err("--wait-for-replica needs --postgres: it waits for a PostgreSQL streaming replica".into());
    }
    let destinations: Vec<String> =
        args.destinations.iter().chain(&args.cold_destinations).cloned().collect();
    for destination in &destinations {
        shoal_route::Server::parse(destination).map_err(|e| format!("--destination {destination}: {e}"))?;
    }
    for near in &args.near {
        shoal_route::Server::parse(near).map_err(|e| format!("--near {near}: {e}"))?;
        if destinations.contains(near) {
            return Err(format!("--near {near} is a --destination too: give it once, as --near"));
        }
    }
    let followed = match (&args.postgres, &args.sqlite) {
        (Some(_), _) => format!("PostgreSQL slot {}", args.slot),
        (None, Some(path)) => format!("the outbox of {}", path.display()),
        (None, None) => return Err("give --postgres or --sqlite".into()),
    };
    let state_dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    std::fs::create_dir_all(&state_dir).map_err(|e| {
        format!(
            "--state-dir {}: {e} (give --state-dir DIR, a directory this user may write)",
            state_dir.display()
        )
    })?;
    let ack_rule = args.ack_rule == "on";
    if !ack_rule {
        eprintln!(
            "shoal invalidator: --ack-rule off: deletes are sent once, unacknowledged, and the log moves on; \
             a destination that is down loses them"
        );
    }
    let progress = Arc::new(watch::Progress::default());
    let delivery = Arc::new(Delivery::open(
        &state_dir.join("spools"),
        &destinations,
        delivery::Options {
            prefix: args.prefix.clone(),
            batch_keys: args.batch_keys,
            max_bytes: args.backlog_max_mb << 20,
            durable: !args.no_fsync,
            syncer: shoal_spool::Syncer::default(),
            fire_and_forget: !ack_rule,
            remote_markers: args.remote_markers,
            cold: args.cold_destinations.clone(),
            cold_hold: args.cold_hold,
            progress: progress.clone(),
            near: args.near.clone(),
        },
    )?);
    if ack_rule {
        delivery.clone().watch().map_err(|e| format!("could not start a thread: {e}"))?;
        watch::spawn(progress.clone(), delivery.clone())
            .map_err(|e| format!("could not start a thread: {e}"))?;
    }
    let counters = Arc::new(Counters::default());
    // Held from the start: until the commit log gives its first position, the replica may not
    // run ahead of it (at most the bound, as always).
    if let (Some(replica), Some(master), Some(seconds)) =
        (&args.wait_for_replica, &args.postgres, args.hold_replica)
    {
        hold::spawn(replica, master, Duration::from_secs(seconds), counters.clone())?;
    }
    let mut source = open_source(&args, rules, &state_dir)?;
    source.set_progress(progress.clone());
    // Served once the source is open (the slot exists), so a script that waits for /status
    // knows commits from then on are followed.
    if let Some(address) = &args.metrics_listen {
        metrics::spawn(address, delivery.clone(), counters.clone())?;
    }
    eprintln!("shoal invalidator: following {followed} into {}", delivery.destinations().join(", "));
    let stop = AtomicBool::new(false);
    follow(source.as_mut(), &delivery, &counters, &args, ack_rule, &stop, &progress)
}

/// Where state lives without `--state-dir`: the directory systemd made for the service
/// (`StateDirectory=`, the first of `$STATE_DIRECTORY`), else /var/lib/shoal/invalidator —
/// never the working directory, which a restart from elsewhere would not find again.
fn default_state_dir() -> PathBuf {
    let systemd = std::env::var_os("STATE_DIRECTORY");
    let first = systemd.as_ref().and_then(|dirs| std::env::split_paths(dirs).next());
    first.filter(|dir| dir.is_absolute()).unwrap_or_else(|| PathBuf::from("/var/lib/shoal/invalidator"))
}

/// The pause before the next try after `failures` failures in a row: `first`, doubling, at most
/// `cap`. A database that returns (a restart, a link back, a slot its old reader let go) is
/// reached again within tens of milliseconds, where a fixed pause of half a second or more was
/// most of the time a fault's deletes arrived late (issue #26); one that stays away is asked at
/// most every `cap`.
fn pause_after(failures: u32, first: Duration, cap: Duration) -> Duration {
    first.saturating_mul(1 << failures.saturating_sub(1).min(16)).min(cap)
}

/// The first pause after a failure to read the commit log, and the longest.
const REREAD_FIRST: Duration = Duration::from_millis(20);
const REREAD_CAP: Duration = Duration::from_millis(500);
/// The longest pause while the database refuses connections (a link cut by a proxy that closes
/// its port, a restart): a refused connect costs nothing, so the log is read again within
/// 100 ms of the port opening rather than up to 500 ms after it (issue #26).
const REFUSED_CAP: Duration = Duration::from_millis(100);

/// Whether a reconnect failed because the connection was refused (nothing listens).
fn refused(fault: &Fault) -> bool {
    matches!(fault, Fault::Transient(why) if why.contains("Connection refused"))
}

/// Opens the source, waiting out a database that is not up yet.
fn open_source(
    args: &InvalidatorArgs,
    rules: Vec<Rule>,
    state_dir: &std::path::Path,
) -> Result<Box<dyn Source>, String> {
    let mut failures = 0;
    loop {
        let opened: Result<Box<dyn Source>, Fault> = match (&args.postgres, &args.sqlite) {
            (Some(conninfo), _) => {
                let snapshots =
                    (args.snapshot_every_ms > 0).then(|| Duration::from_millis(args.snapshot_every_ms));
                postgres::Postgres::open(
                    conninfo,
                    &args.slot,
                    rules.clone(),
                    state_dir,
                    args.recreate_slot,
                    snapshots,
                )
                .map(|s| Box::new(s) as Box<dyn Source>)
            }
            (None, Some(path)) => sqlite::Sqlite::open(path).map(|s| Box::new(s) as Box<dyn Source>),
            (None, None) => return Err("give --postgres or --sqlite".into()),
        };
        match opened {
            Ok(source) => return Ok(source),
            Err(Fault::Fatal(why)) => return Err(why),
            Err(Fault::Transient(why)) => {
                if failures == 0 {
                    eprintln!("shoal invalidator: {why}; retrying (at most a second apart)");
                }
                failures += 1;
                std::thread::sleep(pause_after(failures, REREAD_FIRST, Duration::from_secs(1)));
            }
        }
    }
}

/// Positions read past and spooled, each with the marks of its deletes' records, waiting to
/// be confirmed until those are safe (flushed or acknowledged) in every spool.
type Unconfirmed = VecDeque<(source::Position, Vec<shoal_spool::Mark>)>;

/// What hands a read batch's commits on: into the spools, then the log's position confirmed
/// once they are safe there (before, under `--ack-rule off`).
struct Handing<'a> {
    source: &'a mut dyn Source,
    delivery: &'a Delivery,
    counters: &'a Counters,
    ack_rule: bool,
    stop: &'a AtomicBool,
    progress: &'a watch::Progress,
    unconfirmed: &'a mut Unconfirmed,
    /// When the commit log gave the batch being handed on.
    read_at: Instant,
    late: &'a late::Throttle,
}

impl Handing<'_> {
    /// Spools `commits` and queues `upto` (the position past them) to be confirmed once they
    /// are safe; false when stopped while a full spool held them.
    fn on(
        &mut self,
        commits: &[source::Commit],
        upto: &source::Position,
        in_hand: usize,
    ) -> Result<bool, Fault> {
        self.progress.enter(watch::Stage::Spooling, in_hand);
        if !self.ack_rule {
            self.progress.enter(watch::Stage::Confirming, 0);
            self.source.confirm(upto)?;
            self.progress.enter(watch::Stage::Spooling, in_hand);
            *self.counters.position.lock().unwrap_or_else(|p| p.into_inner()) = upto.to_string();
        }
        let Ok((deletes, marks)) = self.delivery.spool(commits, self.stop) else { return Ok(false) };
        if let Some(oldest) = commits.iter().filter_map(|c| c.micros).min() {
            let age = Duration::from_micros(delivery::now_micros().saturating_sub(oldest));
            if age > late::LATE && self.late.ready() {
                eprintln!("{}", late::spooled(age, self.read_at.elapsed(), commits.len()));
            }
        }
        if self.ack_rule {
            self.unconfirmed.push_back((upto.clone(), marks));
            self.counters.unconfirmed.store(self.unconfirmed.len() as u64, Ordering::Relaxed);
            confirm_safe(self.source, self.counters, self.progress, self.unconfirmed)?;
        }
        self.counters.transactions.fetch_add(commits.len() as u64, Ordering::Relaxed);
        self.counters.deletes.fetch_add(deletes as u64, Ordering::Relaxed);
        Ok(true)
    }
}

/// Confirms the furthest queued position whose deletes, and all before them, are safe in
/// every spool (flushed or acknowledged): what lies before it is never read again.
fn confirm_safe(
    source: &mut dyn Source,
    counters: &Counters,
    progress: &watch::Progress,
    unconfirmed: &mut Unconfirmed,
) -> Result<(), Fault> {
    let safe = unconfirmed.iter().take_while(|(_, marks)| Delivery::safe(marks)).count();
    let Some((upto, _)) = safe.checked_sub(1).and_then(|last| unconfirmed.get(last)) else { return Ok(()) };
    progress.enter(watch::Stage::Confirming, 0);
    source.confirm(upto)?;
    *counters.position.lock().unwrap_or_else(|p| p.into_inner()) = upto.to_string();
    unconfirmed.drain(..safe);
    counters.unconfirmed.store(unconfirmed.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// The main loop: read, spool, confirm.
fn follow(
    source: &mut dyn Source,
    delivery: &Delivery,
    counters: &Counters,
    args: &InvalidatorArgs,
    ack_rule: bool,
    stop: &AtomicBool,
    progress: &watch::Progress,
) -> Result<(), String> {
    let idle = Duration::from_millis(args.poll_ms);
    let mut replica = args.wait_for_replica.as_deref().map(replica::ReplicaGate::new);
    let mut failing: Option<String> = None;
    let mut failures = 0;
    let mut cap = REREAD_CAP;
    let mut unconfirmed = Unconfirmed::new();
    let late = late::Throttle::default();
    while !stop.load(Ordering::Relaxed) {
        // The source waits for changes itself (up to `idle`), so the loop never sleeps.
        let step = (|| -> Result<(), Fault> {
            confirm_safe(&mut *source, counters, progress, &mut unconfirmed)?;
            progress.enter(watch::Stage::Reading, 0);
            let batch = source.read(args.read_changes, idle)?;
            counters.replica_front.advance(source.given());
            let read_at = Instant::now();
            let in_hand = batch.commits.iter().map(|c| c.keys.len()).sum();
            for problem in &batch.problems {
                counters.problem(problem);
                eprintln!("shoal invalidator: {problem}");
            }
            let Some(upto) = batch.upto else { return Ok(()) };
            let mut hand = Handing {
                source: &mut *source,
                delivery,
                counters,
                ack_rule,
                stop,
                progress,
                unconfirmed: &mut unconfirmed,
                read_at,
                late: &late,
            };
            let (Some(gate), source::Position::Lsn(..)) = (replica.as_mut(), &upto) else {
                hand.on(&batch.commits, &upto, in_hand)?;
                return Ok(());
            };
            // A replica region's commits are handed on as the replica replays them, each as
            // soon as it has, rather than the whole batch once its last commit has: the first
            // commits of a batch (read while the previous one waited for the replica's
            // `recovery_min_apply_delay`) would wait that delay twice (issue #26).
            let mut from = 0;
            while from < batch.commits.len() {
                hand.progress.enter(watch::Stage::Replica, in_hand);
                let replayed = gate.wait_for(batch.commits[from].lsn, stop, &mut || {
                    hand.source.tend()?;
                    counters.replica_front.advance(hand.source.given());
                    Ok(())
                })?;
                let n = batch.commits[from..].iter().take_while(|c| c.lsn <= replayed).count().max(1);
                let last = &batch.commits[from + n - 1];
                let done = if from + n == batch.commits.len() {
                    upto.clone()
                } else {
                    source::Position::Lsn(last.lsn, false)
                };
                if !hand.on(&batch.commits[from..from + n], &done, in_hand)? {
                    return Ok(());
                }
                from += n;
            }
            if batch.commits.is_empty() {
                hand.on(&[], &upto, 0)?;
            }
            Ok(())
        })();
        match step {
            Ok(()) => {
                failures = 0;
                if let Some(why) = failing.take() {
                    eprintln!("shoal invalidator: reading again (after: {why})");
                }
            }
            Err(Fault::Fatal(why)) => return Err(why),
            Err(Fault::Transient(why)) => {
                counters.source_errors.fetch_add(1, Ordering::Relaxed);
                if failing.as_deref() != Some(&why) {
                    eprintln!("shoal invalidator: {why}; nothing after the last confirmed position is lost; retrying");
                    failing = Some(why);
                }
                failures += 1;
                std::thread::sleep(pause_after(failures, REREAD_FIRST, cap));
                match source.reconnect() {
                    Err(Fault::Fatal(why)) => return Err(why),
                    Err(fault) => cap = if refused(&fault) { REFUSED_CAP } else { REREAD_CAP },
                    Ok(()) => cap = REREAD_CAP,
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{pause_after, refused, Fault};
    use std::time::Duration;

    #[test]
    fn a_refused_connect_is_told_from_other_faults() {
        let fault = |why: &str| Fault::Transient(why.to_string());
        assert!(refused(&fault(
            "connecting to PostgreSQL at host=db port=5432: Connection refused (os error 111)"
        )));
        assert!(refused(&fault(
            "PostgreSQL replication connection: connect: Connection refused (os error 111)"
        )));
        assert!(!refused(&fault("PostgreSQL did not answer within 2.0 s")));
        assert!(!refused(&Fault::Fatal("Connection refused".into())), "a fatal fault is not retried at all");
    }

    #[test]
    fn the_pause_after_failures_starts_short_doubles_and_stops_at_its_cap() {
        let ms = Duration::from_millis;
        let pauses: Vec<_> = (1..=7).map(|n| pause_after(n, ms(20), ms(500))).collect();
        assert_eq!(pauses, [ms(20), ms(40), ms(80), ms(160), ms(320), ms(500), ms(500)]);
        assert_eq!(pause_after(u32::MAX, ms(20), ms(500)), ms(500), "no overflow however many");
        assert_eq!(pause_after(0, ms(20), ms(500)), ms(20));
    }
}
