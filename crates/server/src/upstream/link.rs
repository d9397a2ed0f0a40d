//! One blocking connection to the upstream (TCP or a unix socket) with a deadline on every
//! exchange: a request goes out whole, one answer is framed back by `shoal-proto`'s bounded
//! [`Framer`] (a garbage answer, an endless line or a value larger than the server's largest
//! item is an error, never a wait), and a connection that failed in any way is dropped, never
//! reused, so a late answer cannot be read as the next request's.

use shoal_proto::answer::{Framer, Limits, Shape};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Where the upstream listens: `host:port` (a router or a server) or a unix socket path, as
/// the client library spells an address.
pub use shoal_client::Address;

/// `--upstream`'s value: `host:port` (port 1–65535), `[v6]:port` or a socket path; the error
/// says what was expected.
pub fn parse_upstream(text: &str) -> Result<Address, String> {
    let expected = || {
        format!("--upstream {text}: expected host:port of a shoal router or server (or a unix socket path)")
    };
    match Address::parse(text).map_err(|_| expected())? {
        Address::Tcp(a) if a.rsplit_once(':').is_some_and(|(_, port)| port == "0") => Err(expected()),
        address => Ok(address),
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A connection to the upstream.
pub struct Link {
    stream: Stream,
    /// What was read and not yet handed out.
    buf: Vec<u8>,
    framer: Framer,
}

impl Link {
    /// Connects within `timeout`.
    pub fn open(address: &Address, timeout: Duration) -> io::Result<Link> {
        let stream = match address {
            Address::Tcp(a) => {
                let mut last = io::Error::other(format!("{a}: no address"));
                let mut found = None;
                for addr in a.to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, timeout) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or(last)?;
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
            Address::Unix(p) => Stream::Unix(UnixStream::connect(p)?),
        };
        Ok(Link { stream, buf: Vec::new(), framer: Framer::default() })
    }

    fn set_timeout(&self, t: Duration) -> io::Result<()> {
        let t = Some(t.max(Duration::from_millis(1)));
        match &self.stream {
            Stream::Tcp(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
            Stream::Unix(s) => s.set_read_timeout(t).and_then(|_| s.set_write_timeout(t)),
        }
    }

    /// Sends `request` and returns its `count` answers of `shape` (pipelined requests: the
    /// `END` of a values answer included), all before `deadline`. Any error leaves the link
    /// unusable: drop it.
    pub fn exchange(
        &mut self,
        request: &[u8],
        count: usize,
        shape: Shape,
        limits: &Limits,
        deadline: Instant,
    ) -> io::Result<Vec<Vec<u8>>> {
        let left = |now: Instant| {
            deadline.checked_duration_since(now).filter(|d| !d.is_zero()).ok_or(io::ErrorKind::TimedOut)
        };
        self.set_timeout(left(Instant::now())?)?;
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(request)?,
            Stream::Unix(s) => s.write_all(request)?,
        }
        self.framer.reset();
        let mut answers = Vec::with_capacity(count);
        let mut chunk = [0u8; 16 << 10];
        while answers.len() < count {
            if let Some(frame) = self.framer.frame(&self.buf, shape, limits)? {
                answers.push(self.buf[..frame.len].to_vec());
                self.buf.drain(..frame.len);
                continue;
            }
            self.set_timeout(left(Instant::now())?)?;
            let n = match &mut self.stream {
                Stream::Tcp(s) => s.read(&mut chunk),
                Stream::Unix(s) => s.read(&mut chunk),
            };
            match n {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the upstream closed")),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock) => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                Err(e) => return Err(e),
            }
        }
        Ok(answers)
    }

    /// Whether nothing was read past the answers handed out: a link with stray bytes (more
    /// than was asked for) is not reused, so they are never read as a later request's answer.
    pub fn is_drained(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_upstream("127.0.0.1:5000").unwrap(), Address::Tcp("127.0.0.1:5000".into()));
        assert_eq!(parse_upstream("[::1]:5000").unwrap(), Address::Tcp("[::1]:5000".into()));
        assert_eq!(parse_upstream("/run/r.sock").unwrap(), Address::Unix("/run/r.sock".into()));
        for bad in ["", "host", "host:", ":5000", "host:0", "host:99999"] {
            assert!(parse_upstream(bad).unwrap_err().contains("expected host:port"), "{bad}");
        }
    }
}
