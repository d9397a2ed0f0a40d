//! `shoal provision`: turns a power-proportional pool's servers on and off with the load
//! (Proteus). See the crate's doc for the data flow; [`plan`] decides, the state file
//! (`shoal_client::provisioning`, which routers and clients follow) remembers and tells,
//! [`announce`] finds the files routers follow, [`servers`] starts and stops processes,
//! [`signal`] measures.

pub mod announce;
mod metrics;
pub mod plan;
pub mod servers;
pub mod signal;

use clap::Parser;
use plan::Planner;
use serde_json::json;
use servers::Servers;
use shoal_client::provisioning::{State, Transition};
use signal::LoadSignal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// `shoal provision`.
#[derive(Debug, Parser)]
#[command(
    about = "Turn a Proteus pool's servers on and off with the load, in its fixed order, announcing each transition to the routers",
    after_help = "The pool's servers, in the provisioning order, come from --servers or from the pool in the\n\
        first --router-config (placed with \"hash\": \"proteus\" for smooth transitions; a router\n\
        cuts a pool placed otherwise to its servers on). Examples:\n  \
        shoal provision --router-config router.json --pool A --target-rps 50000 --drain 30\n  \
        shoal provision --servers 127.0.0.1:11211,127.0.0.1:11212 --spawn --server-args='-m 64 --digest-keys 100000' \\\n    \
        --schedule diurnal.txt --target-rps 2000 --state /var/lib/shoal/provision-A.json\n\
        A router follows the pool when its configuration names the state file, relative to its own\n\
        directory: \"pools\": { \"A\": { \"servers\": [...], \"provisioning\": \"provision-A.json\" } }.\n\
        The router's configuration is read, never written."
)]
pub struct ProvisionArgs {
    /// The pool's servers in the provisioning order (host:port, comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT,…")]
    pub servers: Vec<String>,
    /// A router configuration (repeat for every router), read and never written: its pool's
    /// servers are the provisioning order, and its pool's "provisioning" names the state file
    /// that router follows, which this provisioner writes.
    #[arg(long = "router-config", value_name = "FILE")]
    pub router_configs: Vec<PathBuf>,
    /// The pool's name in the router configurations.
    #[arg(long, default_value = "A")]
    pub pool: String,
    /// What the state files tell: transition (Proteus, old owners asked while it lasts), or
    /// active (the servers on alone: Proteus without smooth transitions; a pool placed
    /// otherwise is cut to its servers on either way).
    #[arg(long, value_enum, default_value = "transition")]
    pub announce: announce::Announce,
    /// Requests per second one server should carry.
    #[arg(long, value_name = "RPS")]
    pub target_rps: f64,
    /// Turn a server off only once the others would run this fraction below their target.
    #[arg(long, default_value_t = 0.2)]
    pub hysteresis: f64,
    /// The drain period in seconds (the hot data's TTL): how long a transition lasts, during
    /// which old owners are still asked, before a server turned off stops.
    #[arg(long, default_value_t = 30.0)]
    pub drain: f64,
    /// Seconds between two looks at the load.
    #[arg(long, default_value_t = 5.0)]
    pub interval: f64,
    /// The fewest servers on.
    #[arg(long, default_value_t = 1)]
    pub min_active: usize,
    /// The most servers on (default: all of them).
    #[arg(long)]
    pub max_active: Option<usize>,
    /// Servers on at the first start (default: all); later starts resume from --state.
    #[arg(long)]
    pub initial_active: Option<usize>,
    /// Follow a schedule file (`<seconds> <requests per second>` lines) instead of the servers' stats.
    #[arg(long, value_name = "FILE")]
    pub schedule: Option<PathBuf>,
    /// Start and stop the `shoal server` processes too (servers on this host).
    #[arg(long)]
    pub spawn: bool,
    /// Arguments for every spawned server, after `-l <host> -p <port>`.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    pub server_args: Option<String>,
    /// Where the state (servers on, transition under way) is kept across restarts; clients
    /// follow it (default: the state file the first --router-config's pool names).
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Serve Prometheus metrics at /metrics and the state at /status on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<String>,
    /// Log decisions as JSON lines on standard output (text on standard error otherwise).
    #[arg(long)]
    pub json: bool,
    /// Stop after this many seconds (experiments); default: run until killed.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
}

/// What the provisioner shows at `/metrics` and `/status`.
#[derive(Debug)]
pub struct Status {
    /// The state as last announced.
    pub state: State,
    /// The last load measured.
    pub load: Option<f64>,
    /// Transitions started up.
    pub turned_on: u64,
    /// Transitions started down.
    pub turned_off: u64,
    /// The last decision's reason.
    pub reason: String,
}

/// The provisioner's run: its state, how it announces, and what it logs.
struct Provisioner {
    args: ProvisionArgs,
    planner: Planner,
    servers: Option<Servers>,
    status: Arc<Mutex<Status>>,
    /// Where the state is written: `--state` (first, read back on a restart), then every
    /// other file a router follows.
    state_files: Vec<PathBuf>,
}

/// Runs `shoal provision` until it is killed (or `--duration` passes).
pub fn run(args: ProvisionArgs) -> Result<(), String> {
    let servers = pool_servers(&args)?;
    // Proteus placement validates the order: duplicates, too many servers, bad addresses.
    shoal_route::Placement::from_strings(shoal_route::Hashing::Proteus, &servers)
        .map_err(|e| format!("the pool's servers: {e}"))?;
    let count = servers.len();
    let max_active = args.max_active.unwrap_or(count);
    if max_active > count {
        return Err(format!("--max-active {max_active}: the pool has {}", n_servers(count)));
    }
    let planner = Planner::new(args.target_rps, args.hysteresis, args.min_active, max_active)?;
    let seconds = |s: f64, least: f64| s.is_finite() && s >= least;
    if !seconds(args.drain, 0.0) || !seconds(args.interval, 1e-3) {
        return Err("--drain and --interval: seconds (--interval above 0)".into());
    }
    let spawned = match args.spawn {
        true => {
            let extra = args.server_args.as_deref().unwrap_or("").split_whitespace().map(str::to_string);
            let program =
                std::env::current_exe().map_err(|e| format!("cannot find the shoal binary: {e}"))?;
            Some(Servers::new(program, extra.collect(), &servers)?)
        }
        false => None,
    };
    let state_files = state_files(&args)?;
    let state = match State::load(&state_files[0])? {
        Some(state) if state.servers != servers => {
            return Err(format!(
                "--state {}: it is for the servers {:?}, not {:?}; remove it to start afresh",
                state_files[0].display(),
                state.servers,
                servers
            ))
        }
        Some(state) => state,
        None => {
            let active = args.initial_active.unwrap_or(max_active);
            if active == 0 || active > count {
                return Err(format!("--initial-active {active}: from 1 to the pool's {}", n_servers(count)));
            }
            State { servers: servers.clone(), active, transition: None }
        }
    };
    let status = Arc::new(Mutex::new(Status {
        state: state.clone(),
        load: None,
        turned_on: 0,
        turned_off: 0,
        reason: "starting".into(),
    }));
    if let Some(address) = &args.metrics_listen {
        metrics::spawn(address, status.clone())?;
    }
    let mut provisioner = Provisioner { args, planner, servers: spawned, status, state_files };
    provisioner.serve(state)
}

/// The state files: `--state`, then each one a router follows (each once); at least one.
fn state_files(args: &ProvisionArgs) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = args.state.iter().cloned().collect();
    let same = |a: &Path, b: &Path| std::path::absolute(a).ok() == std::path::absolute(b).ok();
    for path in &args.router_configs {
        let file = announce::followed_state(path, &args.pool)?;
        if !files.iter().any(|f| same(f, &file)) {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err("nowhere to keep the state: give --state FILE (clients follow it), or a \
                    --router-config whose pool names the state file it follows"
            .into());
    }
    Ok(files)
}

/// The pool's servers: `--servers`, or the pool in the first router configuration (and every
/// configuration must list the same, in the same order).
fn pool_servers(args: &ProvisionArgs) -> Result<Vec<String>, String> {
    let mut servers = args.servers.clone();
    for path in &args.router_configs {
        let listed = announce::pool_servers(path, &args.pool)?;
        if servers.is_empty() {
            servers = listed;
        } else if listed != servers {
            return Err(format!(
                "--router-config {}: pool {:?} lists {listed:?}, not the provisioning order {servers:?}",
                path.display(),
                args.pool
            ));
        }
    }
    if servers.is_empty() {
        return Err("no servers: give --servers or a --router-config with the pool".into());
    }
    Ok(servers)
}

impl Provisioner {
    fn serve(&mut self, mut state: State) -> Result<(), String> {
        // Whatever was on before, the servers the state names as on (or draining) answer first.
        let on = state.transition.map_or(state.active, |t| t.from.max(state.active));
        for i in 0..on {
            if let Some(servers) = &mut self.servers {
                servers.start(i)?;
            }
        }
        self.announce(&state)?;
        self.log("start", &state, None, "resuming from the state file or the initial count");
        let mut signal = match &self.args.schedule {
            Some(path) => LoadSignal::schedule(path)?,
            None => LoadSignal::stats(),
        };
        let started = std::time::Instant::now();
        let interval = Duration::from_secs_f64(self.args.interval);
        loop {
            if self.args.duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
                return Ok(());
            }
            if let Some(servers) = &mut self.servers {
                servers.stop_due();
            }
            if let Some(t) = state.transition {
                if SystemTime::now() < t.until {
                    std::thread::sleep(
                        interval.min(t.until.duration_since(SystemTime::now()).unwrap_or_default()),
                    );
                    continue;
                }
                state.transition = None;
                self.announce(&state)?;
                // The servers turned off have drained: stop them (after a grace period).
                for i in state.active..t.from {
                    if let Some(servers) = &mut self.servers {
                        servers.stop_later(i);
                    }
                }
                let (from, to) = (n_servers(t.from), n_servers(state.active));
                self.log("transition-end", &state, None, &format!("from {from} to {to} done"));
            }
            let load = signal.sample(&state.servers[..state.active]);
            self.status.lock().unwrap_or_else(|p| p.into_inner()).load = load;
            if let Some(load) = load {
                let decision = self.planner.decide(load, state.active);
                self.status.lock().unwrap_or_else(|p| p.into_inner()).reason = decision.reason.clone();
                if decision.active != state.active {
                    if decision.active > state.active {
                        if let Some(servers) = &mut self.servers {
                            servers.start(state.active)?;
                        }
                    }
                    let from = state.active;
                    let until = SystemTime::now() + Duration::from_secs_f64(self.args.drain);
                    state.transition = Some(Transition { from, until });
                    state.active = decision.active;
                    self.announce(&state)?;
                    let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
                    if state.active > from {
                        status.turned_on += 1;
                    } else {
                        status.turned_off += 1;
                    }
                    drop(status);
                    self.log("transition-start", &state, Some(load), &decision.reason);
                    continue;
                }
            }
            std::thread::sleep(interval);
        }
    }

    /// Writes the state to every state file, `--state` first (each whole, then renamed into
    /// place: routers and clients reload it).
    fn announce(&self, state: &State) -> Result<(), String> {
        let announced = announce::announced(state, self.args.announce);
        for path in &self.state_files {
            announced.save(path)?;
        }
        self.status.lock().unwrap_or_else(|p| p.into_inner()).state = state.clone();
        Ok(())
    }

    fn log(&self, event: &str, state: &State, load: Option<f64>, reason: &str) {
        let from = state.transition.map(|t| t.from);
        if self.args.json {
            let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            let line = json!({ "time": now.as_secs_f64(), "event": event, "active": state.active,
                               "from": from, "load_rps": load, "reason": reason });
            println!("{line}");
        } else {
            let from = from.map(|f| format!(" (from {f})")).unwrap_or_default();
            eprintln!("shoal provision: {event}: {} on{from}: {reason}", n_servers(state.active));
        }
    }
}

/// `1 server`, `3 servers`.
pub(crate) fn n_servers(n: usize) -> String {
    format!("{n} server{}", if n == 1 { "" } else { "s" })
}
