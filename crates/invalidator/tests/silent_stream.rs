//! A replication stream whose link goes silent without closing (a cut link: the walsender's
//! packets and its keepalives stop, nothing says the connection ended) is given up after its
//! keep-alive goes unanswered, its old walsender is ended so that the slot is free, and the
//! stream starts again from the confirmed position: nothing committed before or during the
//! silence is lost (issue #26).
//!
//! The link is a proxy in the test: `cut` black-holes every replication connection open at that
//! moment (it reads and drops their bytes both ways and never closes them, as a cut link whose
//! retransmissions never get through), while new connections pass — the link came back, the old
//! connection is still in TCP's back-off.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::common::{eventually, Server};
use support::*;

/// A TCP proxy to PostgreSQL that can black-hole its replication connections.
struct Proxy {
    port: u16,
    /// Per replication connection: set once it is cut.
    replication: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let replication = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (list, stopping) = (replication.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                        let cut = Arc::new(AtomicBool::new(false));
                        let (list, stopping) = (list.clone(), stopping.clone());
                        std::thread::spawn(move || join(client, server, cut, list, stopping));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, replication, stop }
    }

    /// Black-holes every replication connection open now; how many there were.
    fn cut(&self) -> usize {
        let list = self.replication.lock().unwrap();
        list.iter().for_each(|c| c.store(true, Ordering::SeqCst));
        list.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Pumps both ways; a connection whose start-up asks for `replication` is listed, to be cut.
fn join(
    client: TcpStream,
    server: TcpStream,
    cut: Arc<AtomicBool>,
    list: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    stop: Arc<AtomicBool>,
) {
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (cut2, stop2) = (cut.clone(), stop.clone());
    std::thread::spawn(move || pump(s2, c2, cut2, stop2, None));
    pump(client, server, cut, stop, Some(list));
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    mut list: Option<Arc<Mutex<Vec<Arc<AtomicBool>>>>>,
) {
    from.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut chunk = [0u8; 16 << 10];
    while !stop.load(Ordering::Relaxed) {
        let n = match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                continue
            }
            Err(_) => break,
        };
        // The start-up message of a replication connection carries `replication\0database`.
        if let Some(list) = list.take() {
            if chunk[..n].windows(12).any(|w| w == b"replication\0") {
                list.lock().unwrap().push(cut.clone());
            }
        }
        if cut.load(Ordering::SeqCst) {
            continue; // dropped: the link is cut
        }
        if to.write_all(&chunk[..n]).is_err() {
            break;
        }
    }
    // A cut connection is never closed while the test runs: its ends hear nothing.
    while cut.load(Ordering::SeqCst) && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_replication_stream_gone_silent_is_given_up_its_walsender_ended_and_nothing_lost() {
    let pg = Postgres::start("silent");
    let mut db = pg.client();
    let server = Server::shoal("inv-silent", 0, &[]);
    let keys: Vec<String> = (0..3).map(|i| format!("silent:{i}")).collect();
    fill(&server, keys.iter().cloned());
    let proxy = Proxy::start(pg.port());
    let state = state_dir("silent");
    let conninfo = format!("host=127.0.0.1 port={} user=postgres dbname=postgres", proxy.port);
    let inv = Invalidator::start(&state, &["--postgres", &conninfo], &[server.address()], &[]);

    emit(&mut db, &keys[0]);
    assert!(eventually(60, || !present(&server, &keys[0])), "the stream works: {}", inv.stderr());
    assert!(eventually(60, || proxy.cut() >= 1), "the invalidator's stream goes through the proxy");
    // Committed while the old stream is black-holed: only a new stream can carry it.
    emit(&mut db, &keys[1]);
    assert!(
        eventually(120, || !present(&server, &keys[1])),
        "a delete committed after the cut arrives over a new stream: {}",
        inv.stderr()
    );
    let said = inv.stderr();
    assert!(said.contains("no answer to a keep-alive"), "{said}");
    assert!(said.contains("ended the walsender of the stream given up"), "{said}");
    // And the new stream goes on.
    emit(&mut db, &keys[2]);
    assert!(eventually(60, || !present(&server, &keys[2])), "{}", inv.stderr());
    inv.kill();
    let _ = std::fs::remove_dir_all(state);
}
