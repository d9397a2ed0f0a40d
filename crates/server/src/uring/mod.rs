//! The io_uring data path (`-o io_uring`, or `SHOAL_SERVER_IO=uring`): the same connections
//! and the same execution as the epoll path, driven by completions instead of readiness.
//!
//! ```text
//!  acceptor ring: multishot accept per listener ──► admit (-c) ──► round-robin ──► worker inbox
//!                 poll of the acceptor's waker (stop)                              + waker
//!  worker ring:   multishot recv per connection, buffers picked from the worker's buffer ring
//!                   │ completion: bytes ──► Conn::feed ──► buffer back to the ring
//!                   ▼
//!                 Conn::serve (conn.rs: parse, execute, answer: the epoll path's code)
//!                   │ answers ──► Conn::take_output ──► one send per connection in flight
//!                   ▼
//!                 one io_uring_enter per loop: submits every send and re-armed receive,
//!                 waits for the next completions (or the watch / idle-timeout tick)
//! ```
//!
//! A connection's slot lives until every operation naming it has completed: closing cancels
//! its receive (and, unless its last answers are still to go, its send) and frees the slot
//! and the socket only when the kernel has said so, so no completion ever finds memory or a
//! descriptor reused. What needs the kernel is probed at start ([`probe`]); a kernel without
//! it gets one log line and the epoll path. TLS (`-Z`) is not served here: an explicit
//! `-o io_uring` with `-Z` is refused at start, the environment's default leaves TLS servers
//! on epoll.

mod bufs;
mod worker;

pub use crate::uring_options::{IoOptions, IoStats, BUFFER_BYTES, DEFAULT_BUFFERS};

use crate::conn::Stream;
use crate::net::{self, Accepted, Listeners};
use crate::state::Shared;
use io_uring::{cqueue, opcode, types, IoUring, Probe};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether this kernel has what the io_uring path needs; the error says what is missing.
pub fn probe(buffers: u16) -> Result<(), String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts =
        release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version < (6, 1) {
        return Err(format!(
            "kernel {} is older than 6.1, which multishot receive and deferred task work need",
            release.trim()
        ));
    }
    let ring = ring_builder().build(8).map_err(|e| format!("io_uring_setup: {e}"))?;
    if !ring.params().is_feature_ext_arg() {
        return Err("no IORING_FEAT_EXT_ARG (timed waits)".into());
    }
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| format!("probe: {e}"))?;
    for (code, name) in [
        (opcode::Accept::CODE, "accept"),
        (opcode::Recv::CODE, "recv"),
        (opcode::Send::CODE, "send"),
        (opcode::PollAdd::CODE, "poll"),
        (opcode::AsyncCancel::CODE, "cancel"),
    ] {
        if !probe.is_supported(code) {
            return Err(format!("no {name} operation"));
        }
    }
    let bufs = bufs::BufRing::register(&ring, buffers.min(8), 64)
        .map_err(|e| format!("no provided-buffer ring: {e}"))?;
    let _ = ring.submitter().unregister_buf_ring(bufs::GROUP);
    drop(ring);
    drop(bufs);
    Ok(())
}

/// A worker's ring: one thread submits and reaps (`SINGLE_ISSUER`), and the kernel runs the
/// completions' deferred work only when that thread waits (`DEFER_TASKRUN`), in one batch,
/// instead of interrupting it as they come (kernel 6.1).
fn ring_builder() -> io_uring::Builder {
    let mut builder = IoUring::builder();
    builder.setup_single_issuer().setup_defer_taskrun();
    builder
}

/// An operation's tag for the acceptor: the listener's index, or the waker's poll.
const ACCEPT_WAKE: u64 = u64::MAX;

/// Accepts connections with multishot accepts and runs io_uring workers until the server is
/// asked to stop (the epoll acceptor's job, [`net::serve`]'s counterpart).
pub fn serve(shared: Arc<Shared>, listeners: Listeners) -> Result<(), String> {
    let waker = listeners.waker().map_err(|e| e.to_string())?;
    let ((poll, tcp, tcp_tenant, unix), udp) = listeners.into_parts(&shared);
    let mut ring = IoUring::new(64).map_err(|e| format!("io_uring_setup: {e}"))?;
    let accept = |fd: i32, tag: u64| {
        opcode::AcceptMulti::new(types::Fd(fd)).flags(libc_flags()).build().user_data(tag)
    };
    let fds: Vec<i32> =
        tcp.iter().map(AsRawFd::as_raw_fd).chain(unix.iter().map(|(l, _, _)| l.as_raw_fd())).collect();
    let poll_fd = poll.as_raw_fd();
    let wake = || opcode::PollAdd::new(types::Fd(poll_fd), POLLIN).multi(true).build().user_data(ACCEPT_WAKE);
    for (i, &fd) in fds.iter().enumerate() {
        push(&mut ring, &accept(fd, i as u64));
    }
    push(&mut ring, &wake());
    let workers = net::spawn_workers(&shared, &waker, worker::run)?;
    shared.io.uring.store(true, Ordering::Relaxed);
    let mut events = crate::epoll::Events::with_capacity(8);
    let mut next = 0;
    let mut completions = Vec::new();
    while !shared.stopping() {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                net::join_workers(workers);
                return Err(format!("io_uring_enter failed: {e}"));
            }
        }
        completions.clear();
        completions.extend(ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
        for &(tag, result, flags) in &completions {
            if tag == ACCEPT_WAKE {
                let _ = poll.poll(&mut events, Some(std::time::Duration::ZERO));
                if !cqueue::more(flags) {
                    push(&mut ring, &wake());
                }
                continue;
            }
            let i = tag as usize;
            if result >= 0 {
                let accepted = if i < tcp.len() {
                    tcp_accepted(result, tcp_tenant[i])
                } else {
                    let (_, path, tenant) = &unix[i - tcp.len()];
                    // SAFETY: the kernel just returned this descriptor, which nothing else owns.
                    let socket = unsafe { std::os::unix::net::UnixStream::from_raw_fd(result) };
                    Some(Accepted {
                        stream: Stream::Unix(socket),
                        addr: format!("unix:{}", path.display()),
                        tls: false,
                        tenant: *tenant,
                    })
                };
                if let Some(conn) = accepted.and_then(|conn| net::admit(&shared, conn)) {
                    workers[next % workers.len()].hand(conn);
                    next += 1;
                }
            } else if shared.verbosity.load(Ordering::Relaxed) > 0 {
                // EMFILE and the like: memcached too keeps going.
                eprintln!("accept failed: {}", io::Error::from_raw_os_error(-result));
            }
            if !cqueue::more(flags) {
                if result < 0 {
                    // The error ended the multishot accept: give the condition (EMFILE) a
                    // moment to pass rather than failing again at once.
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                push(&mut ring, &accept(fds[i], tag));
            }
        }
    }
    net::join_workers(workers);
    if let Some(udp) = udp {
        let _ = udp.join();
    }
    drop(ring);
    for (_, path, _) in &unix {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// A TCP connection the kernel accepted (descriptor `fd`), ready for a worker.
fn tcp_accepted(fd: i32, tenant: Option<usize>) -> Option<Accepted> {
    // SAFETY: the kernel just returned this descriptor, which nothing else owns.
    let socket = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let _ = socket.set_nodelay(true);
    // A client already gone has no address: it is dropped (closed) uncounted.
    let peer = socket.peer_addr().ok()?;
    Some(Accepted { stream: Stream::Tcp(socket), addr: format!("tcp:{peer}"), tls: false, tenant })
}

/// `poll(2)`'s readable event.
const POLLIN: u32 = 0x001;

/// Accepted sockets are non-blocking (as the epoll path's are) and closed on exec.
fn libc_flags() -> i32 {
    (nix::sys::socket::SockFlag::SOCK_NONBLOCK | nix::sys::socket::SockFlag::SOCK_CLOEXEC).bits()
}

/// Queues an operation, submitting what is queued first if the queue is full.
fn push(ring: &mut IoUring, entry: &io_uring::squeue::Entry) {
    loop {
        // SAFETY: every operation this module queues names memory (buffers, timespecs) that
        // outlives its completion: see the callers.
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return;
        }
        let _ = ring.submit();
    }
}
