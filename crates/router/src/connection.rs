//! One worker's connection to one destination, run as a small event loop (as twemproxy runs
//! its server connections): requests are appended to one output buffer, written together, and
//! answered in the order they were written.
//!
//! ```text
//!  client tasks ──send()──► out (encoded) + waiting (one slot per request, oldest first)
//!                                │  a lone request: its own waiter runs the loop's turns
//!                                │  else: wakes the connection task when `out` gets its first bytes
//!  a turn (the task's, or a lone waiter's): write out ──► destination ──► read into input
//!        ──► framer ──► slot answered; an alarm (deadline.rs) at the oldest unanswered
//!        slot's deadline ──► slot timed out
//! ```
//!
//! Why not a task, channel and timer per request: those were most of the router's own CPU per
//! request (docs/BENCHMARKS.md, issue #14). Here a request costs one slot, its encoding straight
//! into `out` and a wake-up of the waiting client; a wake-up of the connection task serves
//! every request that arrived since it last ran; and the alarm is re-armed only once it rang.
//! A request alone on its connection (one client, or a quiet moment) costs less still: its
//! waiter runs the turns itself, in its own task, so the answer needs no hand-off from the
//! connection task, and no wake-up of either (issue #29).
//!
//! Invariants:
//! - `waiting` holds every request written or to be written, in the order of `out`, until its
//!   answer has been read (or the connection failed): the next answer read is its front's.
//! - The first `expired` slots of `waiting` timed out: their waiters were answered with a
//!   timeout already, and their answers are read and dropped when they come.
//! - A slot is answered once; `Health::pending` counts slots not answered yet.
//! - Whatever is left to do (bytes in `out`, slots in `waiting`) has a task that will run the
//!   next turn: the task whose waker the last turn left with the stream's readiness and the
//!   alarm. A waiter runs turns only while its slot is the only one (`Waiting::poll`); when
//!   another request joins it, or it goes, the connection task is woken and takes over.
//! - Once `closed`, nothing is added: the next request opens a new connection. A connection
//!   whose queue is full while its oldest request has timed out is closed too; otherwise a
//!   server that stopped answering on it, but answers new connections (and so the TKO probe),
//!   would fail every request sent to it for as long as the connection stayed up.
//! - Once a request on it timed out, the connection is `retired`: it takes no new request (the
//!   next one opens a fresh connection) and closes once every request it holds is answered or
//!   timed out. A stream that a cut link left in TCP's retransmission back-off delivers
//!   nothing until its next retransmission, up to seconds after the link is back: requests
//!   queued behind it would time out too, and with them the other requests of every client
//!   batch they were in (issue #26: a cut of one server's host held the region's deletes to
//!   every server, through both routers, until 1.2 s after the link returned).

use crate::deadline::{self, Alarm};
use crate::health::{probe, Health};
use crate::request::{ErrorKind, Shape};
use crate::stream::{connect, Socket, Stream};
use shoal_proto::{Framer, Limits};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Requests one destination connection may have in flight; more fail at once (backpressure
/// on a destination that stopped answering, instead of unbounded queues). Well above the
/// clients one worker serves: 10 000 clients each with a few requests outstanding fit (4096
/// failed them; mcrouter sets no limit by default). A stalled destination's queue still
/// ends: its requests time out.
const MAX_IN_FLIGHT: usize = 65_536;
/// Answered slots a connection keeps for reuse.
const SPARE_SLOTS: usize = 64;
/// How much the input buffer grows by when an answer does not fit.
const READ_CHUNK: usize = 16 << 10;
/// Answer buffers a worker keeps for its connections' next answers, and the largest it keeps.
const SPARE_BUFFERS: usize = 64;
const SPARE_CAPACITY: usize = 4 << 10;

/// A request's answer, or why there is none.
pub type Answer = Result<Vec<u8>, (ErrorKind, String)>;

/// Answer buffers that clients gave back once written, for the next answers of a worker's
/// connections (a worker is one thread: no lock). A get's answer is its client's whole answer:
/// without them every request allocated one and freed it once written.
#[derive(Default)]
pub struct Spares(RefCell<Vec<Vec<u8>>>);

impl Spares {
    /// An empty buffer with room for `len` bytes.
    fn take(&self, len: usize) -> Vec<u8> {
        let mut buf = self.0.borrow_mut().pop().unwrap_or_default();
        buf.reserve(len);
        buf
    }

    /// Takes back a buffer once its bytes are written: kept for an answer to come if it is
    /// small and fewer than [`SPARE_BUFFERS`] are, else freed.
    pub fn give(&self, mut buf: Vec<u8>) {
        let mut spares = self.0.borrow_mut();
        if buf.capacity() <= SPARE_CAPACITY && spares.len() < SPARE_BUFFERS {
            buf.clear();
            spares.push(buf);
        }
    }
}

/// One connection to a destination, shared by the clients of one worker thread.
pub struct Connection {
    address: String,
    connect_timeout: Duration,
    health: Arc<Health>,
    max_value: usize,
    spares: Rc<Spares>,
    state: RefCell<State>,
}

/// What the client tasks and the connection task share (one thread: no locks).
struct State {
    /// Request bytes not yet written; `out[..written]` are.
    out: Vec<u8>,
    written: usize,
    queue: Queue,
    /// The stream and what the loop keeps between turns, once connected.
    io: Option<Io>,
    /// The connection task's waker, once it has started.
    task: Option<Waker>,
    /// Whether the connection task ran the last turn (else a lone request's waiter did, and
    /// the task must be woken to take over when that changes).
    task_drives: bool,
    closed: bool,
    /// A request on it timed out: no new requests (see the module's invariants).
    retired: bool,
}

/// The requests in flight.
struct Queue {
    /// Requests in the order their answers will come.
    waiting: VecDeque<Rc<Slot>>,
    /// How many of the oldest slots timed out (see the module's invariants).
    expired: usize,
    /// Answered slots, reused by the next requests once their waiters let go of them (no
    /// allocation per request).
    spare: Vec<Rc<Slot>>,
}

/// The connected stream, what was read from it, and the alarm at the oldest request's
/// deadline.
struct Io {
    stream: Stream,
    input: Input,
    alarm: Option<Arc<Alarm>>,
}

/// One request waiting for its answer.
struct Slot {
    shape: Shape,
    deadline: Instant,
    timeout: Duration,
    state: RefCell<SlotState>,
}

enum SlotState {
    /// Not answered; the waiter to wake when it is.
    Waiting(Option<Waker>),
    Answered(Answer),
    /// The waiter took the answer.
    Taken,
}

impl Slot {
    /// Answers the slot, waking its waiter unless it is `running` (a waiter answering its own
    /// slot in its own turn would only be polled once more for nothing).
    fn answer(&self, answer: Answer, running: &Waker) {
        let previous = std::mem::replace(&mut *self.state.borrow_mut(), SlotState::Answered(answer));
        if let SlotState::Waiting(Some(waker)) = previous {
            if !waker.will_wake(running) {
                waker.wake();
            }
        }
    }

    fn is_waiting(&self) -> bool {
        matches!(*self.state.borrow(), SlotState::Waiting(_))
    }
}

/// A request's answer, once it comes (from [`Connection::send`]).
pub struct Waiting {
    connection: Rc<Connection>,
    slot: Rc<Slot>,
}

impl Future for Waiting {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        if self.slot.is_waiting() {
            self.connection.run_alone(&self.slot, cx);
        }
        let mut state = self.slot.state.borrow_mut();
        match &mut *state {
            SlotState::Waiting(Some(waker)) if waker.will_wake(cx.waker()) => Poll::Pending,
            SlotState::Waiting(waker) => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            SlotState::Answered(_) => match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Answered(answer) => Poll::Ready(answer),
                _ => unreachable!("matched Answered"),
            },
            SlotState::Taken => panic!("a request's answer was awaited after it was taken"),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // An answer never taken (its client left) is not kept in a spare slot.
        let unanswered = self.slot.is_waiting();
        *self.slot.state.borrow_mut() = SlotState::Taken;
        if unanswered {
            // This waiter may have been running the turns (the stream's readiness and the
            // alarm wake it): the task takes over, to read the answer still to come.
            self.connection.hand_over();
        }
    }
}

impl Connection {
    /// A connection to `address` (`host:port` or a unix socket path), opened in a task of the
    /// current worker's `LocalSet`; requests may be sent at once (they wait for the connect).
    pub fn open(
        address: &str,
        connect_timeout: Duration,
        health: Arc<Health>,
        max_value: usize,
        spares: Rc<Spares>,
    ) -> Rc<Connection> {
        let connection = Rc::new(Connection {
            address: address.to_string(),
            connect_timeout,
            health,
            max_value,
            spares,
            state: RefCell::new(State {
                out: Vec::with_capacity(READ_CHUNK),
                written: 0,
                queue: Queue { waiting: VecDeque::new(), expired: 0, spare: Vec::new() },
                io: None,
                task: None,
                task_drives: true,
                closed: false,
                retired: false,
            }),
        });
        tokio::task::spawn_local(connection.clone().run());
        connection
    }

    /// Whether the connection failed, closed or retired (a request must open a new one).
    pub fn is_closed(&self) -> bool {
        let state = self.state.borrow();
        state.closed || state.retired
    }

    /// Queues the request `encode` appends to the output buffer, whose answer has `shape`, to
    /// be answered within `timeout`; `None` when too many requests are in flight already.
    pub fn send(
        connection: &Rc<Connection>,
        encode: impl FnOnce(&mut Vec<u8>),
        shape: Shape,
        timeout: Duration,
    ) -> Option<Waiting> {
        let mut guard = connection.state.borrow_mut();
        let state = &mut *guard;
        let queue = &mut state.queue;
        if queue.waiting.len() >= MAX_IN_FLIGHT {
            if queue.expired > 0 {
                // Full, and its oldest request timed out: the destination stopped answering on
                // this connection. Closed, so that the next request opens a new one instead of
                // failing here for as long as this one stays up.
                state.closed = true;
                if let Some(task) = &state.task {
                    task.wake_by_ref();
                }
            }
            return None;
        }
        let fresh = Slot {
            shape,
            deadline: Instant::now() + timeout,
            timeout,
            state: RefCell::new(SlotState::Waiting(None)),
        };
        let slot = match queue.spare.pop() {
            Some(mut spare) => match Rc::get_mut(&mut spare) {
                Some(unused) => {
                    *unused = fresh;
                    spare
                }
                None => Rc::new(fresh), // its waiter has not taken its answer yet
            },
            None => Rc::new(fresh),
        };
        let alone = queue.waiting.is_empty() && state.io.is_some();
        queue.waiting.push_back(slot.clone());
        // Alone, the request's waiter runs the turns that write and answer it. Otherwise the
        // task writes whatever is in `out` when it runs: only the first request since it last
        // wrote needs to wake it, unless a lone waiter was running the turns until now.
        if !alone && (state.out.is_empty() || !state.task_drives) {
            if let Some(task) = &state.task {
                task.wake_by_ref();
            }
        }
        encode(&mut state.out);
        connection.health.pending.fetch_add(1, Ordering::Relaxed);
        Some(Waiting { connection: connection.clone(), slot })
    }

    /// The connection task: connects, then runs turns until the connection fails.
    async fn run(self: Rc<Self>) {
        let task = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
        self.state.borrow_mut().task = Some(task.clone());
        let stream = match connect(&self.address, self.connect_timeout).await {
            Ok(stream) => stream,
            Err(e) => {
                let why = format!("cannot connect to {}: {e}", self.address);
                return self.fail(ErrorKind::Connect, why, &task);
            }
        };
        let input = Input { buf: Vec::with_capacity(READ_CHUNK), start: 0, framer: Framer::default() };
        self.state.borrow_mut().io = Some(Io { stream, input, alarm: None });
        let (kind, why) = std::future::poll_fn(|cx| {
            let mut state = self.state.borrow_mut();
            state.task_drives = true;
            self.turn(&mut state, cx)
        })
        .await;
        self.fail(kind, format!("{}: {why}", self.address), &task);
    }

    /// Runs a turn in the task of `slot`'s waiter while `slot` is the only request in flight
    /// (there is nothing else to write or read); if the connection fails, fails it.
    fn run_alone(&self, slot: &Rc<Slot>, cx: &mut Context<'_>) {
        let mut state = self.state.borrow_mut();
        let queue = &state.queue;
        let alone = queue.expired == 0
            && queue.waiting.len() == 1
            && Rc::ptr_eq(&queue.waiting[0], slot)
            && state.io.is_some();
        if !alone {
            return;
        }
        state.task_drives = false;
        if let Poll::Ready((kind, why)) = self.turn(&mut state, cx) {
            // The task ends at its next turn, which finds the connection closed.
            if let Some(task) = &state.task {
                task.wake_by_ref();
            }
            drop(state);
            self.fail(kind, format!("{}: {why}", self.address), cx.waker());
        }
    }

    /// Wakes the connection task to run the next turn in place of a lone waiter that goes.
    fn hand_over(&self) {
        let state = self.state.borrow();
        if !state.task_drives {
            if let Some(task) = &state.task {
                task.wake_by_ref();
            }
        }
    }

    /// One turn of the loop, run by the task `cx` wakes: write, read and answer, time out.
    /// Ready when the connection failed, with why.
    fn turn(&self, state: &mut State, cx: &mut Context<'_>) -> Poll<(ErrorKind, String)> {
        let State { out, written, queue, io, task, task_drives, closed, retired } = state;
        if *closed {
            let why = format!("{} requests in flight, the oldest timed out", queue.waiting.len());
            return Poll::Ready((ErrorKind::Timeout, why));
        }
        let Some(Io { stream, input, alarm }) = io else {
            return Poll::Pending; // connecting: the task runs the first turn once connected
        };
        while *written < out.len() {
            match stream.poll_write(cx, &out[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready((ErrorKind::Connect, "connection closed".into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready((ErrorKind::Connect, e.to_string())),
                Poll::Pending => break,
            }
        }
        if *written == out.len() {
            out.clear();
            *written = 0;
        }
        loop {
            input.make_room();
            match stream.poll_read_buf(cx, &mut input.buf) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready((ErrorKind::Connect, "the destination closed the connection".into()))
                }
                Poll::Ready(Ok(_)) => {
                    if let Err(why) = self.answer(queue, input, cx.waker()) {
                        return Poll::Ready((ErrorKind::Remote, why));
                    }
                    if !*task_drives && queue.waiting.is_empty() {
                        // A lone request answered: nothing is left to read for, and a waker
                        // left with the stream now would only wake its client's task. The
                        // next request's turn waits on the stream again.
                        break;
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready((ErrorKind::Connect, e.to_string())),
                Poll::Pending => break,
            }
        }
        if let Some(task) = task {
            self.expire(queue, alarm, task, cx.waker());
        }
        *retired |= queue.expired > 0;
        if *retired && queue.expired == queue.waiting.len() {
            let why =
                format!("retired after a request timed out ({} late answers not awaited)", queue.expired);
            return Poll::Ready((ErrorKind::Timeout, why));
        }
        Poll::Pending
    }

    /// Hands every complete answer in `input` to its slot (`running`: the waker of the task
    /// running this turn).
    fn answer(&self, queue: &mut Queue, input: &mut Input, running: &Waker) -> Result<(), String> {
        while input.start < input.buf.len() {
            let Some(slot) = queue.waiting.front() else {
                return Err("answered a request it was not sent".into());
            };
            let bytes = &input.buf[input.start..];
            let limits = Limits::values(self.max_value);
            let Some(frame) = input.framer.frame(bytes, slot.shape, &limits).map_err(|e| e.to_string())?
            else {
                return Ok(()); // the rest of this answer is still on its way
            };
            let slot = queue.waiting.pop_front().expect("a front slot");
            if queue.expired > 0 {
                queue.expired -= 1; // its waiter gave up: the answer is dropped
            } else {
                self.health.pending.fetch_sub(1, Ordering::Relaxed);
                self.health.success();
                // With room for the `END` that closes a client's get: the client's answer is
                // then this very buffer (`proxy::append`), given back once written.
                let mut answer = self.spares.take(frame.answer + b"END\r\n".len());
                answer.extend_from_slice(&bytes[..frame.answer]);
                slot.answer(Ok(answer), running);
            }
            // Kept while its waiter will take the answer (and then let go of the slot); a
            // slot whose waiter is gone goes, with whatever answer it holds.
            if Rc::strong_count(&slot) > 1 && queue.spare.len() < SPARE_SLOTS {
                queue.spare.push(slot);
            }
            input.start += frame.len;
        }
        Ok(())
    }

    /// Answers every slot past its deadline with a timeout once the alarm rang, and arms it
    /// (to wake the connection `task`) at the oldest unanswered slot's deadline.
    fn expire(&self, queue: &mut Queue, alarm: &mut Option<Arc<Alarm>>, task: &Waker, running: &Waker) {
        while let Some(next) = queue.waiting.get(queue.expired) {
            match alarm.as_ref().map(|armed| armed.rung()) {
                // Armed at the deadline of a slot as old as this one, or older (perhaps since
                // answered): nothing is due before it rings.
                Some(false) => return,
                Some(true) => {
                    // Rang: time out what is due, then arm for the oldest slot that is not.
                    *alarm = None;
                    let now = Instant::now();
                    while let Some(slot) = queue.waiting.get(queue.expired).filter(|s| s.deadline <= now) {
                        let why = format!("{} did not answer within {:?}", self.address, slot.timeout);
                        self.failed(slot, ErrorKind::Timeout, why, running);
                        queue.expired += 1;
                    }
                }
                None => *alarm = Some(deadline::arm(next.deadline, task)),
            }
        }
    }

    /// Answers `slot` with an error and counts it towards TKO.
    fn failed(&self, slot: &Slot, kind: ErrorKind, why: String, running: &Waker) {
        self.health.pending.fetch_sub(1, Ordering::Relaxed);
        if self.health.failure() {
            tokio::task::spawn_local(probe(self.address.clone(), self.connect_timeout, self.health.clone()));
        }
        slot.answer(Err((kind, why)), running);
    }

    /// Closes the connection: every request still waiting fails with `why`.
    fn fail(&self, kind: ErrorKind, why: String, running: &Waker) {
        let mut state = self.state.borrow_mut();
        state.closed = true;
        state.out = Vec::new();
        state.io = None;
        let queue = &mut state.queue;
        let expired = std::mem::take(&mut queue.expired);
        for slot in queue.waiting.drain(..).skip(expired) {
            self.failed(&slot, kind, why.clone(), running);
        }
    }
}

/// Answers read from the destination: `buf[start..]` not handed on yet (reads go into its
/// spare room).
struct Input {
    buf: Vec<u8>,
    start: usize,
    /// How far the answer at `start` is framed, across reads.
    framer: Framer,
}

impl Input {
    /// Room for a read after what `buf` holds: moves what is left to the front, or grows.
    fn make_room(&mut self) {
        if self.start == self.buf.len() {
            self.start = 0;
            self.buf.clear();
        }
        if self.buf.capacity() - self.buf.len() >= READ_CHUNK / 4 {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 4 {
            self.buf.reserve(READ_CHUNK.max(self.buf.capacity() / 2));
        }
    }
}
