//! A near cache's invalidation listener (`--invalidation-listen ADDR`,
//! docs/design/near-cache.md): deletes that only drop the near copy. The invalidator and the
//! routers of the region send their deletes here; the pool gets its own copy of each from them,
//! so nothing is forwarded upstream (a `delete` on the near cache's own port is, and costs a
//! round trip to the upstream before it is answered).
//!
//! ```text
//!  invalidator's / router's spool ──TCP──► accept thread ──► a thread per connection
//!     "delete k\r\n" "md <k> [b] [q]\r\n" (pipelined)     │ parsed by shoal-proto's parser
//!                                                         ▼
//!     drop(key): the epoch bumped (no fetch in flight keeps an older value), the copy deleted
//!     ──► DELETED / NOT_FOUND (HD / NF for md; q: nothing); anything else: CLIENT_ERROR
//! ```
//!
//! Plain threads: a blocking accept (woken at the stop by a connection of its own) and
//! blocking reads with a short timeout so that a stop is seen; its clients are a few delivery
//! threads (one per invalidator or router), not applications.

use shoal_proto::{MetaCmd, Parse, Parser, Request, KEY_MAX};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The most connections served at once (more are closed at once).
pub const MAX_CONNECTIONS: usize = 256;

/// How often a waiting thread looks whether the server is stopping.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The most a connection may send without a whole request in it.
const MAX_PENDING: usize = 64 << 10;

/// What the listener answers to anything but a delete.
pub const ONLY_DELETES: &[u8] =
    b"CLIENT_ERROR this is a near cache's invalidation listener: it takes delete <key> and md <key> only\r\n";

/// Drops a key's near copy: true if one was there.
pub type Drop = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Invalidations taken.
#[derive(Default)]
pub struct ListenCounters {
    pub deletes: AtomicU64,
    pub connections: AtomicUsize,
}

/// Binds `address` (`host:port`); the error names it.
pub fn bind(address: &str) -> Result<TcpListener, String> {
    TcpListener::bind(address).map_err(|e| format!("--invalidation-listen: cannot listen on {address}: {e}"))
}

/// The listener's thread, and where it listens (to wake its blocking accept at the stop).
pub struct Listening {
    thread: JoinHandle<()>,
    address: Option<std::net::SocketAddr>,
}

impl Listening {
    /// Waits for the listener's threads to end once the server is stopping: its accept is
    /// woken by a connection of our own, its connections see the stop within 100 ms.
    pub fn stop(self) {
        if let Some(address) = self.address {
            let _ = TcpStream::connect_timeout(&address, Duration::from_secs(1));
        }
        let _ = self.thread.join();
    }
}

/// Serves `listener` on a thread of its own until `stopping` says so (and [`Listening::stop`]
/// wakes it); every connection's thread has ended when it has.
pub fn spawn(
    listener: TcpListener,
    drop: Drop,
    counters: Arc<ListenCounters>,
    stopping: Arc<dyn Fn() -> bool + Send + Sync>,
) -> Result<Listening, String> {
    let address = listener.local_addr().ok().map(|mut a| {
        if a.ip().is_unspecified() {
            a.set_ip(if a.is_ipv4() { [127, 0, 0, 1].into() } else { std::net::Ipv6Addr::LOCALHOST.into() });
        }
        a
    });
    let thread = std::thread::Builder::new()
        .name("near-invalidations".into())
        .spawn(move || {
            let mut threads: Vec<JoinHandle<()>> = Vec::new();
            while !stopping() {
                threads.retain(|t| !t.is_finished());
                match listener.accept() {
                    Ok((stream, _)) if threads.len() < MAX_CONNECTIONS => {
                        let (drop, counters, stopping) = (drop.clone(), counters.clone(), stopping.clone());
                        let spawned = std::thread::Builder::new()
                            .name("near-invalidation".into())
                            .spawn(move || serve(stream, &*drop, &counters, &*stopping));
                        threads.extend(spawned.ok());
                    }
                    Ok(_) => {} // too many (or the stop's own): closed
                    Err(_) => std::thread::sleep(LOOK_EVERY), // out of descriptors: not in a busy loop
                }
            }
            threads.into_iter().for_each(|t| {
                let _ = t.join();
            });
        })
        .map_err(|e| format!("could not start the invalidation listener's thread: {e}"))?;
    Ok(Listening { thread, address })
}

/// One sender's connection, until it leaves, breaks, sends what is no request, or the server
/// stops.
fn serve(
    mut stream: TcpStream,
    drop: &(dyn Fn(&[u8]) -> bool + Send + Sync),
    counters: &ListenCounters,
    stopping: &dyn Fn() -> bool,
) {
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(LOOK_EVERY));
    let _ = stream.set_nodelay(true);
    let mut parser = Parser::new(MAX_PENDING);
    let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
    let mut chunk = [0u8; 16 << 10];
    'read: while !stopping() {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut consumed = 0;
        let mut close = false;
        while consumed < buf.len() {
            match parser.parse(&buf[consumed..]) {
                Parse::Incomplete => break,
                Parse::Done { request, consumed: used } => {
                    consumed += used;
                    let answered = answer(&request, drop, &mut out);
                    if answered {
                        counters.deletes.fetch_add(1, Ordering::Relaxed);
                    } else if matches!(request, Request::Quit) {
                        close = true;
                        break;
                    } else {
                        out.extend_from_slice(ONLY_DELETES);
                    }
                }
                Parse::Error { reply, consume, .. } => {
                    if let Some(line) = reply {
                        out.extend_from_slice(line.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    if consume > buf.len() - consumed {
                        close = true; // a value to swallow: no sender of deletes sends one
                        break;
                    }
                    consumed += consume;
                }
                Parse::Close => {
                    close = true;
                    break;
                }
            }
        }
        buf.drain(..consumed);
        if (!out.is_empty() && stream.write_all(&out).is_err()) || close || buf.len() > MAX_PENDING {
            break 'read;
        }
    }
    counters.connections.fetch_sub(1, Ordering::Relaxed);
}

/// Answers a delete into `out` after dropping its key's copy; false for any other request.
fn answer(request: &Request<'_>, drop: &dyn Fn(&[u8]) -> bool, out: &mut Vec<u8>) -> bool {
    match request {
        Request::Delete { key, noreply, .. } => {
            let found = drop(key);
            if !noreply {
                out.extend_from_slice(if found { b"DELETED\r\n" } else { b"NOT_FOUND\r\n" });
            }
            true
        }
        Request::Meta(m) if m.cmd == MetaCmd::Delete => {
            let mut scratch = [0u8; KEY_MAX];
            let found = drop(m.key(&mut scratch));
            if !m.flags.has(b'q') {
                out.extend_from_slice(if found { b"HD\r\n" } else { b"NF\r\n" });
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn deletes_drop_copies_and_nothing_else_is_taken() {
        let dropped = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
        let log = dropped.clone();
        let drop: Drop = Arc::new(move |key: &[u8]| {
            log.lock().unwrap().push(key.to_vec());
            key == b"here"
        });
        let listener = bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = spawn(
            listener,
            drop,
            Arc::new(ListenCounters::default()),
            Arc::new(move || stopped.load(Ordering::Relaxed)),
        )
        .unwrap();
        let mut client = TcpStream::connect(address).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        client
            .write_all(b"delete here\r\ndelete gone\r\nmd aGVyZQ== b\r\nmd x q\r\nget here\r\nquit\r\n")
            .unwrap();
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        let expected = [&b"DELETED\r\nNOT_FOUND\r\nHD\r\n"[..], ONLY_DELETES].concat();
        assert_eq!(String::from_utf8_lossy(&answer), String::from_utf8_lossy(&expected));
        let keys: Vec<&[u8]> = vec![b"here", b"gone", b"here", b"x"];
        assert_eq!(*dropped.lock().unwrap(), keys);
        stop.store(true, Ordering::Relaxed);
        thread.stop();
    }
}
