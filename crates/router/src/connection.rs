//! One worker's connection to one destination, run as a small event loop of its own (as
//! twemproxy runs its server connections): requests are appended to one output buffer, written
//! together, and answered in the order they were written.
//!
//! ```text
//!  client tasks ──send()──► out (encoded) + waiting (one slot per request, oldest first)
//!                                │  wakes the connection task when `out` gets its first bytes
//!  connection task: write out ──► destination ──► read into input ──► framer ──► slot answered,
//!                   one timer at the oldest unanswered slot's deadline ──► slot timed out
//! ```
//!
//! Why not a task, channel and timer per request: those were most of the router's own CPU per
//! request (docs/BENCHMARKS.md, issue #14). Here a request costs one slot, its encoding straight
//! into `out` and a wake-up of the waiting client; a wake-up of the connection task serves every request that
//! arrived since it last ran; and the timer is re-armed only when it fires.
//!
//! Invariants:
//! - `waiting` holds every request written or to be written, in the order of `out`, until its
//!   answer has been read (or the connection failed): the next answer read is its front's.
//! - The first `expired` slots of `waiting` timed out: their waiters were answered with a
//!   timeout already, and their answers are read and dropped when they come.
//! - A slot is answered once; `Health::pending` counts slots not answered yet.
//! - Once `closed`, nothing is added: the next request opens a new connection. A connection
//!   whose queue is full while its oldest request has timed out is closed too; otherwise a
//!   server that stopped answering on it, but answers new connections (and so the TKO probe),
//!   would fail every request sent to it for as long as the connection stayed up.

use crate::health::{probe, Health};
use crate::request::{ErrorKind, Shape};
use crate::stream::{connect, Stream};
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

/// A request's answer, or why there is none.
pub type Answer = Result<Vec<u8>, (ErrorKind, String)>;

/// One connection to a destination, shared by the clients of one worker thread.
pub struct Connection {
    address: String,
    connect_timeout: Duration,
    health: Arc<Health>,
    state: RefCell<State>,
}

/// What the client tasks and the connection task share (one thread: no locks).
struct State {
    /// Request bytes not yet written; `out[..written]` are.
    out: Vec<u8>,
    written: usize,
    /// Requests in the order their answers will come.
    waiting: VecDeque<Rc<Slot>>,
    /// How many of the oldest slots timed out (see the module's invariants).
    expired: usize,
    /// Answered slots, reused by the next requests once their waiters let go of them (no
    /// allocation per request).
    spare: Vec<Rc<Slot>>,
    /// The connection task's waker, once it has run.
    task: Option<Waker>,
    closed: bool,
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
    fn answer(&self, answer: Answer) {
        let previous = std::mem::replace(&mut *self.state.borrow_mut(), SlotState::Answered(answer));
        if let SlotState::Waiting(Some(waker)) = previous {
            waker.wake();
        }
    }
}

/// A request's answer, once it comes (from [`Connection::send`]).
pub struct Waiting(Rc<Slot>);

impl Future for Waiting {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let mut state = self.0.state.borrow_mut();
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
        *self.0.state.borrow_mut() = SlotState::Taken;
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
    ) -> Rc<Connection> {
        let connection = Rc::new(Connection {
            address: address.to_string(),
            connect_timeout,
            health,
            state: RefCell::new(State {
                out: Vec::with_capacity(READ_CHUNK),
                written: 0,
                waiting: VecDeque::new(),
                expired: 0,
                spare: Vec::new(),
                task: None,
                closed: false,
            }),
        });
        tokio::task::spawn_local(connection.clone().run(max_value));
        connection
    }

    /// Whether the connection failed or closed (a request must open a new one).
    pub fn is_closed(&self) -> bool {
        self.state.borrow().closed
    }

    /// Queues the request `encode` appends to the output buffer, whose answer has `shape`, to
    /// be answered within `timeout`; `None` when too many requests are in flight already.
    pub fn send(
        &self,
        encode: impl FnOnce(&mut Vec<u8>),
        shape: Shape,
        timeout: Duration,
    ) -> Option<Waiting> {
        let mut state = self.state.borrow_mut();
        if state.waiting.len() >= MAX_IN_FLIGHT {
            if state.expired > 0 {
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
        let slot = match state.spare.pop() {
            Some(mut spare) => match Rc::get_mut(&mut spare) {
                Some(unused) => {
                    *unused = fresh;
                    spare
                }
                None => Rc::new(fresh), // its waiter has not taken its answer yet
            },
            None => Rc::new(fresh),
        };
        state.waiting.push_back(slot.clone());
        if state.out.is_empty() {
            // The task writes whatever is in `out` when it runs; only the first request since
            // it last wrote needs to wake it.
            if let Some(task) = &state.task {
                task.wake_by_ref();
            }
        }
        encode(&mut state.out);
        self.health.pending.fetch_add(1, Ordering::Relaxed);
        Some(Waiting(slot))
    }

    /// The connection task: connects, then serves until the connection fails.
    async fn run(self: Rc<Self>, max_value: usize) {
        let mut stream = match connect(&self.address, self.connect_timeout).await {
            Ok(stream) => stream,
            Err(e) => {
                return self.fail(ErrorKind::Connect, format!("cannot connect to {}: {e}", self.address))
            }
        };
        let mut input = Input { buf: vec![0; READ_CHUNK], start: 0, end: 0, framer: Framer::default() };
        let mut timer =
            Timer { sleep: Box::pin(tokio::time::sleep(Duration::ZERO)), armed: false, polled: false };
        let (kind, why) =
            std::future::poll_fn(|cx| self.poll(cx, &mut stream, &mut input, &mut timer, max_value)).await;
        self.fail(kind, format!("{}: {why}", self.address));
    }

    /// One turn of the loop: write, read and answer, time out. Ready when the connection
    /// failed, with why.
    fn poll(
        &self,
        cx: &mut Context<'_>,
        stream: &mut Stream,
        input: &mut Input,
        timer: &mut Timer,
        max_value: usize,
    ) -> Poll<(ErrorKind, String)> {
        let mut state = self.state.borrow_mut();
        if state.closed {
            let why = format!("{} requests in flight, the oldest timed out", state.waiting.len());
            return Poll::Ready((ErrorKind::Timeout, why));
        }
        if !state.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            state.task = Some(cx.waker().clone());
        }
        while state.written < state.out.len() {
            let State { out, written, .. } = &mut *state;
            match stream.poll_write(cx, &out[*written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready((ErrorKind::Connect, "connection closed".into())),
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready((ErrorKind::Connect, e.to_string())),
                Poll::Pending => break,
            }
        }
        if state.written == state.out.len() {
            state.out.clear();
            state.written = 0;
        }
        loop {
            input.make_room();
            match stream.poll_read(cx, &mut input.buf[input.end..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready((ErrorKind::Connect, "the destination closed the connection".into()))
                }
                Poll::Ready(Ok(n)) => {
                    input.end += n;
                    if let Err(why) = self.answer(&mut state, input, max_value) {
                        return Poll::Ready((ErrorKind::Remote, why));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready((ErrorKind::Connect, e.to_string())),
                Poll::Pending => break,
            }
        }
        self.expire(cx, &mut state, timer);
        Poll::Pending
    }

    /// Hands every complete answer in `input` to its slot.
    fn answer(&self, state: &mut State, input: &mut Input, max_value: usize) -> Result<(), String> {
        while input.start < input.end {
            let Some(slot) = state.waiting.front() else {
                return Err("answered a request it was not sent".into());
            };
            let bytes = &input.buf[input.start..input.end];
            let limits = Limits::values(max_value);
            let Some(frame) = input.framer.frame(bytes, slot.shape, &limits).map_err(|e| e.to_string())?
            else {
                return Ok(()); // the rest of this answer is still on its way
            };
            let slot = state.waiting.pop_front().expect("a front slot");
            if state.expired > 0 {
                state.expired -= 1; // its waiter gave up: the answer is dropped
            } else {
                self.health.pending.fetch_sub(1, Ordering::Relaxed);
                self.health.success();
                // With room for the `END` that closes a client's get: the client's answer is
                // then this very buffer (`proxy::append`).
                let mut answer = Vec::with_capacity(frame.answer + b"END\r\n".len());
                answer.extend_from_slice(&bytes[..frame.answer]);
                slot.answer(Ok(answer));
            }
            // Kept while its waiter will take the answer (and then let go of the slot); a
            // slot whose waiter is gone goes, with whatever answer it holds.
            if Rc::strong_count(&slot) > 1 && state.spare.len() < SPARE_SLOTS {
                state.spare.push(slot);
            }
            input.start += frame.len;
        }
        Ok(())
    }

    /// Answers every slot past its deadline with a timeout, and arms the timer for the next.
    fn expire(&self, cx: &mut Context<'_>, state: &mut State, timer: &mut Timer) {
        while let Some(next) = state.waiting.get(state.expired) {
            if !timer.armed {
                timer.sleep.as_mut().reset(next.deadline.into());
                (timer.armed, timer.polled) = (true, false);
            }
            // Once polled, the timer wakes this task when it fires: until then, polling it
            // again (every turn of the loop) would only register the same waker again.
            if timer.polled && !timer.sleep.is_elapsed() {
                return;
            }
            timer.polled = true;
            if timer.sleep.as_mut().poll(cx).is_pending() {
                return;
            }
            // Fired (perhaps for an earlier slot, since answered): time out what is due, then
            // re-arm for the oldest slot that is not.
            timer.armed = false;
            let now = Instant::now();
            while let Some(slot) = state.waiting.get(state.expired).filter(|s| s.deadline <= now) {
                let why = format!("{} did not answer within {:?}", self.address, slot.timeout);
                self.failed(slot, ErrorKind::Timeout, why);
                state.expired += 1;
            }
        }
    }

    /// Answers `slot` with an error and counts it towards TKO.
    fn failed(&self, slot: &Slot, kind: ErrorKind, why: String) {
        self.health.pending.fetch_sub(1, Ordering::Relaxed);
        if self.health.failure() {
            tokio::task::spawn_local(probe(self.address.clone(), self.connect_timeout, self.health.clone()));
        }
        slot.answer(Err((kind, why)));
    }

    /// Closes the connection: every request still waiting fails with `why`.
    fn fail(&self, kind: ErrorKind, why: String) {
        let mut state = self.state.borrow_mut();
        state.closed = true;
        state.out = Vec::new();
        let expired = std::mem::take(&mut state.expired);
        for slot in state.waiting.drain(..).skip(expired) {
            self.failed(&slot, kind, why.clone());
        }
    }
}

/// Answers read from the destination: `buf[start..end]` not handed on yet. The buffer is
/// always initialised (it only grows), so a read needs no unsafe code.
struct Input {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// How far the answer at `start` is framed, across reads.
    framer: Framer,
}

impl Input {
    /// Room for a read after `end`: moves what is left to the front, or grows.
    fn make_room(&mut self) {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.buf.len() - self.end >= READ_CHUNK / 4 {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
        }
        if self.buf.len() - self.end < READ_CHUNK / 4 {
            self.buf.resize(self.buf.len() + READ_CHUNK.max(self.buf.len() / 2), 0);
        }
    }
}

/// The one timer of a connection: armed at the oldest waiting request's deadline.
struct Timer {
    sleep: Pin<Box<tokio::time::Sleep>>,
    armed: bool,
    /// Polled since it was armed (its waker registered).
    polled: bool,
}
