//! `shoal bench load`: a get/set mix against one server, with throughput, latency
//! percentiles, and the server's CPU time per request.

use crate::engine::{Clients, Phase, Schedule};
use crate::keys::{Distribution, KeyChooser, KeySpace};
use crate::pin::CpuList;
use crate::progress::progress_bar;
use crate::tally::Tally;
use crate::target::{CpuTime, Target};
use crate::workload::{Mix, Order, RequestSource, ValueSize};
use clap::Parser;
use serde_json::{json, Value};
use std::fmt;
use std::time::Duration;

/// Pipeline depth of the prefill (deep, so that it is quick).
const PREFILL_PIPELINE: usize = 32;

/// Raw memcached-protocol load against one server (memcached, Shoal, a router…).
///
/// Closed loop by default: each connection keeps `--pipeline` requests in flight. With
/// `--rate`, open loop: requests go out on a fixed schedule and latency is measured from
/// when each was due. Reports throughput, latency percentiles, hits, misses and errors, and
/// the server's CPU time per request from its `stats` rusage before and after.
#[derive(Parser, Debug, Clone)]
#[command(name = "load")]
pub struct LoadOptions {
    /// The server and its protocol.
    #[command(flatten)]
    pub target: Target,
    /// Connections, all threads together.
    #[arg(long, short = 'c', default_value_t = 1, value_parser = at_least_one)]
    pub connections: usize,
    /// Generator threads; connections are dealt to them in turn.
    #[arg(long, short = 't', default_value_t = 1, value_parser = at_least_one)]
    pub threads: usize,
    /// Requests each connection keeps in flight.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub pipeline: usize,
    /// Keys per get (text: one `get` with them all; meta: one `mg` each; binary: one `GETKQ`
    /// each and a `NOOP`, or one `GETK` for a single key).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub multiget: u32,
    /// Fraction of requests that are gets; the rest are sets.
    #[arg(long, default_value_t = 0.9, value_parser = fraction)]
    pub get_ratio: f64,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Bytes per key (`key:` and the zero-padded key number).
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// How keys are drawn: uniform, zipf, zipf:SKEW, latest or latest:SKEW (SKEW 0.99 by default).
    #[arg(long, default_value = "uniform")]
    pub distribution: Distribution,
    /// Bytes per value set: one size, or MIN-MAX for sizes drawn uniformly.
    #[arg(long, default_value = "100")]
    pub value_size: ValueSize,
    /// Seconds to run (ignored with --requests).
    #[arg(long, short = 'd', default_value_t = 10.0, value_parser = positive)]
    pub duration: f64,
    /// Run exactly this many requests instead of for a duration.
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Open loop: send this many requests per second in total, on a fixed schedule.
    #[arg(long, value_parser = positive)]
    pub rate: Option<f64>,
    /// Set every key once before the measured run.
    #[arg(long)]
    pub prefill: bool,
    /// Pin generator threads to these CPUs, in turn (taskset's syntax: 1 or 0,2 or 0-3).
    #[arg(long)]
    pub pin: Option<CpuList>,
    /// How gets reach the server: `network` (the protocol, every request), or `shm` (gets
    /// read through Shoal's shared memory by shoal-client, one client per connection and
    /// thread; sets over its connection).
    #[arg(long, value_enum, default_value_t = Through::Network)]
    pub through: Through,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The path gets take (`--through`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Through {
    /// memcached's protocol over the connection.
    Network,
    /// Shoal's shared memory, through shoal-client.
    Shm,
}

pub(crate) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(value) if value >= 1 => Ok(value),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

pub(crate) fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(format!("{text:?} is not a fraction between 0 and 1")),
    }
}

pub(crate) fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value > 0.0 && value.is_finite() => Ok(value),
        _ => Err(format!("{text:?} is not a positive number")),
    }
}

/// What a load run measured, with the options that produced it.
#[derive(Debug)]
pub struct LoadReport {
    /// The run's options.
    pub options: LoadOptions,
    /// Requests, replies and latencies of the measured run (not the prefill).
    pub tally: Tally,
    /// From the first request to the last reply.
    pub elapsed: Duration,
    /// Server CPU time spent during the measured run, if it reports it.
    pub server_cpu: Option<CpuTime>,
}

impl LoadReport {
    /// Requests completed per second.
    pub fn requests_per_second(&self) -> f64 {
        self.tally.requests() as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Server CPU microseconds (user + system) per request completed.
    pub fn server_cpu_us_per_request(&self) -> Option<f64> {
        Some(self.per_request_us(self.server_cpu?.total()))
    }

    fn per_request_us(&self, seconds: f64) -> f64 {
        seconds * 1e6 / self.tally.requests().max(1) as f64
    }

    /// The report, options included, as one JSON object.
    pub fn to_json(&self) -> Value {
        let o = &self.options;
        let t = &self.tally;
        json!({
            "server": o.target.server.to_string(), "protocol": o.target.protocol.to_string(),
            "connections": o.connections, "threads": o.threads, "pipeline": o.pipeline,
            "multiget": o.multiget, "get_ratio": o.get_ratio, "keys": o.keys, "key_size": o.key_size,
            "value_size": o.value_size.to_string(), "distribution": o.distribution.to_string(),
            "rate": o.rate, "prefill": o.prefill, "through": format!("{:?}", o.through).to_lowercase(),
            "seconds": self.elapsed.as_secs_f64(), "requests": t.requests(),
            "requests_per_second": self.requests_per_second(),
            "gets": t.gets, "sets": t.sets, "hits": t.hits, "misses": t.misses, "errors": t.errors,
            "behind_schedule": t.behind_schedule,
            "latency_us": t.latency().to_json(),
            "server_cpu_seconds": self.server_cpu.map(|c| c.total()),
            "server_cpu_us_per_request": self.server_cpu_us_per_request(),
            "server_user_us_per_request": self.server_cpu.map(|c| self.per_request_us(c.user)),
            "server_system_us_per_request": self.server_cpu.map(|c| self.per_request_us(c.system)),
        })
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        let t = &self.tally;
        let schedule = match (o.rate, o.through) {
            (Some(rate), _) => format!("open loop at {rate} req/s"),
            (None, Through::Network) => "closed loop".to_owned(),
            (None, Through::Shm) => "closed loop, gets through shared memory".to_owned(),
        };
        writeln!(
            f,
            "{} ({}): {} thread(s), {} connection(s), pipeline {}, {:.0}% gets of {} key(s), {} keys of {} B ({}), \
             values {} B, {schedule}",
            o.target.server,
            o.target.protocol,
            o.threads,
            o.connections,
            o.pipeline,
            o.get_ratio * 100.0,
            o.multiget,
            o.keys,
            o.key_size,
            o.distribution,
            o.value_size
        )?;
        writeln!(
            f,
            "  requests    {} in {:.2} s = {:.0} req/s",
            t.requests(),
            self.elapsed.as_secs_f64(),
            self.requests_per_second()
        )?;
        writeln!(
            f,
            "  replies     {} gets ({} hits, {} misses), {} sets, {} errors",
            t.gets, t.hits, t.misses, t.sets, t.errors
        )?;
        let l = t.latency();
        writeln!(
            f,
            "  latency µs  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  (mean {:.1})",
            l.p50, l.p90, l.p99, l.p999, l.max, l.mean
        )?;
        if t.behind_schedule > 0 {
            writeln!(
                f,
                "  behind      {} requests due were never sent: the server did not keep up with the rate, \
                 and the latency above leaves them out",
                t.behind_schedule
            )?;
        }
        match self.server_cpu {
            Some(cpu) => writeln!(
                f,
                "  server CPU  {:.3} s user+system = {:.2} µs per request ({:.2} user, {:.2} system)",
                cpu.total(),
                self.per_request_us(cpu.total()),
                self.per_request_us(cpu.user),
                self.per_request_us(cpu.system),
            ),
            None => writeln!(f, "  server CPU  unknown (no rusage in its stats)"),
        }
    }
}

/// Runs the load the options describe and measures it.
pub fn run_load(options: &LoadOptions) -> Result<LoadReport, String> {
    let space = KeySpace::new(options.keys, options.key_size)?;
    let mut clients =
        Clients::connect(&options.target, options.connections, options.threads, options.pin.clone())?;
    if options.prefill {
        prefill(&mut clients, options, space)?;
    }
    let cpu_before = cpu_time(&options.target);
    let phase = Phase {
        pipeline: options.pipeline,
        schedule: options.rate.map_or(Schedule::ClosedLoop, |rate| Schedule::OpenLoop { rate }),
        duration: match options.requests {
            Some(_) => None,
            None => Some(Duration::from_secs_f64(options.duration)),
        },
    };
    let chooser = KeyChooser::new(options.distribution, options.keys);
    let connections = clients.connection_count() as u64;
    let source_for = |connection: usize| {
        let connection = connection as u64;
        let mix = Mix { get_ratio: options.get_ratio, multiget: options.multiget, keys: chooser.clone() };
        // --requests is shared out evenly, the first connections taking the remainder.
        let remaining = options.requests.map(|n| n / connections + u64::from(connection < n % connections));
        let seed = 0x5eed_0000 + connection;
        RequestSource::new(
            options.target.protocol,
            space,
            options.value_size,
            Order::Mixed { mix, remaining },
            seed,
        )
    };
    // The bar counts requests with --requests, milliseconds otherwise.
    let bar = progress_bar("load", Some(options.requests.unwrap_or((options.duration * 1e3) as u64)));
    let tick = |completed: u64, elapsed: Duration| {
        bar.set_message(format!("{:.0} req/s", completed as f64 / elapsed.as_secs_f64().max(1e-3)));
        bar.set_position(if options.requests.is_some() { completed } else { elapsed.as_millis() as u64 });
    };
    let outcome = match options.through {
        Through::Network => clients.run(&phase, source_for, tick),
        Through::Shm => crate::shm_load::run(options, space, tick),
    };
    bar.finish_and_clear();
    let outcome = outcome?;
    let cpu_after = cpu_time(&options.target);
    Ok(LoadReport {
        options: options.clone(),
        tally: outcome.tally,
        elapsed: outcome.elapsed,
        server_cpu: cpu_after.zip(cpu_before).map(|(after, before)| after.since(before)),
    })
}

/// The server's CPU time so far, or `None` (with a warning) if it does not say.
fn cpu_time(target: &Target) -> Option<CpuTime> {
    let server = &target.server;
    match target.tls().and_then(|tls| server.stats_with(tls.as_ref())).map(|stats| stats.cpu_time()) {
        Ok(Some(seconds)) => Some(seconds),
        Ok(None) => {
            eprintln!("warning: {server} reports no rusage_user/rusage_system in `stats`");
            None
        }
        Err(error) => {
            eprintln!("warning: {error}");
            None
        }
    }
}

/// Sets every key once, the keys shared out between the connections in contiguous ranges.
fn prefill(clients: &mut Clients, options: &LoadOptions, space: KeySpace) -> Result<(), String> {
    let connections = clients.connection_count() as u64;
    let keys = space.count();
    let phase = Phase {
        pipeline: PREFILL_PIPELINE.max(options.pipeline),
        schedule: Schedule::ClosedLoop,
        duration: None,
    };
    let source_for = |connection: usize| {
        let connection = connection as u64;
        let order = Order::sequential_part(0..keys, connection, connections);
        RequestSource::new(options.target.protocol, space, options.value_size, order, connection)
    };
    let bar = progress_bar("prefill", Some(keys));
    let outcome = clients.run(&phase, source_for, |completed, _| bar.set_position(completed));
    bar.finish_and_clear();
    let errors = outcome?.tally.errors;
    if errors > 0 {
        return Err(format!("{errors} of {keys} prefill sets failed on {}", options.target.server));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use crate::target::ServerAddress;

    #[test]
    fn options_have_usable_defaults_and_refuse_nonsense() {
        let options = LoadOptions::try_parse_from(["load"]).unwrap();
        assert_eq!(options.target.server, ServerAddress::Tcp("127.0.0.1:11211".into()));
        assert_eq!((options.connections, options.threads, options.pipeline, options.multiget), (1, 1, 1, 1));
        let parsed = LoadOptions::try_parse_from([
            "load",
            "--server",
            "/tmp/mc.sock",
            "--protocol",
            "meta",
            "-c",
            "50",
            "--get-ratio",
            "1",
            "--distribution",
            "zipf:1.1",
            "--value-size",
            "10-20",
            "--rate",
            "5000",
            "--pin",
            "1",
        ])
        .unwrap();
        assert_eq!(parsed.target.protocol, Protocol::Meta);
        let binary =
            LoadOptions::try_parse_from(["load", "--protocol", "binary", "--multiget", "10"]).unwrap();
        assert_eq!((binary.target.protocol, binary.multiget), (Protocol::Binary, 10));
        assert_eq!(parsed.distribution, Distribution::Zipf { skew: 1.1 });
        for bad in [
            &["--get-ratio", "1.5"][..],
            &["--connections", "0"],
            &["--pipeline", "0"],
            &["--rate", "0"],
            &["--duration", "-1"],
            &["--distribution", "pareto"],
            &["--protocol", "ascii"],
        ] {
            let args = std::iter::once("load").chain(bad.iter().copied());
            assert!(LoadOptions::try_parse_from(args).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn cpu_per_request_divides_the_servers_cpu_time_by_the_requests() {
        let mut tally = Tally::default();
        for _ in 0..4 {
            tally.record(crate::protocol::RequestKind::Set, Default::default(), Duration::from_micros(5));
        }
        let report = LoadReport {
            options: LoadOptions::try_parse_from(["load"]).unwrap(),
            tally,
            elapsed: Duration::from_secs(2),
            server_cpu: Some(CpuTime { user: 0.000_002, system: 0.000_008 }),
        };
        assert_eq!(report.requests_per_second(), 2.0);
        assert!((report.server_cpu_us_per_request().unwrap() - 2.5).abs() < 1e-9);
        let json = report.to_json();
        assert_eq!(json["requests"], 4);
        assert_eq!(json["latency_us"]["p50"].as_f64().map(|p| (p - 5.0).abs() < 0.01), Some(true));
        assert!(report.to_string().contains("2.50 µs per request (0.50 user, 2.00 system)"), "{report}");
        assert!((json["server_user_us_per_request"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    }
}
