//! Where committed keys come from: a commit log read from a remembered position that moves
//! only when the caller confirms it (PostgreSQL's replication slot, SQLite's outbox).

use crate::decoding::clip;

/// One committed transaction's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// The keys to delete, in the order written.
    pub keys: Vec<String>,
    /// Commit time, microseconds since the epoch (`None`: not known, lag not measured).
    pub micros: Option<u64>,
    /// Where it is in the log (PostgreSQL: its commit's position, as the batch's `upto` gives
    /// it; 0 for a source without positions a replica could be asked about).
    pub lsn: u64,
}

/// Something in the log the invalidator could not use: logged with what to do, and counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A message that is not a key list (not UTF-8, empty, damaged).
    Message(String),
    /// A word of a message that is not a valid key (the message's other keys are deleted).
    Key(String),
    /// A row change a rule could not turn into a key.
    Row(String),
}

impl Problem {
    /// The metric label of the problem's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Problem::Message(_) => "bad_message",
            Problem::Key(_) => "bad_key",
            Problem::Row(_) => "bad_row",
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Message(why) => {
                write!(f, "skipped a message: {why}; write messages with the client's invalidation helpers")
            }
            Problem::Key(why) => {
                write!(f, "skipped a key: {}; the message's other keys are deleted", clip(why))
            }
            Problem::Row(why) => {
                write!(f, "a change gave no key: {why}; fix the rule, or delete that key by hand")
            }
        }
    }
}

/// What one read returned: transactions in commit order and the position after them.
#[derive(Debug, Default)]
pub struct Batch {
    /// Committed transactions with keys (transactions without keys are left out).
    pub commits: Vec<Commit>,
    /// What was found and not used.
    pub problems: Vec<Problem>,
    /// Where the next read starts once this batch is confirmed (`None`: nothing to confirm).
    pub upto: Option<Position>,
}

/// A position in a commit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    /// A PostgreSQL LSN, and whether to confirm 1 byte past it (a non-transactional message,
    /// which the slot skips only once its position is passed).
    Lsn(u64, bool),
    /// The last SQLite outbox row taken.
    Row(i64),
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Position::Lsn(lsn, past) => {
                write!(f, "{}{}", crate::replication::lsn_text(*lsn), if *past { "+1" } else { "" })
            }
            Position::Row(id) => write!(f, "outbox row {id}"),
        }
    }
}

/// Why a source cannot go on.
#[derive(Debug)]
pub enum Fault {
    /// Worth retrying: the database is restarting or unreachable.
    Transient(String),
    /// Needs an operator: the message says what to do.
    Fatal(String),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Transient(why) | Fault::Fatal(why) => f.write_str(why),
        }
    }
}

/// A commit log.
pub trait Source: Send {
    /// Up to about `max` changes after what was read before (whole transactions), waiting up
    /// to `wait` for the first.
    fn read(&mut self, max: usize, wait: std::time::Duration) -> Result<Batch, Fault>;
    /// Moves the confirmed position to `upto`: what lies before it is never read again.
    fn confirm(&mut self, upto: &Position) -> Result<(), Fault>;
    /// Reconnects after a transient fault.
    fn reconnect(&mut self) -> Result<(), Fault>;
    /// Called often while a read batch is held (waiting for a replica): keeps the log's
    /// connection alive and, when it was lost, reconnects, so that the next read finds a new
    /// one (nothing read again is lost or skipped: a reconnect reads from the confirmed
    /// position). Only a fault that needs an operator is returned.
    fn tend(&mut self) -> Result<(), Fault> {
        Ok(())
    }
    /// The furthest position the log has given, read or not (rows and keep-alives; 0 for a
    /// source without positions), for `--hold-replica`.
    fn given(&self) -> u64 {
        0
    }
    /// Where to say what a read is waiting for (a source that waits inside `read` says so).
    fn set_progress(&mut self, _progress: std::sync::Arc<crate::watch::Progress>) {}
}

/// The keys of one message's payload, with its problems noted.
pub fn keys_of_message(payload: &[u8], keys: &mut Vec<String>, problems: &mut Vec<Problem>) {
    match shoal_client::invalidation::parse_message(payload) {
        Ok(parsed) => {
            keys.extend(parsed.keys.iter().map(|k| k.to_string()));
            problems.extend(parsed.rejected.into_iter().map(Problem::Key));
        }
        Err(why) => problems.push(Problem::Message(why)),
    }
}
