//! One client connection: its buffers and the loop that reads requests, executes them and
//! writes the answers, one write per batch.
//!
//! Memory per connection is bounded: the read buffer grows only to hold one request (a value
//! of the largest item size, or a multiget line up to [`MAX_REQUEST`]); answers stop being
//! produced while more than [`OUTPUT_HIGH_WATER`] bytes wait for a client that does not read.

use crate::auth::Session;
use crate::config::{Protocol, Settings};
use crate::counters::Counters;
use crate::exec::crawler::{dump_slice, Dump};
use crate::exec::ops::Placed;
use crate::exec::{binary, Context, Flow};
use crate::state::{conn_state, ConnInfo};
use crate::syscalls;
use crate::tls::TlsStream;
use crate::trace;
use crate::watch::{CloseReason, Watcher, WATCHER_BUFFER};
use shoal_proto::binary::REQUEST_MAGIC;
use shoal_proto::{parse_ascii_auth, AsciiAuth, BinaryParse, BinaryParser, Parse, Parser, ShutdownMode};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Initial read buffer (memcached's too).
const READ_BUFFER: usize = 16 << 10;
/// The longest request a connection may send, unless the item limit needs more: bounds a
/// multiget line (100 000 short keys fit).
pub const MAX_REQUEST: usize = 4 << 20;
/// Requests are not executed while this much output waits to be sent.
pub const OUTPUT_HIGH_WATER: usize = 4 << 20;

/// A TCP, TLS-over-TCP (`-Z`) or unix-socket stream, non-blocking.
pub enum Stream {
    Tcp(TcpStream),
    Tls(Box<TlsStream>),
    Unix(UnixStream),
}

impl Stream {
    /// Reads (plaintext); returns the bytes read and whether nothing more is waiting. A plain
    /// socket is read with the system call itself ([`syscalls`]). Inlined into
    /// [`Conn::read`], as [`Stream::write`] is into [`Conn::flush`] (#29's tenth round).
    #[inline(always)]
    fn read(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        let n = match self {
            Stream::Tcp(s) => syscalls::recv(&*s, buf)?,
            Stream::Tls(s) => return s.read(buf),
            Stream::Unix(s) => syscalls::recv(&*s, buf)?,
        };
        Ok((n, n < buf.len()))
    }

    /// Writes (plaintext; TLS encrypts it).
    #[inline]
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => syscalls::send(&*s, buf),
            Stream::Tls(s) => s.write(buf),
            Stream::Unix(s) => syscalls::send(&*s, buf),
        }
    }

    /// Sends what TLS still holds; `Ok(false)` if the socket cannot take it all now.
    fn push(&mut self) -> io::Result<bool> {
        match self {
            Stream::Tls(s) => s.push(),
            Stream::Tcp(_) | Stream::Unix(_) => Ok(true),
        }
    }

    /// Ends a TLS session politely (close_notify); plain streams need nothing.
    pub fn close(&mut self) {
        if let Stream::Tls(s) = self {
            s.close();
        }
    }

    /// The client's address (`None` on a unix socket).
    fn peer(&self) -> Option<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr().ok(),
            Stream::Tls(s) => s.tcp.peer_addr().ok(),
            Stream::Unix(_) => None,
        }
    }

    /// The socket's descriptor.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Tls(s) => s.tcp.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    /// The socket, for a poll to watch.
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Tls(s) => s.tcp.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// What the worker does with a connection after driving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Wait for the next readiness event.
    Open,
    /// It used its `-R` budget with requests still buffered: drive it again soon, after the
    /// others had their turn.
    Yield,
    /// Close it.
    Close,
    /// Close it and stop the server.
    Shutdown(ShutdownMode),
}

/// Why executing buffered requests stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stopped {
    /// No complete request is buffered (or the connection is closing).
    Input,
    /// The `-R` budget is used up.
    Budget,
    /// Too much output waits to be written.
    Output,
}

/// What one step of parsing and executing did.
enum Outcome {
    /// No whole request is buffered.
    Incomplete,
    /// A request was executed (or refused) and took `consume` bytes (more than are buffered
    /// when the rest of a refused value has yet to arrive).
    Handled { consume: usize, flow: Flow },
    /// Close without answering.
    Close,
}

/// A connection's state.
pub struct Conn {
    stream: Stream,
    /// The socket's descriptor, which names the connection in `stats conns` and the `-vv` trace.
    pub id: u64,
    /// The client's address, taken at accept for `watch connevents` (`None`: a unix socket).
    pub peer: Option<SocketAddr>,
    /// Why it closes, for `watch connevents`: set where the reason is known.
    pub close_reason: CloseReason,
    pub info: Arc<ConnInfo>,
    parser: Parser,
    binary: BinaryParser,
    /// The protocol this connection speaks; `Auto` until its first byte.
    protocol: Protocol,
    session: Session,
    /// Read buffer; bytes `start..end` are received and not yet consumed.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes still to drop (the rest of a refused value that has not arrived yet).
    swallow: usize,
    max_request: usize,
    /// Answers; bytes `sent..` are still to be written.
    out: Vec<u8>,
    sent: usize,
    /// Close once the output is written (`quit`, a protocol error memcached closes on).
    closing: bool,
    shutdown: Option<ShutdownMode>,
    /// A key dump being written (`lru_crawler metadump`).
    dump: Option<Dump>,
    /// Set once the connection became a watcher (`watch`): it takes no more requests.
    watcher: Option<Arc<Watcher>>,
    /// Whether it ever sent a byte.
    heard: bool,
    /// Whether [`Conn::read_ahead`]'s read drained the socket (a short read), for `drive`.
    drained_ahead: bool,
    /// The poll said the client closed its side: a short read no longer means "nothing more",
    /// since the end of the stream raises no new event (see [`Conn::hung_up`]).
    hung_up: bool,
    /// The placement of the key of the `get` at the head of the buffer, made by
    /// [`Conn::read_ahead`] as it started loading the key's index: handed to that request
    /// ([`Context::placed_ahead`]), which then does not hash the key again.
    placed_ahead: Option<Placed>,
}

impl Conn {
    /// A new connection over `stream`, for a server with `settings`.
    /// `tenant`: the tenant its listener binds it to, if any.
    pub fn new(
        stream: Stream,
        id: u64,
        info: Arc<ConnInfo>,
        settings: &Settings,
        tenant: Option<usize>,
    ) -> Conn {
        let max_item_bytes = settings.max_item_bytes;
        Conn {
            peer: stream.peer(),
            close_reason: CloseReason::default(),
            stream,
            id,
            info,
            parser: Parser::new(max_item_bytes),
            binary: BinaryParser { max_item_bytes, sasl: settings.sasl },
            protocol: settings.protocol,
            session: Session { authenticated: !settings.auth_required(), sasl_started: false, tenant },
            buf: vec![0; READ_BUFFER],
            start: 0,
            end: 0,
            swallow: 0,
            max_request: MAX_REQUEST.max(max_item_bytes + shoal_proto::MAX_LINE + 2),
            out: Vec::new(),
            sent: 0,
            closing: false,
            shutdown: None,
            dump: None,
            watcher: None,
            heard: false,
            drained_ahead: false,
            hung_up: false,
            placed_ahead: None,
        }
    }

    /// The stream, to register with a poll.
    pub fn stream(&mut self) -> &mut Stream {
        &mut self.stream
    }

    /// The socket's descriptor.
    pub fn stream_fd(&self) -> std::os::fd::RawFd {
        self.stream.raw_fd()
    }

    /// Tells the connection its poll event said the client closed its side (or the socket
    /// failed). Data and the end of the stream can come in one edge-triggered event: a short
    /// read then takes the data, and the read that meets the end must still be made.
    pub fn hung_up(&mut self) {
        self.hung_up = true;
    }

    /// The watcher this connection became, if it did.
    pub fn watcher(&self) -> Option<&Arc<Watcher>> {
        self.watcher.as_ref()
    }

    /// Reads, executes and answers until the socket has nothing more, the output cannot be
    /// written, or `budget` requests were executed. A watcher's waiting lines are sent.
    /// Inlined into its one caller, the worker's (a call's entry and exit cost a request some
    /// 20 instructions, #29's tenth round).
    #[inline(always)]
    pub fn drive(&mut self, cx: &mut Context<'_>, budget: usize) -> Status {
        self.info.state.store(conn_state::PARSE_CMD, Ordering::Relaxed);
        let status = self.run(cx, budget);
        self.info.state.store(self.resting_state(), Ordering::Relaxed);
        status
    }

    /// What the connection waits for now, as `stats conns` shows it.
    fn resting_state(&self) -> u8 {
        if self.watcher.is_some() || self.dump.is_some() {
            return conn_state::WATCH;
        } else if self.sent < self.out.len() {
            return conn_state::MWRITE;
        } else if !self.heard {
            return conn_state::NEW_CMD;
        } else if self.start == self.end && self.swallow == 0 {
            // The commonest case, decided without searching (or slicing the buffer).
            return conn_state::READ;
        }
        let pending = &self.buf[self.start..self.end];
        if self.swallow > 0
            || (self.protocol == Protocol::Binary && pending.len() >= shoal_proto::binary::HEADER_LEN)
            || (self.protocol != Protocol::Binary && pending.contains(&b'\n'))
        {
            // A whole command line (or binary header) is in: its value is what it waits for.
            conn_state::NREAD
        } else {
            conn_state::READ
        }
    }

    /// Reads what the socket holds ahead of [`Conn::drive`], and starts loading the index
    /// buckets of the key of a text `get`/`gets` at the head of the buffer: a worker woken for
    /// many connections reads them all first, so their lookups' memory misses overlap instead
    /// of queueing one after another (as a multiget's keys' do). Only an idle connection reads
    /// here; anything but data (the end of the stream, an error, nothing yet) is left for
    /// `drive`'s own read to meet and handle.
    pub fn read_ahead(&mut self, cx: &mut Context<'_>) {
        let idle = self.start == self.end && self.swallow == 0 && !self.closing;
        if !idle || self.watcher.is_some() || self.dump.is_some() || self.sent < self.out.len() {
            return;
        }
        match self.read(cx.counters) {
            Ok((n, short)) if n > 0 => self.drained_ahead = short && !self.hung_up,
            _ => return,
        }
        if let Some(key) = self.key_ahead() {
            cx.bound = self.session.tenant;
            self.placed_ahead = Some(cx.place_ahead(key));
        }
    }

    /// The key of the text `get`/`gets` at the head of the buffer, if one is there whole.
    fn key_ahead(&self) -> Option<&[u8]> {
        (self.protocol == Protocol::Ascii).then(|| get_key(&self.buf[self.start..self.end])).flatten()
    }

    fn run(&mut self, cx: &mut Context<'_>, mut budget: usize) -> Status {
        let mut drained = std::mem::take(&mut self.drained_ahead);
        // Nothing buffered, nothing to send, nothing TLS may hold: straight to the read (a
        // connection woken by its data alone starts there, with an empty buffer). After a
        // read that brought data there is always something to serve: asked once, not again.
        let mut serve = !self.waits_for_input();
        if !serve && drained {
            return Status::Open;
        }
        loop {
            if serve {
                if let Some(status) = self.serve_buffered(cx, &mut budget, drained) {
                    return status;
                }
            }
            match self.read(cx.counters) {
                Ok((0, _)) => {
                    self.close_reason = CloseReason::Normal; // the client closed
                    return Status::Close;
                }
                Ok((_, short)) => (serve, drained) = (true, short && !self.hung_up),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Status::Open,
                // What is buffered was served before this read: read again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => serve = false,
                Err(_) => return Status::Close,
            }
        }
    }

    /// Whether the connection has nothing to do but read: no request or part of one buffered,
    /// no answer unsent, no stream of its own (watch, dump), not closing, plain TCP or unix.
    fn waits_for_input(&self) -> bool {
        self.start == self.end
            && self.swallow == 0
            && self.out.is_empty()
            && !self.closing
            && self.watcher.is_none()
            && self.dump.is_none()
            && !matches!(self.stream, Stream::Tls(_))
    }

    /// Executes what is buffered and writes the answers; a status to return unless the next
    /// step is to read.
    fn serve_buffered(&mut self, cx: &mut Context<'_>, budget: &mut usize, drained: bool) -> Option<Status> {
        loop {
            let stopped = self.process(cx, budget);
            match self.flush(cx.counters) {
                Ok(true) => {}
                Ok(false) => return Some(Status::Open), // the writable event drives it again
                Err(_) => return Some(Status::Close),
            }
            if self.closing {
                return Some(self.shutdown.map_or(Status::Close, Status::Shutdown));
            }
            match stopped {
                Stopped::Output => {}
                Stopped::Budget => {
                    Counters::bump(&cx.counters.conn_yields);
                    return Some(Status::Yield);
                }
                // A short read drained the socket: new data will raise a new event, so the
                // read that would only say "nothing more" is saved.
                Stopped::Input if drained => return Some(Status::Open),
                Stopped::Input => return None,
            }
        }
    }

    /// Executes the complete requests in the buffer, within the budget; says why it stopped.
    /// Inlined into its two callers (the epoll and the io_uring loops): as a call, its entry
    /// and exit were some 20 instructions a request (#29's ninth round).
    #[inline(always)]
    fn process(&mut self, cx: &mut Context<'_>, budget: &mut usize) -> Stopped {
        let mut executed = false;
        let tracing = cx.shared.verbosity.load(Ordering::Relaxed) > 1;
        cx.conn = self.id;
        let stopped = loop {
            if *budget == 0 {
                break Stopped::Budget;
            }
            if self.closing {
                break Stopped::Input;
            }
            if self.out.len() - self.sent >= OUTPUT_HIGH_WATER {
                break Stopped::Output;
            }
            if let Some(watcher) = &self.watcher {
                // A watcher's requests are ignored, as memcached ignores them.
                (self.start, self.end) = (0, 0);
                if self.out.len() - self.sent < WATCHER_BUFFER {
                    watcher.take(&mut self.out);
                }
                break Stopped::Input;
            }
            if let Some(dump) = &mut self.dump {
                *budget -= 1;
                if dump_slice(cx, dump, &mut self.out) {
                    self.dump = None;
                }
                continue;
            }
            if self.swallow > 0 {
                let n = self.swallow.min(self.end - self.start);
                self.start += n;
                self.swallow -= n;
                if self.swallow > 0 {
                    break Stopped::Input;
                }
            }
            if self.start == self.end {
                break Stopped::Input;
            }
            let before = self.out.len();
            match self.step(cx) {
                Outcome::Incomplete => break Stopped::Input,
                Outcome::Close => self.closing = true,
                Outcome::Handled { consume, flow } => {
                    *budget -= 1;
                    executed = true;
                    let available = self.end - self.start;
                    if tracing && self.protocol != Protocol::Binary {
                        let request = &self.buf[self.start..self.start + consume.min(available)];
                        trace::exchange(self.id, request, &self.out[before..]);
                    }
                    match flow {
                        Flow::Continue => {}
                        Flow::Dump(dump) => self.dump = Some(dump),
                        Flow::Watch(kinds) => match cx.shared.logs.add(kinds) {
                            Ok(watcher) => {
                                self.out.extend_from_slice(b"OK\r\n");
                                self.watcher = Some(watcher);
                            }
                            Err(answer) => crate::exec::reply(&mut self.out, answer.as_bytes()),
                        },
                        Flow::Close => {
                            self.closing = true;
                            self.close_reason = CloseReason::Normal;
                        }
                        Flow::Abort => {
                            self.closing = true;
                            self.out.truncate(self.sent); // what was not sent is dropped
                        }
                        Flow::Shutdown(mode) => {
                            self.closing = true;
                            self.shutdown = Some(mode);
                        }
                    }
                    if consume <= available {
                        self.start += consume;
                    } else {
                        self.swallow = consume - available;
                        self.start = self.end;
                    }
                    if self.start == self.end && *budget > 0 && self.dump.is_none() && self.watcher.is_none()
                    {
                        // All consumed (the usual end of a batch): the next round's checks
                        // would say so too.
                        break Stopped::Input;
                    }
                }
            }
        };
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if executed {
            // The clock the regions are ticked with (every 100 ms): finer than memcached's
            // (`current_time`, every second), and one load where reading the system clock took
            // a tenth of a get's instructions.
            self.info.last_cmd.store(u64::from(cx.region_clock()), Ordering::Relaxed);
        }
        stopped
    }

    /// Parses the request at the start of the buffer in the connection's protocol, and
    /// executes or refuses it. The text protocol's, signed in, is inlined into the loop
    /// ([`Conn::process`]); the others are a call ([`Conn::step_other`]). As a call, the step
    /// cost a request some 25 instructions (#29's tenth round).
    #[inline(always)]
    fn step(&mut self, cx: &mut Context<'_>) -> Outcome {
        cx.bound = self.session.tenant;
        // What `read_ahead` placed is the first key of the request at the head of the buffer,
        // the one about to be parsed: that request uses it or drops it (a stale placement
        // would look another key up in the wrong buckets). Only a whole text `get` line takes
        // it; one still incomplete keeps it.
        cx.placed_ahead = self.placed_ahead.take();
        if self.protocol == Protocol::Ascii && self.session.authenticated {
            self.step_text(cx)
        } else {
            self.step_other(cx)
        }
    }

    /// [`Conn::step`] in the text protocol, signed in.
    #[inline(always)]
    fn step_text(&mut self, cx: &mut Context<'_>) -> Outcome {
        let (input, out) = (&self.buf[self.start..self.end], &mut self.out);
        match self.parser.parse(input) {
            Parse::Incomplete => {
                self.placed_ahead = cx.placed_ahead.take();
                Outcome::Incomplete
            }
            // Borrowed in place: moved out, the request was copied first.
            Parse::Done { ref request, consumed } => {
                Outcome::Handled { consume: consumed, flow: cx.execute(request, out) }
            }
            Parse::Error { reply, consume, forget } => {
                cx.refuse(reply, forget, out);
                Outcome::Handled { consume, flow: Flow::Continue }
            }
            Parse::Close => Outcome::Close,
        }
    }

    /// [`Conn::step`] for a connection whose protocol is still to be negotiated, the binary
    /// protocol's, or a text connection that has yet to sign in (`-Y`).
    #[inline(never)]
    fn step_other(&mut self, cx: &mut Context<'_>) -> Outcome {
        let input = &self.buf[self.start..self.end];
        if self.protocol == Protocol::Auto {
            // memcached's negotiation: a first byte of 0x80 is the binary protocol.
            self.protocol = if input[0] == REQUEST_MAGIC { Protocol::Binary } else { Protocol::Ascii };
            if self.protocol == Protocol::Ascii && self.session.authenticated {
                return self.step_text(cx);
            }
        }
        let out = &mut self.out;
        if self.protocol == Protocol::Binary {
            return match self.binary.parse(input, self.session.authenticated) {
                BinaryParse::Incomplete => Outcome::Incomplete,
                BinaryParse::Done { request, consumed } => {
                    let flow = binary::execute(cx, request, &mut self.session, out);
                    Outcome::Handled { consume: consumed, flow }
                }
                BinaryParse::Refused { opcode, opaque, status, consume, close, forget } => {
                    cx.forget(forget, false);
                    binary::error(out, opcode, opaque, status, status.message());
                    Outcome::Handled { consume, flow: if close { Flow::Close } else { Flow::Continue } }
                }
                BinaryParse::Close => Outcome::Close,
            };
        }
        match parse_ascii_auth(input, self.max_request) {
            AsciiAuth::Incomplete => Outcome::Incomplete,
            AsciiAuth::Credentials { user, password, consumed } => {
                if cx.ascii_auth(user, password, out) {
                    self.session.sign_in(user, &cx.shared.tenants);
                }
                Outcome::Handled { consume: consumed, flow: Flow::Continue }
            }
            AsciiAuth::Refused { reply, consume } => {
                crate::exec::reply(out, reply.as_bytes());
                Outcome::Handled { consume, flow: Flow::Continue }
            }
            AsciiAuth::Close => Outcome::Close,
        }
    }

    /// Reads what the socket has into the buffer, growing it for a request that does not fit
    /// (up to the limit). Returns the bytes read and whether the read drained the socket.
    /// Inlined into its two callers (`run`, `read_ahead`), as [`Conn::process`] is.
    #[inline(always)]
    fn read(&mut self, counters: &Counters) -> io::Result<(usize, bool)> {
        if !self.make_room() {
            // A request longer than any we accept: memcached would close too.
            return Ok((0, true));
        }
        let (n, drained) = self.stream.read(&mut self.buf[self.end..])?;
        self.end += n;
        self.heard |= n > 0;
        Counters::add(&counters.bytes_read, n as u64);
        Ok((n, drained))
    }

    /// Makes room after `end` in the read buffer: moves the unconsumed bytes to the front, or
    /// grows the buffer for a request that does not fit. `false`: the buffer holds a request
    /// longer than any we accept.
    fn make_room(&mut self) -> bool {
        if self.start > 0 && (self.end == self.buf.len() || self.start >= self.buf.len() / 2) {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= self.max_request {
                return false;
            }
            let grown = (self.buf.len() * 2).min(self.max_request);
            self.buf.resize(grown, 0);
        }
        true
    }

    /// Bytes a completion-driven loop (io_uring, [`crate::uring`]) received for this
    /// connection, appended to the read buffer as [`Conn::read`] would have read them, as
    /// many as fit (the buffer grows to the longest request accepted); returns how many.
    /// Fewer than given: the requests buffered must be served first; none while nothing is
    /// served: one request longer than any we accept (close, as a read would).
    pub fn feed(&mut self, data: &[u8], counters: &Counters) -> usize {
        let mut taken = 0;
        while taken < data.len() && self.make_room() {
            let n = (self.buf.len() - self.end).min(data.len() - taken);
            self.buf[self.end..self.end + n].copy_from_slice(&data[taken..taken + n]);
            self.end += n;
            taken += n;
        }
        Counters::add(&counters.bytes_read, taken as u64);
        self.heard |= taken > 0;
        taken
    }

    /// Executes the requests [`Conn::feed`] brought, within `budget`, doing no I/O: the
    /// answers wait for [`Conn::take_output`]. The same execution as [`Conn::drive`]'s.
    pub fn serve(&mut self, cx: &mut Context<'_>, mut budget: usize) -> Status {
        self.info.state.store(conn_state::PARSE_CMD, Ordering::Relaxed);
        let stopped = self.process(cx, &mut budget);
        let status = if self.closing {
            self.shutdown.map_or(Status::Close, Status::Shutdown)
        } else if stopped == Stopped::Budget {
            Counters::bump(&cx.counters.conn_yields);
            Status::Yield
        } else {
            Status::Open
        };
        self.info.state.store(self.resting_state(), Ordering::Relaxed);
        status
    }

    /// What `stats conns` shows once answers were handed to a send (a completion-driven loop):
    /// `conn_mwrite` while the kernel still has some (`true`), else the resting state.
    pub fn show_sending(&self, sending: bool) {
        let state = if sending { conn_state::MWRITE } else { self.resting_state() };
        self.info.state.store(state, Ordering::Relaxed);
    }

    /// Hands the answers waiting to be sent to `sending` (which must be empty), where they stay
    /// in place until the kernel has sent them; the connection keeps producing answers into
    /// `sending`'s old allocation meanwhile. `false`: nothing to send.
    pub fn take_output(&mut self, sending: &mut Vec<u8>) -> bool {
        debug_assert!(sending.is_empty() && self.sent == 0);
        if self.out.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.out, sending);
        true
    }

    /// Answer bytes produced and not yet handed to the socket (or to [`Conn::take_output`]):
    /// at [`OUTPUT_HIGH_WATER`] the connection executes nothing more until they go.
    pub fn output_waiting(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Whether requests wait in the read buffer (a completion-driven loop drives such a
    /// connection again once its output is sent).
    pub fn has_input(&self) -> bool {
        self.start < self.end
    }

    /// Writes pending answers; `Ok(false)` if the socket cannot take them all now.
    fn flush(&mut self, counters: &Counters) -> io::Result<bool> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent += n;
                    Counters::add(&counters.bytes_written, n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.clear();
        self.sent = 0;
        if self.out.capacity() > OUTPUT_HIGH_WATER {
            self.out.shrink_to(READ_BUFFER); // give back what one large answer needed
        }
        // TLS may still hold records the socket did not take: the writable event sends them.
        self.stream.push()
    }
}

/// The first key of a text `get`/`gets` at the start of `input`, if it is there whole and
/// valid (it ends at a space or the line's end).
fn get_key(input: &[u8]) -> Option<&[u8]> {
    let rest = input.strip_prefix(b"get ").or_else(|| input.strip_prefix(b"gets "))?;
    let end = shoal_proto::key_run(rest);
    let ends_key = matches!(rest.get(end), Some(b' ' | b'\r' | b'\n'));
    (end > 0 && end <= shoal_proto::KEY_MAX && ends_key).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::get_key;

    #[test]
    fn the_key_read_ahead_is_a_whole_get_key() {
        assert_eq!(get_key(b"get k1\r\n"), Some(&b"k1"[..]));
        assert_eq!(get_key(b"gets k1 k2\r\n"), Some(&b"k1"[..]));
        assert_eq!(get_key(b"get k1\n"), Some(&b"k1"[..]));
        let long = [b"get ".as_slice(), &[b'k'; 251], b"\r\n"].concat();
        // Cut short, no key, not a get, too long, or a byte no key may hold.
        for none in
            [&b"get k1"[..], b"get  k\r\n", b"set k 0 0 1\r\n", b"gat 0 k\r\n", b"", &long, b"get a\tb\r\n"]
        {
            assert_eq!(get_key(none), None, "{:?}", String::from_utf8_lossy(none));
        }
    }
}
