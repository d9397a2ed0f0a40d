//! `--wait-for-replica`: the invalidator of a *replica* region holds each batch until that
//! region's database (a streaming replica of the master) has replayed its commits, so a read
//! that misses after the delete finds the new row in the replica, never the old one (Scaling
//! Memcache §5: the replica region's deletes follow its own replica's progress).

use crate::source::Fault;
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a replica that did not answer is left before it is asked again.
pub const RETRY_REPLICA: Duration = Duration::from_millis(100);

/// What one look at the replica found.
#[derive(Debug, Clone, Copy)]
pub struct Look {
    /// How far it has replayed (`pg_last_wal_replay_lsn()`).
    pub replayed: u64,
    /// How far it has received (`pg_last_wal_receive_lsn()`).
    pub received: u64,
    /// Whether its replay is paused or asked to pause.
    pub paused: bool,
    /// Its `recovery_min_apply_delay`.
    pub apply_delay: Duration,
}

/// A connection to the replica, made on first use and again after it failed.
pub struct Replica {
    conninfo: String,
    client: Option<Client>,
}

/// A replica whose replay position gates delivery.
pub struct ReplicaGate {
    replica: Replica,
}

/// `X/Y` as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

impl Replica {
    /// The replica at `conninfo` (connected on first use).
    pub fn new(conninfo: &str) -> Replica {
        Replica { conninfo: conninfo.to_string(), client: None }
    }

    /// Runs `sql` (one row expected), connecting first if need be; a failure drops the
    /// connection, so that the next call makes a new one.
    fn query_one(&mut self, sql: &str) -> Result<postgres::Row, Fault> {
        if self.client.is_none() {
            let config = crate::postgres::config_of(&self.conninfo).map_err(Fault::Fatal)?;
            let client = config
                .connect(NoTls)
                .map_err(|e| Fault::Transient(format!("--wait-for-replica: connect: {e}")))?;
            self.client = Some(client);
        }
        let client = self.client.as_mut().expect("connected above");
        client.query_one(sql, &[]).map_err(|e| {
            self.client = None;
            Fault::Transient(format!("--wait-for-replica: {e}"))
        })
    }

    /// How far the replica has replayed and received, whether its replay is paused (or asked
    /// to be), and its apply delay.
    pub fn look(&mut self) -> Result<Look, Fault> {
        let row = self.query_one(
            "SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text, \
             CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END, \
             (SELECT setting::bigint FROM pg_settings WHERE name = 'recovery_min_apply_delay')",
        )?;
        let replayed: Option<String> = row.get(0);
        let Some(replayed) = replayed.as_deref().and_then(parse_lsn) else {
            return Err(Fault::Fatal(
                "--wait-for-replica names a server that is not a standby (pg_last_wal_replay_lsn() is NULL); \
                 give the replica region's streaming replica"
                    .into(),
            ));
        };
        // Nothing received by streaming (a replica replaying from its archive): what it replayed.
        let received = row.get::<_, Option<String>>(1).as_deref().and_then(parse_lsn).unwrap_or(replayed);
        let delay_ms: Option<i64> = row.get(3);
        Ok(Look {
            replayed,
            received: received.max(replayed),
            paused: row.get(2),
            apply_delay: Duration::from_millis(delay_ms.unwrap_or(0).max(0) as u64),
        })
    }

    /// Pauses or resumes the replica's replay (`pg_wal_replay_pause()` / `_resume()`).
    pub fn set_paused(&mut self, paused: bool) -> Result<(), Fault> {
        let call = if paused { "pg_wal_replay_pause" } else { "pg_wal_replay_resume" };
        self.query_one(&format!("SELECT {call}()")).map(drop).map_err(|fault| match fault {
            Fault::Transient(why) => Fault::Transient(format!(
                "{why} (--hold-replica: {call}() needs a superuser, \
                 or GRANT EXECUTE ON FUNCTION {call}() TO this user)"
            )),
            fatal => fatal,
        })
    }
}

impl ReplicaGate {
    /// A gate on the replica at `conninfo` (connected on first use).
    pub fn new(conninfo: &str) -> ReplicaGate {
        ReplicaGate { replica: Replica::new(conninfo) }
    }

    /// Waits until the replica has replayed everything before `lsn` and returns how far it has
    /// replayed (`u64::MAX` once `stop` is set). A replica that cannot be reached (restarting,
    /// say) is asked again every [`RETRY_REPLICA`] with the batch held: the commit log is not
    /// read again, so deletes go out as soon as it answers (the fault harness's replica
    /// restarts, docs/design/faults.md).
    /// `tend` is called at every look (the commit log's [`crate::source::Source::tend`]).
    pub fn wait_for(
        &mut self,
        lsn: u64,
        stop: &AtomicBool,
        tend: &mut dyn FnMut() -> Result<(), Fault>,
    ) -> Result<u64, Fault> {
        let mut failing: Option<String> = None;
        while !stop.load(Ordering::Relaxed) {
            tend()?;
            match self.replica.look() {
                Ok(look) if look.replayed >= lsn => {
                    if failing.is_some() {
                        eprintln!("shoal invalidator: --wait-for-replica: the replica answers again");
                    }
                    return Ok(look.replayed);
                }
                Ok(_) => std::thread::sleep(Duration::from_millis(5)),
                Err(Fault::Transient(why)) => {
                    if failing.as_deref() != Some(&why) {
                        eprintln!("shoal invalidator: {why}; the batch waits, asking again every 100 ms");
                        failing = Some(why);
                    }
                    std::thread::sleep(RETRY_REPLICA);
                }
                Err(fatal) => return Err(fatal),
            }
        }
        Ok(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lsns_read_as_postgres_writes_them() {
        assert_eq!(super::parse_lsn("0/1525E90"), Some(0x1525E90));
        assert_eq!(super::parse_lsn("1A/0"), Some(0x1A << 32));
        assert_eq!(super::parse_lsn("nonsense"), None);
    }
}
