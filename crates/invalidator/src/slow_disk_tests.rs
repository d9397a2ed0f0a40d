//! The log reader with a disk whose flush blocks (issue #26): deletes still reach the
//! destinations that are up at once, and the log's position is confirmed past them only once
//! they are flushed or acknowledged in every destination's spool.

use crate::delivery::{Delivery, Options};
use crate::source::{Batch, Commit, Fault, Position, Source};
use crate::{follow, watch, InvalidatorArgs};
use clap::Parser;
use shoal_spool::Syncer;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A log of the given batches, then nothing; the positions confirmed.
struct Log {
    batches: VecDeque<Batch>,
    confirmed: Arc<Mutex<Vec<Position>>>,
}

impl Source for Log {
    fn read(&mut self, _max: usize, wait: Duration) -> Result<Batch, Fault> {
        Ok(self.batches.pop_front().unwrap_or_else(|| {
            std::thread::sleep(wait);
            Batch::default()
        }))
    }

    fn confirm(&mut self, upto: &Position) -> Result<(), Fault> {
        self.confirmed.lock().unwrap().push(upto.clone());
        Ok(())
    }

    fn reconnect(&mut self) -> Result<(), Fault> {
        Ok(())
    }
}

/// A destination on a free port answering `DELETED` to every line; the lines it received.
fn destination() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let received = Arc::new(Mutex::new(Vec::new()));
    let lines = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut answers = stream.try_clone().unwrap();
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
                if answers.write_all(b"DELETED\r\n").is_err() {
                    break;
                }
            }
        }
    });
    (address, received)
}

/// A flush that blocks until the returned sender is dropped; the flushes begun.
fn blocked_flush() -> (Syncer, Sender<()>, Arc<AtomicU64>) {
    let (open, wait) = channel::<()>();
    let wait = Mutex::new(wait);
    let begun = Arc::new(AtomicU64::new(0));
    let counted = begun.clone();
    let syncer = Syncer::new(move |file| {
        counted.fetch_add(1, Ordering::SeqCst);
        let _ = wait.lock().unwrap().recv();
        file.sync_data()
    });
    (syncer, open, begun)
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Follows a log of one transaction (keys a and b, position row 1) into `destinations`, with
/// the spools flushed by `syncer`; `check` runs while it follows, given the confirmed positions.
fn follow_one_commit(
    test: &str,
    destinations: &[String],
    syncer: Syncer,
    check: impl FnOnce(&Mutex<Vec<Position>>),
) {
    let dir = std::env::temp_dir().join(format!("shoal-slow-disk-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let progress = Arc::new(watch::Progress::default());
    let options = Options {
        batch_keys: 1000,
        max_bytes: 1 << 20,
        durable: true,
        syncer,
        progress,
        ..Options::default()
    };
    let delivery = Delivery::open(&dir, destinations, options).unwrap();
    let mut args = vec!["shoal-invalidator", "--sqlite", "unused.db"];
    for d in destinations {
        args.extend(["--destination", d]);
    }
    let args = InvalidatorArgs::try_parse_from(args).unwrap();
    let confirmed = Arc::new(Mutex::new(Vec::new()));
    let commit = Commit { keys: vec!["a".into(), "b".into()], micros: None, lsn: 0 };
    let batch = Batch { commits: vec![commit], problems: Vec::new(), upto: Some(Position::Row(1)) };
    let mut log = Log { batches: VecDeque::from([batch]), confirmed: confirmed.clone() };
    let stop = AtomicBool::new(false);
    let counters = crate::Counters::default();
    std::thread::scope(|s| {
        let following = s.spawn(|| {
            follow(&mut log, &delivery, &counters, &args, true, &stop, &watch::Progress::default())
        });
        check(&confirmed);
        stop.store(true, Ordering::Relaxed);
        following.join().unwrap().unwrap();
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_blocked_flush_holds_the_position_but_no_delete() {
    let (up, received) = destination();
    // Nothing listens there: its deletes are only safe once flushed.
    let down = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let (syncer, open, begun) = blocked_flush();
    follow_one_commit("held", &[up, down], syncer, |confirmed| {
        eventually("the deletes to reach the destination that is up", || received.lock().unwrap().len() == 2);
        assert_eq!(*received.lock().unwrap(), ["delete a", "delete b"]);
        // The down destination's spool is being flushed, and that flush does not return: the
        // position is not confirmed past deletes that are neither flushed nor acknowledged.
        eventually("the flush to begin", || begun.load(Ordering::SeqCst) > 0);
        assert!(confirmed.lock().unwrap().is_empty(), "confirmed before its deletes were safe");
        drop(open);
        eventually("the position to be confirmed once flushed", || !confirmed.lock().unwrap().is_empty());
        assert_eq!(*confirmed.lock().unwrap(), [Position::Row(1)]);
    });
}

#[test]
fn acknowledged_deletes_are_confirmed_without_waiting_for_the_flush() {
    let (up, received) = destination();
    let (syncer, open, _) = blocked_flush();
    follow_one_commit("acked", &[up], syncer, |confirmed| {
        eventually("the position to be confirmed", || !confirmed.lock().unwrap().is_empty());
        assert_eq!(received.lock().unwrap().len(), 2);
        assert_eq!(*confirmed.lock().unwrap(), [Position::Row(1)]);
    });
    drop(open);
}
