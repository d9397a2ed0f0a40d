//! The command line: memcached's flags with memcached's meanings, plus Shoal's own long
//! options, turned into [`Settings`].

use crate::tls::TlsOptions;
use clap::{ArgAction, Args};
use std::path::PathBuf;

/// memcached's default TCP port.
pub const DEFAULT_PORT: u16 = 11211;

/// `shoal server`: a drop-in memcached server whose items live in a shared-memory region.
///
/// Takes memcached's flags with the same meanings (`shoal server -h` lists them).
#[derive(Args, Debug, Clone)]
// A flag given twice takes its last value, as memcached's getopt loop does.
#[command(disable_help_flag = true, disable_version_flag = true, args_override_self = true)]
pub struct ServerArgs {
    /// TCP port to listen on (default: 11211, or -U's port when that is given; 0 = off;
    /// -1 = any free port)
    #[arg(short = 'p', long = "port", allow_negative_numbers = true)]
    pub port: Option<i32>,
    /// UDP port to listen on (default: 0, off; -1 = any free port)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0, allow_negative_numbers = true)]
    pub udp_port: i32,
    /// unix socket path to listen on (disables network support)
    #[arg(short = 's', long = "unix-socket", value_name = "FILE")]
    pub unix_socket: Option<PathBuf>,
    /// access mask for the unix socket, in octal (default: 700)
    #[arg(short = 'a', long = "unix-mask", default_value = "700", value_name = "MASK")]
    pub unix_mask: String,
    /// interface to listen on (default: INADDR_ANY); a comma-separated list of addr[:port];
    /// with -Z, a `notls:` prefix keeps that listener plaintext
    #[arg(short = 'l', long = "listen", value_name = "ADDR")]
    pub listen: Option<String>,
    /// item memory in megabytes: the whole region, index included (default: 64)
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64, value_name = "MB")]
    pub memory_mb: usize,
    /// the most memory `cache_memlimit` may raise -m to, in megabytes: the region file is
    /// created this large, sparse, and uses -m of it (default: 4 × -m, at least 64; a device
    /// region: -m)
    #[arg(long = "memory-max", value_name = "MB")]
    pub memory_max_mb: Option<usize>,
    /// return error on memory exhausted instead of evicting
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// max simultaneous connections (default: 1024)
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    pub conn_limit: usize,
    /// number of worker threads (default: 4)
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    pub threads: usize,
    /// max requests processed per connection per event, so one client cannot starve the
    /// others (default: 20)
    #[arg(short = 'R', long = "max-reqs-per-event", default_value_t = 20)]
    pub reqs_per_event: usize,
    /// largest item stored, e.g. 1m, 512k, 2097152 (default: 1m; 1k to 1024m, at most half of -m)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_name = "SIZE")]
    pub max_item_size: String,
    /// disable CAS (gets answers 0; cas never matches)
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// protocol - one of ascii, binary, or auto (default: auto-negotiate; binary with -S,
    /// ascii with -Y)
    #[arg(short = 'B', long = "protocol")]
    pub protocol: Option<String>,
    /// turn on SASL authentication (binary protocol; users from the file named by the
    /// MEMCACHED_SASL_PWDB environment variable, `user:password` lines)
    #[arg(short = 'S', long = "enable-sasl")]
    pub enable_sasl: bool,
    /// enable ascii protocol authentication: a file of `user:password` lines
    #[arg(short = 'Y', long = "auth-file", value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// group that owns the region file (default: the server's)
    #[arg(long = "region-group", value_name = "GROUP")]
    pub region_group: Option<String>,
    /// access mode of the region file, in octal (default: 600)
    #[arg(long = "region-mode", default_value = "600", value_name = "MODE")]
    pub region_mode: String,
    /// TCP listen backlog (default: 1024)
    #[arg(short = 'b', long = "listen-backlog", default_value_t = 1024)]
    pub backlog: i32,
    /// enable the ascii "shutdown" command
    #[arg(short = 'A', long = "enable-shutdown")]
    pub enable_shutdown: bool,
    /// disable flush_all
    #[arg(short = 'F', long = "disable-flush-all")]
    pub disable_flush_all: bool,
    /// region file: restarting on the same file keeps every item (warm restart)
    #[arg(short = 'e', long = "memory-file", value_name = "FILE")]
    pub memory_file: Option<PathBuf>,
    /// the region file (same as -e)
    #[arg(long = "region-path", value_name = "FILE", conflicts_with = "memory_file")]
    pub region_path: Option<PathBuf>,
    /// after a warm restart, hide the items kept from before it for this many seconds (to the
    /// network and to local readers) while routers and invalidators deliver the deletes the
    /// server missed while it was down (0: no hold; docs/design/faults.md)
    #[arg(long = "rejoin-hold", value_name = "SECONDS", default_value_t = 0)]
    pub rejoin_hold: u32,
    /// average item size (key + value + 12) the index is sized for when a region is created
    #[arg(long = "avg-item-bytes", default_value_t = 128)]
    pub avg_item_bytes: usize,
    /// verbose (print errors/warnings); -vv: also print client commands and responses
    #[arg(short = 'v', long = "verbose", action = ArgAction::Count)]
    pub verbose: u8,
    /// assume the identity of <username> (only when started as root: after binding the
    /// listeners and opening the region, which is given to that user)
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// write the process id to this file
    #[arg(short = 'P', long = "pidfile", value_name = "FILE")]
    pub pidfile: Option<PathBuf>,
    /// run as a daemon: detach from the terminal once listening (errors before that still
    /// reach it)
    #[arg(short = 'd', long = "daemon")]
    pub daemonize: bool,
    /// serve Prometheus metrics (every `stats` counter, local reads, the region's fill) at
    /// http://ADDR:PORT/metrics
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
    /// keep a Proteus digest (a counting Bloom filter of the keys held, fetched with `digest`)
    /// sized for this many keys (0: none)
    #[arg(long = "digest-keys", value_name = "N", default_value_t = 0)]
    pub digest_keys: u64,
    /// the digest's false-positive rate at --digest-keys keys
    #[arg(long = "digest-fp", value_name = "RATE", default_value_t = 1e-4)]
    pub digest_fp: f64,
    /// measure the hit-ratio curve of the requests served (SHARDS; the `curve` command and
    /// /metrics)
    #[arg(long = "hit-curve")]
    pub hit_curve: bool,
    /// half-life of what curves remember, in seconds: older reads weigh less, so a curve
    /// follows a workload that changes (0: every read since the start weighs the same)
    #[arg(long = "curve-half-life", value_name = "SECONDS", default_value_t = 10.0)]
    pub curve_half_life: f64,
    /// partition memory among tenants named in this file (TOML, or JSON if it ends in .json;
    /// docs/PROTOCOL.md describes it): each gets a region, a size, a curve and stats
    #[arg(long = "tenants", value_name = "FILE")]
    pub tenants: Option<PathBuf>,
    /// count gets, hits, sets and deletes per key prefix (`stats detail dump`), the prefix
    /// ending at this character (memcached's -D; the default delimiter is `:`)
    #[arg(short = 'D', value_name = "CHAR")]
    pub prefix_delimiter: Option<String>,
    /// comma-separated extended options (memcached's; see docs/PROTOCOL.md for those that apply);
    /// Shoal's `io_uring` serves connections with io_uring instead of epoll (the default unless
    /// the environment has SHOAL_SERVER_IO=uring; `no_io_uring` forces epoll), with
    /// `io_uring_buffers=N` receive buffers per worker
    #[arg(short = 'o', long = "extended", value_name = "OPTS")]
    pub extended: Vec<String>,
    /// lease interval in seconds: a `lease-get` token (and the hot misses of other callers)
    /// lasts this long
    #[arg(long = "lease-ttl", value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub lease_ttl: u32,
    /// seconds a deleted value is kept, hidden and stale, for `lease-get <key> stale`
    /// (0: `delete` removes at once, as memcached does)
    #[arg(long = "stale-ttl", value_name = "SECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=86_400))]
    pub stale_ttl: u32,
    /// enable TLS on TCP connections (needs -o ssl_chain_cert=<PEM file>,ssl_key=<PEM file>;
    /// the other ssl_* options are in docs/PROTOCOL.md)
    #[arg(short = 'Z', long = "enable-ssl")]
    pub enable_ssl: bool,
    /// test mode: enables `debugtime <seconds>`, which moves the server clock forward
    #[arg(long = "test-mode")]
    pub test_mode: bool,
    /// read flags from FILE first, one per line as in Debian's /etc/memcached.conf (`#`
    /// comments; `-d` and `logfile` lines skipped); the command line's come after them and
    /// win (docs/packaging.md)
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub near: crate::upstream::NearArgs,
    /// print this help and exit
    #[arg(short = 'h', long = "help")]
    pub help: bool,
    /// print version and exit
    #[arg(short = 'V', long = "version")]
    pub version: bool,
}

/// Which protocol connections speak (`-B`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Ascii,
    Binary,
    /// Each connection's first byte decides: 0x80 is binary.
    Auto,
}

impl Protocol {
    /// How `stats settings` names it (memcached's `prot_text`).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ascii => "ascii",
            Protocol::Binary => "binary",
            Protocol::Auto => "auto-negotiate",
        }
    }
}

/// What the server runs with, checked.
#[derive(Clone, Debug)]
pub struct Settings {
    /// TCP listen addresses (host, port); empty = TCP off.
    pub tcp: Vec<(String, u16)>,
    /// The TCP listeners that stay plaintext under `-Z` (`-l notls:<addr>:<port>`).
    pub notls: Vec<(String, u16)>,
    /// UDP port (None = off).
    pub udp: Option<(String, u16)>,
    pub unix_socket: Option<(PathBuf, u32)>,
    /// The region `-m` asks for (header, index and segments): the memory limit at start.
    pub region_bytes: usize,
    /// The memory `cache_memlimit` may grow the limit to (`--memory-max`; [`crate::memory`]).
    pub memory_max_bytes: usize,
    /// memcached's `-o temporary_ttl` (its TEMP LRU on): items living at most this many
    /// seconds are never evicted, only expired.
    pub temporary_ttl: Option<u32>,
    pub evict: bool,
    pub max_connections: usize,
    pub threads: usize,
    pub reqs_per_event: usize,
    pub max_item_bytes: usize,
    pub use_cas: bool,
    pub backlog: i32,
    pub enable_shutdown: bool,
    pub enable_flush: bool,
    /// The region file if one was named (kept for warm restarts); else a fresh one in /dev/shm.
    pub region_path: Option<PathBuf>,
    pub avg_item_bytes: usize,
    pub verbose: u8,
    pub pidfile: Option<PathBuf>,
    /// Where `/metrics` is served (`--metrics-listen`).
    pub metrics_listen: Option<String>,
    /// The digest's expected keys and false-positive rate (`--digest-keys`, `--digest-fp`).
    pub digest: Option<(u64, f64)>,
    /// Measure the hit-ratio curve (`--hit-curve`).
    pub hit_curve: bool,
    /// Seconds after which a read weighs half in the curves (`--curve-half-life`; 0: never).
    pub curve_half_life: f64,
    /// The tenants file (`--tenants`).
    pub tenants_file: Option<PathBuf>,
    /// The user to become after binding, when started as root (`-u`).
    pub user: Option<String>,
    /// Detach from the terminal once listening (`-d`).
    pub daemonize: bool,
    /// Close connections idle this many seconds (`-o idle_timeout=N`), counted as `idle_kicks`.
    pub idle_timeout: Option<u32>,
    /// The most answers one connection may hold unsent (`-o read_buf_mem_limit`; `None`: no
    /// limit): past it a multiget answers `SERVER_ERROR out of memory writing get response`
    /// and a pipelined request closes the connection, as in memcached.
    pub answers_held: Option<usize>,
    /// Whether `lru_crawler metadump` and `crawl` start enabled (`-o no_lru_crawler` or
    /// `no_modern` turn them off until `lru_crawler enable`).
    pub lru_crawler: bool,
    /// memcached's LRU maintainer and slab page mover switches (`-o [no_]lru_maintainer`,
    /// `[no_]slab_reassign`, `no_modern`): Shoal has neither machine, but `stats` prints their
    /// counters only when memcached would.
    pub lru_maintainer: bool,
    pub slab_reassign: bool,
    /// memcached's `-o [no_]maxconns_fast`: Shoal always refuses a connection past `-c` at
    /// once, but prints `rejected_connections` only when memcached would.
    pub maxconns_fast: bool,
    /// Hot keys listed by `stats hotkeys` (`-o hotkeys=K`, 0: detection off) and one read in
    /// how many, on average, is counted (`-o hotkeys_sample=N`).
    pub hotkeys: usize,
    pub hotkeys_sample: u32,
    /// The data path: io_uring or epoll (`-o io_uring`, `SHOAL_SERVER_IO`; [`crate::uring_options`]).
    pub io: crate::uring_options::IoOptions,
    /// Seconds a lease token lasts (`--lease-ttl`).
    pub lease_ttl: u32,
    /// Seconds a deleted value stays readable as stale by lease clients (`--stale-ttl`).
    pub stale_ttl: u32,
    pub test_mode: bool,
    /// `-Z` and the `ssl_*` options.
    pub tls: TlsOptions,
    pub protocol: Protocol,
    /// `-S`: binary connections authenticate with SASL PLAIN.
    pub sasl: bool,
    /// The file SASL users come from (MEMCACHED_SASL_PWDB).
    pub sasl_pwdb: Option<PathBuf>,
    /// `-Y`: ascii connections authenticate with a token from this file.
    pub auth_file: Option<PathBuf>,
    /// The group the region file is given (`--region-group`), as a gid.
    pub region_group: Option<u32>,
    /// The region file's mode (`--region-mode`).
    pub region_mode: u32,
    /// Seconds a warm restart hides the items kept from before it (`--rejoin-hold`).
    pub rejoin_hold: u32,
    /// `-D`: the key prefix delimiter of `stats detail`, which it turns on.
    pub prefix_delimiter: Option<u8>,
    /// A near cache's upstream, policy and TTL (`--upstream`; [`crate::upstream`]).
    pub near: Option<crate::upstream::NearSettings>,
}

impl Settings {
    /// The region `-m` alone would make.
    fn base_region(&self) -> shoal_region::Config {
        shoal_region::Config {
            region_bytes: self.region_bytes,
            max_item_bytes: self.max_item_bytes,
            avg_item_bytes: self.avg_item_bytes,
        }
    }

    /// The region the server creates: `-m`'s, with room for `--memory-max` (`memory.rs`).
    pub fn region_config(&self) -> shoal_region::Config {
        crate::memory::region_config(self.base_region(), self.memory_max_bytes)
    }

    /// Sets what the settings ask of a region the server opened: the memory limit `-m` gives,
    /// and memcached's `temporary_ttl` (`memory.rs`).
    pub fn prepare_region(&self, writer: &shoal_region::Writer) -> Result<(), String> {
        crate::memory::prepare_region(writer, &self.base_region(), self.temporary_ttl)
    }

    /// Whether connections must authenticate before anything else.
    pub fn auth_required(&self) -> bool {
        self.sasl || self.auth_file.is_some()
    }

    /// The CAS unique clients see (0 when `-C` turned CAS off).
    pub fn visible_cas(&self, cas: u64) -> u64 {
        if self.use_cas {
            cas
        } else {
            0
        }
    }
}

/// memcached's `read_buf_mem_limit` (bytes, 0: none) in answers a connection may hold unsent:
/// memcached splits it between its `threads` workers into 16 KiB buffers (at least one), and
/// a buffer holds 14 answers (its response objects are about 1.1 KiB, a 1 KiB write buffer
/// each); Shoal allows a connection that many answers.
fn answers_held(limit: usize, threads: usize) -> Option<usize> {
    const BUFFER: usize = 16 << 10;
    const ANSWERS_PER_BUFFER: usize = 14;
    (limit > 0).then(|| (limit / threads.max(1) / BUFFER).max(1) * ANSWERS_PER_BUFFER)
}

/// Parses memcached's size syntax: a number of bytes, or with a `k`, `m` or `g` suffix.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_lowercase()),
        _ => (t, 'b'),
    };
    let n: usize = digits.parse().ok()?;
    let shift = match unit {
        'b' => 0,
        'k' => 10,
        'm' => 20,
        'g' => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

impl ServerArgs {
    /// Checks the flags and turns them into settings; the error says what to fix.
    pub fn settings(&self) -> Result<Settings, String> {
        let crate::suboptions::Suboptions {
            idle_timeout,
            lru_crawler,
            lru_maintainer,
            slab_reassign,
            maxconns_fast,
            read_buf_mem_limit,
            hotkeys,
            hotkeys_sample,
            temporary_ttl,
            tls,
            io,
        } = crate::suboptions::parse(&self.extended, self.enable_ssl)?;
        let near = self.near.settings(self.memory_file.as_deref().or(self.region_path.as_deref()))?;
        let protocol = match (near.is_some(), self.protocol()?) {
            (true, Protocol::Binary) => return Err(crate::upstream::TEXT_ONLY.into()),
            // The text protocol's requests are the ones a near cache forwards.
            (true, _) => Protocol::Ascii,
            (false, p) => p,
        };
        let port = |p: i32, what: &str| -> Result<Option<u16>, String> {
            match p {
                0 => Ok(None),
                -1 => Ok(Some(0)),
                1..=65535 => Ok(Some(p as u16)),
                _ => Err(format!("{what} port {p} is out of range (1-65535, 0 = off, -1 = any free port)")),
            }
        };
        // memcached's `notls:` prefix keeps one listener plaintext under -Z.
        let hosts: Vec<(String, Option<u16>, bool)> = match &self.listen {
            None => vec![("0.0.0.0".to_string(), None, false)],
            Some(list) => list
                .split(',')
                .map(|item| {
                    let (item, plain) =
                        item.strip_prefix("notls:").map_or((item, false), |rest| (rest, true));
                    split_host_port(item).map(|(host, port)| (host, port, plain))
                })
                .collect::<Result<_, _>>()?,
        };
        let network = self.unix_socket.is_none();
        // memcached 1.6: a UDP port given without a TCP one is the TCP port too.
        let tcp_port = match (self.port, self.udp_port) {
            (Some(p), _) => p,
            (None, 0) => i32::from(DEFAULT_PORT),
            (None, udp) => udp,
        };
        let tcp_port = port(tcp_port, "TCP")?;
        let listen = |plain_only: bool| -> Vec<(String, u16)> {
            hosts
                .iter()
                .filter(|(_, _, plain)| network && (!plain_only || *plain))
                .filter_map(|(h, p, _)| p.or(tcp_port).map(|p| (h.clone(), p)))
                .collect()
        };
        let (tcp, notls) = (listen(false), listen(true));
        let udp = port(self.udp_port, "UDP")?.filter(|_| network).map(|p| (hosts[0].0.clone(), p));
        let unix_socket = match &self.unix_socket {
            Some(path) => {
                let mask = u32::from_str_radix(&self.unix_mask, 8)
                    .map_err(|_| format!("-a {}: the mask must be octal, e.g. 700", self.unix_mask))?;
                Some((path.clone(), mask))
            }
            None => None,
        };
        let max_item_bytes = parse_size(&self.max_item_size).ok_or_else(|| {
            format!("-I {}: expected a size such as 1m, 512k or 2097152", self.max_item_size)
        })?;
        // memcached's limits and messages, in its order.
        if max_item_bytes < 1024 {
            return Err("Item max size cannot be less than 1024 bytes.".into());
        }
        if max_item_bytes > self.memory_mb.saturating_mul(1 << 20) / 2 {
            return Err("Cannot set item size limit higher than 1/2 of memory max.".into());
        }
        if max_item_bytes > shoal_region::layout::MAX_ITEM_LIMIT {
            return Err("Cannot set item size limit higher than a gigabyte.".into());
        }
        if self.memory_mb == 0 {
            return Err("-m 0: the memory limit must be at least a few megabytes".into());
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(format!("-t {}: use between 1 and 256 worker threads", self.threads));
        }
        if self.reqs_per_event == 0 {
            return Err("-R 0: at least one request per event".into());
        }
        // memcached's check is on -p alone: `-Z -s <path>` with a port serves the unix socket
        // in plaintext.
        if tls.enabled && tcp_port.is_none() {
            return Err("ERROR: You cannot enable SSL without a TCP port.".into());
        }
        if self.tenants.is_some() && self.digest_keys > 0 {
            return Err("--digest-keys does not work with --tenants yet: a digest covers one region".into());
        }
        if !(self.curve_half_life >= 0.0 && self.curve_half_life.is_finite()) {
            return Err(format!("--curve-half-life {}: seconds, 0 or more", self.curve_half_life));
        }
        if self.conn_limit == 0 {
            return Err("-c 0: allow at least one connection".into());
        }
        let region_path = self.memory_file.clone().or_else(|| self.region_path.clone());
        let memory_max_bytes =
            crate::memory::max_bytes(self.memory_mb, self.memory_max_mb, region_path.as_deref())?;
        Ok(Settings {
            tcp,
            notls,
            udp,
            unix_socket,
            region_bytes: crate::memory::region_bytes_for(
                self.memory_mb.checked_mul(1 << 20).ok_or("-m: too large")?,
                max_item_bytes,
                self.avg_item_bytes,
            ),
            memory_max_bytes,
            temporary_ttl,
            evict: !self.disable_evictions,
            max_connections: self.conn_limit,
            threads: self.threads,
            reqs_per_event: self.reqs_per_event,
            max_item_bytes,
            use_cas: !self.disable_cas,
            backlog: self.backlog,
            enable_shutdown: self.enable_shutdown,
            enable_flush: !self.disable_flush_all,
            region_path,
            avg_item_bytes: self.avg_item_bytes,
            verbose: self.verbose,
            pidfile: self.pidfile.clone(),
            metrics_listen: self.metrics_listen.clone(),
            digest: (self.digest_keys > 0).then_some((self.digest_keys, self.digest_fp)),
            hit_curve: self.hit_curve,
            curve_half_life: self.curve_half_life,
            tenants_file: self.tenants.clone(),
            user: self.user.clone(),
            daemonize: self.daemonize,
            idle_timeout,
            answers_held: answers_held(read_buf_mem_limit, self.threads),
            lru_crawler,
            lru_maintainer,
            slab_reassign,
            maxconns_fast,
            hotkeys,
            hotkeys_sample,
            io: io.checked(tls.enabled)?,
            lease_ttl: self.lease_ttl,
            stale_ttl: self.stale_ttl,
            test_mode: self.test_mode,
            tls,
            protocol,
            sasl: self.enable_sasl,
            sasl_pwdb: std::env::var_os("MEMCACHED_SASL_PWDB").map(PathBuf::from),
            auth_file: self.auth_file.clone(),
            region_group: self.region_group.as_deref().map(group_id).transpose()?,
            region_mode: u32::from_str_radix(&self.region_mode, 8).ok().filter(|m| *m <= 0o777).ok_or_else(
                || format!("--region-mode {}: the mode must be octal, e.g. 640", self.region_mode),
            )?,
            rejoin_hold: self.rejoin_hold,
            prefix_delimiter: match self.prefix_delimiter.as_deref().map(str::as_bytes) {
                None => None,
                Some([first, ..]) => Some(*first),
                Some([]) => return Err("No delimiter specified".into()),
            },
            near,
        })
    }

    /// The protocol, with memcached's rules: `-S` means binary and `-Y` ascii unless `-B`
    /// says otherwise, and then they refuse to start (with `-S -Y`, `-Y` wins, as there).
    fn protocol(&self) -> Result<Protocol, String> {
        let named = match self.protocol.as_deref() {
            None => None,
            Some("ascii") => Some(Protocol::Ascii),
            Some("binary") => Some(Protocol::Binary),
            Some("auto") => Some(Protocol::Auto),
            Some(other) => {
                return Err(format!(
                    "Invalid value for binding protocol: {other} -- should be one of auto, binary, or ascii"
                ))
            }
        };
        if self.enable_sasl && named.is_some_and(|p| p != Protocol::Binary) {
            return Err("ERROR: You cannot allow the ASCII protocol while using SASL.".into());
        }
        if self.enable_sasl && self.udp_port != 0 {
            return Err("ERROR: Cannot enable UDP while using binary SASL authentication.".into());
        }
        if self.auth_file.is_some() && named.is_some_and(|p| p != Protocol::Ascii) {
            return Err(
                "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.".into(),
            );
        }
        Ok(match named {
            Some(p) => p,
            None if self.auth_file.is_some() => Protocol::Ascii,
            None if self.enable_sasl => Protocol::Binary,
            None => Protocol::Auto,
        })
    }
}

/// A group named by name or number, as its gid.
fn group_id(group: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    nix::unistd::Group::from_name(group)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
        .ok_or_else(|| format!("--region-group {group}: no such group"))
}

/// `host`, `host:port`, `[v6]:port` or `[v6]`.
fn split_host_port(item: &str) -> Result<(String, Option<u16>), String> {
    let bad = || format!("-l {item}: expected an address, optionally with :port");
    if let Some(rest) = item.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| bad())?),
            None if after.is_empty() => None,
            None => return Err(bad()),
        };
        return Ok((host.to_string(), port));
    }
    match item.rsplit_once(':') {
        Some((host, p)) if !host.contains(':') => Ok((host.to_string(), Some(p.parse().map_err(|_| bad())?))),
        _ if item.is_empty() => Err(bad()),
        _ => Ok((item.to_string(), None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServerArgs,
    }

    fn settings(argv: &[&str]) -> Result<Settings, String> {
        let cli = Cli::try_parse_from(std::iter::once("server").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.args.settings()
    }

    #[test]
    fn read_buf_mem_limit_caps_the_answers_a_connection_holds() {
        assert_eq!(settings(&[]).unwrap().answers_held, None);
        // memcached's conn-limits.t: 1 MB over 32 workers is two 16 KiB buffers each.
        let s = settings(&["-o", "read_buf_mem_limit=1", "-t", "32"]).unwrap();
        assert_eq!(s.answers_held, Some(28));
        let s = settings(&["-o", "read_buf_mem_limit=1", "-t", "256"]).unwrap();
        assert_eq!(s.answers_held, Some(14), "at least one buffer");
        assert!(settings(&["-o", "read_buf_mem_limit=x"]).is_err());
    }

    #[test]
    fn a_memory_limit_below_the_smallest_region_is_raised_to_it() {
        // memcached's suite starts with -m 2 (dash-M.t, lru-maintainer.t).
        let s = settings(&["-m", "2"]).unwrap();
        assert!(s.region_bytes > 2 << 20 && s.region_bytes <= 4 << 20, "{}", s.region_bytes);
        let config = shoal_region::Config {
            region_bytes: s.region_bytes,
            max_item_bytes: s.max_item_bytes,
            avg_item_bytes: s.avg_item_bytes,
        };
        assert!(config.layout().is_ok());
        // Not a byte less than needed: a MiB less does not make a region.
        let smaller = shoal_region::Config { region_bytes: s.region_bytes - (1 << 20), ..config };
        assert!(smaller.layout().is_err());
        assert_eq!(settings(&["-m", "64"]).unwrap().region_bytes, 64 << 20, "large enough: as given");
    }

    #[test]
    fn memcached_flags_mean_what_they_mean_there() {
        let s =
            settings(&["-p", "-1", "-U", "0", "-l", "127.0.0.1", "-m", "128", "-M", "-c", "10", "-t1", "-C"])
                .unwrap();
        assert_eq!(s.tcp, vec![("127.0.0.1".to_string(), 0)]);
        assert!(s.udp.is_none());
        assert_eq!(s.region_bytes, 128 << 20);
        assert!(!s.evict && !s.use_cas);
        assert_eq!((s.max_connections, s.threads), (10, 1));
        let s =
            settings(&["-vv", "-I", "2m", "-o", "modern,hashpower=20", "-o", "relaxed_privileges"]).unwrap();
        assert_eq!((s.verbose, s.max_item_bytes), (2, 2 << 20));
        let s = settings(&["-s", "/tmp/x.sock", "-a", "770"]).unwrap();
        assert!(s.tcp.is_empty() && s.udp.is_none());
        assert_eq!(s.unix_socket, Some((PathBuf::from("/tmp/x.sock"), 0o770)));
        let s = settings(&["-l", "127.0.0.1:7000,[::1]", "-p", "7001"]).unwrap();
        assert_eq!(s.tcp, vec![("127.0.0.1".into(), 7000), ("::1".into(), 7001)]);
    }

    #[test]
    fn bad_flags_say_what_to_fix() {
        assert_eq!(settings(&["-o", "bogus"]).unwrap_err(), "Illegal suboption \"bogus\"");
        assert!(settings(&["-B", "binery"]).unwrap_err().contains("should be one of"));
        assert!(settings(&["-S", "-B", "auto"]).unwrap_err().contains("ASCII protocol while using SASL"));
        assert!(settings(&["-S", "-U", "5000"]).unwrap_err().contains("UDP"));
        assert!(settings(&["-Y", "/f", "-B", "binary"]).unwrap_err().contains("BINARY protocol"));
        assert!(settings(&["--region-mode", "999"]).unwrap_err().contains("octal"));
        assert!(settings(&["--region-group", "no-such-group-here"]).unwrap_err().contains("no such group"));
        assert_eq!(
            settings(&["-m", "4096", "-I", "1025m"]).unwrap_err(),
            "Cannot set item size limit higher than a gigabyte."
        );
        assert_eq!(settings(&["-m", "2048", "-I", "1024m"]).unwrap().max_item_bytes, 1 << 30);
        assert_eq!(settings(&["-m", "64", "-I", "32m"]).unwrap().max_item_bytes, 32 << 20);
        assert_eq!(settings(&["-I", "1000"]).unwrap_err(), "Item max size cannot be less than 1024 bytes.");
        assert_eq!(
            settings(&["-m", "64", "-I", "40m"]).unwrap_err(),
            "Cannot set item size limit higher than 1/2 of memory max."
        );
        assert_eq!(settings(&["-p", "1", "-p", "2"]).unwrap().tcp[0].1, 2, "the last -p wins");
        assert!(settings(&["-I", "lots"]).is_err());
        assert!(settings(&["-p", "70000"]).unwrap_err().contains("out of range"));
        assert!(settings(&["-a", "9z", "-s", "/tmp/s"]).unwrap_err().contains("octal"));
    }

    #[test]
    fn tcp_follows_udp_when_no_tcp_port_is_given_as_in_memcached_1_6() {
        let tcp = |argv: &[&str]| settings(argv).unwrap().tcp.iter().map(|t| t.1).collect::<Vec<_>>();
        assert_eq!(tcp(&["-U", "11222"]), [11222]);
        assert_eq!(tcp(&["-U", "-1"]), [0], "ephemeral, as UDP");
        assert_eq!(tcp(&["-U", "0"]), [DEFAULT_PORT]);
        assert_eq!(tcp(&["-p", "11232", "-U", "11233"]), [11232]);
        assert!(tcp(&["-p", "0"]).is_empty(), "no TCP listener at all");
    }

    #[test]
    fn no_modern_turns_memcached_machines_off_and_d_names_a_delimiter() {
        let s = settings(&["-o", "no_modern,lru_crawler"]).unwrap();
        assert!(s.lru_crawler && !s.lru_maintainer && !s.slab_reassign && !s.maxconns_fast);
        let s = settings(&["-o", "modern"]).unwrap();
        assert!(s.lru_crawler && s.lru_maintainer && s.slab_reassign && s.maxconns_fast);
        assert_eq!(settings(&["-D", "|"]).unwrap().prefix_delimiter, Some(b'|'));
        assert_eq!(settings(&[]).unwrap().prefix_delimiter, None);
    }

    #[test]
    fn auth_flags_choose_the_protocol_as_memcached_does() {
        let p = |argv: &[&str]| settings(argv).unwrap().protocol;
        assert_eq!(p(&[]), Protocol::Auto);
        assert_eq!(p(&["-B", "binary"]), Protocol::Binary);
        assert_eq!(p(&["-S"]), Protocol::Binary);
        assert_eq!(p(&["-Y", "/f"]), Protocol::Ascii);
        assert_eq!(p(&["-S", "-Y", "/f"]), Protocol::Ascii);
        let s = settings(&["--region-group", "0", "--region-mode", "640"]).unwrap();
        assert_eq!((s.region_group, s.region_mode), (Some(0), 0o640));
        assert!(settings(&["-Y", "/f"]).unwrap().auth_required());
        assert_eq!(
            (settings(&[]).unwrap().rejoin_hold, settings(&["--rejoin-hold", "30"]).unwrap().rejoin_hold),
            (0, 30)
        );
    }

    #[test]
    fn tls_options_are_memcached_ones() {
        let s = settings(&[
            "-Z",
            "-o",
            "ssl_chain_cert=/c.pem,ssl_key=/k.pem,ssl_verify_mode=1",
            "-o",
            "ssl_session_cache,ssl_min_version=3",
        ])
        .unwrap();
        assert!(s.tls.enabled && s.tls.session_cache);
        assert_eq!(
            (s.tls.chain_cert.as_deref(), s.tls.key.as_deref()),
            (Some(Path::new("/c.pem")), Some(Path::new("/k.pem")))
        );
        assert_eq!((s.tls.verify_mode, s.tls.min_version), (1, 3));
        assert!(
            !settings(&["-o", "ssl_chain_cert=/c.pem"]).unwrap().tls.enabled,
            "options without -Z only show"
        );
        assert_eq!(
            settings(&["-Z", "-s", "/tmp/s", "-p", "0"]).unwrap_err(),
            "ERROR: You cannot enable SSL without a TCP port."
        );
        assert!(settings(&["-o", "ssl_verify_mode=4"]).unwrap_err().starts_with("Invalid ssl_verify_mode"));
        assert!(settings(&["-o", "ssl_min_version=x"]).unwrap_err().starts_with("Invalid ssl_min_version"));
        assert!(settings(&["-o", "ssl_keyformat=3"]).unwrap_err().contains("engine"));
        assert!(settings(&["-o", "ssl_kernel_tls"]).unwrap_err().contains("remove the option"));
        assert!(settings(&["-o", "ssl_chain_cert"]).unwrap_err().contains("Missing ssl_chain_cert"));
    }

    #[test]
    fn sizes_parse_like_memcached() {
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("2097152"), Some(2 << 20));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size(""), None);
    }
}
