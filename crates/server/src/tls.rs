//! TLS (`-Z`): memcached's `-o ssl_*` options, the rustls server configuration built from
//! them (built again by `refresh_certs`), and a connection's TLS session over its TCP stream.
//!
//! The session is driven by the worker's own edge-triggered loop, never by a thread of its
//! own: [`TlsStream::read`] feeds the socket's records to rustls and hands back plaintext,
//! [`TlsStream::write`] encrypts answers, and [`TlsStream::push`] sends what rustls holds once
//! the socket takes it again. Handshake messages travel the same way, so a client that stalls
//! mid-handshake holds nothing but its connection.

use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// OpenSSL's names for the TLS 1.2 suites rustls offers: what `ssl_ciphers` may list (it
/// chooses among TLS 1.2 suites only, as OpenSSL's cipher list does; TLS 1.3 keeps its own).
const TLS12_SUITES: &[(&str, SupportedCipherSuite)] = &[
    ("ECDHE-ECDSA-AES256-GCM-SHA384", cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-ECDSA-AES128-GCM-SHA256", cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-ECDSA-CHACHA20-POLY1305", cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256),
    ("ECDHE-RSA-AES256-GCM-SHA384", cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384),
    ("ECDHE-RSA-AES128-GCM-SHA256", cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
    ("ECDHE-RSA-CHACHA20-POLY1305", cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
];

/// OpenSSL's `SSL_FILETYPE_PEM` and `SSL_FILETYPE_ASN1`: memcached's `ssl_keyformat` values.
const KEYFORMAT_PEM: u8 = 1;
const KEYFORMAT_DER: u8 = 2;

/// memcached's TLS settings, as `-Z` and `-o ssl_*` give them (shown by `stats settings`
/// whether or not `-Z` is on, as memcached shows them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsOptions {
    /// `-Z`.
    pub enabled: bool,
    pub chain_cert: Option<PathBuf>,
    /// The private key; without it, the key is looked for in the chain file.
    pub key: Option<PathBuf>,
    /// PEM file of the CAs whose client certificates are accepted.
    pub ca_cert: Option<PathBuf>,
    /// 0 none, 1 request, 2 require, 3 once (the same as require: rustls never renegotiates).
    pub verify_mode: u8,
    /// 1 PEM, 2 DER.
    pub keyformat: u8,
    /// OpenSSL names of the TLS 1.2 suites allowed, `:`-separated.
    pub ciphers: Option<String>,
    /// memcached's per-connection TLS output buffer; rustls sizes its own (shown only).
    pub wbuf_bytes: usize,
    pub session_cache: bool,
    /// 0 TLS 1.0 … 3 TLS 1.3; rustls speaks 1.2 and 1.3 only, so 0 and 1 mean 1.2.
    pub min_version: u8,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enabled: false,
            chain_cert: None,
            key: None,
            ca_cert: None,
            verify_mode: 0,
            keyformat: KEYFORMAT_PEM,
            ciphers: None,
            wbuf_bytes: 16 << 10,
            session_cache: false,
            min_version: 2,
        }
    }
}

impl TlsOptions {
    /// Takes one `-o` sub-option if it is a TLS one: `None` if it is not, else whether its
    /// value was good (the error is memcached's where it has one, with the fix).
    pub fn suboption(&mut self, name: &str, value: Option<&str>) -> Option<Result<(), String>> {
        let path = |value: Option<&str>| match value {
            Some(v) if !v.is_empty() => Ok(Some(PathBuf::from(v))),
            _ => Err(format!("Missing {name} argument: give a file, e.g. {name}=/etc/memcached/server.pem")),
        };
        let number = |value: Option<&str>, max: u8, invalid: &str| {
            value.and_then(|v| v.parse::<u8>().ok()).filter(|n| *n <= max).ok_or_else(|| invalid.to_string())
        };
        let result = match name {
            "ssl_chain_cert" => path(value).map(|p| self.chain_cert = p),
            "ssl_key" => path(value).map(|p| self.key = p),
            "ssl_ca_cert" => path(value).map(|p| self.ca_cert = p),
            "ssl_verify_mode" => number(value, 3, "Invalid ssl_verify_mode. Use help to see valid options.")
                .map(|m| self.verify_mode = m),
            "ssl_min_version" => number(value, 3, "Invalid ssl_min_version. Use help to see valid options.")
                .map(|v| self.min_version = v),
            "ssl_keyformat" => match value.and_then(|v| v.parse::<u8>().ok()) {
                Some(f @ (KEYFORMAT_PEM | KEYFORMAT_DER)) => {
                    self.keyformat = f;
                    Ok(())
                }
                _ => Err("-o ssl_keyformat: 1 (PEM) or 2 (DER); engine keys (3) are not supported".into()),
            },
            "ssl_ciphers" => match value {
                Some(list) if !list.is_empty() => {
                    self.ciphers = Some(list.to_string());
                    Ok(())
                }
                _ => Err("Missing ssl_ciphers argument".into()),
            },
            "ssl_wbuf_size" => match value.and_then(|v| v.parse::<usize>().ok()?.checked_mul(1024)) {
                Some(bytes) => {
                    self.wbuf_bytes = bytes;
                    Ok(())
                }
                None => Err("could not parse argument to ssl_wbuf_size".into()),
            },
            "ssl_session_cache" => {
                self.session_cache = true;
                Ok(())
            }
            "ssl_kernel_tls" => Err("-o ssl_kernel_tls: Shoal's TLS (rustls) runs in the server, not the \
                 kernel; remove the option"
                .into()),
            _ => return None,
        };
        Some(result)
    }

    /// memcached's `stats settings` lines for TLS.
    pub fn settings_lines(&self, mut line: impl FnMut(&str, String)) {
        let shown = |p: &Option<PathBuf>, none: &str| {
            p.as_ref().map_or(none.to_string(), |p| p.display().to_string())
        };
        let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
        line("ssl_enabled", yes(self.enabled));
        line("ssl_chain_cert", shown(&self.chain_cert, "(null)"));
        line("ssl_key", shown(&self.key, "(null)"));
        line("ssl_verify_mode", self.verify_mode.to_string());
        line("ssl_keyformat", self.keyformat.to_string());
        line("ssl_ciphers", self.ciphers.clone().unwrap_or_else(|| "NULL".into()));
        line("ssl_ca_cert", shown(&self.ca_cert, "NULL"));
        line("ssl_wbuf_size", self.wbuf_bytes.to_string());
        line("ssl_session_cache", yes(self.session_cache));
        line("ssl_kernel_tls", yes(false));
        line("ssl_min_version", format!("tlsv1.{}", self.min_version));
    }

    /// The rustls configuration these options describe, reading the files now. Errors start
    /// as memcached's do (`Error loading the certificate chain: <file> : …`).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
        let failed = |what: &str, file: Option<&Path>, why: String| {
            let file = file.map_or("(null)".to_string(), |f| f.display().to_string());
            format!("Error loading the {what}: {file} : {why}")
        };
        let Some(chain_file) = &self.chain_cert else {
            let why = "-Z needs -o ssl_chain_cert=<PEM file>,ssl_key=<PEM file>".to_string();
            return Err(failed("certificate chain", None, why));
        };
        let chain =
            load_certs(chain_file).map_err(|why| failed("certificate chain", Some(chain_file), why))?;
        let key_file = self.key.as_deref().unwrap_or(chain_file);
        let key = self.load_key(key_file).map_err(|why| failed("key", Some(key_file), why))?;
        let provider = Arc::new(self.provider()?);
        let versions: &[&rustls::SupportedProtocolVersion] =
            if self.min_version >= 3 { &[&rustls::version::TLS13] } else { rustls::ALL_VERSIONS };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("-o ssl_ciphers: {e}"))?;
        let builder = match (self.verify_mode, &self.ca_cert) {
            (0, _) => {
                if let Some(ca) = &self.ca_cert {
                    self.client_roots(ca).map_err(|why| failed("CA certificate", Some(ca), why))?;
                }
                builder.with_no_client_auth()
            }
            (_, None) => {
                return Err(format!(
                    "-o ssl_verify_mode={}: client certificates are checked against ssl_ca_cert=<PEM \
                     file of the CAs that sign them>; give it",
                    self.verify_mode
                ))
            }
            (mode, Some(ca)) => {
                let roots = self.client_roots(ca).map_err(|why| failed("CA certificate", Some(ca), why))?;
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                // 1 asks for a certificate and checks one if given; 2 and 3 require one.
                let verifier = if mode == 1 { verifier.allow_unauthenticated() } else { verifier };
                builder.with_client_cert_verifier(verifier.build().map_err(|e| format!("ssl_ca_cert: {e}"))?)
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            failed("key", Some(key_file), format!("it does not go with the certificate: {e}"))
        })?;
        if self.session_cache {
            config.session_storage = ServerSessionMemoryCache::new(20_480); // OpenSSL's default size
        } else {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
        Ok(Arc::new(config))
    }

    /// ring's provider, with the TLS 1.2 suites `ssl_ciphers` names when it is given.
    fn provider(&self) -> Result<CryptoProvider, String> {
        let mut provider = default_provider();
        if let Some(list) = &self.ciphers {
            let mut chosen: Vec<SupportedCipherSuite> =
                provider.cipher_suites.iter().copied().filter(|s| s.tls13().is_some()).collect();
            for name in list.split(':').filter(|n| !n.is_empty()) {
                let Some((_, suite)) = TLS12_SUITES.iter().find(|(n, _)| *n == name) else {
                    let known: Vec<&str> = TLS12_SUITES.iter().map(|(n, _)| *n).collect();
                    return Err(format!(
                        "Error setting the provided cipher(s): {list} (Shoal knows the TLS 1.2 suites {})",
                        known.join(":")
                    ));
                };
                chosen.push(*suite);
            }
            provider.cipher_suites = chosen;
        }
        Ok(provider)
    }

    fn load_key(&self, file: &Path) -> Result<PrivateKeyDer<'static>, String> {
        if self.keyformat == KEYFORMAT_DER {
            let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
            return PrivateKeyDer::try_from(bytes).map_err(|e| format!("not a DER private key: {e}"));
        }
        PrivateKeyDer::from_pem_file(file).map_err(|e| match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no PEM private key in it; give the key's file as ssl_key=<file>".to_string()
            }
            other => other.to_string(),
        })
    }

    fn client_roots(&self, file: &Path) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        for cert in load_certs(file)? {
            roots.add(cert).map_err(|e| format!("not a CA certificate: {e}"))?;
        }
        Ok(roots)
    }
}

/// Every PEM certificate in a file (at least one).
fn load_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(file)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// The server's TLS state: the configuration new connections take (replaced whole by
/// `refresh_certs`) and memcached's two TLS counters.
pub struct Tls {
    options: TlsOptions,
    config: RwLock<Arc<ServerConfig>>,
    /// Server time of the last (re)load, for `time_since_server_cert_refresh`.
    loaded_at: AtomicU32,
    handshake_errors: AtomicU64,
}

impl Tls {
    /// Loads the certificates `options` name; `now` is the server time.
    pub fn load(options: &TlsOptions, now: u32) -> Result<Tls, String> {
        Ok(Tls {
            options: options.clone(),
            config: RwLock::new(options.server_config()?),
            loaded_at: AtomicU32::new(now),
            handshake_errors: AtomicU64::new(0),
        })
    }

    /// `refresh_certs`: reads the files again; connections already open keep their session.
    pub fn refresh(&self, now: u32) -> Result<(), String> {
        let config = self.options.server_config()?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        self.loaded_at.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// A new connection's TLS session over `tcp`.
    pub fn accept(self: &Arc<Self>, tcp: TcpStream) -> io::Result<TlsStream> {
        let config = self.config.read().unwrap_or_else(|p| p.into_inner()).clone();
        let session = ServerConnection::new(config).map_err(io::Error::other)?;
        Ok(TlsStream { tcp, session, socket_drained: false, failed: false, tls: self.clone() })
    }

    /// memcached's `stats` lines for TLS (given only with `-Z`).
    pub fn stats_lines(&self, now: u32, mut line: impl FnMut(&str, u64)) {
        line("ssl_handshake_errors", self.handshake_errors.load(Ordering::Relaxed));
        line(
            "time_since_server_cert_refresh",
            u64::from(now.saturating_sub(self.loaded_at.load(Ordering::Relaxed))),
        );
    }
}

/// A TCP stream that says whether its last read left the socket empty.
struct Drained<'a> {
    tcp: &'a mut TcpStream,
    short: bool,
}

impl Read for Drained<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.tcp.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

/// One connection's TLS session and its TCP stream.
pub struct TlsStream {
    pub tcp: TcpStream,
    session: ServerConnection,
    /// The last socket read was short: the kernel had nothing more.
    socket_drained: bool,
    /// The session failed (and rustls queued its alert): no close_notify after that.
    failed: bool,
    tls: Arc<Tls>,
}

impl TlsStream {
    /// Reads plaintext into `buf`, reading and decrypting records as needed (answering the
    /// handshake on the way). Returns the bytes read (0 at the end of the stream) and whether
    /// neither the socket nor the session has more.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<(usize, bool)> {
        loop {
            match self.session.reader().read(buf) {
                Ok(0) => return Ok((0, true)), // the client's close_notify
                Ok(n) => return Ok((n, self.socket_drained && n < buf.len())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Ok((0, true)), // closed without close_notify
            }
            let mut socket = Drained { tcp: &mut self.tcp, short: false };
            let n = self.session.read_tls(&mut socket)?;
            self.socket_drained = socket.short;
            if n == 0 {
                return Ok((0, true));
            }
            if let Err(e) = self.session.process_new_packets() {
                self.failed = true;
                if self.session.is_handshaking() {
                    self.tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                }
                let _ = self.push(); // rustls queued an alert saying why
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            self.push()?; // the handshake's answer, if any; the rest when writable
        }
    }

    /// Encrypts what of `buf` the session takes, after sending what it already held.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = self.session.writer().write(buf)?;
        self.push()?;
        Ok(n)
    }

    /// Sends the records the session holds; `Ok(false)` if the socket cannot take them all.
    pub fn push(&mut self) -> io::Result<bool> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Says goodbye (close_notify), if the socket takes it now.
    pub fn close(&mut self) {
        if self.failed {
            return;
        }
        self.session.send_close_notify();
        let _ = self.push();
    }
}
