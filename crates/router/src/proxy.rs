//! A client connection: requests parsed with the server's parser (so malformed ones get
//! memcached's answers), each key routed on the configuration current when the request
//! arrived, answers written in request order.
//!
//! The requests of one read are carried out together (a pipelining client's requests, and a
//! multiget's keys, travel in parallel), then answered in order. A client's buffered input is
//! bounded by the largest item plus one request line: past that the connection is closed.
//!
//! A connection holds no buffer while it waits for its client: it waits until the socket is
//! readable, then reads into a buffer lent by its worker ([`Buffers`]), and gives it back as
//! soon as every request in it is parsed; only a request cut short by the end of a read keeps
//! its buffer until the rest comes. Answers are gathered in a buffer of their own size, given
//! back to the worker once written (`connection::Spares`: a few small ones kept for the next
//! answers, the rest freed). So 10 000 idle clients cost their tasks and sockets, not 10 000 pairs of
//! 16 KiB buffers (which, freed and reallocated round after round, left the router's resident
//! memory growing towards their whole extent: docs/BENCHMARKS.md, issue #26).

use crate::config::Config;
use crate::ctx::Ctx;
use crate::dest::{Sender, Worker};
use crate::dispatch::Dispatch;
use crate::request::{is_error_answer, split, Keys, Op, Reply, Request, Shape};
use crate::state::Router;
use crate::stream::Socket;
use shoal_proto::{Parse, Parser, Request as Parsed};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a buffer lent for a read has room for at least.
const READ_CHUNK: usize = 16 << 10;
/// Buffers a worker keeps for its connections' next reads; more are freed.
const KEEP_BUFFERS: usize = 64;
/// The largest buffer a worker keeps (one that grew for a large value is freed).
const KEEP_CAPACITY: usize = 4 * READ_CHUNK;
/// The most answers a connection keeps room for between reads.
const KEEP_PENDING: usize = 16;

/// A worker's read buffers, lent to its connections for one read at a time (a worker is one
/// thread: no lock). Counted router-wide in `stats` (`client_buffers`, `client_buffer_bytes`:
/// what connections hold for requests cut short, and what workers keep for the next reads).
pub struct Buffers {
    free: RefCell<Vec<Vec<u8>>>,
    router: Arc<Router>,
}

impl Buffers {
    pub fn new(router: Arc<Router>) -> Buffers {
        Buffers { free: RefCell::default(), router }
    }

    /// A buffer with room for a read (counted as lent until given back).
    fn take(&self) -> Vec<u8> {
        let buf = self.free.borrow_mut().pop().unwrap_or_default();
        self.router.connections.buffer_taken(buf.capacity());
        buf
    }

    /// Takes back a buffer from [`Buffers::take`]: kept for the next read, or freed.
    fn give(&self, mut buf: Vec<u8>) {
        let mut free = self.free.borrow_mut();
        buf.clear();
        let keep = buf.capacity() <= KEEP_CAPACITY && free.len() < KEEP_BUFFERS;
        self.router.connections.buffer_given(buf.capacity(), keep);
        if keep {
            free.push(buf);
        }
    }
}

/// What the router answers for one parsed client request.
enum Answer {
    /// Keys routed; their replies are joined into one answer ending in `END` (`joined`: a
    /// get), or the one reply is the answer.
    Routed { joined: bool, keys: Keys },
    /// `flush_all`, to every destination of the configuration; `OK` once all answered.
    FlushAll(Request),
    /// Bytes to send as they are.
    Bytes(Vec<u8>),
    /// Nothing (quiet).
    Silent,
    /// Answer, then close.
    Close(Vec<u8>),
}

/// Serves one client until it leaves.
pub async fn serve<S: Socket>(stream: S, router: Arc<Router>, worker: Rc<Worker>, buffers: Rc<Buffers>) {
    let _open = router.connections.open();
    let mut parser = Parser::new(router.max_item_bytes);
    // A request cut short at the end of a read, in the buffer it was read into; otherwise the
    // connection holds no buffer between reads.
    let mut held: Option<Vec<u8>> = None;
    let limit = router.max_item_bytes + (64 << 10);
    // Bytes of an oversized value still to swallow.
    let mut skip = 0usize;
    // What one read's requests are answered with, kept for the next read (no allocation per
    // request); a pipelined burst's long list is not kept.
    let mut pending: Vec<Answer> = Vec::new();
    let give_back = |buf: Option<Vec<u8>>| buf.into_iter().for_each(|b| buffers.give(b));
    loop {
        if std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await.is_err() {
            return give_back(held);
        }
        let mut buf = held.take().unwrap_or_else(|| buffers.take());
        let start = buf.len();
        buf.reserve(READ_CHUNK);
        let n = match stream.try_read_buf(&mut buf) {
            Ok(0) => return buffers.give(buf),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Readiness was stale: nothing read.
                hold(buf, &mut held, &buffers);
                continue;
            }
            Err(_) => return buffers.give(buf),
        };
        if skip > 0 {
            let s = skip.min(n);
            skip -= s;
            buf.drain(start..start + s);
        }
        let mut out = Vec::new();
        let mut consumed = 0;
        let mut close = false;
        let config = router.config();
        let sender = Sender { destinations: config.destinations.clone(), worker: worker.clone() };
        let dispatch = Dispatch {
            config,
            ctx: Ctx {
                sender,
                spools: router.spools.clone(),
                spool: false,
                fail_open: false,
                latest_seed: router.latest_seed,
            },
            errors: &router.errors,
        };
        // The deletes this read's changes owe the near caches (none without "near_caches").
        let (mut near_deletes, mut near_count) = (Vec::new(), 0u32);
        let near = !dispatch.config.near_caches.is_empty();
        while consumed < buf.len() && !close {
            match parser.parse(&buf[consumed..]) {
                Parse::Incomplete => break,
                Parse::Close => {
                    close = true;
                    pending.push(Answer::Close(Vec::new()));
                }
                Parse::Error { reply, consume, .. } => {
                    let available = buf.len() - consumed;
                    if consume > available {
                        skip = consume - available;
                        consumed = buf.len();
                    } else {
                        consumed += consume;
                    }
                    pending.push(match reply {
                        Some(line) => Answer::Bytes(format!("{line}\r\n").into_bytes()),
                        None => Answer::Silent,
                    });
                }
                Parse::Done { request, consumed: used } => {
                    consumed += used;
                    router.requests.fetch_add(1, Ordering::Relaxed);
                    let answer = local_answer(&request, &router, &dispatch.config);
                    close |= matches!(answer, Answer::Close(_));
                    if let (true, Answer::Routed { keys, .. }) = (near, &answer) {
                        let noted = keys.iter().filter(|k| crate::near::note_change(k, &mut near_deletes));
                        near_count += noted.count() as u32;
                    }
                    pending.push(answer);
                }
            }
        }
        buf.drain(..consumed);
        if buf.len() > limit {
            buffers.give(buf);
            let _ = write_answer(&stream, b"SERVER_ERROR request too large\r\n").await;
            return;
        }
        hold(buf, &mut held, &buffers);
        carry_out(&mut pending, &dispatch, &mut out).await;
        if pending.capacity() > KEEP_PENDING {
            pending = Vec::new();
        }
        // After the pool answered, before the client is: spooled (a kill -9 keeps them).
        router.near.deliver(&dispatch.config.near_caches, &near_deletes, near_count);
        let written = out.is_empty() || write_answer(&stream, &out).await.is_ok();
        // Most often a destination's answer buffer (`append`): its connections' next answer's.
        worker.spares.give(out);
        if !written || close {
            return give_back(held);
        }
    }
}

/// Writes `bytes` to the client: at once while the socket takes them (the usual whole
/// answer), the rest once it is writable again.
async fn write_answer<S: Socket>(stream: &S, bytes: &[u8]) -> std::io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        match std::future::poll_fn(|cx| stream.poll_write(cx, &bytes[written..])).await? {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n => written += n,
        }
    }
    Ok(())
}

/// Keeps `buf` as the connection's while it holds a request cut short; else gives it back.
fn hold(buf: Vec<u8>, held: &mut Option<Vec<u8>>, buffers: &Buffers) {
    if buf.is_empty() {
        buffers.give(buf);
    } else {
        *held = Some(buf);
    }
}

/// Requests the router answers itself, or the per-key requests of one to route.
fn local_answer(request: &Parsed<'_>, router: &Router, config: &Config) -> Answer {
    if let Some(keys) = split(request) {
        if let Some(lookup) = route_lookup(&keys, config) {
            return Answer::Bytes(lookup);
        }
        let joined = matches!(request, Parsed::Get(_) | Parsed::LeaseGet { .. });
        return Answer::Routed { joined, keys };
    }
    match request {
        Parsed::Version => {
            Answer::Bytes(format!("VERSION shoal-router {}\r\n", env!("CARGO_PKG_VERSION")).into_bytes())
        }
        Parsed::Quit => Answer::Close(Vec::new()),
        Parsed::Stats(args) if args.clone().next().is_none() => Answer::Bytes(router.stats_text()),
        Parsed::Stats(_) => Answer::Bytes(b"ERROR\r\n".to_vec()),
        Parsed::FlushAll { delay, noreply } => Answer::FlushAll(Request::flush_all(*delay, *noreply)),
        Parsed::Verbosity { noreply: true, .. } => Answer::Silent,
        Parsed::Verbosity { .. } => Answer::Bytes(b"OK\r\n".to_vec()),
        Parsed::Meta(m) if m.cmd == shoal_proto::MetaCmd::Noop => Answer::Bytes(b"MN\r\n".to_vec()),
        _ => Answer::Bytes(b"ERROR\r\n".to_vec()),
    }
}

/// mcrouter's route lookup: `get __mcrouter__.route(<op>,<key>)` answers the destinations
/// the operation on that key would go to, one per line.
fn route_lookup(keys: &[Request], config: &Config) -> Option<Vec<u8>> {
    let first = keys.first()?;
    let query = first.key.strip_prefix(b"__mcrouter__.route(")?.strip_suffix(b")")?;
    let (op, key) = std::str::from_utf8(query).ok()?.split_once(',')?;
    let op = Op::parse(op)?;
    let probe = crate::request::split(&shoal_proto::Request::Delete {
        key: key.as_bytes(),
        hold: 0,
        noreply: false,
    })?
    .first()
    .cloned()
    .map(|mut r| {
        r.op = op;
        r
    })?;
    let routed = shoal_route::Routed::parse(&probe.key);
    let mut destinations = Vec::new();
    if let Some(route) = config.route_for(routed.region, routed.cluster) {
        route.destinations(&probe, &mut destinations);
    }
    let text: Vec<&str> = destinations.iter().map(|&d| config.destinations[d].address.as_str()).collect();
    let body = text.join("\r\n");
    Some(
        format!("VALUE {} 0 {}\r\n{body}\r\nEND\r\n", String::from_utf8_lossy(&first.key), body.len())
            .into_bytes(),
    )
}

/// Routes every pending request at once (leaving `pending` empty), and appends each answer to
/// `out` in order.
async fn carry_out(pending: &mut Vec<Answer>, dispatch: &Dispatch<'_>, out: &mut Vec<u8>) {
    if pending.len() == 1 {
        // The common case (one request per read): no joining, answered straight into `out`.
        let answer = pending.pop().expect("one");
        return carry_out_one(answer, dispatch, out).await;
    }
    let answers = futures::future::join_all(pending.drain(..).map(|answer| async move {
        let mut bytes = Vec::new();
        carry_out_one(answer, dispatch, &mut bytes).await;
        bytes
    }));
    for answer in answers.await {
        append(out, answer);
    }
}

/// One answer, routed if it must be, appended to `out`.
async fn carry_out_one(answer: Answer, dispatch: &Dispatch<'_>, out: &mut Vec<u8>) {
    match answer {
        Answer::Bytes(b) | Answer::Close(b) => out.extend_from_slice(&b),
        Answer::Silent => {}
        Answer::FlushAll(request) => {
            let all = (0..dispatch.config.destinations.len()).map(|d| dispatch.ctx.send(d, &request, false));
            let replies = futures::future::join_all(all).await;
            match replies.into_iter().find(Reply::is_error) {
                Some(Reply::Error(_, why)) => {
                    out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes())
                }
                Some(Reply::Answer(a)) => out.extend_from_slice(&a),
                None if request.quiet => {}
                None => out.extend_from_slice(b"OK\r\n"),
            }
        }
        Answer::Routed { joined: true, keys }
            if keys.len() > 1 && matches!(keys[0].op, Op::Get | Op::Gets) =>
        {
            crate::multiget::get_many(&keys, dispatch, out).await
        }
        Answer::Routed { joined, keys } if keys.len() == 1 => {
            let reply = dispatch.route_one(&keys[0]).await;
            encode(joined, &keys, std::iter::once(reply), dispatch.errors, out)
        }
        Answer::Routed { joined, keys } => {
            let replies = futures::future::join_all(keys.iter().map(|r| dispatch.route_one(r))).await;
            encode(joined, &keys, replies, dispatch.errors, out)
        }
    }
}

/// Encodes replies for the client into `out`: a get's hits joined and closed with `END`;
/// any other request's single reply as it came (or nothing when the client asked for quiet).
fn encode(
    joined: bool,
    keys: &[Request],
    replies: impl IntoIterator<Item = Reply>,
    errors_total: &AtomicU64,
    out: &mut Vec<u8>,
) {
    let mut replies = replies.into_iter().peekable();
    if !joined {
        let (request, reply) = (&keys[0], replies.next().expect("one reply"));
        if reply.is_error() {
            errors_total.fetch_add(1, Ordering::Relaxed);
        }
        match reply {
            Reply::Error(_, why) => out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes()),
            Reply::Answer(a) if request.quiet && quiet_hides(request, &a) => {}
            Reply::Answer(a) => append(out, a),
        }
        return;
    }
    if keys.len() == 1 {
        if let Some(Reply::Error(_, why)) = replies.peek() {
            errors_total.fetch_add(1, Ordering::Relaxed);
            out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes());
            return;
        }
    }
    let mut errors = 0;
    for reply in replies {
        // In a multiget, a key whose route failed is a miss (the others still answer).
        match reply {
            Reply::Answer(a) if !is_error_answer(&a) => append(out, a),
            _ => errors += 1,
        }
    }
    errors_total.fetch_add(errors, Ordering::Relaxed);
    out.extend_from_slice(b"END\r\n");
}

/// Appends `bytes` to `out`; into an empty `out` they move, uncopied (a destination's answer
/// comes with room for the `END` a get's answer ends with).
fn append(out: &mut Vec<u8>, bytes: Vec<u8>) {
    if out.is_empty() {
        *out = bytes;
    } else {
        out.extend_from_slice(&bytes);
    }
}

/// Whether a quiet request's answer is one the client asked not to see: everything for
/// `noreply`; for meta `q`, the success (`HD`, `NF` of md) and the miss of `mg` (`EN`).
fn quiet_hides(request: &Request, answer: &[u8]) -> bool {
    match request.shape() {
        Shape::Meta => {
            answer.starts_with(b"HD")
                || (request.op == Op::MetaGet && answer.starts_with(b"EN"))
                || (request.op == Op::MetaDelete && answer.starts_with(b"NF"))
        }
        _ => true,
    }
}
