//! `--wait-for-replica`: the invalidator of a *replica* region holds each batch until that
//! region's database (a streaming replica of the master) has replayed its commits, so a read
//! that misses after the delete finds the new row in the replica, never the old one (Scaling
//! Memcache §5: the replica region's deletes follow its own replica's progress).

use crate::source::Fault;
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long a replica that did not answer is left before it is asked again.
const RETRY_REPLICA: Duration = Duration::from_millis(100);

/// A replica whose replay position gates delivery.
pub struct ReplicaGate {
    conninfo: String,
    client: Option<Client>,
}

/// `X/Y` as a number.
pub fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    Some((u64::from_str_radix(high, 16).ok()? << 32) | u64::from_str_radix(low, 16).ok()?)
}

impl ReplicaGate {
    /// A gate on the replica at `conninfo` (connected on first use).
    pub fn new(conninfo: &str) -> ReplicaGate {
        ReplicaGate { conninfo: conninfo.to_string(), client: None }
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
            match self.replayed() {
                Ok(replayed) if replayed >= lsn => {
                    if failing.is_some() {
                        eprintln!("shoal invalidator: --wait-for-replica: the replica answers again");
                    }
                    return Ok(replayed);
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

    /// The replica's replay position, connecting first if need be.
    fn replayed(&mut self) -> Result<u64, Fault> {
        if self.client.is_none() {
            let config = crate::postgres::config_of(&self.conninfo).map_err(Fault::Fatal)?;
            let client = config
                .connect(NoTls)
                .map_err(|e| Fault::Transient(format!("--wait-for-replica: connect: {e}")))?;
            self.client = Some(client);
        }
        let client = self.client.as_mut().expect("connected above");
        let replayed: Option<String> = match client.query_one("SELECT pg_last_wal_replay_lsn()::text", &[]) {
            Ok(row) => row.get(0),
            Err(e) => {
                self.client = None;
                return Err(Fault::Transient(format!("--wait-for-replica: {e}")));
            }
        };
        let Some(replayed) = replayed else {
            return Err(Fault::Fatal(
                "--wait-for-replica names a server that is not a standby (pg_last_wal_replay_lsn() is NULL); \
                 give the replica region's streaming replica"
                    .into(),
            ));
        };
        Ok(parse_lsn(&replayed).unwrap_or(0))
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
