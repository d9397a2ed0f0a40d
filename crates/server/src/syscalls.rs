//! The two system calls every request of the epoll path makes — receiving and sending — made
//! through rustix, which issues them itself (its `linux_raw` backend), rather than through
//! glibc's `recv` and `send` and std's and mio's wrappers around them. glibc's two are thread
//! cancellation points: each call enables and disables cancellation around the system call,
//! and with the wrappers above that came to about 60 user-space instructions a call
//! (docs/BENCHMARKS.md, #29's eighth round). Rust never cancels a thread, so those points
//! served nothing. Errors are the same `io::Error`s.

use rustix::net::{RecvFlags, SendFlags};
use std::io;
use std::os::fd::AsFd;

/// Receives into `buf` from socket `fd`: `recv(fd, buf, buf.len(), 0)`.
#[inline]
pub fn recv(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let (received, _) = rustix::net::recv(fd, buf, RecvFlags::empty())?;
    Ok(received)
}

/// Sends `buf` on socket `fd` without raising `SIGPIPE` if the peer is gone (`EPIPE` instead):
/// `send(fd, buf, buf.len(), MSG_NOSIGNAL)`, as std sends on a TCP stream.
#[inline]
pub fn send(fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, buf, SendFlags::NOSIGNAL)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn recv_and_send_move_bytes_and_report_errors_as_std_does() {
        let (a, mut b) = UnixStream::pair().expect("a socket pair");
        a.set_nonblocking(true).expect("a non-blocking socket");
        let mut buf = [0u8; 16];
        // Nothing sent yet, and the sockets do not block.
        assert_eq!(recv(&a, &mut buf).map_err(|e| e.kind()), Err(ErrorKind::WouldBlock));
        assert_eq!(send(&a, b"hello").expect("send"), 5);
        let mut got = [0u8; 5];
        b.read_exact(&mut got).expect("read what send sent");
        assert_eq!(&got, b"hello");
        b.write_all(b"world").expect("write");
        assert_eq!(recv(&a, &mut buf).expect("recv"), 5);
        assert_eq!(&buf[..5], b"world");
        drop(b);
        // The peer is gone: the end of the stream, then EPIPE, not a SIGPIPE that would kill
        // the test.
        assert_eq!(recv(&a, &mut buf).expect("recv at the end"), 0);
        assert_eq!(send(&a, b"x").map_err(|e| e.kind()), Err(ErrorKind::BrokenPipe));
        // A descriptor that is no socket: the error errno names.
        let file = std::fs::File::open("/dev/null").expect("/dev/null");
        assert_eq!(recv(&file, &mut buf).map_err(|e| e.raw_os_error()), Err(Some(nix::libc::ENOTSOCK)));
    }
}
