//! The server under load: its address, connecting to it with errors that say what to do, and
//! reading its `stats` (for the CPU time it spent, and its item counts).

use crate::protocol::Protocol;
use crate::tls::TlsStream;
use rustls::ClientConfig;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The server under load and the protocol to speak to it (options of every subcommand).
#[derive(clap::Args, Clone, Debug)]
pub struct Target {
    /// Server: host:port, or the path of a unix socket.
    #[arg(long, short = 's', default_value = "127.0.0.1:11211")]
    pub server: ServerAddress,
    /// Protocol of the requests.
    #[arg(long, value_enum, default_value_t = Protocol::Text)]
    pub protocol: Protocol,
    /// Speak TLS (to a server started with `-Z`), trusting the CAs in this PEM file.
    #[arg(long, value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
}

impl Target {
    /// The TLS client configuration `--tls-ca` asks for, if any.
    pub fn tls(&self) -> Result<Option<Arc<ClientConfig>>, String> {
        self.tls_ca.as_deref().map(crate::tls::client_config).transpose()
    }
}

/// Where the server listens (`--server`): `host:port`, or the path of a unix socket (anything
/// with a `/` in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddress {
    /// A TCP `host:port`.
    Tcp(String),
    /// A unix socket path.
    Unix(PathBuf),
}

impl FromStr for ServerAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.contains('/') {
            Ok(ServerAddress::Unix(text.into()))
        } else if text
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
        {
            Ok(ServerAddress::Tcp(text.into()))
        } else {
            Err(format!("{text:?} is neither host:port nor a unix socket path"))
        }
    }
}

impl fmt::Display for ServerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddress::Tcp(address) => f.write_str(address),
            ServerAddress::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// A blocking connection, before the load generator makes it non-blocking.
pub enum Stream {
    /// Over TCP, with Nagle's algorithm off.
    Tcp(TcpStream),
    /// Over a unix socket.
    Unix(UnixStream),
    /// TLS over TCP, handshake done.
    Tls(Box<TlsStream<TcpStream>>),
}

/// How long a `stats` exchange may take before the server is declared unresponsive.
const STATS_TIMEOUT: Duration = Duration::from_secs(10);

impl ServerAddress {
    /// Opens one connection; the error names the address and, when nothing listens there,
    /// says that the server must be started first.
    pub fn connect(&self) -> Result<Stream, String> {
        self.connect_with(None)
    }

    /// [`ServerAddress::connect`], over TLS when `tls` is given (TCP only).
    pub fn connect_with(&self, tls: Option<&Arc<ClientConfig>>) -> Result<Stream, String> {
        let stream = match (self, tls) {
            (ServerAddress::Tcp(address), None) => self.connect_tcp(address).map(Stream::Tcp),
            (ServerAddress::Tcp(address), Some(config)) => {
                let tcp = self.connect_tcp(address).map_err(|error| self.explain(&error))?;
                let host = address.rsplit_once(':').map_or(address.as_str(), |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                return crate::tls::handshake(config, host, tcp)
                    .map(|session| Stream::Tls(Box::new(session)))
                    .map_err(|error| format!("TLS handshake with {self}: {error}"));
            }
            (ServerAddress::Unix(path), None) => UnixStream::connect(path).map(Stream::Unix),
            (ServerAddress::Unix(_), Some(_)) => {
                return Err(format!(
                    "{self}: TLS (--tls-ca) is for TCP servers; memcached's -Z leaves unix sockets plain"
                ))
            }
        };
        stream.map_err(|error| self.explain(&error))
    }

    fn connect_tcp(&self, address: &str) -> io::Result<TcpStream> {
        let mut last_error = io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address");
        for socket_address in address.to_socket_addrs()? {
            match TcpStream::connect(socket_address) {
                Ok(stream) => {
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    fn explain(&self, error: &io::Error) -> String {
        match error.kind() {
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound => format!(
                "cannot connect to {self}: {error}. Is the server running? Start it first, e.g. \
                 `memcached {}` or `shoal server {}`",
                self.memcached_flag(),
                self.memcached_flag()
            ),
            _ => format!("cannot connect to {self}: {error}"),
        }
    }

    /// memcached's flag for listening here, for error messages.
    fn memcached_flag(&self) -> String {
        match self {
            ServerAddress::Tcp(address) => {
                let (host, port) = address.rsplit_once(':').unwrap_or((address, "11211"));
                format!("-l {host} -p {port}")
            }
            ServerAddress::Unix(path) => format!("-s {}", path.display()),
        }
    }

    /// Reads the server's general-purpose `stats` over a connection of its own.
    pub fn stats(&self) -> Result<ServerStats, String> {
        self.stats_with(None)
    }

    /// [`ServerAddress::stats`], over TLS when `tls` is given.
    pub fn stats_with(&self, tls: Option<&Arc<ClientConfig>>) -> Result<ServerStats, String> {
        let exchanged = match self.connect_with(tls)? {
            Stream::Tcp(stream) => {
                stream.set_read_timeout(Some(STATS_TIMEOUT)).and_then(|()| ServerStats::exchange(stream))
            }
            Stream::Unix(stream) => {
                stream.set_read_timeout(Some(STATS_TIMEOUT)).and_then(|()| ServerStats::exchange(stream))
            }
            Stream::Tls(stream) => {
                stream.tcp.set_read_timeout(Some(STATS_TIMEOUT)).and_then(|()| ServerStats::exchange(stream))
            }
        };
        exchanged.map_err(|error| format!("reading `stats` from {self}: {error}"))
    }
}

/// The `STAT <name> <value>` lines of one `stats` answer.
#[derive(Clone, Debug, Default)]
pub struct ServerStats {
    values: HashMap<String, String>,
}

impl ServerStats {
    fn exchange<S: Read + Write>(mut stream: S) -> io::Result<Self> {
        stream.write_all(b"stats\r\n")?;
        Self::parse(BufReader::new(stream))
    }

    /// Reads `STAT` lines up to `END`.
    fn parse(reader: impl BufRead) -> io::Result<Self> {
        let mut values = HashMap::new();
        for line in reader.lines() {
            let line = line?;
            let line = line.trim_end();
            if line == "END" {
                return Ok(ServerStats { values });
            }
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("STAT"), Some(name), Some(value)) => {
                    values.insert(name.to_owned(), value.to_owned());
                }
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected line {line:?}"),
                    ))
                }
            }
        }
        Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection before END"))
    }

    /// A counter, if the server reports it.
    pub fn counter(&self, name: &str) -> Option<u64> {
        self.values.get(name)?.parse().ok()
    }

    /// CPU time the server process has used (`rusage_user`, `rusage_system`), if it reports it.
    pub fn cpu_time(&self) -> Option<CpuTime> {
        let seconds = |name: &str| self.values.get(name)?.parse::<f64>().ok();
        Some(CpuTime { user: seconds("rusage_user")?, system: seconds("rusage_system")? })
    }
}

/// CPU seconds of a process, split as `getrusage` splits them: in its own code (user) and in
/// the kernel on its behalf (system: system calls, and on loopback the peer's TCP receive).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    /// Seconds in user mode.
    pub user: f64,
    /// Seconds in the kernel.
    pub system: f64,
}

impl CpuTime {
    /// User plus system seconds.
    pub fn total(&self) -> f64 {
        self.user + self.system
    }

    /// The time spent between `earlier` and this reading.
    pub fn since(&self, earlier: CpuTime) -> CpuTime {
        CpuTime { user: self.user - earlier.user, system: self.system - earlier.system }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_tcp_or_unix_paths() {
        assert_eq!("127.0.0.1:11211".parse(), Ok(ServerAddress::Tcp("127.0.0.1:11211".into())));
        assert_eq!("[::1]:11211".parse(), Ok(ServerAddress::Tcp("[::1]:11211".into())));
        assert_eq!("/tmp/mc.sock".parse(), Ok(ServerAddress::Unix("/tmp/mc.sock".into())));
        assert_eq!("./mc.sock".parse(), Ok(ServerAddress::Unix("./mc.sock".into())));
        for bad in ["localhost", "localhost:http", ":11211", "host:70000"] {
            assert!(bad.parse::<ServerAddress>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn refused_connections_say_which_address_and_to_start_the_server() {
        // Port 1 on loopback: nothing listens there in a test environment.
        let error = "127.0.0.1:1".parse::<ServerAddress>().unwrap().connect().err().unwrap();
        assert!(error.contains("cannot connect to 127.0.0.1:1"), "{error}");
        assert!(error.contains("memcached -l 127.0.0.1 -p 1"), "{error}");
        let error = "/nonexistent/mc.sock".parse::<ServerAddress>().unwrap().connect().err().unwrap();
        assert!(
            error.contains("/nonexistent/mc.sock") && error.contains("-s /nonexistent/mc.sock"),
            "{error}"
        );
    }

    #[test]
    fn stats_lines_give_counters_and_cpu_time() {
        let answer = "STAT pid 42\r\nSTAT rusage_user 1.250000\r\nSTAT rusage_system 0.500000\r\n\
                      STAT version 1.6.18\r\nSTAT curr_items 1000\r\nEND\r\n";
        let stats = ServerStats::parse(answer.as_bytes()).unwrap();
        assert_eq!(stats.counter("curr_items"), Some(1000));
        assert_eq!(stats.counter("version"), None);
        assert_eq!(stats.counter("evictions"), None);
        assert_eq!(stats.cpu_time(), Some(CpuTime { user: 1.25, system: 0.5 }));
        assert_eq!(stats.cpu_time().unwrap().total(), 1.75);
        assert!(ServerStats::parse("STAT pid 42\r\n".as_bytes()).is_err(), "no END");
        assert!(ServerStats::parse("ERROR\r\n".as_bytes()).is_err());
    }
}
