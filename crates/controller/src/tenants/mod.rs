//! `shoal controller`: sizes every server's tenants from their hit-ratio curves (Moirai).
//!
//! Every `--interval` it reads each server's `stats tenants` and every tenant's `curve`
//! ([`poll`]), turns the counters into request rates and plans the server's memory (the sum of
//! its tenants' sizes) for the goal with hysteresis ([`control`], over `shoal_curves::plan`),
//! applies the changed sizes with `tenant_memlimit`, shrinks first ([`rounds`]), and logs each
//! decision with its reason. [`state`] keeps what it knows for the dashboard, `/api/state`
//! and `/metrics` ([`http`]).

pub mod control;
pub mod http;
pub mod poll;
pub mod rounds;
pub mod state;

use clap::Parser;
use control::Mode;
use rounds::{Controller, Settings};
use state::{ServerState, Shared};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `shoal controller`.
#[derive(Debug, Parser)]
#[command(
    about = "Size every server's tenants from their hit-ratio curves (Moirai): plan each server's memory for a goal and apply it with tenant_memlimit",
    after_help = "Every --interval, for each server: `stats tenants` and each tenant's `curve`, request rates\n\
        from the gets since the last round, a plan of the server's memory (the sum of its tenants'\n\
        sizes, in whole segments) kept unless it gains more than --hysteresis, then the changed sizes,\n\
        shrinks first. A refused resize is undone and logged; the sizes in force stay. Examples:\n  \
        shoal controller --server 127.0.0.1:11211 --server 127.0.0.1:11212 --goal slo --http 127.0.0.1:8080\n  \
        shoal controller --server 127.0.0.1:11211 --interval 30s --dry-run --json"
)]
pub struct ControllerArgs {
    /// A server to control (host:port; repeat for each).
    #[arg(long = "server", value_name = "HOST:PORT", required = true)]
    pub servers: Vec<String>,
    /// Time between rounds: 15s–30s in service (shorter for tests); `500ms`, `20s`, `1m`, or
    /// plain seconds.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub interval: Duration,
    /// What to plan for: global (hits per second over all tenants), priorities (weighted by
    /// each tenant's priority), slo (hit-ratio objectives reserved first, then global).
    #[arg(long, value_enum, default_value = "global")]
    pub goal: Mode,
    /// Keep the sizes in force unless a new plan gains more than this fraction (0.01: 1 %).
    #[arg(long, default_value_t = 0.01)]
    pub hysteresis: f64,
    /// Serve the dashboard (/), its state (/api/state) and Prometheus metrics (/metrics) here.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<String>,
    /// Plan and show, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Log decisions as JSON lines on standard output (text on standard error otherwise).
    #[arg(long)]
    pub json: bool,
    /// Connection and I/O timeout per server.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// A duration: `<n>ms`, `<n>s`, `<n>m` or plain seconds, above 0 and at most a day.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let seconds = number.trim().parse::<f64>().ok().map(|n| n * scale);
    match seconds {
        Some(s) if s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?}: a duration above 0 and at most a day, like 500ms, 20s or 1m")),
    }
}

/// Runs `shoal controller` until it is killed.
pub fn run(args: ControllerArgs) -> Result<(), String> {
    if !(args.hysteresis.is_finite() && (0.0..1.0).contains(&args.hysteresis)) {
        return Err(format!("--hysteresis {}: a fraction from 0 up to (not including) 1", args.hysteresis));
    }
    for (i, server) in args.servers.iter().enumerate() {
        let port = server.rsplit_once(':').map(|(_, p)| p.parse::<u16>());
        if !matches!(port, Some(Ok(p)) if p > 0) {
            return Err(format!("--server {server}: give host:port, like 127.0.0.1:11211"));
        }
        if args.servers[..i].contains(server) {
            return Err(format!("--server {server} is given twice"));
        }
    }
    let shared = Arc::new(Mutex::new(Shared {
        mode: args.goal,
        interval_seconds: args.interval.as_secs_f64(),
        dry_run: args.dry_run,
        round: 0,
        resizes: 0,
        refusals: 0,
        servers: args.servers.iter().map(|a| ServerState::new(a)).collect(),
        decisions: Default::default(),
    }));
    if let Some(address) = &args.http {
        http::spawn(address, shared.clone())?;
    }
    let settings = Settings {
        mode: args.goal,
        hysteresis: args.hysteresis,
        dry_run: args.dry_run,
        json: args.json,
        timeout: args.timeout,
    };
    if !args.json {
        eprintln!(
            "shoal controller: {} server(s) every {:?}, goal {}{}{}",
            args.servers.len(),
            args.interval,
            args.goal.name(),
            if args.dry_run { ", dry run" } else { "" },
            args.http.as_deref().map(|a| format!(", dashboard at http://{a}/")).unwrap_or_default()
        );
    }
    let mut controller = Controller::new(settings, &args.servers, shared);
    loop {
        let started = Instant::now();
        controller.round();
        std::thread::sleep(args.interval.saturating_sub(started.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_and_refuse_nonsense() {
        assert_eq!(parse_duration("20s"), Ok(Duration::from_secs(20)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0s", "-1s", "abc", "", "2d", "90000"] {
            assert!(parse_duration(bad).unwrap_err().contains("a duration above 0"), "{bad}");
        }
    }
}
