//! `--snapshot-every-ms`: moves the slot's restart point forward every second, so that a
//! restarted stream re-decodes about a second of WAL rather than up to fifteen (issue #26).
//!
//! ```text
//!   every 1 s, own SQL connection:
//!     pg_create_logical_replication_slot('<slot>_snapshot', 'test_decoding', temporary => true)
//!       └─► PostgreSQL logs a running_xacts record (ReplicationSlotReserveWal → LogStandbySnapshot)
//!     pg_drop_replication_slot('<slot>_snapshot')
//!   the stream's walsender decodes that record ─► a candidate restart point for our slot
//!   our next confirm past the record ─► the slot's restart_lsn moves to it
//! ```
//!
//! A logical slot's `restart_lsn` moves only at `running_xacts` records, which PostgreSQL's
//! background writer logs every 15 s: a stream that restarts (a WAN cut, a reconnect, a kill)
//! decodes again everything from there, up to 15 s of WAL, before it sends its first new
//! commit, while a streaming replica has those commits in a few hundred milliseconds.
//! PostgreSQL 16 has `pg_log_standby_snapshot()`; 15 logs one when a logical slot is created on
//! a primary, which is what this does, with a temporary slot dropped at once (dropped by
//! PostgreSQL too when the session ends).
//!
//! It never holds the stream up: it is a thread of its own with its own connection (a slot's
//! creation waits for the transactions running at that moment to end: bounded by a statement
//! timeout), and one that fails only says so, once per cause. Nothing about what is read or
//! confirmed changes: it only lets the restart point, which the confirmations already move,
//! move more often.

use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the slot's creation may wait for running transactions to end.
const CREATE_WITHIN: Duration = Duration::from_secs(5);

/// A thread that logs a standby snapshot every so often; stopped when dropped.
pub struct Keeper {
    stop: Arc<AtomicBool>,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The temporary slot's name: `<slot>_snapshot`, within PostgreSQL's 63 bytes.
pub fn temporary_slot(slot: &str) -> String {
    format!("{}_snapshot", &slot[..slot.len().min(63 - "_snapshot".len())])
}

impl Keeper {
    /// Starts logging a standby snapshot every `every` on the primary at `conninfo`.
    pub fn spawn(conninfo: &str, slot: &str, every: Duration) -> Result<Keeper, String> {
        let mut config = crate::postgres::config_of(conninfo)?;
        // A connection whose link is cut fails a query within seconds, not TCP's minutes.
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(CREATE_WITHIN + Duration::from_secs(1));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (name, stopping) = (temporary_slot(slot), stop.clone());
        std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || keep(&config, &name, every, &stopping))
            .map_err(|e| format!("could not start a thread: {e}"))?;
        Ok(Keeper { stop })
    }
}

fn keep(config: &postgres::Config, name: &str, every: Duration, stop: &AtomicBool) {
    let mut client: Option<Client> = None;
    let mut failing: Option<String> = None;
    let mut next = Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(100)));
            continue;
        }
        next = now + every;
        match log_snapshot(&mut client, config, name) {
            Ok(()) => {
                if failing.take().is_some() {
                    eprintln!("shoal invalidator: standby snapshots are logged again (--snapshot-every-ms)");
                }
            }
            Err(why) => {
                // A session that failed may hold the temporary slot: a new one starts clean.
                client = None;
                if failing.as_deref() != Some(&why) {
                    eprintln!(
                        "shoal invalidator: could not log a standby snapshot ({why}); a restarted stream \
                         may re-decode up to 15 s of WAL; trying again every {} ms",
                        every.as_millis()
                    );
                    failing = Some(why);
                }
            }
        }
    }
}

/// Creates and drops the temporary logical slot `name` (connecting first if need be).
fn log_snapshot(client: &mut Option<Client>, config: &postgres::Config, name: &str) -> Result<(), String> {
    if client.is_none() {
        let mut c = config.connect(NoTls).map_err(|e| format!("connect: {}", why(&e)))?;
        c.batch_execute(&format!("SET statement_timeout = {}", CREATE_WITHIN.as_millis()))
            .map_err(|e| why(&e))?;
        *client = Some(c);
    }
    let c = client.as_mut().expect("connected above");
    c.execute("SELECT pg_create_logical_replication_slot($1, 'test_decoding', true)", &[&name])
        .map_err(|e| format!("create the temporary slot {name}: {}", why(&e)))?;
    c.execute("SELECT pg_drop_replication_slot($1)", &[&name])
        .map_err(|e| format!("drop the temporary slot {name}: {}", why(&e)))?;
    Ok(())
}

/// The server's message, or the client's error.
fn why(e: &postgres::Error) -> String {
    e.as_db_error().map_or_else(|| e.to_string(), |db| db.message().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_temporary_slot_is_named_after_the_slot_within_63_bytes() {
        assert_eq!(super::temporary_slot("shoal_b"), "shoal_b_snapshot");
        let long = "x".repeat(63);
        assert_eq!(super::temporary_slot(&long).len(), 63);
    }
}
