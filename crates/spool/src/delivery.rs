//! Delivering one destination's spool: the thread each destination has, for as long as the
//! process runs.
//!
//! ```text
//!   <dest>.offset (on disk) = the earliest record not wholly acknowledged
//!        │
//!   [ … records … ][ records not sent yet … ]
//!        ▲ retries  ▲ cursor
//!   each write: the retries that are due, then records from the cursor (≤ 64, ≤ 65 536 answers)
//!        answer DELETED / NOT_FOUND / HD / NF ─► counted, the observer told
//!        any other answer ─► that request kept in memory as a retry, sent again 250 ms later
//!        none (no connection, a timeout, a broken connection) ─► kept as a retry, sent with
//!             the next attempt: 100 ms after the failed one began, or at once when it took
//!             longer (a connect is given 250 ms, an answer 1 s)
//!        the cursor moves past every record sent; the offset to the earliest record a retry
//!        came from (or the cursor)
//!   cursor at the end and no retries ─► drained: truncated to 0 (under the appends' lock)
//! ```
//!
//! A destination that refuses some deletes — a router whose server behind it is down answers
//! an error for that server's keys and takes the rest — holds only those: the deletes after
//! them go on. Deletes are idempotent and only a key's own deletes could be reordered (a spool
//! holds nothing but deletes), so sending a refused one again after later ones changes no
//! outcome: a delete that comes later than it was written removes at most a newer value (a
//! miss), never brings an older one back. A kill loses nothing: the offset on disk never
//! passes a refused delete, so a restarted process sends it again (with the records after it
//! that were taken already: sent twice, harmless).

use super::after::GATE_POLL;
use super::{
    read_offset, record_at, write_offset, Activity, Delivered, Spool, Spools, GATHER_RECORDS, RETRY_EVERY,
};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The most answers awaited for one write.
const GATHER_ANSWERS: u64 = 65_536;

/// How long a connection may take to open. Short, so that a destination whose link was cut is
/// tried with a new connection soon after the link returns: a connect left to the kernel's own
/// retransmission of its first packet would wait 1 s, then 3 s (issue #26: the stale reads
/// after a partition).
const CONNECT_WITHIN: Duration = Duration::from_millis(250);

/// How long an answer may take (each line; the router's own timeout towards a server is 1 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// After a failed attempt (no connection, a timeout, a broken connection) the next begins this
/// long after the failed one began, or at once when that one took longer (it waited already).
const FAILED_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// Deletes sent in one write: a record of the spool, or the deletes of earlier writes that were
/// refused or not answered.
struct Pending {
    /// Where the earliest record they come from begins: the offset on disk stays at or before it.
    offset: u64,
    requests: Vec<u8>,
    /// Each request's end in `requests` and the answers it gets: one line per delete when the
    /// record is one delete a line (always, as written by the router and the invalidator), else
    /// the whole record as one.
    units: Vec<(usize, u32)>,
    /// The record's stamp (the earliest, for retries; 0: none).
    stamp: u64,
}

impl Pending {
    fn of_record(offset: u64, requests: Vec<u8>, answers: u32, stamp: u64) -> Pending {
        let ends: Vec<usize> =
            requests.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i + 1).collect();
        let units = if ends.len() == answers as usize && ends.last() == Some(&requests.len()) {
            ends.into_iter().map(|end| (end, 1)).collect()
        } else {
            vec![(requests.len(), answers)]
        };
        Pending { offset, requests, units, stamp }
    }

    fn answers(&self) -> u64 {
        self.units.iter().map(|&(_, n)| u64::from(n)).sum()
    }
}

/// The earlier of two stamps, 0 being none.
fn earliest(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// What `acks` (the answers read, in order: acknowledged or not) say of `batch`: the deletes
/// acknowledged per entry, and every request not acknowledged (refused, or its answer never
/// came), gathered into one retry.
fn settle(batch: &[Pending], acks: &[bool]) -> (Vec<u64>, Option<Pending>) {
    let mut kept = Pending { offset: u64::MAX, requests: Vec::new(), units: Vec::new(), stamp: 0 };
    let mut at = 0;
    let mut acked = Vec::with_capacity(batch.len());
    for entry in batch {
        let (mut start, mut taken) = (0, 0);
        for &(end, answers) in &entry.units {
            let n = answers as usize;
            if acks.get(at..at + n).is_some_and(|a| a.iter().all(|&ok| ok)) {
                taken += u64::from(answers);
            } else {
                kept.requests.extend_from_slice(&entry.requests[start..end]);
                kept.units.push((kept.requests.len(), answers));
                kept.offset = kept.offset.min(entry.offset);
                kept.stamp = earliest(kept.stamp, entry.stamp);
            }
            at += n;
            start = end;
        }
        acked.push(taken);
    }
    (acked, (!kept.units.is_empty()).then_some(kept))
}

/// A blocking connection for delivery.
enum Line {
    Tcp(BufReader<TcpStream>),
    Unix(BufReader<UnixStream>),
}

/// What a destination answered to one write.
struct Answered {
    /// Per answer read, in order: whether it acknowledged a delete.
    acks: Vec<bool>,
    /// The first answer that did not.
    refusal: Option<String>,
    /// What cut the exchange short (no connection, a timeout, a broken connection).
    failure: Option<std::io::Error>,
}

impl Line {
    fn open(address: &str) -> std::io::Result<Line> {
        let timeout = Some(ANSWER_WITHIN);
        if address.contains('/') {
            let s = UnixStream::connect(address)?;
            s.set_read_timeout(timeout)?;
            Ok(Line::Unix(BufReader::new(s)))
        } else {
            let addr = std::net::ToSocketAddrs::to_socket_addrs(address)?
                .next()
                .ok_or_else(|| std::io::Error::other("no address"))?;
            let s = TcpStream::connect_timeout(&addr, CONNECT_WITHIN)?;
            s.set_read_timeout(timeout)?;
            s.set_nodelay(true)?;
            Ok(Line::Tcp(BufReader::new(s)))
        }
    }

    /// Sends requests and reads up to `answers` answers, keeping those that came before a
    /// failure.
    fn exchange(&mut self, requests: &[u8], answers: u64) -> Answered {
        let mut answered = Answered { acks: Vec::new(), refusal: None, failure: None };
        let written = match self {
            Line::Tcp(r) => r.get_mut().write_all(requests),
            Line::Unix(r) => r.get_mut().write_all(requests),
        };
        if let Err(e) = written {
            answered.failure = Some(e);
            return answered;
        }
        let reader: &mut dyn BufRead = match self {
            Line::Tcp(r) => r,
            Line::Unix(r) => r,
        };
        let mut answer = String::new();
        for _ in 0..answers {
            answer.clear();
            match reader.read_line(&mut answer) {
                Ok(0) => {
                    answered.failure = Some(std::io::ErrorKind::UnexpectedEof.into());
                    break;
                }
                // A line cut short by a timeout is not an answer.
                Ok(_) if answer.ends_with('\n') => {}
                Ok(_) => {
                    answered.failure = Some(std::io::ErrorKind::UnexpectedEof.into());
                    break;
                }
                Err(e) => {
                    answered.failure = Some(e);
                    break;
                }
            }
            let ok = ["DELETED", "NOT_FOUND", "HD", "NF"].iter().any(|a| answer.starts_with(a));
            if !ok && answered.refusal.is_none() {
                answered.refusal = Some(answer.trim_end().to_string());
            }
            answered.acks.push(ok);
        }
        answered
    }
}

/// Delivers `spool` for as long as the process runs.
pub(crate) fn deliver(spools: &Spools, spool: &Spool) {
    let owner = spools.owner;
    let mut connection: Option<Line> = None;
    let mut reader = match File::open(&spool.path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{owner}: spool {}: {e}", spool.path.display());
            return;
        }
    };
    // The offset on disk, and where the records not sent yet begin.
    let mut recorded = read_offset(&spool.path);
    let mut cursor = recorded;
    // Deletes refused or unanswered, by when they are sent again (earliest first).
    let mut retries: VecDeque<(Instant, Pending)> = VecDeque::new();
    let mut refusing = false;
    loop {
        let now = Instant::now();
        let (mut batch, mut answers) = (Vec::new(), 0);
        while batch.len() < GATHER_RECORDS
            && answers < GATHER_ANSWERS
            && retries.front().is_some_and(|(due, _)| *due <= now)
        {
            let (_, retry) = retries.pop_front().expect("a retry");
            answers += retry.answers();
            batch.push(retry);
        }
        let mut next = cursor;
        let mut damaged = None;
        // A gated spool (after.rs) sends nothing past what its gate released: a boundary
        // between records, in the file's positions.
        let open_to =
            spool.gate.as_ref().map(|g| g.release().saturating_sub(spool.base.load(Ordering::Acquire)));
        while batch.len() < GATHER_RECORDS && answers < GATHER_ANSWERS && open_to.is_none_or(|o| next < o) {
            match record_at(&mut reader, next) {
                Ok(Some(record)) => {
                    answers += u64::from(record.answers);
                    batch.push(Pending::of_record(next, record.requests, record.answers, record.stamp));
                    next = record.next;
                }
                Ok(None) => break,
                Err(e) => {
                    damaged = Some(e);
                    break;
                }
            }
        }
        if batch.is_empty() {
            if let Some(e) = damaged {
                eprintln!("{owner}: spool {}: {e}; it is left for an operator", spool.path.display());
                return;
            }
            let file = spool.file.lock().unwrap_or_else(|p| p.into_inner());
            let length = file.metadata().map(|m| m.len()).unwrap_or(0);
            let gated = open_to.is_some_and(|o| cursor >= o) && length > cursor;
            if length != cursor && !gated {
                continue; // an append seen half-written; whole now (it was made under the lock)
            }
            // Held by the gate: the marks it waits for are other spools', looked at again soon.
            let longest = if gated { GATE_POLL } else { RETRY_EVERY };
            if let Some((due, _)) = retries.front() {
                spool.set_activity(Activity::Holding);
                let wait = due.saturating_duration_since(now).clamp(Duration::from_millis(1), longest);
                let _ = spool.wake.wait_timeout(file, wait);
                continue;
            }
            if gated {
                spool.set_activity(Activity::Gated);
                let _ = spool.wake.wait_timeout(file, GATE_POLL);
                continue;
            }
            if cursor > 0 {
                // Drained: start the file over, under the lock appends take. The offset goes to 0
                // first: a kill between the two steps then re-sends delivered deletes (harmless)
                // instead of leaving an offset past the end of a file that new records refill.
                // Logical positions go on from where the file ended.
                let base = spool.base.load(Ordering::Acquire);
                spool.acked.fetch_max(base + cursor, Ordering::AcqRel);
                if write_offset(&spool.path, 0).is_ok() && file.set_len(0).is_ok() {
                    spool.base.store(base + cursor, Ordering::Release);
                    (cursor, recorded) = (0, 0);
                }
            }
            // Drained (under the appends' lock, so nothing missed is in flight): caught up.
            if spool.behind.swap(false, Ordering::AcqRel) {
                spools.behind.fetch_sub(1, Ordering::AcqRel);
            }
            spool.failing.store(false, Ordering::Release);
            refusing = false;
            spool.set_activity(Activity::Idle);
            let _ = spool.wake.wait_timeout(file, RETRY_EVERY);
            continue;
        }
        let requests: Vec<u8> = batch.iter().flat_map(|p| p.requests.iter().copied()).collect();
        spool.set_activity(Activity::Sending);
        let attempt = Instant::now();
        let answered = match connection.take().map_or_else(|| Line::open(&spool.address), Ok) {
            Ok(mut line) => {
                let answered = line.exchange(&requests, answers);
                if answered.failure.is_none() {
                    connection = Some(line);
                }
                answered
            }
            Err(e) => Answered { acks: Vec::new(), refusal: None, failure: Some(e) },
        };
        let (acked, kept) = settle(&batch, &answered.acks);
        cursor = next;
        let taken: u64 = acked.iter().sum();
        spool.pending.fetch_sub(taken, Ordering::Relaxed);
        spools.delivered.fetch_add(taken, Ordering::Relaxed);
        if let Some(observer) = &spools.observer {
            for (entry, &n) in batch.iter().zip(&acked).filter(|(_, &n)| n > 0) {
                observer(&spool.address, Delivered { answers: n as u32, stamp: entry.stamp });
            }
        }
        if let Some(kept) = kept {
            // Refused: asked again in 250 ms. Not answered (the connection failed): with the
            // next attempt, whose pace the failure sets (below).
            let due = if answered.failure.is_some() { attempt } else { Instant::now() + RETRY_EVERY };
            retries.push_back((due, kept));
            retries.make_contiguous().sort_by_key(|(due, _)| *due);
        }
        let held: u64 = retries.iter().map(|(_, p)| p.answers()).sum();
        spool.held.store(held, Ordering::Relaxed);
        // The offset on disk never passes a delete that is still to be taken.
        let head = retries.iter().map(|(_, p)| p.offset).fold(cursor, u64::min);
        spool.acked.fetch_max(spool.base.load(Ordering::Acquire) + head, Ordering::AcqRel);
        if head != recorded && write_offset(&spool.path, head).is_ok() {
            recorded = head;
        }
        if let Some(answer) = &answered.refusal {
            spool.failing.store(true, Ordering::Release);
            spools.refused.fetch_add(1, Ordering::Relaxed);
            if !refusing {
                eprintln!(
                    "{owner}: {} answered {answer:?} to a delete; the deletes it refuses stay in its spool and \
                     are sent again every {} ms until it takes them, and the later ones go on meanwhile \
                     (check the servers behind it)",
                    spool.address,
                    RETRY_EVERY.as_millis()
                );
                refusing = true;
            }
        } else if retries.is_empty() {
            refusing = false;
        }
        if answered.failure.is_some() {
            spool.failing.store(true, Ordering::Release);
            spool.set_activity(Activity::Resting);
            std::thread::sleep(FAILED_AGAIN_AFTER.saturating_sub(attempt.elapsed()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_unanswered_deletes_become_one_retry_from_the_earliest_record() {
        let a = Pending::of_record(10, b"delete a\r\ndelete b\r\n".to_vec(), 2, 7);
        let b = Pending::of_record(40, b"delete c\r\ndelete d\r\n".to_vec(), 2, 5);
        // Not one delete a line: acknowledged only whole.
        let odd = Pending::of_record(70, b"delete e\r\n".to_vec(), 2, 0);
        assert_eq!(odd.units, [(10, 2)]);
        let batch = [a, b, odd];
        let (acked, kept) = settle(&batch, &[true, false, true]);
        assert_eq!(acked, [1, 1, 0]);
        let kept = kept.unwrap();
        assert_eq!(kept.requests, b"delete b\r\ndelete d\r\ndelete e\r\n");
        assert_eq!((kept.offset, kept.stamp, kept.answers()), (10, 5, 4));
        assert_eq!(kept.units, [(10, 1), (20, 1), (30, 2)]);
        let (acked, kept) = settle(&batch, &[true; 6]);
        assert_eq!((acked, kept.is_none()), (vec![2, 2, 2], true));
        assert_eq!(earliest(0, 3), 3);
    }
}
