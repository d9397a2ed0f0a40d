//! The epoll instance the acceptor and each epoll worker wait on, and the eventfd that wakes
//! it, over rustix's safe `epoll` and `eventfd` calls. rustix makes the system calls itself
//! (`epoll_pwait` with no signal mask), without glibc's `epoll_wait`, a thread-cancellation
//! point, and without mio's layers: about 70 user-space instructions a request fewer
//! (docs/BENCHMARKS.md, #29's ninth round). Every source is watched edge-triggered, as mio
//! watched them.

use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// What a source is watched for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Data to read, the peer's end of the stream (listeners, the waker).
    Read,
    /// That, and room to write (connections: a send that could not finish resumes).
    ReadWrite,
}

impl Interest {
    fn flags(self) -> epoll::EventFlags {
        use epoll::EventFlags as F;
        let read = F::ET | F::IN | F::RDHUP;
        match self {
            Interest::Read => read,
            Interest::ReadWrite => read | F::OUT,
        }
    }
}

/// An epoll instance; each source is named by a token.
#[derive(Debug)]
pub struct Poll {
    epoll: OwnedFd,
}

impl Poll {
    pub fn new() -> io::Result<Poll> {
        Ok(Poll { epoll: epoll::create(epoll::CreateFlags::CLOEXEC)? })
    }

    /// Starts watching `source` (edge-triggered), whose events will carry `token`.
    pub fn add(&self, source: impl AsFd, token: usize, interest: Interest) -> io::Result<()> {
        Ok(epoll::add(&self.epoll, source, epoll::EventData::new_u64(token as u64), interest.flags())?)
    }

    /// Stops watching `source`.
    pub fn delete(&self, source: impl AsFd) -> io::Result<()> {
        Ok(epoll::delete(&self.epoll, source)?)
    }

    /// Waits up to `timeout` (`None`: until an event) for events, which replace `events`'
    /// contents (as many as its capacity holds).
    pub fn poll(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<()> {
        let timeout = timeout.map(|t| Timespec {
            tv_sec: t.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: t.subsec_nanos().into(),
        });
        events.0.clear();
        epoll::wait(&self.epoll, rustix::buffer::spare_capacity(&mut events.0), timeout.as_ref())?;
        Ok(())
    }
}

/// The io_uring path waits for the epoll instance itself to turn readable (its waker's event).
impl AsRawFd for Poll {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

/// The events one [`Poll::poll`] returned.
pub struct Events(Vec<epoll::Event>);

impl Events {
    pub fn with_capacity(capacity: usize) -> Events {
        Events(Vec::with_capacity(capacity))
    }

    pub fn iter(&self) -> impl Iterator<Item = Event> + '_ {
        // Copied out: the kernel's `epoll_event` is packed, its fields cannot be borrowed.
        self.0.iter().map(|&event| Event { flags: event.flags, token: event.data.u64() as usize })
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One source's readiness.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    flags: epoll::EventFlags,
    token: usize,
}

impl Event {
    /// The token the source was added with.
    pub fn token(&self) -> usize {
        self.token
    }

    /// The peer closed its side, or the socket hung up.
    pub fn is_read_closed(&self) -> bool {
        use epoll::EventFlags as F;
        self.flags.contains(F::HUP) || self.flags.contains(F::IN | F::RDHUP)
    }

    /// The socket has an error pending.
    pub fn is_error(&self) -> bool {
        self.flags.contains(epoll::EventFlags::ERR)
    }
}

/// Wakes a [`Poll`] from another thread: an eventfd added to it, written to.
#[derive(Debug)]
pub struct Waker {
    eventfd: OwnedFd,
}

impl Waker {
    /// A waker whose wakes are events of `poll` carrying `token`.
    pub fn new(poll: &Poll, token: usize) -> io::Result<Waker> {
        let eventfd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        poll.add(&eventfd, token, Interest::Read)?;
        Ok(Waker { eventfd })
    }

    /// Raises the waker's event. Nothing reads the counter (each write is an edge of its own);
    /// should it ever fill up, it is read back to zero first.
    pub fn wake(&self) -> io::Result<()> {
        loop {
            match rustix::io::write(&self.eventfd, &1u64.to_ne_bytes()) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => {
                    let mut counter = [0u8; 8];
                    match rustix::io::read(&self.eventfd, &mut counter) {
                        Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    const DEADLINE: Duration = Duration::from_secs(10);

    /// Waits (up to the deadline) for the next events.
    fn next(poll: &Poll, events: &mut Events) {
        poll.poll(events, Some(DEADLINE)).expect("epoll_pwait");
        assert!(!events.is_empty(), "no event within {DEADLINE:?}");
    }

    #[test]
    fn sources_raise_their_tokens_edge_triggered() {
        let poll = Poll::new().expect("an epoll instance");
        let mut events = Events::with_capacity(8);
        let (a, mut b) = UnixStream::pair().expect("a socket pair");
        a.set_nonblocking(true).expect("nonblocking");
        poll.add(&a, 7, Interest::ReadWrite).expect("add");
        // Writable at once.
        next(&poll, &mut events);
        let first: Vec<usize> = events.iter().map(|e| e.token()).collect();
        assert_eq!(first, [7]);
        assert!(!events.iter().any(|e| e.is_read_closed() || e.is_error()));
        // Edge-triggered: nothing new, no event.
        poll.poll(&mut events, Some(Duration::ZERO)).expect("epoll_pwait");
        assert!(events.is_empty());
        b.write_all(b"x").expect("write");
        next(&poll, &mut events);
        assert_eq!(events.iter().map(|e| e.token()).collect::<Vec<_>>(), [7]);
        drop(b);
        next(&poll, &mut events);
        assert!(events.iter().all(|e| e.token() == 7 && e.is_read_closed()));
        poll.delete(&a).expect("delete");
    }

    #[test]
    fn a_waker_raises_its_event_at_every_wake() {
        let poll = Poll::new().expect("an epoll instance");
        let waker = Waker::new(&poll, usize::MAX).expect("a waker");
        let mut events = Events::with_capacity(8);
        for _ in 0..3 {
            waker.wake().expect("wake");
            next(&poll, &mut events);
            assert_eq!(events.iter().map(|e| e.token()).collect::<Vec<_>>(), [usize::MAX]);
        }
        // Each wake is an edge of its own (the counter is never read): no event without one.
        poll.poll(&mut events, Some(Duration::ZERO)).expect("epoll_pwait");
        assert!(events.is_empty());
    }
}
