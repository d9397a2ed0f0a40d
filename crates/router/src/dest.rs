//! Destinations, as the transport knows them: an address and its settings (timeouts), nothing
//! of the routes that chose them. One connection per destination and worker thread
//! (`connection.rs`), opened when first needed and shared by every request of every client of
//! that worker (a router's point: thousands of clients, a handful of server connections);
//! health shared by all workers (`health.rs`).
//!
//! ```text
//!  route handles ──► Sender::exchange(dest index, encode, shape)
//!                      │ the worker's Link for that index (rebuilt when the table changes):
//!                      │ TKO? ──► Tko error at once (unless fail_open)
//!                      ▼
//!                    Connection (per worker and address) ──► answer, or why there is none
//! ```

use crate::connection::{Connection, Spares};
use crate::health::Health;
use crate::request::{ErrorKind, Reply, Shape};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One server requests can be sent to. The same address in two pools is one destination (one
/// health state, one connection per worker).
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    /// `host:port` or a unix socket path.
    pub address: String,
    /// How long to wait for an answer.
    pub server_timeout: Duration,
    /// How long to wait for a connection.
    pub connect_timeout: Duration,
}

/// What the transports of every worker share: each destination's health by address (one per
/// address, across configurations), and a bound on what one answer may make the router
/// allocate.
#[derive(Debug)]
pub struct Transport {
    health: Mutex<HashMap<String, Arc<Health>>>,
    /// The largest value a destination may announce.
    pub max_value_bytes: usize,
}

impl Transport {
    /// The shared transport state of one router.
    pub fn new(max_value_bytes: usize) -> Transport {
        Transport { health: Mutex::new(HashMap::new()), max_value_bytes }
    }

    /// The health of `address` (created healthy on first use).
    pub fn health(&self, address: &str) -> Arc<Health> {
        let mut map = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(health) = map.get(address) {
            return health.clone();
        }
        map.entry(address.to_string()).or_default().clone()
    }

    /// `address` answered outside the transport (its spool delivered to it): no longer TKO.
    /// An address the transport never sent to is left alone.
    pub fn revive(&self, address: &str) {
        let map = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(health) = map.get(address) {
            health.revive();
        }
    }

    /// Every destination seen so far, with its health, sorted by address.
    pub fn destinations(&self) -> Vec<(String, Arc<Health>)> {
        let map = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<_> = map.iter().map(|(a, h)| (a.clone(), h.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

/// A worker thread's connections by destination address (kept across reloads), and, for the
/// table of destinations it last sent to, each destination's health and connection by index
/// (so a request hashes no address and takes no lock shared with other workers).
pub struct Worker {
    transport: Arc<Transport>,
    connections: RefCell<HashMap<String, Rc<Connection>>>,
    links: RefCell<Links>,
    /// Its connections' answer buffers, given back by the clients that wrote them.
    pub spares: Rc<Spares>,
}

impl Worker {
    /// A worker's transport, on the state every worker shares.
    pub fn new(transport: Arc<Transport>) -> Worker {
        Worker {
            transport,
            connections: RefCell::default(),
            links: RefCell::default(),
            spares: Rc::default(),
        }
    }
}

/// The worker's view of one table of destinations, by index.
#[derive(Default)]
struct Links {
    table: Option<Arc<[Destination]>>,
    by_dest: Vec<Link>,
}

/// One destination as a worker sees it.
struct Link {
    health: Arc<Health>,
    connection: Option<Rc<Connection>>,
}

/// Sends to a table of destinations (a configuration's) by index, from one worker.
#[derive(Clone)]
pub struct Sender {
    pub destinations: Arc<[Destination]>,
    pub worker: Rc<Worker>,
}

impl Sender {
    /// The worker's links for this sender's table (rebuilt when it changed).
    fn links(&self) -> std::cell::RefMut<'_, Links> {
        let mut links = self.worker.links.borrow_mut();
        if !links.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, &self.destinations)) {
            links.by_dest = self
                .destinations
                .iter()
                .map(|d| Link { health: self.worker.transport.health(&d.address), connection: None })
                .collect();
            links.table = Some(self.destinations.clone());
        }
        links
    }

    /// How many of the destinations `dests` are marked TKO (the worker's links looked up once).
    pub fn count_tko(&self, dests: impl IntoIterator<Item = usize>) -> usize {
        let links = self.links();
        dests.into_iter().filter(|&d| links.by_dest[d].health.is_tko()).count()
    }

    /// Sends the request `encode` writes, whose answer has `shape`, to destination `dest` and
    /// waits for the answer (at once an error if it is TKO, unless `fail_open`). The connection
    /// counts it in the destination's health (failures towards TKO).
    pub async fn exchange(
        &self,
        dest: usize,
        encode: impl FnOnce(&mut Vec<u8>),
        shape: Shape,
        fail_open: bool,
    ) -> Reply {
        let destination = &self.destinations[dest];
        let waiting = {
            let mut links = self.links();
            let link = &mut links.by_dest[dest];
            if link.health.is_tko() && !fail_open {
                return Reply::Error(ErrorKind::Tko, format!("{} is marked down (TKO)", destination.address));
            }
            let connection = match &link.connection {
                Some(c) if !c.is_closed() => c,
                _ => {
                    link.connection.insert(self.connection(&destination.address, destination.connect_timeout))
                }
            };
            match Connection::send(connection, encode, shape, destination.server_timeout) {
                Some(waiting) => waiting,
                None => {
                    return Reply::Error(
                        ErrorKind::Timeout,
                        format!("{} has too many requests in flight", destination.address),
                    )
                }
            }
        };
        match waiting.await {
            Ok(answer) => Reply::Answer(answer),
            Err((kind, why)) => Reply::Error(kind, why),
        }
    }

    /// The worker's connection to `address`, opened now if it has none (or it died).
    fn connection(&self, address: &str, connect_timeout: Duration) -> Rc<Connection> {
        let mut connections = self.worker.connections.borrow_mut();
        if let Some(connection) = connections.get(address).filter(|c| !c.is_closed()) {
            return connection.clone();
        }
        let transport = &self.worker.transport;
        let health = transport.health(address);
        let spares = self.worker.spares.clone();
        let connection =
            Connection::open(address, connect_timeout, health, transport.max_value_bytes, spares);
        connections.insert(address.to_string(), connection.clone());
        connection
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ErrorKind;
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A destination that answers every `get` with `END`, except that its first connection
    /// stops answering after its first request (as a stream a cut link left in TCP's
    /// retransmission back-off does, while new connections are answered at once).
    fn stalling_destination() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let nth = counted.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut writer = stream.try_clone().unwrap();
                    for (i, line) in BufReader::new(stream).lines().enumerate() {
                        if line.is_err() || (nth == 0 && i > 0) {
                            continue; // read, never answered
                        }
                        if writer.write_all(b"END\r\n").is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, accepted)
    }

    #[test]
    fn a_request_after_a_timeout_goes_over_a_fresh_connection_not_behind_the_stalled_one() {
        let (address, accepted) = stalling_destination();
        // Generous against a loaded machine: the test takes about 1.5 of them.
        let timeout = Duration::from_secs(4);
        let destination = Destination { address, server_timeout: timeout, connect_timeout: timeout };
        let sender = Sender {
            destinations: Arc::from(vec![destination]),
            worker: Rc::new(Worker::new(Arc::new(Transport::new(1 << 20)))),
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let replies = tokio::task::LocalSet::new().block_on(&runtime, async {
            let get = || sender.exchange(0, |out| out.extend_from_slice(b"get k\r\n"), Shape::Values, false);
            let first = get().await;
            // A second request stalls; a third joins it halfway through its wait, and is still
            // waiting when the second times out and the fourth is sent.
            let third = async {
                tokio::time::sleep(timeout / 2).await;
                get().await
            };
            let second_then_fourth = async {
                let second = get().await;
                (second, get().await)
            };
            let (third, (second, fourth)) = futures::join!(third, second_then_fourth);
            [first, second, third, fourth]
        });
        assert!(matches!(replies[0], Reply::Answer(_)), "answered on the first connection: {:?}", replies[0]);
        for (n, reply) in [(2, &replies[1]), (3, &replies[2])] {
            let timed_out = matches!(reply, Reply::Error(ErrorKind::Timeout, _));
            assert!(timed_out, "request {n}, on the stalled connection, timed out: {reply:?}");
        }
        assert!(matches!(replies[3], Reply::Answer(_)), "the fourth request was answered: {:?}", replies[3]);
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "over a second connection");
    }
}
