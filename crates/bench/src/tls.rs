//! The load generator's TLS client (`--tls-ca`), for servers started with memcached's `-Z`:
//! rustls's client side, the handshake done blocking at connect, then records read and written
//! by the same non-blocking loop as plain connections.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

/// A client configuration trusting the CAs in a PEM file.
pub fn client_config(ca_file: &Path) -> Result<Arc<ClientConfig>, String> {
    let bad = |why: String| format!("--tls-ca {}: {why}", ca_file.display());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).map_err(|e| bad(e.to_string()))? {
        roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A session on a blocking TCP stream, handshake done: `host` is the name (or IP address) the
/// server's certificate must carry.
pub fn handshake(
    config: &Arc<ClientConfig>,
    host: &str,
    mut tcp: TcpStream,
) -> io::Result<TlsStream<TcpStream>> {
    let name =
        ServerName::try_from(host.to_string()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut session = ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    while session.is_handshaking() {
        session.complete_io(&mut tcp)?;
    }
    Ok(TlsStream { tcp, session })
}

/// A client TLS session over a TCP stream (blocking, or mio's non-blocking one).
pub struct TlsStream<S> {
    pub tcp: S,
    session: ClientConnection,
}

impl<S: Read + Write> TlsStream<S> {
    /// The same session over another stream (the handshake's blocking one made mio's).
    pub fn map<T>(self, f: impl FnOnce(S) -> T) -> TlsStream<T> {
        TlsStream { tcp: f(self.tcp), session: self.session }
    }

    /// Sends the records the session holds; `Ok(false)` if the socket would block first.
    pub fn push(&mut self) -> io::Result<bool> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl<S: Read + Write> Read for TlsStream<S> {
    /// Plaintext, reading and decrypting records until some comes (or the socket would block).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.session.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => return other,
            }
            if self.session.read_tls(&mut self.tcp)? == 0 {
                return Ok(0);
            }
            self.session.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

impl<S: Read + Write> Write for TlsStream<S> {
    /// Encrypts what of `buf` the session takes, once what it held earlier has gone out.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.session.writer().write(buf)?;
        self.push()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push().map(|_| ())
    }
}
