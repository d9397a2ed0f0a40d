//! A pool member as the user names it, and the key rule of the text protocol
//! (`shoal_proto::valid_key`) as a routing error.

use crate::error::{Error, Result};

/// One server of a pool: where it listens and its weight.
///
/// Hashing schemes that place servers by name (ketama, rendezvous) hash the `host` and `port`
/// exactly as the tool they imitate formats them, so keep them as the user wrote them.
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    /// `host:port` (`[v6]:port`) or a unix socket path, as given.
    pub address: String,
    /// The host part (the whole path for a unix socket).
    pub host: String,
    /// The port; 0 for a unix socket.
    pub port: u16,
    /// Relative weight, above 0 (1 unless given).
    pub weight: f64,
    /// twemproxy's server name (`host:port:weight name`), which names the server's ketama
    /// points instead of its address; only `ketama_weighted` uses it.
    pub name: Option<String>,
}

impl Server {
    /// Parses `host:port`, `host:port:weight`, `[v6]:port[:weight]`, or a unix socket path
    /// (anything containing `/`, optionally `path:weight`).
    pub fn parse(text: &str) -> Result<Server> {
        if let Some((address, name)) = text.split_once(' ') {
            let name = name.trim_start_matches(' ');
            if name.is_empty() || name.contains(char::is_whitespace) || address.is_empty() {
                return Err(Error::BadServer(text.to_string()));
            }
            let server = Server::parse(address).map_err(|e| match e {
                Error::BadServer(_) => Error::BadServer(text.to_string()),
                other => other,
            })?;
            return Ok(Server { name: Some(name.to_string()), ..server });
        }
        let bad = || Error::BadServer(text.to_string());
        if text.contains('/') {
            let (path, weight) = match text.rsplit_once(':') {
                Some((path, w)) if !w.contains('/') => (path, Some(w)),
                _ => (text, None),
            };
            return Server::unix(path).with_weight_text(weight, text);
        }
        let (host, rest) = if let Some(v6) = text.strip_prefix('[') {
            let (host, rest) = v6.split_once(']').ok_or_else(bad)?;
            (host, rest.strip_prefix(':').ok_or_else(bad)?)
        } else {
            text.split_once(':').ok_or_else(bad)?
        };
        let (port, weight) = match rest.split_once(':') {
            Some((port, weight)) => (port, Some(weight)),
            None => (rest, None),
        };
        let port: u16 = port.parse().map_err(|_| bad())?;
        if host.is_empty() || port == 0 || host.contains(char::is_whitespace) {
            return Err(bad());
        }
        let address =
            if text.starts_with('[') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
        Server { address, host: host.to_string(), port, weight: 1.0, name: None }
            .with_weight_text(weight, text)
    }

    /// A TCP server with weight 1.
    pub fn tcp(host: &str, port: u16) -> Server {
        Server { address: format!("{host}:{port}"), host: host.to_string(), port, weight: 1.0, name: None }
    }

    /// A unix-socket server with weight 1.
    pub fn unix(path: &str) -> Server {
        Server { address: path.to_string(), host: path.to_string(), port: 0, weight: 1.0, name: None }
    }

    /// The same server with another weight; refuses a weight that is not above 0.
    pub fn with_weight(mut self, weight: f64) -> Result<Server> {
        if !(weight.is_finite() && weight > 0.0) {
            return Err(Error::BadWeight { server: self.address, weight: weight.to_string() });
        }
        self.weight = weight;
        Ok(self)
    }

    fn with_weight_text(self, weight: Option<&str>, text: &str) -> Result<Server> {
        match weight {
            None => Ok(self),
            Some(w) => {
                let value: f64 = w
                    .parse()
                    .map_err(|_| Error::BadWeight { server: text.to_string(), weight: w.to_string() })?;
                self.with_weight(value)
            }
        }
    }
}

impl std::str::FromStr for Server {
    type Err = Error;
    fn from_str(text: &str) -> Result<Server> {
        Server::parse(text)
    }
}

/// Checks that `key` is one memcached's text protocol carries (`shoal_proto::valid_key`: 1 to
/// `KEY_MAX` bytes, no spaces or control characters).
pub fn validate_key(key: &[u8]) -> Result<()> {
    match shoal_proto::key_fault(key) {
        None => Ok(()),
        Some(why) => Err(Error::BadKey { key: key.to_vec(), why }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_write() {
        let s = Server::parse("10.0.0.1:11211").unwrap();
        assert_eq!((s.host.as_str(), s.port, s.weight), ("10.0.0.1", 11211, 1.0));
        let s = Server::parse("cache-a:11212:3").unwrap();
        assert_eq!((s.address.as_str(), s.weight), ("cache-a:11212", 3.0));
        let s = Server::parse("[::1]:11211:0.5").unwrap();
        assert_eq!((s.host.as_str(), s.address.as_str(), s.weight), ("::1", "[::1]:11211", 0.5));
        let s = Server::parse("/run/shoal.sock").unwrap();
        assert_eq!((s.port, s.address.as_str()), (0, "/run/shoal.sock"));
        let s = Server::parse("/run/shoal.sock:2").unwrap();
        assert_eq!((s.address.as_str(), s.weight), ("/run/shoal.sock", 2.0));
        let s = Server::parse("10.0.0.1:11211:2 cache-a").unwrap();
        assert_eq!(
            (s.address.as_str(), s.weight, s.name.as_deref()),
            ("10.0.0.1:11211", 2.0, Some("cache-a"))
        );
    }

    #[test]
    fn refuses_what_does_not_parse_naming_it() {
        for bad in [
            "",
            "localhost",
            ":11211",
            "host:",
            "host:0",
            "host:99999",
            "host:port",
            "[::1",
            "a b:1",
            "h:1 ",
            "h:1 a b",
        ] {
            assert_eq!(Server::parse(bad), Err(Error::BadServer(bad.to_string())), "{bad}");
        }
        for (bad, w) in
            [("h:1:0", "0"), ("h:1:-2", "-2"), ("h:1:x", "x"), ("h:1:NaN", "NaN"), ("h:1:inf", "inf")]
        {
            match Server::parse(bad) {
                Err(Error::BadWeight { weight, .. }) => assert_eq!(weight, w, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn keys_follow_the_text_protocol() {
        assert!(validate_key(b"user:42").is_ok());
        assert!(validate_key(&[b'k'; 250]).is_ok());
        assert!(validate_key(&[b'k'; 251]).is_err());
        assert!(validate_key(b"").is_err());
        assert!(validate_key(b"a b").is_err());
        assert!(validate_key(b"a\r\n").is_err());
    }
}
