//! Sockets, TCP or unix, clients' and destinations': waited on with tokio's readiness, read and
//! written with rustix's `recv` and `send`; and connecting to a destination within a timeout.
//! The bottom of the transport (`connection.rs` runs its loop on a [`Stream`], `health.rs`
//! probes with one) and of a client's connection (`proxy.rs`).
//!
//! Why not tokio's `AsyncRead`/`AsyncWrite`: under them a read or a write goes through mio's,
//! std's and glibc's wrappers, and glibc's `recv` and `send` are thread cancellation points
//! (cancellation enabled and disabled around each call); rustix makes the system call itself
//! (its `linux_raw` backend). With tokio's readiness kept as it keeps it, that was about a
//! hundred instructions per call, four calls a proxied get (issue #29, as the server's own
//! `syscalls.rs` found).

use rustix::net::{RecvFlags, SendFlags};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::Interest;

/// A socket registered with its worker's event loop: tokio's readiness (what the loop last
/// reported, and the task to wake when it reports more) around rustix's system calls.
pub trait Socket: AsFd {
    /// Ready once the socket is readable (the task's waker kept in the socket's one reader slot).
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Ready once the socket is writable (the task's waker kept in its one writer slot).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// `io` if the socket is ready for `interest`; a `WouldBlock` from it clears the readiness.
    fn try_io<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R>;

    /// Reads what is there into `buf`'s spare room (after its bytes), without waiting. A read
    /// that does not fill the room took all there was: the readiness is cleared then (as
    /// tokio's `poll_read` clears it), so that the next poll waits for the event loop instead
    /// of finding nothing with a system call. A client waiting for its answer sends nothing
    /// more until it has it, so a read after the answer most often finds nothing (after 99.7 %
    /// of the one-connection gets under callgrind, issue #29).
    fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let (fd, room) = (self.as_fd(), buf.capacity() - buf.len());
        let spare = rustix::buffer::spare_capacity(buf);
        let n =
            self.try_io(Interest::READABLE, || Ok(rustix::net::recv(fd, spare, RecvFlags::empty())?.0))?;
        if n > 0 && n < room {
            // Readiness changes only when the worker's event loop runs, on this thread between
            // task polls: none reported since the read is cleared.
            let _ = self.try_io(Interest::READABLE, || Err::<(), _>(io::ErrorKind::WouldBlock.into()));
        }
        Ok(n)
    }

    /// [`Socket::try_read_buf`] once readable.
    fn poll_read_buf(&self, cx: &mut Context<'_>, buf: &mut Vec<u8>) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.poll_read_ready(cx))?;
            match self.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                read => return Poll::Ready(read),
            }
        }
    }

    /// Writes what the socket takes now, without waiting. A peer that is gone is `EPIPE`, not
    /// `SIGPIPE` (`MSG_NOSIGNAL`, as std sends on a TCP stream).
    fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        let fd = self.as_fd();
        self.try_io(Interest::WRITABLE, || Ok(rustix::net::send(fd, bytes, SendFlags::NOSIGNAL)?))
    }

    /// Writes what the socket takes: at once while it takes bytes, else once writable.
    fn poll_write(&self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            match self.try_write(bytes) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ready!(self.poll_write_ready(cx))?,
                written => return Poll::Ready(written),
            }
        }
    }
}

macro_rules! tokio_socket {
    ($t:ty) => {
        impl Socket for $t {
            fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_read_ready(self, cx)
            }
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$t>::poll_write_ready(self, cx)
            }
            fn try_io<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
                <$t>::try_io(self, interest, io)
            }
        }
    };
}
tokio_socket!(tokio::net::TcpStream);
tokio_socket!(tokio::net::UnixStream);

/// A connected stream to a destination, TCP or unix.
pub enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The two halves of a stream, whichever kind it is.
pub type Halves = (Box<dyn tokio::io::AsyncRead + Unpin>, Box<dyn tokio::io::AsyncWrite + Unpin>);

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl Socket for Stream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Unix(s) => s.poll_read_ready(cx),
        }
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_write_ready(cx),
            Stream::Unix(s) => s.poll_write_ready(cx),
        }
    }

    fn try_io<R>(&self, interest: Interest, io: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Stream::Tcp(s) => s.try_io(interest, io),
            Stream::Unix(s) => s.try_io(interest, io),
        }
    }
}

impl Stream {
    /// Its read and write halves (the probe's line exchange).
    pub fn halves(self) -> Halves {
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
pub async fn connect(address: &str, timeout: Duration) -> std::io::Result<Stream> {
    let attempt = async {
        if address.contains('/') {
            tokio::net::UnixStream::connect(address).await.map(Stream::Unix)
        } else {
            let s = tokio::net::TcpStream::connect(address).await?;
            s.set_nodelay(true)?;
            Ok(Stream::Tcp(s))
        }
    };
    crate::deadline::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::{poll_fn, Future};

    /// Runs `test` on a current-thread runtime, failing it if it takes over a minute.
    fn within_a_minute(test: impl Future<Output = ()>) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let finished = runtime.block_on(async { tokio::time::timeout(Duration::from_secs(60), test).await });
        finished.expect("the test's reads and writes finished within a minute");
    }

    /// Whether a poll with a waker that does nothing is pending.
    fn pending<T>(poll: impl FnOnce(&mut Context<'_>) -> Poll<T>) -> bool {
        let waker = futures::task::noop_waker();
        poll(&mut Context::from_waker(&waker)).is_pending()
    }

    #[test]
    fn reads_and_writes_move_bytes_wait_for_readiness_and_report_errors() {
        within_a_minute(async {
            let (a, b) = tokio::net::UnixStream::pair().expect("a socket pair");
            let mut buf = Vec::with_capacity(64);
            // Nothing sent yet: nothing read, without waiting.
            let nothing = Socket::try_read_buf(&a, &mut buf).map_err(|e| e.kind());
            assert_eq!(nothing, Err(io::ErrorKind::WouldBlock));
            poll_fn(|cx| b.poll_write_ready(cx)).await.expect("writable");
            assert_eq!(Socket::try_write(&b, b"hello").expect("written"), 5);
            assert_eq!(poll_fn(|cx| a.poll_read_buf(cx, &mut buf)).await.expect("read"), 5);
            assert_eq!(buf, b"hello");
            // That short read cleared the readiness: the next read waits (pending, not an
            // empty read) until more comes.
            assert!(pending(|cx| a.poll_read_buf(cx, &mut buf)));
            // Into the vector's spare room, after what it holds.
            assert_eq!(poll_fn(|cx| b.poll_write(cx, b"world")).await.expect("written"), 5);
            assert_eq!(poll_fn(|cx| a.poll_read_buf(cx, &mut buf)).await.expect("read"), 5);
            assert_eq!(buf, b"helloworld");
            // A read that fills the room may have left more: the readiness stays, and the next
            // read takes the rest at once.
            buf.clear();
            buf.shrink_to(4);
            let room = buf.capacity();
            let sent = vec![b'x'; room + 3];
            assert_eq!(poll_fn(|cx| b.poll_write(cx, &sent)).await.expect("written"), sent.len());
            assert_eq!(poll_fn(|cx| a.poll_read_buf(cx, &mut buf)).await.expect("read"), room);
            buf.reserve(16);
            assert_eq!(Socket::try_read_buf(&a, &mut buf).expect("the rest, without waiting"), 3);
            assert_eq!(buf, sent);
            // The peer gone: the end of the stream, then EPIPE (no SIGPIPE to kill the test).
            drop(b);
            assert_eq!(poll_fn(|cx| a.poll_read_buf(cx, &mut buf)).await.expect("the end"), 0);
            let broken = poll_fn(|cx| a.poll_write(cx, b"x")).await.map_err(|e| e.kind());
            assert_eq!(broken, Err(io::ErrorKind::BrokenPipe));
        });
    }

    #[test]
    fn a_write_the_socket_cannot_take_waits_until_it_can() {
        within_a_minute(async {
            let (a, b) = tokio::net::UnixStream::pair().expect("a socket pair");
            // Fill the socket's buffers until it takes no more.
            let chunk = vec![7u8; 64 << 10];
            let mut sent = 0;
            poll_fn(|cx| a.poll_write_ready(cx)).await.expect("writable");
            loop {
                match Socket::try_write(&a, &chunk) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(pending(|cx| a.poll_write(cx, b"x")));
            // A reader drains it all, and the byte still to come, in a task of its own; the
            // write waiting meanwhile is then taken.
            let reader = tokio::spawn(async move {
                let (mut got, mut buf) = (0, Vec::with_capacity(64 << 10));
                while got < sent + 1 {
                    buf.clear();
                    got += poll_fn(|cx| b.poll_read_buf(cx, &mut buf)).await.expect("read");
                }
                got
            });
            assert_eq!(poll_fn(|cx| a.poll_write(cx, b"x")).await.expect("written"), 1);
            assert_eq!(reader.await.expect("the reader"), sent + 1);
        });
    }
}
