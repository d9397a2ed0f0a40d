//! What can be wrong with a pool's description or a key, found before any request is sent.

use std::fmt;

/// A routing error: each names the bad value.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// A pool needs at least one server.
    EmptyPool,
    /// A server string that does not parse (`host:port`, `host:port:weight`, or a unix path).
    BadServer(String),
    /// A weight that is zero, negative or not a number.
    BadWeight { server: String, weight: String },
    /// A hashing scheme this crate does not know.
    UnknownHashing(String),
    /// More servers than the scheme supports.
    TooManyServers { hashing: &'static str, servers: usize, max: usize },
    /// A weight the scheme cannot place as its tool would (say, a fraction where the tool
    /// reads whole numbers).
    UnsupportedWeight { hashing: &'static str, server: String, weight: f64, why: &'static str },
    /// A server name (`host:port:weight name`) given to a scheme that does not use names.
    NamedServer { hashing: &'static str, server: String },
    /// The same server named twice in a pool.
    DuplicateServer(String),
    /// A key the text protocol cannot carry.
    BadKey { key: Vec<u8>, why: &'static str },
    /// A Proteus question about `active` servers outside `1..=servers`.
    BadActive { active: usize, servers: usize },
    /// A digest that cannot be built or a snapshot that cannot be read; says which value.
    BadDigest(String),
}

/// The result of a routing call.
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::EmptyPool => f.write_str("the pool has no servers: name at least one (host:port)"),
            Error::BadServer(s) => {
                write!(
                    f,
                    "server {s:?} does not parse: write host:port, host:port:weight or a unix socket path"
                )
            }
            Error::BadWeight { server, weight } => {
                write!(f, "server {server:?} has weight {weight:?}: a weight must be a number above 0")
            }
            Error::UnknownHashing(name) => {
                write!(f, "unknown hashing {name:?}: use one of {}", crate::Hashing::NAMES.join(", "))
            }
            Error::TooManyServers { hashing, servers, max } => {
                write!(f, "{hashing} supports at most {max} servers, the pool has {servers}")
            }
            Error::UnsupportedWeight { hashing, server, weight, why } => {
                write!(f, "server {server:?} has weight {weight} that {hashing} cannot use: {why}")
            }
            Error::NamedServer { hashing, server } => write!(
                f,
                "server {server:?} has a name, which {hashing} does not use: only ketama_weighted (twemproxy's) names points by it"
            ),
            Error::DuplicateServer(s) => write!(f, "server {s:?} is named twice in the pool"),
            Error::BadKey { key, why } => write!(f, "key {:?} {why}", String::from_utf8_lossy(key)),
            Error::BadActive { active, servers } => {
                write!(f, "{active} active servers: Proteus takes 1 to the pool's {servers}")
            }
            Error::BadDigest(why) => write!(f, "digest: {why}"),
        }
    }
}

impl std::error::Error for Error {}
