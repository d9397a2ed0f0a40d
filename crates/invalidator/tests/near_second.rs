//! `--near`: a near cache gets each delete at once and again once every destination has
//! acknowledged it, also across a `kill -9` of the invalidator (issue #28: a near cache that
//! refetched through a router before the pool's delete kept the old value).

mod support;

use shoal_client::invalidation;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::common::{eventually, free_port};
use support::*;

/// Every delete the fake destinations took, in the order they took it: (who, key).
type Taken = Arc<Mutex<Vec<(&'static str, String)>>>;

/// A destination that answers `DELETED` to every `delete <key>` and notes it in `taken`
/// before answering; it serves for as long as the test process runs.
fn destination(name: &'static str, port: u16, taken: &Taken) -> String {
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("bind a fake destination");
    let taken = taken.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let taken = taken.clone();
            std::thread::spawn(move || serve(name, stream, &taken));
        }
    });
    format!("127.0.0.1:{port}")
}

fn serve(name: &'static str, stream: TcpStream, taken: &Taken) {
    // A connection idle this long is the invalidator's, gone: its thread ends.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut writer = stream.try_clone().expect("clone a stream");
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let Some(key) = line.trim_end().strip_prefix("delete ") else { return };
        taken.lock().unwrap().push((name, key.to_string()));
        if writer.write_all(b"DELETED\r\n").is_err() {
            return;
        }
    }
}

fn took(taken: &Taken, name: &str, key: &str) -> Vec<usize> {
    let taken = taken.lock().unwrap();
    taken.iter().enumerate().filter(|(_, (n, k))| *n == name && k == key).map(|(i, _)| i).collect()
}

fn second(inv: &Invalidator, field: &str) -> Option<u64> {
    inv.try_status()?["near_second"][0][field].as_u64()
}

#[test]
fn a_near_cache_gets_each_delete_at_once_and_again_after_every_destination_acknowledged() {
    let state = state_dir("near-second");
    std::fs::create_dir_all(&state).unwrap();
    let path = state.join("app.db");
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute(invalidation::SQLITE_OUTBOX_SCHEMA, []).unwrap();
    let taken: Taken = Arc::default();
    // Router A is up; router B is down until later; the near cache is up.
    let router_a = destination("a", free_port(), &taken);
    let b_port = free_port();
    let router_b = format!("127.0.0.1:{b_port}");
    let near = destination("near", free_port(), &taken);
    let source = ["--sqlite", path.to_str().unwrap()];
    let routers = [router_a, router_b];
    let start = || Invalidator::start(&state.join("inv"), &source, &routers, &["--near", &near]);
    let inv = start();
    db.execute_batch("BEGIN").unwrap();
    invalidation::emit_sqlite(&db, &["k"]).unwrap();
    db.execute_batch("COMMIT").unwrap();
    // The first delivery does not wait for router B.
    assert!(eventually(30, || !took(&taken, "near", "k").is_empty()), "near got k at once: {}", inv.stderr());
    assert!(eventually(30, || !took(&taken, "a", "k").is_empty()), "router A got k: {}", inv.stderr());
    // The second waits for router B, which is down.
    assert!(
        eventually(30, || second(&inv, "waiting") == Some(1) && second(&inv, "owed") == Some(1)),
        "the second delete waits for router B: {}",
        inv.status()
    );
    assert!(inv.metrics().contains("shoal_invalidator_near_second_waiting_deletes{near=\""));
    // Confirmed (the outbox row gone: the second spool is flushed too), so a restart reads
    // nothing again.
    let left = || db.query_row("SELECT count(*) FROM shoal_outbox", [], |r| r.get::<_, i64>(0)).unwrap();
    assert!(eventually(30, || left() == 0), "the outbox row is confirmed: {} left", left());
    // Killed and restarted with router B still down: the second delete is still owed and held.
    inv.kill();
    let inv = start();
    assert!(
        eventually(30, || second(&inv, "waiting") == Some(1)),
        "after a restart the second delete is owed and still waits: {}",
        inv.status()
    );
    let before_b = took(&taken, "near", "k").len();
    // Router B comes back: it takes k, and only then does the near cache get k again.
    destination("b", b_port, &taken);
    assert!(
        eventually(30, || second(&inv, "owed") == Some(0) && second(&inv, "delivered") == Some(1)),
        "the second delete is delivered once router B took k: {} {}",
        inv.status(),
        inv.stderr()
    );
    let b = took(&taken, "b", "k");
    let near_took = took(&taken, "near", "k");
    assert!(near_took.len() > before_b, "the near cache got k again: {near_took:?}");
    assert!(
        !b.is_empty() && near_took.last() > b.first(),
        "the near cache's last k came after router B took it: near {near_took:?}, b {b:?}"
    );
    assert_eq!(second(&inv, "waiting"), Some(0));
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}
