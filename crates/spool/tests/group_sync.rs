//! Grouped durability (issue #26): with the disk's flush blocked, deletes still reach a
//! destination that is up, its records are safe (acknowledged), and a down destination's
//! records are not safe until the flush returns.

use shoal_spool::{Durability, Spools, Syncer};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{destination, scratch};

/// An address nothing listens on (a port the OS gave, then closed).
fn down() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A flush that blocks until opened, counting the flushes entered.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    entered: AtomicU64,
}

impl Gate {
    fn syncer(gate: &Arc<Gate>) -> Syncer {
        let gate = gate.clone();
        Syncer::new(move |file| {
            gate.entered.fetch_add(1, Ordering::SeqCst);
            let mut open = gate.open.lock().unwrap();
            while !*open {
                open = gate.opened.wait(open).unwrap();
            }
            file.sync_data()
        })
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

#[test]
fn a_blocked_flush_delays_only_what_is_neither_flushed_nor_acknowledged() {
    let gate = Arc::new(Gate::default());
    let (up, received) = destination();
    let down = down();
    let dir = scratch("group");
    let spools =
        Spools::open_durable(&dir, 1 << 20, "test", Durability::Grouped, Gate::syncer(&gate), None).unwrap();
    let to_up = spools.append_batch(&up, b"delete a\r\ndelete b\r\n", 2, 0).unwrap();
    let to_down = spools.append_batch(&down, b"delete a\r\ndelete b\r\n", 2, 0).unwrap();
    // The group syncer flushes the down destination's spool, and blocks there.
    eventually("the flush to begin", || gate.entered.load(Ordering::SeqCst) > 0);
    // Meanwhile the destination that is up gets its deletes, which are safe: acknowledged.
    eventually("the deletes to reach the destination that is up", || received.lock().unwrap().len() == 2);
    eventually("the acknowledged record to be safe", || to_up.is_safe());
    assert_eq!(*received.lock().unwrap(), ["delete a", "delete b"]);
    // The down destination's record is neither flushed nor acknowledged: not safe, and a later
    // append to the destination that is up does not wait for the flush either.
    assert!(!to_down.is_safe(), "safe before its flush returned");
    let later = spools.append_batch(&up, b"delete c\r\n", 1, 0).unwrap();
    eventually("a later delete to be delivered during the flush", || received.lock().unwrap().len() == 3);
    eventually("the later record to be safe", || later.is_safe());
    assert!(!to_down.is_safe(), "safe before its flush returned");
    gate.open();
    eventually("the flushed record to be safe", || to_down.is_safe());
    assert!(spools.syncs.load(Ordering::Relaxed) >= 1);
    // Still held for the down destination (flushed, not delivered).
    assert_eq!(spools.depths().into_iter().find(|(a, _)| *a == down).map(|d| d.1), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_append_flushes_before_it_returns_and_its_mark_is_safe_at_once() {
    let flushes = Arc::new(AtomicU64::new(0));
    let counted = flushes.clone();
    let syncer = Syncer::new(move |file| {
        counted.fetch_add(1, Ordering::SeqCst);
        file.sync_data()
    });
    let dir = scratch("every");
    let spools = Spools::open_durable(&dir, 1 << 20, "test", Durability::EveryAppend, syncer, None).unwrap();
    let mark = spools.append_batch(&down(), b"delete a\r\n", 1, 0).unwrap();
    assert!(mark.is_safe());
    assert_eq!(flushes.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(dir);
}
