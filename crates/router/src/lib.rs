//! # shoal-router: `shoal router`, an mcrouter-shaped memcached router
//!
//! Owns the router (docs/design/router.md): mcrouter's JSON configuration of pools and route
//! handles, reloaded when the file changes; clients speaking memcached's text and meta
//! protocols (and the lease commands) over TCP or a unix socket; each key routed by the routing
//! core (`shoal-route`) and the route handles; destinations' health; reliable broadcast deletes.
//!
//! ```text
//!  config file ──(inotify, stat+hash every second)──► Config::parse ──► Router.config (Arc swap;
//!  and the provisioning state files its pools name                 a bad file keeps the old one)
//!  client ──► worker thread (tokio, one per -t) ──► proxy: shoal-proto parser, one Request per key
//!                 │ dispatch: Config::route_for(/region/cluster/) ──► Route::execute (route.rs)
//!                 ▼                                   (multiget.rs: keys batched per server)
//!           Ctx::send (ctx.rs) ──► deletes under AllAsyncRoute or /*/*/ ──► shoal-spool
//!                 │                 changes a down destination missed, as deletes ──┘ (reads
//!                 │                 wait until its spool drains: docs/design/faults.md)
//!                 ▼
//!  changes' keys ──► near.rs: a delete per near cache of "near_caches", spooled before the
//!                   client's answer, delivered by the spool's thread (never on the answer path)
//!  transport: Sender::exchange (dest.rs) ──► the worker's one connection per destination
//!             (connection.rs): an event loop that pipelines, answers in order (a request
//!             alone on it runs the loop in its own task); deadline.rs: one thread that wakes
//!             a connection whose oldest request's deadline passed; health.rs: TKO, probes;
//!             stream.rs: sockets, TCP or unix (clients' too), tokio's readiness around
//!             rustix's recv and send
//! ```
//!
//! The modules, each importing only modules below it (`scripts/module-cycles.py` checks):
//!
//! ```text
//!  lib.rs: run, reload, worker threads
//!    ├─► metrics ─► state (Router: configuration in service, counters, `stats`) ─► config
//!    └─► proxy (a client connection) ─► multiget ─► dispatch (a key's route(s)) ─► config
//!              ├─► near (deletes for the near caches) ─► ctx
//!              └─► stream (its socket)
//!  config (the file, parsed) ─► route (handles) ─► provisioned (power-proportional pools)
//!                                     └─► ctx (Ctx: how a handle sends; spools) ─► dest
//!  transport, knowing destinations (addresses, timeouts) and nothing of routes:
//!    dest (Destination, Sender, Worker, Transport) ─► connection ─► health (TKO, probe) ─► stream
//!  request (one key's request and reply) and deadline (alarms, sleep, timeout: the one
//!  thread that keeps time for the workers, whose runtimes have no time driver) under all of them
//! ```
//!
//! A configuration hands the transport a table of destinations; route handles name them by
//! index, and a worker's links to them are rebuilt when the table changes (a reload).

mod config;
mod connection;
mod ctx;
mod deadline;
mod dest;
mod dispatch;
mod health;
mod metrics;
mod multiget;
mod near;
mod provisioned;
mod proxy;
mod request;
mod route;
mod state;
mod stream;

pub use config::{Config, ConfigError};
pub use state::Router;

use clap::Args;
use dest::{Transport, Worker};
use shoal_spool::Spools;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `shoal router`: route memcached requests to pools of servers, as mcrouter does.
#[derive(Args, Debug, Clone)]
#[command(
    override_usage = "shoal router -f <FILE> [OPTIONS]\n       shoal router --validate <FILE>",
    after_help = "Example configurations (twemproxy's placement, Gutter, a regional pool): examples/router/"
)]
pub struct RouterArgs {
    /// The configuration file (mcrouter's JSON: pools and routes); reloaded when it changes,
    /// and when a provisioning state file a pool follows changes.
    #[arg(short = 'f', long = "config-file", value_name = "FILE", help_heading = "Required")]
    pub config: Option<PathBuf>,
    /// Instead of -f: check a configuration file and exit, 0 if it loads, else the error and
    /// where it is.
    #[arg(long, value_name = "FILE", help_heading = "Required")]
    pub validate: Option<PathBuf>,
    /// TCP port to listen on (0: none).
    #[arg(short = 'p', long, default_value_t = 5000)]
    pub port: u16,
    /// Address to listen on.
    #[arg(short = 'l', long, default_value = "0.0.0.0")]
    pub listen: String,
    /// A unix socket to listen on as well.
    #[arg(short = 's', long = "unix-socket", value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,
    /// Worker threads; each keeps one connection per destination, shared by its clients.
    #[arg(short = 't', long, default_value_t = 4)]
    pub threads: usize,
    /// Where deletes that must reach a destination wait for it, including a delete of every key
    /// changed while its destination was down (default:
    /// /var/tmp/shoal-router-<port>).
    #[arg(long, value_name = "DIR")]
    pub spool_dir: Option<PathBuf>,
    /// The most each destination's spool may hold, in megabytes.
    #[arg(long, default_value_t = 1024)]
    pub spool_max_mb: u64,
    /// The largest value a client may send or a destination may answer, in bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_item_bytes: usize,
    /// How long a changed configuration file must stay unchanged before it is loaded.
    #[arg(long, default_value_t = 200)]
    pub reload_settle_ms: u64,
    /// Serve Prometheus metrics (the `stats` counters, each destination's state) at
    /// http://ADDR:PORT/metrics.
    #[arg(long = "metrics-listen", value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
}

/// Reads and checks a configuration file (and the provisioning state files its pools follow,
/// found relative to its directory).
pub fn load(path: &Path) -> Result<Config, String> {
    let text = shoal_textfile::read_text(path, "", shoal_textfile::DEFAULT_MAX_BYTES)?;
    let base = path.parent().unwrap_or(Path::new("."));
    Config::parse_in(&text, base).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs `shoal router` until it is killed (or, with `--validate`, checks a file).
pub fn run(args: RouterArgs) -> Result<(), String> {
    if let Some(path) = &args.validate {
        let config = load(path)?;
        println!(
            "{}: ok ({}, {}; {})",
            path.display(),
            config::plural(config.destinations.len(), "destination"),
            config::plural(config.prefixed.len(), "prefixed route"),
            config.describe_pools()
        );
        return Ok(());
    }
    let Some(path) = args.config.clone() else {
        return Err("shoal router needs its configuration: -f FILE (mcrouter's JSON of pools and routes; \
                    examples/router/ has some), or --validate FILE to check one"
            .into());
    };
    // The version the watcher compares against is the one read here, before anything can
    // rewrite the file: taken in the watcher thread, a rewrite made while it starts would
    // look like the file it started with, and never load.
    let file_version = version(&path);
    let config = load(&path)?;
    let started_with =
        Version { followed: config.followed.iter().map(|(_, v)| *v).collect(), ..file_version };
    config.fetch_digests();
    if args.threads == 0 {
        return Err("-t: at least one worker thread".into());
    }
    let spool_dir = args
        .spool_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/var/tmp/shoal-router-{}", args.port)));
    let transport = Arc::new(Transport::new(args.max_item_bytes));
    // A delete the destination acknowledged says it is back: its TKO mark goes at once rather
    // than at the probe's next turn (its reads still wait for its spool to drain).
    let revive: shoal_spool::Observer = {
        let transport = transport.clone();
        Arc::new(move |address, _| transport.revive(address))
    };
    // Durable: a delete a down destination missed must outlive the machine, not only the router.
    let spools = Spools::open_with(&spool_dir, args.spool_max_mb << 20, "shoal router", true, Some(revive))
        .map_err(|e| format!("spool directory {}: {e}", spool_dir.display()))?;
    // The near caches' deletes: written before the client's answer, not fsync'd (a kill -9
    // keeps them; near.rs says why not the machine's crash).
    let near_dir = spool_dir.join("near");
    let near_spools = Spools::open_with(&near_dir, args.spool_max_mb << 20, "shoal router", false, None)
        .map_err(|e| format!("spool directory {}: {e}", near_dir.display()))?;
    let router = Arc::new(Router {
        config: RwLock::new(Arc::new(config)),
        transport,
        spools,
        max_item_bytes: args.max_item_bytes,
        latest_seed: std::process::id() as usize,
        started: Instant::now(),
        threads: args.threads,
        requests: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        reloads: AtomicU64::new(0),
        reload_failures: AtomicU64::new(0),
        connections: Default::default(),
        near: near::NearDelivery::new(near_spools),
    });
    let tcp = if args.port > 0 {
        let l = std::net::TcpListener::bind((args.listen.as_str(), args.port))
            .map_err(|e| format!("cannot listen on {}:{}: {e}", args.listen, args.port))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Some(l)
    } else {
        None
    };
    let unix = match &args.unix_socket {
        Some(p) => {
            let _ = std::fs::remove_file(p);
            let l = std::os::unix::net::UnixListener::bind(p)
                .map_err(|e| format!("cannot listen on {}: {e}", p.display()))?;
            l.set_nonblocking(true).map_err(|e| e.to_string())?;
            Some(l)
        }
        None => None,
    };
    if tcp.is_none() && unix.is_none() {
        return Err("nothing to listen on: give -p <port> or -s <unix socket>".into());
    }
    if let Some(address) = &args.metrics_listen {
        metrics::spawn(address, router.clone())?;
    }
    let listening: Vec<String> = [
        tcp.as_ref().map(|_| format!("{}:{}", args.listen, args.port)),
        args.unix_socket.as_ref().map(|p| p.display().to_string()),
    ]
    .into_iter()
    .flatten()
    .collect();
    eprintln!(
        "shoal router: {} listening on {}; config {}: {}",
        rfc3339(SystemTime::now()),
        listening.join(" and "),
        std::path::absolute(&path).unwrap_or_else(|_| path.clone()).display(),
        router.config.read().unwrap_or_else(|p| p.into_inner()).describe_pools()
    );
    {
        let router = router.clone();
        let settle = Duration::from_millis(args.reload_settle_ms);
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || watch(&path, settle, &router, started_with))
            .map_err(|e| e.to_string())?;
    }
    deadline::start().map_err(|e| format!("cannot start the deadline thread: {e}"))?;
    let mut workers = Vec::new();
    for i in 0..args.threads {
        let tcp = tcp.as_ref().map(|l| l.try_clone()).transpose().map_err(|e| e.to_string())?;
        let unix = unix.as_ref().map(|l| l.try_clone()).transpose().map_err(|e| e.to_string())?;
        let router = router.clone();
        workers.push(
            std::thread::Builder::new()
                .name(format!("worker {i}"))
                .spawn(move || serve_worker(tcp, unix, router))
                .map_err(|e| e.to_string())?,
        );
    }
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

/// A worker thread: its own runtime, accepting on the shared listeners.
fn serve_worker(
    tcp: Option<std::net::TcpListener>,
    unix: Option<std::os::unix::net::UnixListener>,
    router: Arc<Router>,
) {
    // A local runtime (its tasks need not be `Send`) rather than a `LocalSet` on a
    // current-thread one: a `LocalSet`'s tasks are a second scheduler inside the runtime's,
    // entered, ticked and woken through on every wake-up (about 500 instructions a request,
    // issue #29). No time driver (its work at every park is a request's cost): whatever waits
    // for a time waits on the deadline thread (deadline.rs).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build_local(tokio::runtime::LocalOptions::default())
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shoal router: a worker could not start: {e}");
            return;
        }
    };
    // The accept loop is a task of its own, polled when a listener is ready, not the future
    // the runtime blocks on.
    runtime.block_on(async move {
        tokio::task::spawn_local(accept(tcp, unix, router));
        std::future::pending::<()>().await
    });
}

/// A worker's accept loop: each client connection a task of the worker's.
async fn accept(
    tcp: Option<std::net::TcpListener>,
    unix: Option<std::os::unix::net::UnixListener>,
    router: Arc<Router>,
) {
    let worker = Rc::new(Worker::new(router.transport.clone()));
    let buffers = Rc::new(proxy::Buffers::new(router.clone()));
    let tcp = tcp.and_then(|l| tokio::net::TcpListener::from_std(l).ok());
    let unix = unix.and_then(|l| tokio::net::UnixListener::from_std(l).ok());
    loop {
        tokio::select! {
            accepted = async { tcp.as_ref().expect("guarded").accept().await }, if tcp.is_some() => {
                match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::task::spawn_local(proxy::serve(stream, router.clone(), worker.clone(), buffers.clone()));
                    }
                    Err(e) => router.connections.accept_failed(e).await,
                }
            }
            accepted = async { unix.as_ref().expect("guarded").accept().await }, if unix.is_some() => {
                match accepted {
                    Ok((stream, _)) => {
                        tokio::task::spawn_local(proxy::serve(stream, router.clone(), worker.clone(), buffers.clone()));
                    }
                    Err(e) => router.connections.accept_failed(e).await,
                }
            }
        }
    }
}

/// `t` in RFC 3339, UTC, to the second (`2026-11-28T00:04:24Z`): log lines' times.
fn rfc3339(t: SystemTime) -> String {
    let seconds = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, second) = ((seconds / 86_400) as i64, seconds % 86_400);
    // The proleptic Gregorian date of a day count (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let m = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * m + 2) / 5 + 1;
    let month = if m < 10 { m + 3 } else { m - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", second / 3_600, second / 60 % 60, second % 60)
}

/// What identifies a version of the configuration: the file's bytes' hash (and whether it
/// could be read at all) and modification time, and the hash of each provisioning state
/// file its pools follow.
#[derive(Clone, Debug, PartialEq)]
struct Version {
    file: Option<u64>,
    modified: Option<SystemTime>,
    followed: Vec<Option<u64>>,
}

/// The configuration file's version (and no state files').
fn version(path: &Path) -> Version {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Version { file: config::fingerprint(path), modified, followed: Vec::new() }
}

/// Reloads the configuration when the file, or a state file it follows, changes: woken by
/// inotify on their directories (so a ConfigMap-style symlink swap is seen) and, as a
/// fallback, by a stat-and-hash every second. A change is loaded once the file has stayed the
/// same for `settle`; a file that does not load is reported and the last good configuration
/// keeps serving.
fn watch(path: &Path, settle: Duration, router: &Router, started_with: Version) {
    use notify::Watcher;
    let (wake, woken) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Only changes: our own reads of the file raise access events, which would wake this
        // loop to read the file again, for ever.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = wake.send(());
        }
    })
    .ok();
    let mut watched = std::collections::HashSet::new();
    let mut watch_beside = |file: &Path| {
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if let Some(w) = watcher.as_mut().filter(|_| watched.insert(dir.to_path_buf())) {
            let _ = w.watch(dir, notify::RecursiveMode::NonRecursive);
        }
    };
    watch_beside(path);
    let followed = |router: &Router| -> Vec<PathBuf> {
        let config = router.config.read().unwrap_or_else(|p| p.into_inner());
        config.followed.iter().map(|(file, _)| file.clone()).collect()
    };
    followed(router).iter().for_each(|file| watch_beside(file));
    // The version last loaded, or that last failed to load (it is not tried again).
    let mut last = started_with;
    loop {
        let _ = woken.recv_timeout(Duration::from_secs(1));
        // Load once the files have stayed the same for `settle`; a file still changing is
        // looked at again at once (its events were drained meanwhile, so nothing else would).
        loop {
            let files = followed(router);
            let current = || Version {
                followed: files.iter().map(|f| config::fingerprint(f)).collect(),
                ..version(path)
            };
            let now = current();
            if now == last {
                break;
            }
            std::thread::sleep(settle);
            while woken.try_recv().is_ok() {}
            if current() != now {
                continue;
            }
            match load(path) {
                Ok(config) => {
                    config.fetch_digests();
                    config.followed.iter().for_each(|(file, _)| watch_beside(file));
                    last = Version { followed: config.followed.iter().map(|(_, v)| *v).collect(), ..now };
                    let pools = config.describe_pools();
                    *router.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
                    router.reloads.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "shoal router: {} loaded {}: {pools}",
                        rfc3339(SystemTime::now()),
                        path.display()
                    );
                }
                Err(e) => {
                    last = now;
                    router.reload_failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "shoal router: {} {e}; still serving the last good configuration",
                        rfc3339(SystemTime::now())
                    );
                }
            }
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_gnu_date_writes_them() {
        // Leap days, the turn of centuries (2000 leap, 2100 not), the epoch, and now.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        for seconds in [0, 951_782_400, 951_868_799, 1_709_164_800, 4_107_542_399, 4_107_628_800, now] {
            let date = std::process::Command::new("date")
                .args(["-u", "-d", &format!("@{seconds}"), "+%Y-%m-%dT%H:%M:%SZ"])
                .output()
                .expect("GNU date");
            let expected = String::from_utf8(date.stdout).unwrap();
            assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(seconds)), expected.trim(), "{seconds}");
        }
    }
}
