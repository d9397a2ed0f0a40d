//! `--hold-replica`: a replica region's replica may not run ahead of its deletes. The replica
//! gate (`replica.rs`) keeps deletes from overtaking the replica; this keeps the replica from
//! overtaking the deletes. The invalidator reads the master's commit log over the WAN, while
//! the replica replays the same WAL physically: after a cut of the WAN on a loaded machine,
//! the replica received and replayed the cut's backlog seconds before the master's walsender
//! had decoded it for the invalidator, and region B's readers refilled the old rows' cached
//! copies meanwhile (docs/design/faults.md, "What it found"). So the replica's replay is paused
//! (`pg_wal_replay_pause()`) while it could replay what the commit log has not given this
//! invalidator, and resumed once it cannot — for at most the bound the operator gives, after
//! which it is resumed and said loudly (the log being that far behind is a fault of its own,
//! and the region's database must not stop for it).
//!
//! PostgreSQL can only pause and resume replay, and a backlog replays within milliseconds of
//! arriving, so the hold cannot wait to see the replica pass the log: it pauses *before*. A
//! thread asks the master for its WAL position every 10 ms (`pg_current_wal_flush_lsn()`), and
//! the replica is held while
//!
//! - the commit log has **not given what the master had written** `recovery_min_apply_delay` −
//!   [`MARGIN`] ago (at least [`NEWEST`] ago): those commits' apply delay is over, so the replica
//!   replays them as soon as it has them (what the master wrote since is held by the delay
//!   itself), or — after a cut — it already has them in a burst it is about to replay;
//! - the master's position is **not known** from that long ago or since (a cut, a master that
//!   does not answer): the replica may receive anything the moment the link returns;
//! - it has **replayed** past what the log has given (too late, but no further).
//!
//! "Given" counts what has arrived from the walsender, read or not: rows held in the stream's
//! buffer while a batch waits for the replica are handed on as soon as that batch is (the
//! gate waits for the replica, so counting only handed-on rows would hold the replica that the
//! gate waits for).
//!
//! ```text
//!   follow (each read, each look while a batch waits) ──► Front: the position given ─┐
//!   master thread, every 10 ms: pg_current_wal_flush_lsn() ──► Written: (when, position) ┤
//!   hold thread, every 10 ms: look at the replica (replayed, received, paused, apply delay)
//!     a reason to hold ──► pause        (Free ─► Held)
//!     none              ──► resume       (Held ─► Free)
//!     held longer than the bound ──► resume, say so; not held again until no reason is left
//!                                                      (Held ─► Spent ─► Free)
//! ```
//!
//! A replica found paused when the thread connects (a killed invalidator's hold) counts as
//! held from then on, so it is resumed by the same rules. PostgreSQL 16 can decode on the
//! standby itself (the invalidator would read its own region's replica, as McSqueal does);
//! Debian 12 has PostgreSQL 15.

use crate::replica::{Look, Replica, RETRY_REPLICA};
use crate::source::Fault;
use crate::Counters;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the replica and the master are looked at.
const LOOK_EVERY: Duration = Duration::from_millis(10);
/// The replica's apply delay less this is how old the master's position must be for the log to
/// have given it.
pub const MARGIN: Duration = Duration::from_millis(200);
/// At least this old (a replica without an apply delay replays at once: the log must keep up
/// with the master within a few looks).
pub const NEWEST: Duration = Duration::from_millis(50);
/// The oldest the master's positions are kept (an apply delay of hours would otherwise keep
/// hours of them): a position written longer ago than this counts whatever the delay.
const WRITTEN_FOR: Duration = Duration::from_secs(60);
/// How long a question to the master (or a connect) may take before it is given up.
const ASK_WITHIN: Duration = Duration::from_millis(500);
/// A hold at least this long is said when it ends.
const SAID_AFTER: Duration = Duration::from_secs(1);

/// The furthest position the commit log has given this process.
#[derive(Debug, Default)]
pub struct Front(AtomicU64);

impl Front {
    /// The log has given everything before `lsn` (positions only grow: a restarted stream
    /// gives again what this process had).
    pub fn advance(&self, lsn: u64) {
        self.0.fetch_max(lsn, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The master's WAL positions as the master thread found them, oldest first.
#[derive(Debug, Default)]
struct Written(Mutex<VecDeque<(Instant, u64)>>);

impl Written {
    fn note(&self, at: Instant, lsn: u64) {
        let mut written = self.0.lock().unwrap_or_else(|p| p.into_inner());
        written.push_back((at, lsn));
        while written.front().is_some_and(|&(then, _)| at.duration_since(then) > WRITTEN_FOR) {
            written.pop_front();
        }
    }

    /// At least what the master had written `ago` before `now`: the first position found at
    /// or after that moment (`None` when none was found since: a cut, or a master that does
    /// not answer).
    fn since(&self, now: Instant, ago: Duration) -> Option<u64> {
        let from = now.checked_sub(ago)?;
        let written = self.0.lock().unwrap_or_else(|p| p.into_inner());
        written.iter().find(|&&(at, _)| at >= from).map(|&(_, lsn)| lsn)
    }
}

/// Why the replica is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    /// Paused when this process found it: an earlier invalidator's hold.
    Found,
    Unknown,
    Behind,
    Replayed,
}

impl Reason {
    fn says(self) -> &'static str {
        match self {
            Reason::Found => "a hold left by an earlier invalidator",
            Reason::Unknown => "the master's position was not known",
            Reason::Behind => {
                "the commit log had not given what the master had written an apply delay before"
            }
            Reason::Replayed => "the replica had replayed past what the commit log had given",
        }
    }
}

/// The reason to hold the replica now, if there is one: `written` is at least what the master
/// had written an apply delay (less [`MARGIN`]) before.
fn reason(look: &Look, written: Option<u64>, given: u64) -> Option<Reason> {
    match written {
        None => Some(Reason::Unknown),
        Some(_) if look.replayed > given => Some(Reason::Replayed),
        Some(written) if written > given => Some(Reason::Behind),
        Some(_) => None,
    }
}

/// Where the hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Paused since then, for that reason.
    Held(Instant, Reason),
    /// Released at the bound: not held again until no reason is left.
    Spent,
}

impl State {
    fn next(self, reason: Option<Reason>, now: Instant, most: Duration) -> State {
        match (self, reason) {
            (_, None) => State::Free,
            (State::Free, Some(reason)) => State::Held(now, reason),
            (State::Held(since, _), Some(_)) if now.duration_since(since) >= most => State::Spent,
            (state, Some(_)) => state,
        }
    }

    fn paused(self) -> bool {
        matches!(self, State::Held(..))
    }
}

/// Notes the master's WAL position every [`LOOK_EVERY`], each question given [`ASK_WITHIN`]:
/// one that a cut link leaves unanswered is given up with its connection (the answer could
/// come seconds after the link's return, behind TCP's retransmission back-off), and the next
/// question goes over a new one.
async fn ask_the_master(config: tokio_postgres::Config, written: &Written) {
    let mut connected: Option<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> = None;
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        if connected.is_none() {
            match tokio::time::timeout(ASK_WITHIN, config.connect(tokio_postgres::NoTls)).await {
                Ok(Ok((client, connection))) => {
                    let task = tokio::spawn(async move { drop(connection.await) });
                    connected = Some((client, task));
                }
                _ => {
                    tokio::time::sleep(RETRY_REPLICA).await;
                    continue;
                }
            }
        }
        let (client, task) = connected.as_ref().expect("connected above");
        // What the master had written by the moment the question was sent: noted at it.
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            ASK_WITHIN,
            client.query_one("SELECT pg_current_wal_flush_lsn()::text", &[]),
        );
        match answer.await {
            Ok(Ok(row)) => written.note(asked, crate::replica::parse_lsn(row.get(0)).unwrap_or(u64::MAX)),
            // Unknown meanwhile: the replica is held.
            _ => {
                task.abort();
                connected = None;
            }
        }
    }
}

/// Starts the threads that hold the replica at `replica` behind the commit log of `master`,
/// for at most `most` at a time.
pub fn spawn(replica: &str, master: &str, most: Duration, counters: Arc<Counters>) -> Result<(), String> {
    let written = Arc::new(Written::default());
    let mut config: tokio_postgres::Config =
        master.parse().map_err(|e| format!("--postgres {master:?}: {e}"))?;
    config.connect_timeout(ASK_WITHIN);
    let noted = written.clone();
    let spawned = std::thread::Builder::new().name("hold-master".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        match runtime {
            Ok(runtime) => runtime.block_on(ask_the_master(config, &written)),
            Err(e) => eprintln!("shoal invalidator: --hold-replica: cannot ask the master ({e}); the replica is held at most the bound at a time"),
        }
    });
    spawned.map_err(|e| format!("could not start a thread: {e}"))?;
    let mut replica = Replica::new(replica);
    let spawned = std::thread::Builder::new().name("hold-replica".into()).spawn(move || {
        let mut state = State::Free;
        let mut failing: Option<String> = None;
        loop {
            std::thread::sleep(LOOK_EVERY);
            let step = replica.look().and_then(|look| {
                let now = Instant::now();
                // Found paused and not by us: a killed invalidator's hold, ours from now on.
                if look.paused && state == State::Free {
                    state = State::Held(now, Reason::Found);
                }
                let given = counters.replica_front.get();
                let written = noted.since(now, look.apply_delay.saturating_sub(MARGIN).clamp(NEWEST, WRITTEN_FOR));
                let next = state.next(reason(&look, written, given), now, most);
                account(state, next, &look, given, written, most, &counters);
                state = next;
                if next.paused() != look.paused {
                    replica.set_paused(next.paused())?;
                }
                Ok(())
            });
            match step {
                Ok(()) => {
                    if failing.take().is_some() {
                        eprintln!("shoal invalidator: --hold-replica: the replica answers again");
                    }
                }
                Err(Fault::Transient(why)) => {
                    if failing.as_deref() != Some(&why) {
                        eprintln!("shoal invalidator: {why}; the replica is not held or released meanwhile; asking again every 100 ms");
                        failing = Some(why);
                    }
                    std::thread::sleep(RETRY_REPLICA);
                }
                // The gate meets the same fault and ends the process with it.
                Err(Fault::Fatal(_)) => return,
            }
        }
    });
    spawned.map_err(|e| format!("could not start a thread: {e}"))?;
    Ok(())
}

/// Counts a hold that begins or ends, and says a long one and a release at the bound.
fn account(
    from: State,
    to: State,
    look: &Look,
    given: u64,
    written: Option<u64>,
    most: Duration,
    counters: &Counters,
) {
    let unix = crate::late::unix_now();
    let lsn = crate::replication::lsn_text;
    let positions = || {
        format!(
            "given {}, the master's then {}, the replica's replayed {} and received {}",
            lsn(given),
            written.map_or_else(|| "unknown".into(), lsn),
            lsn(look.replayed),
            lsn(look.received)
        )
    };
    let State::Held(since, why) = from else {
        if to.paused() {
            counters.replica_holds.fetch_add(1, Ordering::Relaxed);
        } else if (from, to) == (State::Spent, State::Free) {
            eprintln!("shoal invalidator: --hold-replica: the commit log has caught up with the replica; unix time {unix:.3}");
        }
        return;
    };
    if to.paused() {
        return;
    }
    let held = since.elapsed();
    counters.replica_held_micros.fetch_add(held.as_micros() as u64, Ordering::Relaxed);
    if to == State::Spent {
        counters.replica_releases.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "shoal invalidator: --hold-replica: released the replica after the bound of {} s ({}; {}): reads in \
             its region may find rows newer than their cached copies until the log catches up; unix time {unix:.3}",
            most.as_secs(),
            why.says(),
            positions()
        );
    } else if held >= SAID_AFTER {
        eprintln!(
            "shoal invalidator: --hold-replica: held the replica's replay {:.2} s ({}; released at {}); unix time {unix:.3}",
            held.as_secs_f64(),
            why.says(),
            positions()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOST: Duration = Duration::from_secs(30);

    fn look(replayed: u64) -> Look {
        Look { replayed, received: replayed, paused: false, apply_delay: Duration::from_millis(500) }
    }

    #[test]
    fn the_replica_is_held_while_the_log_is_behind_the_master_unknown_or_overtaken() {
        assert_eq!(reason(&look(100), Some(100), 100), None, "the log has given what the master had written");
        assert_eq!(reason(&look(100), Some(120), 110), Some(Reason::Behind));
        assert_eq!(reason(&look(111), Some(100), 110), Some(Reason::Replayed));
        assert_eq!(reason(&look(100), None, 100), Some(Reason::Unknown), "no position of the master since");
    }

    #[test]
    fn the_masters_position_counts_from_the_first_found_at_or_after_the_moment() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let written = Written::default();
        assert_eq!(written.since(t0 + ms(500), ms(300)), None, "nothing found yet");
        written.note(t0, 10);
        written.note(t0 + ms(100), 20);
        written.note(t0 + ms(250), 30);
        assert_eq!(written.since(t0 + ms(400), ms(300)), Some(20), "what the master had at 100 ms");
        assert_eq!(written.since(t0 + ms(400), ms(400)), Some(10));
        assert_eq!(written.since(t0 + ms(600), ms(300)), None, "nothing found since 300 ms: unknown");
        // After a gap (a cut), the first position found after it counts: more than the master had
        // at the moment, never less.
        written.note(t0 + ms(900), 90);
        assert_eq!(written.since(t0 + ms(1000), ms(300)), Some(90));
    }

    #[test]
    fn a_hold_ends_when_no_reason_is_left_or_at_its_bound() {
        let t0 = Instant::now();
        let held = State::Free.next(Some(Reason::Unknown), t0, MOST);
        assert_eq!(held, State::Held(t0, Reason::Unknown));
        assert!(held.paused());
        assert_eq!(held.next(Some(Reason::Behind), t0 + MOST / 2, MOST), held, "still a reason: held");
        assert_eq!(held.next(None, t0 + MOST / 2, MOST), State::Free);
        let spent = held.next(Some(Reason::Behind), t0 + MOST, MOST);
        assert_eq!(spent, State::Spent);
        assert!(!spent.paused(), "released at the bound");
        assert_eq!(spent.next(Some(Reason::Behind), t0 + MOST * 2, MOST), State::Spent, "not held again");
        assert_eq!(spent.next(None, t0 + MOST * 2, MOST), State::Free);
    }
}
