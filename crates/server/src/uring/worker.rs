//! One io_uring worker: its ring, its receive buffers and its connections' slots.
//!
//! Each pass of the loop enters the kernel once (submitting the sends and receives the last
//! pass queued, waiting for completions), feeds every received byte to its connection, drives
//! the connections that got bytes or finished a send, and settles the closing ones.
//!
//! A send is first tried without waiting and without a completion on success
//! (`MSG_DONTWAIT | MSG_WAITALL`, `IOSQE_CQE_SKIP_SUCCESS`): the kernel finishes it inside the
//! `io_uring_enter` that submits it — every byte sent, or a completion saying how many went
//! (`-EAGAIN`: none). A send whose enter returned without such a completion has therefore gone
//! whole, and its buffer is free ([`Worker::confirm_sends`]); the rest of a send the socket
//! could not take at once goes as an ordinary send, which waits for room and completes. So a
//! request–response exchange costs one enter and one completion (the receive's), not two.
//!
//! A connection's socket is also registered in the ring's table of fixed files, at the index
//! of its slot, and its operations name that index: the kernel then takes no reference to
//! the file per operation (`fget`/`fput`). A slot past the table, or a failed registration,
//! names the descriptor as before. The counts `stats shoal` shows are kept by the worker and
//! published once per pass, not per completion.

use super::bufs::{BufRing, GROUP};
use super::{push, IoStats, BUFFER_BYTES, POLLIN};
use crate::conn::{Conn, Status};
use crate::counters::Counters;
use crate::epoll::{Events, Poll, Waker};
use crate::exec::Context;
use crate::net::{self, Accepted};
use crate::state::{stop, Shared};
use crate::watch::CloseReason;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use shoal_proto::ShutdownMode;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a worker sends its watchers the lines queued for them (as on epoll).
const WATCH_INTERVAL: Duration = Duration::from_millis(10);
/// How long a stopping worker waits for the kernel to finish its connections' operations.
const DRAIN: Duration = Duration::from_secs(5);

/// What an operation was, in the top byte of its tag; the slot's generation and index below.
const WAKE: u64 = 1;
const RECV: u64 = 2;
const SEND: u64 = 3;
const CANCEL: u64 = 4;

/// The most fixed-file entries a worker registers (its slots past them use descriptors).
const MAX_FIXED: usize = 1 << 16;

/// Builds an operation on slot `$i`'s socket: its fixed-file index when it has one, else its
/// descriptor (`$fd` is bound to either in `$build`).
macro_rules! on_socket {
    ($slot:expr, $i:expr, |$fd:ident| $build:expr) => {
        if $slot.fixed {
            let $fd = types::Fixed($i as u32);
            $build
        } else {
            let $fd = types::Fd($slot.fd);
            $build
        }
    };
}

fn tag(kind: u64, slot: usize, generation: u32) -> u64 {
    kind << 56 | u64::from(generation & 0xff_ffff) << 32 | slot as u64
}

fn untag(tag: u64) -> (u64, usize, u32) {
    (tag >> 56, (tag & 0xffff_ffff) as usize, ((tag >> 32) & 0xff_ffff) as u32)
}

/// A connection's place: the connection and what the kernel is doing for it.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    /// Told apart from the slot's earlier connections in the operations' tags.
    generation: u32,
    fd: RawFd,
    /// The socket is in the ring's fixed-file table at the slot's index.
    fixed: bool,
    /// A multishot receive is armed (its last completion has not come).
    receiving: bool,
    /// The receive ended (ENOBUFS, or the kernel's own reasons) and is to be armed again.
    rearm: bool,
    /// The answers being sent; they stay in place until the send completes.
    sending: Vec<u8>,
    offset: usize,
    /// A send is in flight.
    send: bool,
    /// That send is a first try without a completion on success (see the module's doc): its
    /// end is known once the enter that submitted it returned ([`Worker::confirm_sends`]).
    skip: bool,
    /// The client ended its side: close once what it sent is answered.
    eof: bool,
    /// Closing, for this reason; `flush`: its last answers go out first.
    closing: Option<CloseReason>,
    flush: bool,
    /// Its operations were cancelled.
    cancelled: bool,
    /// Received bytes its read buffer could not take yet (its requests are served first).
    backlog: Vec<u8>,
    /// Its receive was cancelled while its answers (or its backlog) back up (the client does not read them):
    /// armed again once they went, as the epoll path stops reading.
    paused: bool,
    /// Queued in `Worker::dirty`.
    dirty: bool,
}

struct Worker<'a> {
    shared: &'a Shared,
    stats: &'a IoStats,
    cx: Context<'a>,
    /// Dropped before the buffers it reads into.
    ring: IoUring,
    bufs: BufRing,
    poll: Poll,
    arrivals: Receiver<Accepted>,
    acceptor: Arc<Waker>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Slots to drive this pass (bytes came, or a send finished).
    dirty: Vec<usize>,
    /// Slots that used their `-R` budget with requests still buffered.
    ready: VecDeque<usize>,
    watchers: Vec<usize>,
    closing: Vec<usize>,
    /// Operations submitted whose last completion has not come.
    in_flight: u64,
    /// Buffers the kernel filled that the worker has not given back.
    lent: u64,
    /// `in_flight` and `lent` as last added to the shared counts ([`Worker::publish_counts`]).
    published: (u64, u64),
    /// Entries of the ring's fixed-file table (0: none registered).
    fixed_files: usize,
    /// Sends without a completion on success queued since the last enter (slot, generation).
    unconfirmed: Vec<(usize, u32)>,
    /// Those the last enter submitted: sent whole unless a completion said otherwise.
    confirming: Vec<(usize, u32)>,
}

/// A worker thread's body: serves the connections the acceptor hands it until the stop.
pub(crate) fn run(
    shared: &Shared,
    index: usize,
    poll: Poll,
    arrivals: Receiver<Accepted>,
    acceptor: Arc<Waker>,
) {
    match Worker::new(shared, index, poll, arrivals, acceptor.clone()) {
        Ok(worker) => worker.run(),
        Err(e) => {
            eprintln!("shoal server: worker {index} could not set up io_uring: {e}");
            shared.request_stop(stop::NOW);
            let _ = acceptor.wake();
        }
    }
}

impl<'a> Worker<'a> {
    fn new(
        shared: &'a Shared,
        index: usize,
        poll: Poll,
        arrivals: Receiver<Accepted>,
        acceptor: Arc<Waker>,
    ) -> io::Result<Self> {
        let ring = super::ring_builder().setup_cqsize(8192).build(1024)?;
        let bufs = BufRing::register(&ring, shared.settings.io.buffers, BUFFER_BYTES)?;
        shared.io.buffers.fetch_add(u64::from(bufs.count()), Ordering::Relaxed);
        // One entry per connection the worker may hold; without the table (an error), the
        // operations name descriptors.
        let fixed_files = (shared.settings.max_connections + 1).clamp(64, MAX_FIXED);
        let fixed_files = match ring.submitter().register_files_sparse(fixed_files as u32) {
            Ok(()) => fixed_files,
            Err(_) => 0,
        };
        Ok(Worker {
            shared,
            stats: &shared.io,
            cx: Context::new(shared, index),
            ring,
            bufs,
            poll,
            arrivals,
            acceptor,
            slots: Vec::new(),
            free: Vec::new(),
            dirty: Vec::new(),
            ready: VecDeque::new(),
            watchers: Vec::new(),
            closing: Vec::new(),
            in_flight: 0,
            lent: 0,
            published: (0, 0),
            fixed_files,
            unconfirmed: Vec::new(),
            confirming: Vec::new(),
        })
    }

    /// Queues an operation (counted in flight until its last completion).
    fn push(&mut self, entry: io_uring::squeue::Entry) {
        self.in_flight += 1;
        push(&mut self.ring, &entry);
    }

    /// Adds what changed since the last call to the counts `stats shoal` shows.
    fn publish_counts(&mut self) {
        let (in_flight, lent) = self.published;
        if (in_flight, lent) == (self.in_flight, self.lent) {
            return;
        }
        let add = |count: &std::sync::atomic::AtomicU64, now: u64, before: u64| {
            if now >= before {
                count.fetch_add(now - before, Ordering::Relaxed);
            } else {
                count.fetch_sub(before - now, Ordering::Relaxed);
            }
        };
        add(&self.stats.ops_in_flight, self.in_flight, in_flight);
        add(&self.stats.buffers_lent, self.lent, lent);
        self.published = (self.in_flight, self.lent);
    }

    fn arm_wake(&mut self) {
        let fd = self.poll.as_raw_fd();
        self.push(opcode::PollAdd::new(types::Fd(fd), POLLIN).multi(true).build().user_data(WAKE << 56));
    }

    fn arm_receive(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let entry = on_socket!(slot, i, |fd| opcode::RecvMulti::new(fd, GROUP).build()).user_data(tag(
            RECV,
            i,
            slot.generation,
        ));
        (slot.receiving, slot.rearm) = (true, false);
        self.push(entry);
    }

    /// Sends `sending[offset..]`: a first try (`skip`) that gives up rather than wait and
    /// completes only if it did not send everything, or an ordinary send that waits for room.
    fn push_send(&mut self, i: usize, skip: bool) {
        use nix::sys::socket::MsgFlags;
        let slot = &mut self.slots[i];
        let rest = &slot.sending[slot.offset..];
        let len = rest.len().min(u32::MAX as usize) as u32;
        let mut flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_WAITALL;
        if skip {
            flags |= MsgFlags::MSG_DONTWAIT;
        }
        // The buffer stays untouched until the send ended (`send` is set meanwhile).
        let mut entry =
            on_socket!(slot, i, |fd| opcode::Send::new(fd, rest.as_ptr(), len).flags(flags.bits()).build())
                .user_data(tag(SEND, i, slot.generation));
        if skip {
            entry = entry.flags(squeue::Flags::SKIP_SUCCESS);
            self.unconfirmed.push((i, slot.generation));
        }
        if let Some(conn) = &slot.conn {
            // A first try almost always goes whole inside the next enter; no completion would
            // come to say so before the worker sleeps.
            conn.show_sending(!skip);
        }
        (slot.send, slot.skip) = (true, skip);
        self.push(entry);
    }

    /// Starts sending the answers a connection has waiting, unless a send is in flight.
    fn start_send(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let Some(conn) = slot.conn.as_mut() else { return };
        if !slot.send && conn.take_output(&mut slot.sending) {
            slot.offset = 0;
            self.push_send(i, true);
        }
    }

    fn mark(&mut self, i: usize) {
        if !self.slots[i].dirty {
            self.slots[i].dirty = true;
            self.dirty.push(i);
        }
    }

    fn run(mut self) {
        self.arm_wake();
        let idle = self.shared.settings.idle_timeout;
        let (mut idle_checked, mut watched) = (Instant::now(), Instant::now());
        let mut completions = Vec::with_capacity(256);
        while !self.shared.stopping() {
            let wait = if !self.ready.is_empty() || self.sends_awaited() {
                Some(Duration::ZERO)
            } else if !self.watchers.is_empty() {
                Some(WATCH_INTERVAL)
            } else {
                idle.map(|_| Duration::from_secs(1))
            };
            if let Err(e) = self.enter(wait) {
                eprintln!("worker io_uring_enter failed: {e}");
                break;
            }
            completions.clear();
            completions.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(tag, result, flags) in &completions {
                self.complete(tag, result, flags);
            }
            self.confirm_sends();
            // Clients that left go first, as epoll sees every event before serving: a
            // request in this pass (`stats conns`) no longer finds them open.
            let slots = &self.slots;
            if self.dirty.len() > 1 && self.dirty.iter().any(|&i| slots[i].eof) {
                self.dirty.sort_by_key(|&i| !slots[i].eof);
            }
            for k in 0..self.dirty.len() {
                let i = self.dirty[k];
                self.slots[i].dirty = false;
                self.drive(i);
            }
            self.dirty.clear();
            for _ in 0..self.ready.len() {
                if let Some(i) = self.ready.pop_front() {
                    self.drive(i);
                }
            }
            if !self.watchers.is_empty() && watched.elapsed() >= WATCH_INTERVAL {
                watched = Instant::now();
                for k in (0..self.watchers.len()).rev() {
                    self.drive(self.watchers[k]);
                }
            }
            if let Some(seconds) = idle {
                if idle_checked.elapsed() >= Duration::from_secs(1) {
                    idle_checked = Instant::now();
                    self.kick_idle(seconds);
                }
            }
            self.settle();
        }
        self.drain();
    }

    /// Whether the next enter must not wait: a send it submits (or one not confirmed yet) has
    /// work behind it — answers, requests or bytes held back until it went, a closing or ended
    /// connection — that its end starts and no completion would wake the worker for.
    fn sends_awaited(&self) -> bool {
        !self.confirming.is_empty()
            || self.unconfirmed.iter().any(|&(i, _)| {
                let slot = &self.slots[i];
                slot.eof
                    || slot.paused
                    || slot.closing.is_some()
                    || !slot.backlog.is_empty()
                    || slot.conn.as_ref().is_some_and(|c| c.output_waiting() > 0 || c.has_input())
            })
    }

    /// Submits what is queued and waits for a completion, at most `wait` (`None`: no limit;
    /// zero: only the completions already there, with the deferred work run).
    fn enter(&mut self, wait: Option<Duration>) -> io::Result<()> {
        self.bufs.publish();
        self.publish_counts();
        self.confirming.append(&mut self.unconfirmed);
        let result = match wait {
            None => self.ring.submit_and_wait(1),
            Some(wait) => {
                let ts = types::Timespec::from(wait);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            // ETIME: the wait ended; EBUSY: completions to reap first; EINTR: a signal.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc_errno::ETIME | libc_errno::EBUSY | libc_errno::EINTR)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Takes one completion.
    fn complete(&mut self, tag: u64, result: i32, flags: u32) {
        let more = cqueue::more(flags);
        if !more {
            self.in_flight -= 1;
        }
        let (kind, i, generation) = untag(tag);
        match kind {
            WAKE => {
                let mut events = Events::with_capacity(4);
                let _ = self.poll.poll(&mut events, Some(Duration::ZERO));
                self.take_arrivals();
                if !more {
                    self.arm_wake();
                }
            }
            RECV => self.received(i, generation, result, flags),
            SEND => self.sent(i, result),
            _ => {} // CANCEL: its target's own completion says what happened
        }
    }

    fn received(&mut self, i: usize, generation: u32, result: i32, flags: u32) {
        let more = cqueue::more(flags);
        let buffer = cqueue::buffer_select(flags);
        if buffer.is_some() {
            self.lent += 1;
        }
        let counters = self.cx.counters;
        let Some(slot) = self.slots.get_mut(i).filter(|s| s.generation == generation && s.conn.is_some())
        else {
            if let Some(bid) = buffer {
                self.give_back(bid);
            }
            return;
        };
        if !more {
            slot.receiving = false;
        }
        let open = slot.closing.is_none();
        if let (Some(bid), Some(conn)) = (buffer, slot.conn.as_mut()) {
            if result > 0 && open {
                let data = self.bufs.get(bid, result as usize);
                let taken = if slot.backlog.is_empty() { conn.feed(data, counters) } else { 0 };
                slot.backlog.extend_from_slice(&data[taken..]);
                if !slot.backlog.is_empty() && slot.receiving && !slot.paused {
                    // Served before more is taken: the receive waits (bytes stay in the socket).
                    slot.paused = true;
                    let entry = opcode::AsyncCancel::new(tag(RECV, i, slot.generation))
                        .build()
                        .user_data(CANCEL << 56);
                    self.push(entry);
                }
            }
        }
        if let Some(bid) = buffer {
            self.give_back(bid);
        }
        match result {
            n if n > 0 => {
                self.slots[i].rearm = !more;
                self.mark(i);
            }
            0 => {
                self.slots[i].eof = true;
                self.mark(i);
            }
            n if n == -libc_errno::ENOBUFS => {
                self.stats.ring_empty.fetch_add(1, Ordering::Relaxed);
                self.slots[i].rearm = true;
                self.mark(i); // armed again there, after the buffers of this pass went back
            }
            n if n == -libc_errno::ECANCELED => {
                if self.slots[i].paused {
                    self.mark(i); // its answers may have gone already
                }
            }
            _ => self.begin_close(i, CloseReason::Error, false),
        }
    }

    fn give_back(&mut self, bid: u16) {
        self.bufs.recycle(bid);
        self.lent -= 1;
    }

    /// The sends the last enter submitted without a completion on success and that got none:
    /// every byte went, so they end here as if completed. Left for a later pass while the
    /// kernel has not taken every queued entry, or holds completions back (an overflowing
    /// completion queue), since either may hide a send's end.
    fn confirm_sends(&mut self) {
        if self.confirming.is_empty() {
            return;
        }
        let sq = self.ring.submission();
        if !sq.is_empty() || sq.cq_overflow() {
            return;
        }
        drop(sq);
        let mut confirming = std::mem::take(&mut self.confirming);
        for &(i, generation) in &confirming {
            let slot = &mut self.slots[i];
            if slot.generation != generation || !slot.skip {
                continue; // it completed: it did not go whole (see `sent`)
            }
            slot.skip = false;
            let rest = (slot.sending.len() - slot.offset).min(i32::MAX as usize) as i32;
            self.in_flight -= 1;
            self.sent(i, rest);
        }
        confirming.clear();
        self.confirming = confirming;
    }

    fn sent(&mut self, i: usize, mut result: i32) {
        let slot = &mut self.slots[i];
        if std::mem::take(&mut slot.skip) && result == -libc_errno::EAGAIN {
            result = 0; // the first try found the socket full: the rest waits for room
        }
        slot.send = false;
        if result < 0 {
            // The client is gone (EPIPE, ECONNRESET) or the send was cancelled.
            if slot.closing.is_none() {
                self.begin_close(i, CloseReason::Error, false);
            }
            return;
        }
        Counters::add(&self.cx.counters.bytes_written, result as u64);
        slot.offset += result as usize;
        if slot.offset < slot.sending.len() {
            if !slot.cancelled {
                self.push_send(i, false);
            }
            return;
        }
        slot.sending.clear();
        slot.offset = 0;
        if slot.sending.capacity() > crate::conn::OUTPUT_HIGH_WATER {
            slot.sending = Vec::new(); // give back what one large answer needed
        }
        if slot.closing.is_none() {
            self.mark(i); // more answers may wait, or requests held back by the output
        }
    }

    fn take_arrivals(&mut self) {
        while let Ok(accepted) = self.arrivals.try_recv() {
            let Some(conn) = net::open_conn(self.shared, accepted, |_| true) else { continue };
            let i = self.free.pop().unwrap_or_else(|| {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            });
            let fd = conn.stream_fd();
            let fixed = i < self.fixed_files
                && matches!(self.ring.submitter().register_files_update(i as u32, &[fd]), Ok(1));
            let slot = &mut self.slots[i];
            (slot.fd, slot.fixed) = (fd, fixed);
            slot.conn = Some(conn);
            self.arm_receive(i);
        }
    }

    fn drive(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.closing.is_some() {
            return;
        }
        let Some(conn) = slot.conn.as_mut() else { return };
        let mut status = conn.serve(&mut self.cx, self.shared.settings.reqs_per_event);
        while status == Status::Open && !slot.backlog.is_empty() {
            // Bytes the read buffer could not take: in now that its requests were served.
            let taken = conn.feed(&slot.backlog, self.cx.counters);
            slot.backlog.drain(..taken);
            if taken == 0 {
                if conn.output_waiting() < crate::conn::OUTPUT_HIGH_WATER {
                    // One request longer than any accepted: memcached would close too.
                    self.begin_close(i, CloseReason::Error, false);
                    return;
                }
                break; // served once its answers went
            }
            status = conn.serve(&mut self.cx, self.shared.settings.reqs_per_event);
        }
        let reason = conn.close_reason;
        if conn.watcher().is_some() && !self.watchers.contains(&i) {
            self.watchers.push(i);
        }
        self.start_send(i);
        let slot = &mut self.slots[i];
        let backed_up =
            slot.conn.as_ref().is_some_and(|c| c.output_waiting() >= crate::conn::OUTPUT_HIGH_WATER);
        if backed_up && slot.receiving && !slot.paused {
            slot.paused = true;
            let entry =
                opcode::AsyncCancel::new(tag(RECV, i, slot.generation)).build().user_data(CANCEL << 56);
            self.push(entry);
        }
        match status {
            Status::Open => {
                let slot = &self.slots[i];
                if slot.eof && !slot.send {
                    self.begin_close(i, CloseReason::Normal, true); // all it sent is answered
                } else if (slot.rearm || slot.paused)
                    && !slot.receiving
                    && !backed_up
                    && !slot.eof
                    && slot.backlog.is_empty()
                {
                    self.slots[i].paused = false;
                    self.arm_receive(i);
                }
            }
            Status::Yield => self.ready.push_back(i),
            Status::Close => self.begin_close(i, reason, true),
            Status::Shutdown(mode) => {
                self.begin_close(i, CloseReason::Shutdown, true);
                self.shared.request_stop(if mode == ShutdownMode::Graceful {
                    stop::GRACEFUL
                } else {
                    stop::NOW
                });
                let _ = self.acceptor.wake();
            }
        }
    }

    /// Starts closing a connection: at once if the kernel holds nothing of it, else
    /// [`Worker::settle`] finishes it.
    fn begin_close(&mut self, i: usize, reason: CloseReason, flush: bool) {
        let slot = &mut self.slots[i];
        if slot.closing.is_some() || slot.conn.is_none() {
            return;
        }
        slot.closing = Some(reason);
        slot.flush = flush;
        if !self.advance_close(i) {
            self.closing.push(i);
        }
    }

    /// Moves the closing connections on; see [`Worker::advance_close`].
    fn settle(&mut self) {
        let mut k = 0;
        while k < self.closing.len() {
            if self.advance_close(self.closing[k]) {
                self.closing.swap_remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Moves a closing connection on: its last answers out (if they are to go), its operations
    /// cancelled, and once none is left in flight, the connection closed and its slot freed
    /// (`true`).
    fn advance_close(&mut self, i: usize) -> bool {
        if self.slots[i].flush && !self.slots[i].send {
            self.start_send(i);
        }
        let slot = &mut self.slots[i];
        let busy = slot.receiving || slot.send;
        if busy && !slot.cancelled && (!slot.send || !slot.flush) {
            slot.cancelled = true;
            let entry =
                on_socket!(slot, i, |fd| opcode::AsyncCancel2::new(types::CancelBuilder::fd(fd).all())
                    .build())
                .user_data(CANCEL << 56);
            self.push(entry);
        }
        if busy {
            return false;
        }
        self.finish(i);
        true
    }

    /// Closes a connection none of whose operations is in flight, and frees its slot.
    fn finish(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let Some(mut conn) = slot.conn.take() else { return };
        let reason = slot.closing.unwrap_or_default();
        if slot.fixed {
            // The table's reference would keep the socket open after the descriptor closes.
            if let Err(e) = self.ring.submitter().register_files_update(i as u32, &[-1]) {
                eprintln!("shoal server: io_uring could not release a fixed file: {e}");
            }
        }
        let slot = &mut self.slots[i];
        let generation = slot.generation.wrapping_add(1);
        *slot = Slot { generation, ..Slot::default() };
        if conn.watcher().is_some() {
            self.watchers.retain(|&w| w != i);
        }
        self.ready.retain(|&r| r != i);
        net::close_conn(self.shared, &mut conn, reason);
        drop(conn); // closes the socket
        self.free.push(i);
    }

    /// Closes connections waiting for a command longer than `-o idle_timeout`.
    fn kick_idle(&mut self, seconds: u32) {
        let now = u64::from(self.shared.clock.now());
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            let Some(conn) = &slot.conn else { continue };
            if slot.closing.is_none() && net::idle_past(conn, now, seconds) {
                Counters::bump(&self.cx.counters.idle_kicks);
                self.begin_close(i, CloseReason::IdleTimeout, false);
            }
        }
    }

    /// The stop: every connection closes, and the worker waits (a bounded time) for the
    /// kernel to finish with their buffers before the ring and the buffers go.
    fn drain(mut self) {
        for i in 0..self.slots.len() {
            self.slots[i].flush = false; // a closing client that does not read is not waited for
            self.begin_close(i, CloseReason::Shutdown, false);
        }
        let deadline = Instant::now() + DRAIN;
        while !self.closing.is_empty() && Instant::now() < deadline {
            self.settle();
            if self.closing.is_empty() || self.enter(Some(Duration::from_millis(100))).is_err() {
                break;
            }
            let completions: Vec<_> =
                self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())).collect();
            for (tag, result, flags) in completions {
                self.complete(tag, result, flags);
            }
            self.confirm_sends();
        }
        self.settle();
        for slot in self.slots.iter_mut().filter(|s| s.send) {
            // Still in the kernel's hands after the wait: never freed while it might be read.
            std::mem::forget(std::mem::take(&mut slot.sending));
        }
        self.publish_counts();
        self.stats.ops_in_flight.fetch_sub(self.in_flight, Ordering::Relaxed);
        self.stats.buffers_lent.fetch_sub(self.lent, Ordering::Relaxed);
        self.stats.buffers.fetch_sub(u64::from(self.bufs.count()), Ordering::Relaxed);
    }
}

/// The error numbers the loop tells apart.
mod libc_errno {
    pub const EINTR: i32 = nix::errno::Errno::EINTR as i32;
    pub const EBUSY: i32 = nix::errno::Errno::EBUSY as i32;
    pub const ETIME: i32 = nix::errno::Errno::ETIME as i32;
    pub const ENOBUFS: i32 = nix::errno::Errno::ENOBUFS as i32;
    pub const ECANCELED: i32 = nix::errno::Errno::ECANCELED as i32;
    pub const EAGAIN: i32 = nix::errno::Errno::EAGAIN as i32;
}
