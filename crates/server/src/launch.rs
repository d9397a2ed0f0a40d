//! Starting and stopping: the region, the listeners, the threads, signals.
//!
//! ```text
//!  main thread: accept ──► round-robin ──► worker 1..t (epoll, connections, execute)
//!  clock thread: every 100 ms ──► Writer::tick(now + debugtime offset), fold clients' hints
//!  handoff thread: clients' hints memfds (SCM_RIGHTS) ──► Hints::redeem
//!  udp thread:   datagrams ──► execute ──► framed replies
//!  signal thread: SIGINT/SIGTERM/SIGUSR1 ──► stop flag ──► everyone drains and returns
//! ```
//!
//! On any stop the writer is dropped after the workers return, which marks the region clean:
//! restarting on the same `-e` file is a warm restart with every item in place. With
//! `--rejoin-hold S`, a warm restart (after a clean stop or not) hides the items it kept for S
//! seconds, from the network and local readers alike, while routers and invalidators deliver
//! the deletes it missed (docs/design/faults.md).

use crate::auth::Users;
use crate::config::Settings;
use crate::counters::Counters;
use crate::curve;
use crate::detail::PrefixStats;
use crate::digest::ServerDigest;
use crate::handoff::HandoffSocket;
use crate::hints::Hints;
use crate::net::{self, Listeners};
use crate::state::{stop, Clock, Shared};
use crate::tenants::{TenantCounters, Tenants};
use crate::tls::Tls;
use crate::watch::EvictionLog;
use shoal_region::PreviousStop;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Gives the region file the group and mode the settings ask for. The file is created 0600
/// and only then opened up, so it is never readable by more than asked.
fn set_region_access(path: &Path, settings: &Settings) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(gid) = settings.region_group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| format!("--region-group: could not give {} to group {gid}: {e}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(settings.region_mode))
        .map_err(|e| format!("--region-mode: could not set the mode of {}: {e}", path.display()))
}

/// `-u <user>`: a server started as root becomes `user` once its listeners are bound and its
/// region is open, as memcached does; the region file is given to that user first, so a warm
/// restart as that user can open it, and so is the handoff socket, so the server can remove it
/// at exit. Without root the flag changes nothing (memcached's way).
fn drop_privileges(name: &str, regions: &[PathBuf], handoff: Option<&Path>) -> Result<(), String> {
    use nix::unistd::{geteuid, setgid, setgroups, setuid, User};
    if !geteuid().is_root() {
        return Ok(());
    }
    let user = User::from_name(name)
        .ok()
        .flatten()
        .ok_or_else(|| format!("can't find the user {name} to switch to"))?;
    for region in regions {
        std::os::unix::fs::chown(region, Some(user.uid.as_raw()), None).map_err(|e| {
            format!("-u {name}: could not give the region {} to {name}: {e}", region.display())
        })?;
    }
    if let Some(socket) = handoff {
        std::os::unix::fs::chown(socket, Some(user.uid.as_raw()), None)
            .map_err(|e| format!("-u {name}: could not give {} to {name}: {e}", socket.display()))?;
    }
    setgroups(&[user.gid]).map_err(|e| format!("-u {name}: setgroups: {e}"))?;
    setgid(user.gid).map_err(|e| format!("-u {name}: setgid: {e}"))?;
    setuid(user.uid).map_err(|e| format!("-u {name}: setuid: {e}"))
}

/// Runs a server until it is stopped; returns once everything is closed.
pub fn run(settings: Settings) -> Result<(), String> {
    // memcached's `-e FILE.meta`, before anything is bound or created (restart.rs).
    crate::restart::check(&settings)?;
    let ascii_users = settings.auth_file.as_deref().map(|f| Users::load(f, false)).transpose()?;
    // Without MEMCACHED_SASL_PWDB nobody can authenticate (memcached would ask Cyrus SASL's
    // own database); a file that cannot be read stops the start, as a bad -Y file does.
    let sasl_users = match (&settings.sasl_pwdb, settings.sasl) {
        (Some(path), true) => Users::load(path, true)?,
        _ => Users::default(),
    };
    // Certificates are read before binding (and before -u drops root, which may own them).
    let clock = Clock::new();
    let tls = settings.tls.enabled.then(|| Tls::load(&settings.tls, clock.now())).transpose()?.map(Arc::new);
    let tenants_file = Tenants::read_file(&settings)?;
    let listeners = Listeners::bind(&settings, tenants_file.as_ref().map_or(&[], |f| &f.tenants))?;
    let tenants = Tenants::open(&settings, tenants_file)?;
    let regions: Vec<PathBuf> = tenants.all().iter().map(|t| t.writer.path().to_path_buf()).collect();
    for region in &regions {
        set_region_access(region, &settings)?;
    }
    // Without the socket, clients of other users read over the network; the server still
    // serves (a region path too long for a socket address is the usual cause). One socket
    // serves every tenant: a token names its connection, and so its tenant.
    let handoff = HandoffSocket::bind(
        tenants.default_tenant().writer.path(),
        settings.region_group,
        settings.region_mode,
    )
    .map_err(|why| eprintln!("{why}: clients of other users will read over the network"))
    .ok();
    if settings.daemonize {
        // Bound and with its region open, so a start that cannot work still says why on the
        // terminal; no thread runs yet (a fork keeps only the calling thread). The working
        // directory stays, so relative paths (-P, -e) keep meaning what they meant.
        nix::unistd::daemon(true, settings.verbose > 0)
            .map_err(|e| format!("-d: could not daemonize: {e}"))?;
    }
    if let Some(pidfile) = &settings.pidfile {
        // Written whole, then renamed: a script that sees the file sees the whole pid.
        let partial = pidfile.with_extension("pid.partial");
        std::fs::write(&partial, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&partial, pidfile))
            .map_err(|e| format!("could not write pid file {}: {e}", pidfile.display()))?;
    }
    if let Some(user) = &settings.user {
        drop_privileges(user, &regions, handoff.as_ref().map(HandoffSocket::path))?;
    }
    listeners.write_port_file()?;
    tenants.tick(clock.now());
    hold_after_restart(&tenants, settings.rejoin_hold);
    let digest = settings
        .digest
        .map(|(keys, fp)| ServerDigest::attach(&tenants.default_tenant().writer, keys, fp))
        .transpose()?;
    let crawler_enabled = AtomicBool::new(settings.lru_crawler);
    let hotkeys = crate::hotkeys::HotKeys::new(settings.hotkeys, settings.hotkeys_sample);
    // memcached: naming a delimiter (-D) turns detail on.
    let delimiter = settings.prefix_delimiter;
    let prefixes = PrefixStats::new(delimiter.unwrap_or(b':'), delimiter.is_some());
    let rows = settings.threads + 2;
    let upstream = crate::upstream::Upstream::of(settings.near.clone(), settings.max_item_bytes)?;
    let shared = Arc::new(Shared {
        tenant_counters: (0..rows)
            .map(|_| tenants.all().iter().map(|_| TenantCounters::default()).collect())
            .collect(),
        tenants,
        counters: (0..rows).map(|_| Counters::default()).collect(),
        hints: Hints::new(handoff.as_ref().map(|socket| socket.path().to_path_buf())),
        listening: listeners.describe(),
        verbosity: AtomicU32::new(u32::from(settings.verbose)),
        memlimit: AtomicU64::new(0),
        settings,
        clock,
        curr_connections: AtomicU64::new(0),
        total_connections: AtomicU64::new(0),
        rejected_connections: AtomicU64::new(0),
        conns: Mutex::new(BTreeMap::new()),
        stop: AtomicU8::new(stop::RUNNING),
        sasl_users,
        ascii_users: ascii_users.unwrap_or_default(),
        digest,
        tls,
        logs: Default::default(),
        crawler_enabled,
        hotkeys,
        prefixes,
        upstream,
        io: Default::default(),
    });
    for tenant in shared.tenants.all() {
        let log = EvictionLog(shared.logs.clone());
        let _ = tenant.writer.observe_evictions(Box::new(log)); // a fresh writer has none
    }
    let waker = listeners.waker().map_err(|e| format!("could not create a poll waker: {e}"))?;
    spawn_signal_thread(shared.clone(), waker.clone())?;
    let ticker = spawn_clock_thread(shared.clone());
    let curves = spawn_drainer(&shared);
    let payer = spawn_payer(&shared)?;
    let invalidations = crate::exec::near::spawn_invalidations(&shared)?;
    let handoff = handoff.map(|socket| socket.spawn(shared.clone())).transpose()?;
    let metrics = match &shared.settings.metrics_listen {
        Some(address) => Some(crate::metrics::spawn(address, &shared)?),
        None => None,
    };
    let result = serve(shared.clone(), listeners);
    shared.request_stop(stop::NOW);
    let _ = ticker.join();
    if let Some(curves) = curves {
        let _ = curves.join();
    }
    if let Some(payer) = payer {
        let _ = payer.join(); // a near cache's owed deletes: it ends within --upstream-timeout
    }
    if let Some(invalidations) = invalidations {
        invalidations.stop(); // a near cache's invalidation listener: within 100 ms
    }
    if let Some(handoff) = handoff {
        let _ = handoff.join();
    }
    if let Some(metrics) = metrics {
        let _ = metrics.join(); // it holds the server only while a scrape renders
    }
    let shared = Arc::try_unwrap(shared).map_err(|_| "a thread still holds the server".to_string())?;
    let temporary = shared.tenants.temporary_files();
    let pidfile = shared.settings.pidfile.clone();
    let graceful = shared.stop.load(std::sync::atomic::Ordering::Acquire) == stop::GRACEFUL;
    let meta = crate::restart::Meta::of(&shared.settings).filter(|_| graceful);
    drop(shared); // detaches the writers: the regions are marked clean
    if let Some(meta) = meta {
        meta.save();
    }
    for region in temporary {
        let _ = std::fs::remove_file(region);
    }
    if let Some(pidfile) = pidfile {
        let _ = std::fs::remove_file(pidfile);
    }
    result
}

/// Serves until the stop: on the io_uring path ([`crate::uring`]) when `-o io_uring` asks for
/// it and the kernel has what it needs (else one log line, and epoll), on epoll by default.
fn serve(shared: Arc<Shared>, listeners: Listeners) -> Result<(), String> {
    if shared.settings.io.uring {
        match crate::uring::probe(shared.settings.io.buffers) {
            Ok(()) => return crate::uring::serve(shared, listeners),
            Err(why) => eprintln!("shoal server: io_uring unavailable ({why}): serving with epoll"),
        }
    }
    net::serve(shared, listeners)
}

/// `--rejoin-hold`: each region a warm restart found items in hides them for `seconds`, before
/// anyone can read them (readers of the region see the hold in its header). Any stop counts:
/// deletes are missed while the server is down however it stopped.
fn hold_after_restart(tenants: &Tenants, seconds: u32) {
    for tenant in tenants.all() {
        let writer = &tenant.writer;
        if seconds > 0 && writer.previous_stop() != PreviousStop::None {
            writer.hold(seconds);
            eprintln!(
                "shoal server: {} was left by a stop that was {}: the items it kept are hidden for \
                 {seconds} s (--rejoin-hold) while the deletes it missed arrive",
                writer.path().display(),
                writer.previous_stop().name(),
            );
        }
    }
}

fn spawn_signal_thread(shared: Arc<Shared>, waker: Arc<crate::epoll::Waker>) -> Result<(), String> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1])
        .map_err(|e| format!("could not install signal handlers: {e}"))?;
    // A weak handle: the server is torn down while this thread still waits for signals.
    let shared = Arc::downgrade(&shared);
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let Some(shared) = shared.upgrade() else { return };
                if shared.stopping() {
                    std::process::exit(1); // a second signal: the user is in a hurry
                }
                shared.request_stop(if signal == SIGUSR1 { stop::GRACEFUL } else { stop::NOW });
                let _ = waker.wake();
            }
        })
        .map_err(|e| format!("could not start the signal thread: {e}"))?;
    Ok(())
}

fn spawn_clock_thread(shared: Arc<Shared>) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("clock".into())
        .spawn(move || {
            let half_life = shared.settings.curve_half_life;
            let mut aged = std::time::Instant::now();
            while !shared.stopping() {
                thread::sleep(Duration::from_millis(100));
                shared.tenants.tick(shared.clock.now());
                shared.hints.fold(&shared.tenants, shared.local_reads());
                if half_life > 0.0 && aged.elapsed() >= Duration::from_secs(1) {
                    let seconds = aged.elapsed().as_secs_f64();
                    aged = std::time::Instant::now();
                    shared.tenants.age_curves(0.5f64.powf(seconds / half_life), &shared.tenant_counters);
                }
            }
        })
        .expect("spawning the clock thread")
}

/// Starts the `curves` thread, which drains the local clients' sampled reads into the
/// tenants' curves often enough that a client's ring (16 384 records) does not overflow
/// between two drains: a client that reads faster than the clock thread's 100 ms fold lost
/// the records past the ring (issue 27; a Python scan of 20 000 keys in multigets lost a third
/// of them), and the lost reads showed as hits at the smallest size. `None` when no tenant has
/// a curve. It ends when the server stops.
fn spawn_drainer(shared: &Arc<Shared>) -> Option<thread::JoinHandle<()>> {
    if shared.tenants.all().iter().all(|t| t.curve.is_none()) {
        return None;
    }
    let shared = shared.clone();
    let spawned = thread::Builder::new().name("curves".into()).spawn(move || {
        let mut wait = curve::DRAIN_MAX;
        while !shared.stopping() {
            thread::sleep(wait);
            // With no hints area registered a pass is this check; it still comes every 10 ms,
            // since a client registers its area at its first local read and may fill a ring
            // within 100 ms of it.
            if shared.hints.is_empty() {
                wait = curve::DRAIN_MAX;
                continue;
            }
            shared.hints.attach_samples(&shared.tenants);
            let now = shared.tenants.clock();
            let (mut clients, mut busiest) = (0, 0);
            for curve in shared.tenants.all().iter().filter_map(|t| t.curve.as_ref()) {
                let (c, b) = curve.drain_local(now);
                (clients, busiest) = (clients + c, busiest.max(b));
            }
            wait = if clients == 0 { curve::DRAIN_MAX } else { curve::next_drain(wait, busiest) };
        }
    });
    // Without it the clock thread still drains every 100 ms, as before the thread existed.
    spawned
        .map_err(|e| eprintln!("shoal server: no curves thread ({e}): local reads drain every 100 ms"))
        .ok()
}

/// Starts the thread that sends a near cache's owed deletes while no request does
/// ([`crate::upstream::Upstream::pay_in_background`]); `None` without `--upstream`. It ends
/// when the server stops.
fn spawn_payer(
    shared: &std::sync::Arc<crate::state::Shared>,
) -> Result<Option<std::thread::JoinHandle<()>>, String> {
    if shared.upstream.is_none() {
        return Ok(None);
    }
    let shared = shared.clone();
    std::thread::Builder::new()
        .name("near-owed".into())
        .spawn(move || {
            if let Some(up) = &shared.upstream {
                up.pay_in_background(|| shared.stopping());
            }
        })
        .map(Some)
        .map_err(|e| format!("could not start the near cache's owed-deletes thread: {e}"))
}
