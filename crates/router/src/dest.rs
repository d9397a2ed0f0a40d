//! Destinations: one connection per destination and worker thread (`connection.rs`), opened
//! when first needed and shared by every request of every client of that worker (a router's
//! point: thousands of clients, a handful of server connections); health shared by all workers
//! (TKO after consecutive failures, a probe that brings a destination back); and [`Ctx`], what
//! a route handle needs to send.

use crate::config::Config;
use crate::connection::Connection;
use crate::request::{ErrorKind, Reply, Request, Shape};
use crate::route::Child;
use shoal_client::spool::Spools;
use std::cell::RefCell;
use std::collections::HashMap;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};

/// Consecutive failures that mark a destination TKO ("technical knock-out").
pub const TKO_AFTER: u32 = 3;
/// How often a TKO destination is probed with `version`.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// A destination's health, shared by every worker.
#[derive(Debug, Default)]
pub struct Health {
    failures: AtomicU32,
    tko: AtomicBool,
    probing: AtomicBool,
    /// Requests answered, and failed, through this destination.
    pub sent: AtomicU64,
    pub failed: AtomicU64,
    /// Requests sent to this destination (by any worker) and not answered yet.
    pub pending: AtomicU64,
}

impl Health {
    /// Whether requests to the destination fail fast now.
    pub fn is_tko(&self) -> bool {
        self.tko.load(Ordering::Relaxed)
    }

    pub(crate) fn success(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Counts a failure; true when it marked the destination TKO (the caller starts a probe).
    pub(crate) fn failure(&self) -> bool {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        n >= TKO_AFTER
            && !self.tko.swap(true, Ordering::Relaxed)
            && !self.probing.swap(true, Ordering::Relaxed)
    }
}

/// What every worker shares: destinations' health by address, the spools, counters.
#[derive(Debug)]
pub struct Shared {
    health: Mutex<HashMap<String, Arc<Health>>>,
    /// Spools of deletes that must reach their destination.
    pub spools: Arc<Spools>,
    /// The largest value a destination may announce (a bound on what one answer can make the
    /// router allocate).
    pub max_value_bytes: usize,
    /// Requests from clients, and those answered with an error.
    pub requests: AtomicU64,
    pub errors: AtomicU64,
}

impl Shared {
    /// State shared by the workers of one router.
    pub fn new(spools: Arc<Spools>, max_value_bytes: usize) -> Shared {
        Shared {
            health: Mutex::new(HashMap::new()),
            spools,
            max_value_bytes,
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// The health of `address` (created healthy on first use).
    pub fn health(&self, address: &str) -> Arc<Health> {
        let mut map = self.health.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(health) = map.get(address) {
            return health.clone();
        }
        map.entry(address.to_string()).or_default().clone()
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
/// configuration it last served, each destination's health and connection by index (so a
/// request hashes no address and takes no lock shared with other workers).
#[derive(Default)]
pub struct Worker {
    connections: RefCell<HashMap<String, Rc<Connection>>>,
    links: RefCell<Links>,
}

/// The worker's view of one configuration's destinations, by index.
#[derive(Default)]
struct Links {
    config: Option<Arc<Config>>,
    by_dest: Vec<Link>,
}

/// One destination as a worker sees it.
struct Link {
    health: Arc<Health>,
    connection: Option<Rc<Connection>>,
}

/// What a route handle needs to carry out a request: the configuration it started with, the
/// worker's connections, what workers share, and how to send (spooled or not).
#[derive(Clone)]
pub struct Ctx {
    pub config: Arc<Config>,
    pub worker: Rc<Worker>,
    pub shared: Arc<Shared>,
    /// Deletes are written to spools instead of sent (under `AllAsyncRoute`, `/*/*/`).
    pub spool: bool,
    /// Ignore TKO marks (too many of a pool are TKO: fail open).
    pub fail_open: bool,
    /// Picks `LatestRoute`'s children, once per router.
    pub latest_seed: usize,
}

impl Ctx {
    /// Whether `request` goes to spools under `AllAsyncRoute` (deletes do).
    pub fn spools(&self, request: &Request) -> bool {
        request.op == crate::request::Op::Delete
    }

    /// The worker's links for this context's configuration (rebuilt when it changed).
    fn links(&self) -> std::cell::RefMut<'_, Links> {
        let mut links = self.worker.links.borrow_mut();
        if !links.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.config)) {
            links.by_dest = self
                .config
                .destinations
                .iter()
                .map(|d| Link { health: self.shared.health(&d.address), connection: None })
                .collect();
            links.config = Some(self.config.clone());
        }
        links
    }

    /// Whether destination `dest` is marked TKO.
    pub fn is_tko(&self, dest: usize) -> bool {
        self.links().by_dest[dest].health.is_tko()
    }

    /// Runs `request` along `route` in the background; its answer is dropped.
    pub fn background(&self, route: Child, request: Request) {
        let ctx = self.clone();
        tokio::task::spawn_local(async move {
            route.execute(&request, &ctx).await;
        });
    }

    /// Sends `request` to destination `dest` and waits for its answer (or spools a delete).
    pub async fn send(&self, dest: usize, request: &Request, keep_routing_prefix: bool) -> Reply {
        if self.spool && self.spools(request) {
            let bytes = request.encode(keep_routing_prefix);
            let address = &self.config.destinations[dest].address;
            return match self.shared.spools.append(address, &bytes) {
                Ok(()) => Reply::Answer(b"DELETED\r\n".to_vec()),
                Err(e) => Reply::Error(ErrorKind::Connect, format!("spool for {address}: {e}")),
            };
        }
        let encode = |out: &mut Vec<u8>| request.encode_into(keep_routing_prefix, out);
        self.exchange(dest, encode, request.shape(), self.fail_open).await
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
        let destination = &self.config.destinations[dest];
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
            match connection.send(encode, shape, destination.server_timeout) {
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
        let health = self.shared.health(address);
        let connection = Connection::open(address, connect_timeout, health, self.shared.max_value_bytes);
        connections.insert(address.to_string(), connection.clone());
        connection
    }
}

/// A connected stream to a destination, TCP or unix.
pub(crate) enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The two halves of a stream, whichever kind it is.
type Halves = (Box<dyn tokio::io::AsyncRead + Unpin>, Box<dyn tokio::io::AsyncWrite + Unpin>);

impl Stream {
    /// Reads into `buf` (as `AsyncRead::poll_read`, which also notes a short read drained the
    /// socket, saving the read that would find it empty).
    pub(crate) fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        let polled = match self {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, &mut buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, &mut buf),
        };
        polled.map_ok(|()| buf.filled().len())
    }

    /// Writes from `bytes`.
    pub(crate) fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        match self {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, bytes),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, bytes),
        }
    }

    fn halves(self) -> Halves {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (Box::new(r), Box::new(w))
            }
        }
    }
}

/// Connects to `address` (`host:port`, or a path for a unix socket) within `timeout`.
pub(crate) async fn connect(address: &str, timeout: Duration) -> std::io::Result<Stream> {
    let attempt = async {
        if address.contains('/') {
            tokio::net::UnixStream::connect(address).await.map(Stream::Unix)
        } else {
            let s = tokio::net::TcpStream::connect(address).await?;
            s.set_nodelay(true)?;
            Ok(Stream::Tcp(s))
        }
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))
}

/// Probes a TKO destination with `version` until it answers, then clears the mark.
pub(crate) async fn probe(address: String, connect_timeout: Duration, health: Arc<Health>) {
    use tokio::io::AsyncBufReadExt;
    loop {
        tokio::time::sleep(PROBE_EVERY).await;
        let Ok(stream) = connect(&address, connect_timeout).await else { continue };
        let answered = async {
            let (read, mut write) = stream.halves();
            write.write_all(b"version\r\n").await.ok()?;
            let mut line = String::new();
            BufReader::new(read).read_line(&mut line).await.ok()?;
            line.starts_with("VERSION").then_some(())
        };
        if tokio::time::timeout(connect_timeout, answered).await.ok().flatten().is_some() {
            health.failures.store(0, Ordering::Relaxed);
            health.tko.store(false, Ordering::Relaxed);
            health.probing.store(false, Ordering::Relaxed);
            return;
        }
    }
}
