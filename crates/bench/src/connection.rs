//! One non-blocking connection of the load generator: the bytes waiting to go out, the bytes
//! come in but not yet parsed, and the requests in flight, oldest first.

use crate::protocol::{Parsed, Protocol, RequestKind};
use crate::tally::Tally;
use crate::target::{ServerAddress, Stream};
use crate::tls::TlsStream;
use crate::workload::RequestSource;
use mio::event::Source;
use mio::{Interest, Registry, Token};
use rustls::ClientConfig;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::Instant;

/// Initial size of the input buffer; it doubles when a reply does not fit.
const INPUT_BUFFER_BYTES: usize = 16 << 10;

/// The socket, as mio drives it.
enum NetStream {
    Tcp(mio::net::TcpStream),
    Unix(mio::net::UnixStream),
    Tls(Box<TlsStream<mio::net::TcpStream>>),
}

/// A request sent (or queued to be sent) and not yet answered.
struct InFlight {
    kind: RequestKind,
    /// When it was meant to go out: its latency runs from here (in open loop this may be
    /// before it could be sent, which is what keeps coordinated omission out).
    intended: Instant,
}

/// One connection to the server.
pub struct Connection {
    stream: NetStream,
    /// Requests encoded and not yet written, from `sent` on.
    outgoing: Vec<u8>,
    sent: usize,
    /// Bytes read, `0..received`, starting with the oldest unanswered reply.
    incoming: Vec<u8>,
    received: usize,
    in_flight: VecDeque<InFlight>,
}

impl Connection {
    /// Connects (blocking, so that a refusal is reported at once) and switches to
    /// non-blocking I/O.
    pub fn open(address: &ServerAddress, tls: Option<&Arc<ClientConfig>>) -> Result<Self, String> {
        let nonblocking = |result: io::Result<()>| result.map_err(|e| format!("{address}: {e}"));
        let stream = match address.connect_with(tls)? {
            Stream::Tcp(stream) => {
                nonblocking(stream.set_nonblocking(true))?;
                NetStream::Tcp(mio::net::TcpStream::from_std(stream))
            }
            Stream::Unix(stream) => {
                nonblocking(stream.set_nonblocking(true))?;
                NetStream::Unix(mio::net::UnixStream::from_std(stream))
            }
            Stream::Tls(session) => {
                nonblocking(session.tcp.set_nonblocking(true))?;
                NetStream::Tls(Box::new(session.map(mio::net::TcpStream::from_std)))
            }
        };
        Ok(Connection {
            stream,
            outgoing: Vec::new(),
            sent: 0,
            incoming: vec![0; INPUT_BUFFER_BYTES],
            received: 0,
            in_flight: VecDeque::new(),
        })
    }

    /// Registers the socket with a poller, for readiness to read and to write.
    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        match &mut self.stream {
            NetStream::Tcp(stream) => stream.register(registry, token, interest),
            NetStream::Unix(stream) => stream.register(registry, token, interest),
            NetStream::Tls(session) => session.tcp.register(registry, token, interest),
        }
    }

    /// Requests queued or sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Queues the source's next request, meant to go out at `intended`; `false` if the source
    /// has nothing more to send.
    pub fn queue(&mut self, source: &mut RequestSource, intended: Instant) -> bool {
        match source.encode_next(&mut self.outgoing) {
            Some(kind) => {
                self.in_flight.push_back(InFlight { kind, intended });
                true
            }
            None => false,
        }
    }

    /// Writes what is queued until the socket would block.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.sent < self.outgoing.len() {
            match self.write_from(self.sent) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => self.sent += written,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.outgoing.clear();
        self.sent = 0;
        if let NetStream::Tls(session) = &mut self.stream {
            session.push()?; // what the socket did not take goes on the writable event
        }
        Ok(())
    }

    fn write_from(&mut self, from: usize) -> io::Result<usize> {
        let bytes = &self.outgoing[from..];
        match &mut self.stream {
            NetStream::Tcp(stream) => stream.write(bytes),
            NetStream::Unix(stream) => stream.write(bytes),
            NetStream::Tls(session) => session.write(bytes),
        }
    }

    /// Reads what the socket holds, counting every reply completed into `tally`.
    ///
    /// A read that leaves room in the buffer has emptied the socket, and epoll (edge
    /// triggered) reports the next arrival as a new event; so no read is spent just to hear
    /// that it would block, which saves a system call per reply on a busy generator.
    pub fn receive(&mut self, protocol: Protocol, tally: &mut Tally) -> Result<(), String> {
        loop {
            if self.received == self.incoming.len() {
                self.incoming.resize(self.incoming.len() * 2, 0);
            }
            let space = &mut self.incoming[self.received..];
            let room = space.len();
            // A TLS session may hold decrypted bytes the socket no longer signals: read on
            // until it would block.
            let (read, drains) = match &mut self.stream {
                NetStream::Tcp(stream) => (stream.read(space), true),
                NetStream::Unix(stream) => (stream.read(space), true),
                NetStream::Tls(session) => (session.read(space), false),
            };
            match read {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(read) => {
                    self.received += read;
                    self.complete_replies(protocol, tally)?;
                    if drains && read < room {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Matches whole replies to the oldest requests in flight and drops their bytes.
    fn complete_replies(&mut self, protocol: Protocol, tally: &mut Tally) -> Result<(), String> {
        let now = Instant::now();
        let mut parsed = 0;
        while let Some(request) = self.in_flight.front() {
            let unparsed = &self.incoming[parsed..self.received];
            match protocol.parse_reply(request.kind, unparsed).map_err(|e| e.to_string())? {
                Parsed::Incomplete => break,
                Parsed::Complete { reply, consumed } => {
                    tally.record(request.kind, reply, now.saturating_duration_since(request.intended));
                    parsed += consumed;
                    self.in_flight.pop_front();
                }
            }
        }
        if self.in_flight.is_empty() && parsed < self.received {
            let extra = String::from_utf8_lossy(&self.incoming[parsed..self.received]);
            return Err(format!("the server sent bytes no request asked for: {extra:?}"));
        }
        self.incoming.copy_within(parsed..self.received, 0);
        self.received -= parsed;
        Ok(())
    }
}
