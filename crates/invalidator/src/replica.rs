//! `--wait-for-replica`: the invalidator of a *replica* region holds each batch until that
//! region's database (a streaming replica of the master) has replayed its commits, so a read
//! that misses after the delete finds the new row in the replica, never the old one (Scaling
//! Memcache §5: the replica region's deletes follow its own replica's progress).

use crate::source::Fault;
use postgres::{Client, NoTls};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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

    /// Waits until the replica has replayed everything before `lsn` (or `stop` is set).
    pub fn wait_for(&mut self, lsn: u64, stop: &AtomicBool) -> Result<(), Fault> {
        while !stop.load(Ordering::Relaxed) {
            if self.client.is_none() {
                let client = Client::connect(&self.conninfo, NoTls)
                    .map_err(|e| Fault::Transient(format!("--wait-for-replica: connect: {e}")))?;
                self.client = Some(client);
            }
            let client = self.client.as_mut().expect("connected above");
            let replayed: Option<String> =
                match client.query_one("SELECT pg_last_wal_replay_lsn()::text", &[]) {
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
            if parse_lsn(&replayed).is_some_and(|replayed| replayed >= lsn) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
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
