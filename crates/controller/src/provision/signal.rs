//! The load the provisioner follows: requests per second measured from the servers' own
//! `stats`, or a schedule file (a daily curve compressed into minutes, for experiments; its
//! parser, [`Schedule`], is `shoal-curves`', shared with `shoal bench ycsb`).

use shoal_client::{Client, Options};
use shoal_curves::Schedule;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the load comes from.
pub enum LoadSignal {
    /// `cmd_get + cmd_set` of every server that answers, per second between two samples.
    Stats {
        /// Each server's last counts, and when they were read.
        last: HashMap<String, (Instant, u64)>,
    },
    /// Requests per second by time since the start.
    Schedule { start: Instant, schedule: Schedule },
}

impl LoadSignal {
    /// Measured from the servers' `stats`.
    pub fn stats() -> LoadSignal {
        LoadSignal::Stats { last: HashMap::new() }
    }

    /// A schedule file ([`Schedule`]), its times counted from now.
    pub fn schedule(path: &Path) -> Result<LoadSignal, String> {
        Ok(LoadSignal::Schedule { start: Instant::now(), schedule: Schedule::read(path, "--schedule")? })
    }

    /// The load now; `None` while it cannot be told yet (the first sample of `stats`).
    pub fn sample(&mut self, servers: &[String]) -> Option<f64> {
        match self {
            LoadSignal::Schedule { start, schedule } => Some(schedule.rate_at(start.elapsed().as_secs_f64())),
            LoadSignal::Stats { last } => {
                let mut total = 0.0;
                let mut known = false;
                for server in servers {
                    let Some(count) = requests(server) else { continue };
                    let now = Instant::now();
                    if let Some((then, before)) = last.insert(server.clone(), (now, count)) {
                        // A restarted server counts from 0 again: all it counted is new.
                        let delta = if count >= before { count - before } else { count };
                        total += delta as f64 / now.duration_since(then).as_secs_f64().max(1e-3);
                        known = true;
                    }
                }
                known.then_some(total)
            }
        }
    }
}

/// A server's `cmd_get + cmd_set`, if it answers.
fn requests(server: &str) -> Option<u64> {
    let timeout = Some(Duration::from_millis(500));
    let options = Options { connect_timeout: timeout, io_timeout: timeout, local: false };
    let stats = Client::connect(server, options).ok()?.stats(None).ok()?;
    let stat = |name: &str| stats.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.parse::<u64>().ok());
    Some(stat("cmd_get")? + stat("cmd_set")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schedule's own rules are tested with it, in `shoal_curves::schedule`.
    #[test]
    fn a_schedule_signal_samples_the_rate_since_its_start() {
        let schedule = Schedule::parse("5 100\n30 500\n60 50\n", "s").unwrap();
        let start = Instant::now() - Duration::from_secs(45);
        let mut signal = LoadSignal::Schedule { start, schedule };
        assert_eq!(signal.sample(&[]), Some(500.0));
    }
}
