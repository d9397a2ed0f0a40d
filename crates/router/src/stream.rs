//! A connected stream to a destination, TCP or unix, and connecting within a timeout: the
//! bottom of the transport (`connection.rs` runs its loop on one, `health.rs` probes with one).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connected stream to a destination, TCP or unix.
pub enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// The two halves of a stream, whichever kind it is.
pub type Halves = (Box<dyn tokio::io::AsyncRead + Unpin>, Box<dyn tokio::io::AsyncWrite + Unpin>);

impl Stream {
    /// Reads into `buf` (as `AsyncRead::poll_read`, which also notes a short read drained the
    /// socket, saving the read that would find it empty).
    pub fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        let mut buf = ReadBuf::new(buf);
        let polled = match self {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, &mut buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, &mut buf),
        };
        polled.map_ok(|()| buf.filled().len())
    }

    /// Writes from `bytes`.
    pub fn poll_write(&mut self, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<std::io::Result<usize>> {
        match self {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, bytes),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, bytes),
        }
    }

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
