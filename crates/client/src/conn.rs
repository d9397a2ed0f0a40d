//! One connection to a server: a TCP or unix-socket stream with timeouts, and a read buffer
//! that hands out whole answers, found by the shared answer framer (`shoal_proto::frame`)
//! within the client's bounds.

use crate::error::{Error, Result};
use shoal_proto::{Framer, Limits, Shape, MAX_VALUE_BYTES};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// What a client accepts from a server: lines of [`MAX_ANSWER_LINE`] bytes (memcached's are a
/// few hundred), values of [`MAX_VALUE_BYTES`] (memcached's largest item): a broken or hostile
/// server cannot make the client allocate more than this for one answer line or value.
pub const LIMITS: Limits = Limits::values(MAX_VALUE_BYTES);

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// `host:port`.
    Tcp(String),
    /// The path of a unix socket.
    Unix(PathBuf),
}

impl Address {
    /// `host:port` (`[v6]:port` too), or a path (containing a `/`) for a unix socket.
    pub fn parse(text: &str) -> Result<Address> {
        if text.contains('/') {
            return Ok(Address::Unix(PathBuf::from(text)));
        }
        match text.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Address::Tcp(text.to_string()))
            }
            _ => Err(Error::Address(format!("{text:?} is neither host:port nor a unix socket path"))),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(a) => f.write_str(a),
            Address::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A whole answer that arrived some other way (reassembled UDP datagrams): nothing more
    /// can be read or sent.
    Finished,
}

/// A connected stream and what was read from it but not consumed yet.
pub struct Connection {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// How far the answer at `start` is framed, across reads.
    framer: Framer,
}

impl Connection {
    /// Connects within `connect_timeout`, with `io_timeout` on every read and write.
    pub fn open(
        address: &Address,
        connect_timeout: Option<Duration>,
        io_timeout: Option<Duration>,
    ) -> Result<Connection> {
        let stream = match address {
            Address::Tcp(a) => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{a} resolves to no address"));
                let mut connected = None;
                for addr in a.to_socket_addrs()? {
                    let attempt = match connect_timeout {
                        Some(t) => TcpStream::connect_timeout(&addr, t),
                        None => TcpStream::connect(addr),
                    };
                    match attempt {
                        Ok(s) => {
                            connected = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = connected.ok_or(last)?;
                s.set_nodelay(true)?;
                s.set_read_timeout(io_timeout)?;
                s.set_write_timeout(io_timeout)?;
                Stream::Tcp(s)
            }
            Address::Unix(path) => {
                // A unix-socket connect waits while the listener's backlog is full, for as long
                // as the socket's send timeout allows.
                let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
                socket.set_write_timeout(connect_timeout)?;
                socket.connect(&socket2::SockAddr::unix(path)?)?;
                let s = UnixStream::from(std::os::fd::OwnedFd::from(socket));
                s.set_read_timeout(io_timeout)?;
                s.set_write_timeout(io_timeout)?;
                Stream::Unix(s)
            }
        };
        Ok(Connection { stream, buf: vec![0; 16 << 10], start: 0, end: 0, framer: Framer::default() })
    }

    /// A connection that reads `answer` and then ends: the answer parsers serve datagrams too.
    pub fn finished(answer: Vec<u8>) -> Connection {
        let end = answer.len();
        Connection { stream: Stream::Finished, buf: answer, start: 0, end, framer: Framer::default() }
    }

    /// Sends `request` whole.
    pub fn send(&mut self, request: &[u8]) -> Result<()> {
        match &mut self.stream {
            Stream::Tcp(s) => s.write_all(request)?,
            Stream::Unix(s) => s.write_all(request)?,
            Stream::Finished => return Err(ended().into()),
        }
        Ok(())
    }

    /// Whether the server still holds the connection open: a peek that must not wait finds
    /// either nothing to read (open) or the end of the stream (closed: the server went away).
    pub fn is_open(&mut self) -> bool {
        let socket = match &self.stream {
            Stream::Tcp(s) => socket2::SockRef::from(s),
            Stream::Unix(s) => socket2::SockRef::from(s),
            Stream::Finished => return false,
        };
        let mut byte = [std::mem::MaybeUninit::uninit()];
        match socket.recv_with_flags(&mut byte, libc::MSG_PEEK | libc::MSG_DONTWAIT) {
            Ok(0) => false,
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::WouldBlock,
        }
    }

    /// The next answer line, without its `\r\n`.
    pub fn line(&mut self) -> Result<&[u8]> {
        let line = self.answer(Shape::Line)?;
        Ok(&line[..line.len() - 2])
    }

    /// The next whole answer of `shape`, within [`LIMITS`], borrowed from the read buffer until
    /// the next read: without its `END` line (of [`Shape::Values`] and [`Shape::Stats`]).
    pub fn answer(&mut self, shape: Shape) -> Result<&[u8]> {
        self.answer_within(shape, &LIMITS)
    }

    /// [`Connection::answer`] within `limits`: an answer past them is a protocol error.
    pub fn answer_within(&mut self, shape: Shape, limits: &Limits) -> Result<&[u8]> {
        loop {
            match self.framer.frame(&self.buf[self.start..self.end], shape, limits) {
                Ok(Some(frame)) => {
                    let answer = self.start..self.start + frame.answer;
                    self.start += frame.len;
                    return Ok(&self.buf[answer]);
                }
                Ok(None) => {
                    if let Err(e) = self.fill() {
                        // A caller that goes on after an error may ask for another shape.
                        self.framer.reset();
                        return Err(e);
                    }
                }
                Err(garbage) => return Err(Error::Protocol(garbage.to_string())),
            }
        }
    }

    /// Reads more, making room first (and growing the buffer for a large value).
    fn fill(&mut self) -> Result<()> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let read = match &mut self.stream {
            Stream::Tcp(s) => s.read(&mut self.buf[self.end..]),
            Stream::Unix(s) => s.read(&mut self.buf[self.end..]),
            Stream::Finished => Ok(0),
        };
        match read {
            Ok(0) => Err(Error::Io(ended())),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(Error::Io(e)),
        }
    }
}

/// The error of reading past the end of what the server sent.
fn ended() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection")
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::MAX_ANSWER_LINE;

    #[test]
    fn addresses() {
        assert_eq!(Address::parse("127.0.0.1:11211").unwrap(), Address::Tcp("127.0.0.1:11211".into()));
        assert_eq!(Address::parse("[::1]:11211").unwrap(), Address::Tcp("[::1]:11211".into()));
        assert_eq!(Address::parse("/tmp/mc.sock").unwrap(), Address::Unix("/tmp/mc.sock".into()));
        for bad in ["localhost", ":11211", "host:port", "host:70000", ""] {
            assert!(matches!(Address::parse(bad), Err(Error::Address(_))), "{bad}");
        }
    }

    #[test]
    fn a_unix_connect_to_a_full_backlog_gives_up_after_the_connect_timeout() {
        let dir = std::env::temp_dir().join(format!("shoal-client-backlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sock");
        let _ = std::fs::remove_file(&path);
        let listener = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
        listener.bind(&socket2::SockAddr::unix(&path).unwrap()).unwrap();
        listener.listen(0).unwrap(); // and never accepts
        let address = Address::Unix(path.clone());
        let timeout = Duration::from_millis(200);
        let mut queued = Vec::new();
        let error = loop {
            let started = std::time::Instant::now();
            match Connection::open(&address, Some(timeout), None) {
                Ok(c) => queued.push(c),
                Err(e) => {
                    assert!(started.elapsed() < Duration::from_secs(30), "waited {:?}", started.elapsed());
                    break e;
                }
            }
            assert!(queued.len() < 16, "a listener that never accepts took {} connections", queued.len());
        };
        assert!(matches!(&error, Error::Io(e) if e.kind() == io::ErrorKind::WouldBlock), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A connection whose server is the returned socket.
    fn connection_to_fake_server() -> (Connection, UnixStream) {
        let (client, server) = UnixStream::pair().unwrap();
        (
            Connection {
                stream: Stream::Unix(client),
                buf: vec![0; 16],
                start: 0,
                end: 0,
                framer: Framer::default(),
            },
            server,
        )
    }

    #[test]
    fn a_server_cannot_make_the_client_allocate_without_bound() {
        let (mut conn, mut server) = connection_to_fake_server();
        server.write_all(b"VALUE k 0 5\r\nhello\r\nEND\r\nOK\r\n").unwrap();
        assert_eq!(conn.answer(Shape::Values).unwrap(), b"VALUE k 0 5\r\nhello\r\n");
        assert_eq!(conn.line().unwrap(), b"OK");
        server.write_all(format!("VALUE k 0 {}\r\n", MAX_VALUE_BYTES + 1).as_bytes()).unwrap();
        let error = conn.answer(Shape::Values).unwrap_err();
        assert!(matches!(error, Error::Protocol(_)), "{error}");

        // An endless line is cut off once it passes the limit, not buffered whole (on a new
        // connection: after an error, the client drops the one it has).
        let (mut conn, mut server) = connection_to_fake_server();
        let writer = std::thread::spawn(move || {
            let chunk = [b'x'; 4096];
            while server.write_all(&chunk).is_ok() {}
        });
        let error = conn.line().unwrap_err();
        assert!(matches!(error, Error::Protocol(_)), "{error}");
        assert!(conn.buf.len() <= 2 * MAX_ANSWER_LINE + 4096, "buffer grew to {}", conn.buf.len());
        drop(conn);
        writer.join().unwrap();
    }
}
