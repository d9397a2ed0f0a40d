//! Listening sockets, the acceptor, and the worker threads that own connections.
//!
//! The acceptor (the thread that called [`serve`]) takes new connections and hands them
//! round-robin to the workers, as memcached's dispatcher does; a worker watches its
//! connections with an edge-triggered poll and drives each one that is ready. A connection
//! that used its `-R` budget goes to the back of a ready queue, so one busy client cannot
//! starve the others.

use crate::conn::{Conn, Status, Stream};
use crate::counters::Counters;
use crate::epoll::{Events, Interest, Poll, Waker};
use crate::exec::Context;
use crate::state::{stop, ConnInfo, Shared};
use crate::tenants::file::{Listen, TenantSpec};
use crate::trace;
use crate::watch::{CloseReason, ConnEvent};
use rustix::net::SocketFlags;
use shoal_proto::ShutdownMode;
use socket2::{Domain, Socket, Type};
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread;

/// The token of a poll's waker.
const WAKE: usize = usize::MAX;

/// The sockets a server listens on, and the acceptor's poll.
pub struct Listeners {
    pub(crate) poll: Poll,
    tcp: Vec<TcpListener>,
    /// Whether each TCP listener's connections speak TLS (`-Z`, less `notls:` ones).
    tcp_tls: Vec<bool>,
    /// The tenant each TCP listener's connections are bound to, if any.
    tcp_tenant: Vec<Option<usize>>,
    /// Unix sockets, each with the tenant its connections are bound to, if any.
    unix: Vec<(UnixListener, PathBuf, Option<usize>)>,
    udp: Option<UdpSocket>,
    waker: Arc<Waker>,
}

fn tcp_listener(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A unix socket listener at `path` with mode `mask` (one a dead server left is replaced).
fn unix_listener(path: &std::path::Path, mask: u32) -> Result<UnixListener, String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path); // left by a server that died
    }
    let listener = UnixListener::bind(path)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|e| format!("failed to listen on unix socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask & 0o777))
        .map_err(|e| format!("could not set the mode of {}: {e}", path.display()))?;
    Ok(listener)
}

fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    (host, port).to_socket_addrs().map(Iterator::collect).map_err(|e| format!("-l {host}: {e}"))
}

impl Listeners {
    /// Binds every listener the settings and the tenants ask for; an error names the address
    /// and the fix. Tenants' own listeners start listening first, so a client that reaches the
    /// main port (what scripts and test harnesses wait for) finds every listener already up;
    /// the main ones still come first in the lists (the port file, `stats conns`).
    pub fn bind(settings: &crate::config::Settings, tenants: &[TenantSpec]) -> Result<Listeners, String> {
        let unix_mask = settings.unix_socket.as_ref().map_or(0o700, |(_, mask)| *mask);
        let (mut tenant_tcp, mut tenant_unix) = (Vec::new(), Vec::new());
        let default_host = settings.tcp.first().map_or("0.0.0.0", |(h, _)| h.as_str());
        for (i, tenant) in tenants.iter().enumerate() {
            for listen in &tenant.listen {
                let (host, port) = match listen {
                    Listen::Unix(path) => {
                        tenant_unix.push((unix_listener(path, unix_mask)?, path.clone(), Some(i)));
                        continue;
                    }
                    Listen::Port(port) => (default_host, *port),
                    Listen::Tcp(host, port) => (host.as_str(), *port),
                };
                for addr in resolve(host, port)? {
                    let listener = tcp_listener(addr, settings.backlog).map_err(|e| {
                        format!("tenant {}: failed to listen on TCP {addr}: {e}", tenant.name)
                    })?;
                    tenant_tcp.push((listener, i));
                }
            }
        }
        let (mut tcp, mut tcp_tls) = (Vec::new(), Vec::new());
        for (host, port) in &settings.tcp {
            let tls = settings.tls.enabled && !settings.notls.contains(&(host.clone(), *port));
            for addr in resolve(host, *port)? {
                let listener = tcp_listener(addr, settings.backlog).map_err(|e| {
                    format!(
                        "failed to listen on TCP {addr}: {e} (another server there? choose a port with -p)"
                    )
                })?;
                tcp.push(listener);
                tcp_tls.push(tls);
            }
        }
        let mut unix = match &settings.unix_socket {
            Some((path, _)) => vec![(unix_listener(path, unix_mask)?, path.clone(), None)],
            None => Vec::new(),
        };
        let udp = match &settings.udp {
            Some((host, port)) => {
                let addr =
                    resolve(host, *port)?.into_iter().next().ok_or(format!("-l {host}: no address"))?;
                Some(UdpSocket::bind(addr).map_err(|e| {
                    format!(
                        "failed to listen on UDP {addr}: {e} (another server there? choose a port with -U)"
                    )
                })?)
            }
            None => None,
        };
        let mut tcp_tenant = vec![None; tcp.len()];
        tcp_tls.resize(tcp.len() + tenant_tcp.len(), settings.tls.enabled);
        tcp_tenant.extend(tenant_tcp.iter().map(|&(_, tenant)| Some(tenant)));
        tcp.extend(tenant_tcp.into_iter().map(|(listener, _)| listener));
        unix.append(&mut tenant_unix);
        let poll = Poll::new().map_err(|e| format!("could not create a poll: {e}"))?;
        let waker = Arc::new(Waker::new(&poll, WAKE).map_err(|e| format!("could not create a waker: {e}"))?);
        Ok(Listeners { poll, tcp, tcp_tls, tcp_tenant, unix, udp, waker })
    }

    /// Wakes the acceptor (to notice a stop).
    pub fn waker(&self) -> io::Result<Arc<Waker>> {
        Ok(self.waker.clone())
    }

    /// memcached's `MEMCACHED_PORT_FILENAME`: if set, the bound ports are written there
    /// (`TCP INET: 11211` …), through a `.lck` file renamed into place.
    /// Each listening socket's descriptor and address as `stats conns` names them
    /// (`tcp:127.0.0.1:11211`, `udp:…`, `unix:<path>`).
    pub fn describe(&self) -> Vec<(u64, String)> {
        let mut all = Vec::new();
        for l in &self.tcp {
            if let Ok(a) = l.local_addr() {
                all.push((l.as_raw_fd() as u64, format!("tcp:{a}")));
            }
        }
        for (l, path, _) in &self.unix {
            all.push((l.as_raw_fd() as u64, format!("unix:{}", path.display())));
        }
        if let Some(u) = &self.udp {
            if let Ok(a) = u.local_addr() {
                all.push((u.as_raw_fd() as u64, format!("udp:{a}")));
            }
        }
        all
    }

    pub fn write_port_file(&self) -> Result<(), String> {
        let Some(name) = std::env::var_os("MEMCACHED_PORT_FILENAME") else { return Ok(()) };
        let mut text = String::new();
        let family = |a: &SocketAddr| if a.is_ipv6() { "6" } else { "" };
        for l in &self.tcp {
            let a = l.local_addr().map_err(|e| e.to_string())?;
            text.push_str(&format!("TCP INET{}: {}\n", family(&a), a.port()));
        }
        if let Some(u) = &self.udp {
            let a = u.local_addr().map_err(|e| e.to_string())?;
            text.push_str(&format!("UDP INET{}: {}\n", family(&a), a.port()));
        }
        let path = PathBuf::from(name);
        let mut lock = path.clone().into_os_string();
        lock.push(".lck");
        std::fs::write(&lock, text)
            .and_then(|()| std::fs::rename(&lock, &path))
            .map_err(|e| format!("could not write MEMCACHED_PORT_FILENAME {}: {e}", path.display()))
    }
}

/// A new connection on its way to a worker.
pub(crate) struct Accepted {
    pub(crate) stream: Stream,
    pub(crate) addr: String,
    /// Whether it must speak TLS (it came in on a `-Z` TCP listener).
    pub(crate) tls: bool,
    /// The tenant its listener binds it to.
    pub(crate) tenant: Option<usize>,
}

/// The acceptor's handle on a worker.
pub(crate) struct WorkerHandle {
    inbox: Sender<Accepted>,
    waker: Arc<Waker>,
    thread: thread::JoinHandle<()>,
}

impl WorkerHandle {
    /// Hands a new connection to the worker and wakes it.
    pub(crate) fn hand(&self, conn: Accepted) {
        if self.inbox.send(conn).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// The listeners' parts an io_uring acceptor takes over: the poll (only its waker is
/// registered), the TCP listeners with their TLS flags and tenants, the unix ones.
pub(crate) type ListenerParts =
    (Poll, Vec<TcpListener>, Vec<Option<usize>>, Vec<(UnixListener, PathBuf, Option<usize>)>);

impl Listeners {
    /// Splits the listeners for the io_uring acceptor; the UDP socket is served by its own
    /// thread (returned running) on either path.
    pub(crate) fn into_parts(self, shared: &Arc<Shared>) -> (ListenerParts, Option<thread::JoinHandle<()>>) {
        let udp = self.udp.map(|socket| crate::udp::spawn(shared.clone(), socket));
        ((self.poll, self.tcp, self.tcp_tenant, self.unix), udp)
    }
}

/// Starts the workers, each running `run` with its index, its poll and its inbox.
pub(crate) fn spawn_workers(
    shared: &Arc<Shared>,
    acceptor: &Arc<Waker>,
    run: fn(&Shared, usize, Poll, Receiver<Accepted>, Arc<Waker>),
) -> Result<Vec<WorkerHandle>, String> {
    (0..shared.settings.threads)
        .map(|index| spawn_worker(shared.clone(), index, acceptor.clone(), run))
        .collect()
}

/// Wakes the workers to notice the stop and waits for them.
pub(crate) fn join_workers(workers: Vec<WorkerHandle>) {
    for w in &workers {
        let _ = w.waker.wake();
    }
    for w in workers {
        let _ = w.thread.join();
    }
}

/// Accepts connections and runs the epoll workers until the server is asked to stop (the
/// io_uring path's acceptor is `crate::uring::serve`; `launch` chooses).
pub fn serve(shared: Arc<Shared>, mut listeners: Listeners) -> Result<(), String> {
    let poll = &listeners.poll;
    for (i, l) in listeners.tcp.iter().enumerate() {
        poll.add(l, i, Interest::Read).map_err(|e| e.to_string())?;
    }
    let unix_tokens = listeners.tcp.len()..listeners.tcp.len() + listeners.unix.len();
    for (i, (l, _, _)) in listeners.unix.iter().enumerate() {
        poll.add(l, unix_tokens.start + i, Interest::Read).map_err(|e| e.to_string())?;
    }
    let workers = spawn_workers(&shared, &listeners.waker, |shared, index, poll, arrivals, acceptor| {
        Worker::new(shared, index, poll, arrivals, acceptor).run()
    })?;
    let udp = listeners.udp.take().map(|socket| crate::udp::spawn(shared.clone(), socket));
    let mut events = Events::with_capacity(64);
    let mut next = 0;
    while !shared.stopping() {
        if let Err(e) = listeners.poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("poll failed: {e}"));
        }
        for event in events.iter() {
            let token = event.token();
            loop {
                let accepted = if token < listeners.tcp.len() {
                    let (tls, tenant) = (listeners.tcp_tls[token], listeners.tcp_tenant[token]);
                    accept_tcp(&listeners.tcp[token]).map(|(s, addr)| {
                        let _ = s.set_nodelay(true);
                        Accepted { stream: Stream::Tcp(s), addr: format!("tcp:{addr}"), tls, tenant }
                    })
                } else if unix_tokens.contains(&token) {
                    let (l, path, tenant) = &listeners.unix[token - unix_tokens.start];
                    let accepted = rustix::net::accept_with(l, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC);
                    accepted.map_err(io::Error::from).map(|s| Accepted {
                        stream: Stream::Unix(UnixStream::from(s)),
                        addr: format!("unix:{}", path.display()),
                        tls: false,
                        tenant: *tenant,
                    })
                } else {
                    break; // the waker
                };
                match accepted {
                    Ok(conn) => {
                        if let Some(conn) = admit(&shared, conn) {
                            workers[next % workers.len()].hand(conn);
                            next += 1;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // EMFILE and the like: memcached too keeps going.
                        if shared.verbosity.load(Ordering::Relaxed) > 0 {
                            eprintln!("accept failed: {e}");
                        }
                        break;
                    }
                }
            }
        }
    }
    join_workers(workers);
    if let Some(udp) = udp {
        let _ = udp.join();
    }
    for (_, path, _) in &listeners.unix {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Accepts a TCP connection as a non-blocking socket (closed on exec), with its client's
/// address: one `accept4`, as mio's listener did.
fn accept_tcp(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    let (socket, peer) =
        rustix::net::acceptfrom_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC)?;
    let stream = TcpStream::from(socket);
    let peer = match peer.map(SocketAddr::try_from) {
        Some(Ok(peer)) => peer,
        // Not an IP address, which a TCP listener's client always has: ask the socket.
        _ => stream.peer_addr()?,
    };
    Ok((stream, peer))
}

/// Counts a new connection in, or turns it away with memcached's message if `-c` is reached.
pub(crate) fn admit(shared: &Shared, mut conn: Accepted) -> Option<Accepted> {
    let open = shared.curr_connections.load(Ordering::Relaxed);
    if open as usize >= shared.settings.max_connections {
        shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
        let message = b"ERROR Too many open connections\r\n";
        let _ = conn.stream.write(message); // plain: TLS starts on the worker

        return None;
    }
    shared.curr_connections.fetch_add(1, Ordering::Relaxed);
    shared.total_connections.fetch_add(1, Ordering::Relaxed);
    Some(conn)
}

fn spawn_worker(
    shared: Arc<Shared>,
    index: usize,
    acceptor: Arc<Waker>,
    run: fn(&Shared, usize, Poll, Receiver<Accepted>, Arc<Waker>),
) -> Result<WorkerHandle, String> {
    let poll = Poll::new().map_err(|e| format!("could not create a poll: {e}"))?;
    let waker = Arc::new(Waker::new(&poll, WAKE).map_err(|e| e.to_string())?);
    let (inbox, arrivals) = channel();
    let thread = thread::Builder::new()
        .name(format!("worker-{index}"))
        .spawn(move || run(&shared, index, poll, arrivals, acceptor))
        .map_err(|e| format!("could not start worker thread: {e}"))?;
    Ok(WorkerHandle { inbox, waker, thread })
}

/// One worker thread: its poll and its connections (indexed by poll token).
struct Worker<'a> {
    shared: &'a Shared,
    cx: Context<'a>,
    poll: Poll,
    arrivals: Receiver<Accepted>,
    acceptor: Arc<Waker>,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    /// Connections that yielded with requests still buffered.
    ready: VecDeque<usize>,
    /// Connections that became watchers (`watch`): driven every [`WATCH_INTERVAL`] to send
    /// the lines other threads queued for them.
    watchers: Vec<usize>,
}

/// How often a worker sends its watchers the lines queued for them.
const WATCH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

impl<'a> Worker<'a> {
    fn new(
        shared: &'a Shared,
        index: usize,
        poll: Poll,
        arrivals: Receiver<Accepted>,
        acceptor: Arc<Waker>,
    ) -> Self {
        Worker {
            shared,
            cx: Context::new(shared, index),
            poll,
            arrivals,
            acceptor,
            conns: Vec::new(),
            free: Vec::new(),
            ready: VecDeque::new(),
            watchers: Vec::new(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        let idle = self.shared.settings.idle_timeout;
        let mut idle_checked = std::time::Instant::now();
        while !self.shared.stopping() {
            let timeout = if !self.ready.is_empty() {
                Some(std::time::Duration::ZERO)
            } else if !self.watchers.is_empty() {
                Some(WATCH_INTERVAL)
            } else {
                idle.map(|_| std::time::Duration::from_secs(1))
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                eprintln!("worker poll failed: {e}");
                break;
            }
            for event in events.iter() {
                if event.is_read_closed() || event.is_error() {
                    if let Some(conn) = self.conns.get_mut(event.token()).and_then(Option::as_mut) {
                        conn.hung_up();
                    }
                }
            }
            if events.len() > 1 {
                // Several connections ready: read them all before serving any (`read_ahead`).
                for event in events.iter() {
                    if let Some(conn) = self.conns.get_mut(event.token()).and_then(Option::as_mut) {
                        conn.read_ahead(&mut self.cx);
                    }
                }
            }
            for event in events.iter() {
                if event.token() == WAKE {
                    self.take_arrivals();
                } else {
                    self.drive(event.token());
                }
            }
            for _ in 0..self.ready.len() {
                if let Some(i) = self.ready.pop_front() {
                    self.drive(i);
                }
            }
            for k in (0..self.watchers.len()).rev() {
                self.drive(self.watchers[k]);
            }
            if let Some(seconds) = idle {
                if idle_checked.elapsed() >= std::time::Duration::from_secs(1) {
                    idle_checked = std::time::Instant::now();
                    self.kick_idle(seconds);
                }
            }
        }
        for i in 0..self.conns.len() {
            self.close_for(i, CloseReason::Shutdown);
        }
    }

    fn take_arrivals(&mut self) {
        while let Ok(accepted) = self.arrivals.try_recv() {
            let i = self.free.pop().unwrap_or_else(|| {
                self.conns.push(None);
                self.conns.len() - 1
            });
            let poll = &self.poll;
            let conn = open_conn(self.shared, accepted, |stream| {
                poll.add(stream.fd(), i, Interest::ReadWrite).is_ok()
            });
            let Some(conn) = conn else {
                self.free.push(i);
                continue;
            };
            self.conns[i] = Some(conn);
            // Data may have arrived before registration: look now.
            self.drive(i);
        }
    }

    fn drive(&mut self, i: usize) {
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else { return };
        let status = conn.drive(&mut self.cx, self.shared.settings.reqs_per_event);
        if conn.watcher().is_some() && !self.watchers.contains(&i) {
            self.watchers.push(i);
        }
        match status {
            Status::Open => {}
            Status::Yield => self.ready.push_back(i),
            Status::Close => self.close(i),
            Status::Shutdown(mode) => {
                self.close_for(i, CloseReason::Shutdown);
                self.shared.request_stop(if mode == ShutdownMode::Graceful {
                    stop::GRACEFUL
                } else {
                    stop::NOW
                });
                let _ = self.acceptor.wake();
            }
        }
    }

    /// Closes connections whose last command is `seconds` or more ago (memcached's
    /// `idle_timeout`), counting each in `idle_kicks`.
    fn kick_idle(&mut self, seconds: u32) {
        let now = u64::from(self.shared.clock.now());
        for i in 0..self.conns.len() {
            let Some(conn) = &self.conns[i] else { continue };
            if idle_past(conn, now, seconds) {
                Counters::bump(&self.cx.counters.idle_kicks);
                self.close_for(i, CloseReason::IdleTimeout);
            }
        }
    }

    /// Closes a connection for the reason it knows (see [`Conn::close_reason`]).
    fn close(&mut self, i: usize) {
        let Some(reason) = self.conns.get(i).and_then(Option::as_ref).map(|c| c.close_reason) else { return };
        self.close_for(i, reason);
    }

    fn close_for(&mut self, i: usize, reason: CloseReason) {
        let Some(mut conn) = self.conns.get_mut(i).and_then(Option::take) else { return };
        let _ = self.poll.delete(conn.stream().fd());
        if conn.watcher().is_some() {
            self.watchers.retain(|&w| w != i);
        }
        close_conn(self.shared, &mut conn, reason);
        self.free.push(i);
    }
}

/// Opens a connection a worker took from the acceptor, on either path: its TLS session if its
/// listener asks for one, `register` (with the worker's poll), its `stats conns` entry, the
/// `-vv` line and `watch connevents`. `None`: it could not start (already counted out).
pub(crate) fn open_conn(
    shared: &Shared,
    Accepted { stream, addr, tls, tenant }: Accepted,
    register: impl FnOnce(&mut Stream) -> bool,
) -> Option<Conn> {
    let id = stream.raw_fd() as u64;
    let listen_addr = match &stream {
        Stream::Tcp(s) => s.local_addr().map(|a| format!("tcp:{a}")).unwrap_or_default(),
        Stream::Tls(s) => s.tcp.local_addr().map(|a| format!("tcp:{a}")).unwrap_or_default(),
        Stream::Unix(_) => addr.clone(),
    };
    // -Z: TCP connections speak TLS, but for `notls:` listeners (unix sockets and UDP
    // stay plain, as in memcached).
    let mut stream = match (stream, &shared.tls) {
        (Stream::Tcp(tcp), Some(session)) if tls => match session.accept(tcp) {
            Ok(session) => Stream::Tls(Box::new(session)),
            Err(_) => {
                shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
                return None;
            }
        },
        (stream, _) => stream,
    };
    if !register(&mut stream) {
        shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
        return None;
    }
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        eprintln!("<{id} new auto-negotiating client connection");
    }
    let info = Arc::new(ConnInfo::new(addr, listen_addr, shared.clock.now()));
    shared.conns.lock().unwrap_or_else(|p| p.into_inner()).insert(id, info.clone());
    let conn = Conn::new(stream, id, info, &shared.settings, tenant);
    shared.logs.connection(ConnEvent::Opened, conn.peer, id);
    Some(conn)
}

/// Whether a connection waited for a command longer than `-o idle_timeout` (`seconds`) by
/// `now`. A watcher sends no commands; memcached kicks only connections waiting for one.
pub(crate) fn idle_past(conn: &Conn, now: u64, seconds: u32) -> bool {
    conn.watcher().is_none()
        && now.saturating_sub(conn.info.last_cmd.load(Ordering::Relaxed)) > u64::from(seconds)
}

/// Everything a closing connection undoes, on either path (the worker has already stopped
/// watching its socket): `watch connevents`, TLS's close_notify, the `-vv` line, its hints
/// area, its watcher, its `stats conns` entry and its count. The socket closes when `conn` drops.
pub(crate) fn close_conn(shared: &Shared, conn: &mut Conn, reason: CloseReason) {
    shared.logs.connection(ConnEvent::Closed(reason), conn.peer, conn.id);
    conn.stream().close();
    if shared.verbosity.load(Ordering::Relaxed) > 1 {
        trace::closed(conn.id);
    }
    shared.hints.unregister(conn.id, &shared.tenants, shared.local_reads());
    if let Some(watcher) = conn.watcher() {
        shared.logs.remove(watcher);
    }
    let mut conns = shared.conns.lock().unwrap_or_else(|p| p.into_inner());
    conns.retain(|_, info| !Arc::ptr_eq(info, &conn.info));
    drop(conns);
    shared.curr_connections.fetch_sub(1, Ordering::Relaxed);
}
