//! What can go wrong, as one enum a caller can match on.

use std::fmt;
use std::io;

/// A client error.
#[derive(Debug)]
pub enum Error {
    /// The address could not be understood (`host:port`, or a path for a unix socket).
    Address(String),
    /// The connection failed, broke or timed out. The next call connects again.
    Io(io::Error),
    /// The key is not one the text protocol can carry: 1 to [`shoal_proto::KEY_MAX`] bytes, no
    /// spaces or control characters.
    InvalidKey(Vec<u8>),
    /// The server refused the request: `ERROR`, `CLIENT_ERROR …` or `SERVER_ERROR …` (the
    /// line as it came, e.g. `SERVER_ERROR object too large for cache`).
    Server(String),
    /// The server answered something this client does not understand.
    Protocol(String),
    /// A pool's description is wrong (no servers, a server or weight that does not parse, an
    /// unknown hashing): found before any request is sent.
    Pool(shoal_route::Error),
    /// The key's server failed recently and is skipped until its retry time (a pool without
    /// a Gutter pool answers its writes with this; its reads miss).
    Down(String),
    /// An invalidation message could not be written: no keys, or the database refused it
    /// (see [`crate::invalidation`]).
    Invalidation(String),
    /// A provisioning state file could not be followed (unreadable, damaged, or for another
    /// pool; see [`crate::provisioning`]).
    Provisioning(String),
}

/// The result of a client call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Whether the error means the connection is gone (and the next call reconnects).
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Protocol(_))
    }

    /// Whether the connection timed out.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Io(e) if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Address(why) => write!(f, "bad server address: {why}"),
            Error::Io(e) if self.is_timeout() => write!(f, "timed out waiting for the server ({e})"),
            Error::Io(e) => write!(f, "connection to the server failed: {e}"),
            Error::InvalidKey(key) => write!(
                f,
                "invalid key {:?}: a key is 1 to {} bytes without spaces or control characters",
                String::from_utf8_lossy(key),
                shoal_proto::KEY_MAX
            ),
            Error::Server(line) => write!(f, "the server refused the request: {line}"),
            Error::Protocol(what) => write!(f, "unexpected answer from the server: {what}"),
            Error::Pool(e) => write!(f, "bad pool: {e}"),
            Error::Down(server) => {
                write!(f, "server {server} is marked down after a failure; it is tried again after the retry interval")
            }
            Error::Invalidation(why) => write!(f, "cannot write the invalidation message: {why}"),
            Error::Provisioning(why) => write!(f, "cannot follow the provisioning state: {why}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Pool(e) => Some(e),
            _ => None,
        }
    }
}

impl From<shoal_route::Error> for Error {
    fn from(e: shoal_route::Error) -> Error {
        Error::Pool(e)
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Io(e)
    }
}
