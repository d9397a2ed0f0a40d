//! The load the provisioner follows: requests per second measured from the servers' own
//! `stats`, or a schedule file (a daily curve compressed into minutes, for experiments).

use shoal_client::{Client, Options};
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

/// A load over time, from a file of `<seconds> <requests per second>` lines (seconds
/// increasing; `#` starts a comment): each rate holds until the next line's time, and the last
/// line's time is where the schedule ends. `shoal provision --schedule` follows one, and
/// `shoal bench ycsb --rate-schedule` generates its load from the same file.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    steps: Vec<(f64, f64)>,
}

impl Schedule {
    /// Reads a schedule file (`option` names the flag in errors).
    pub fn read(path: &Path, option: &str) -> Result<Schedule, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{option} {}: {e}", path.display()))?;
        Schedule::parse(&text, &format!("{option} {}", path.display()))
    }

    /// Parses a schedule's text (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<Schedule, String> {
        let mut steps: Vec<(f64, f64)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = || {
                format!(
                    "{source}:{}: {line:?} is not \"<seconds> <requests per second>\" with seconds increasing",
                    i + 1
                )
            };
            let mut words = line.split_whitespace();
            let (Some(at), Some(rps), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad());
            };
            let (Ok(at), Ok(rps)) = (at.parse::<f64>(), rps.parse::<f64>()) else { return Err(bad()) };
            if !(at.is_finite() && rps.is_finite() && at >= 0.0 && rps >= 0.0)
                || steps.last().is_some_and(|(last, _)| at <= *last)
            {
                return Err(bad());
            }
            steps.push((at, rps));
        }
        if steps.is_empty() {
            return Err(format!("{source}: no steps"));
        }
        Ok(Schedule { steps })
    }

    /// The rate `seconds` after the start (0 before the first step).
    pub fn rate_at(&self, seconds: f64) -> f64 {
        self.steps.iter().take_while(|(at, _)| *at <= seconds).last().map_or(0.0, |(_, rps)| *rps)
    }

    /// The time of the first step after `seconds`, if any.
    pub fn next_step_after(&self, seconds: f64) -> Option<f64> {
        self.steps.iter().map(|(at, _)| *at).find(|at| *at > seconds)
    }

    /// The last step's time: where the schedule ends.
    pub fn end(&self) -> f64 {
        self.steps.last().map_or(0.0, |(at, _)| *at)
    }
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

    #[test]
    fn schedules_parse_and_bad_lines_are_named() {
        let parse = |text: &str| Schedule::parse(text, "s.txt");
        let schedule = parse("# diurnal\n0 100\n30 500 # peak\n\n60 50\n").unwrap();
        assert_eq!(schedule.steps, [(0.0, 100.0), (30.0, 500.0), (60.0, 50.0)]);
        assert!(parse("0 100\n0 200\n").unwrap_err().contains("s.txt:2"));
        assert!(parse("0 fast\n").unwrap_err().contains("s.txt:1"));
        assert!(parse("0 1 2\n").unwrap_err().contains("s.txt:1"));
        assert!(parse("-1 2\n").unwrap_err().contains("s.txt:1"));
        assert!(parse("# nothing\n").unwrap_err().contains("no steps"));
    }

    #[test]
    fn a_schedule_holds_each_step() {
        let schedule = Schedule::parse("5 100\n30 500\n60 50\n", "s").unwrap();
        assert_eq!(
            (schedule.rate_at(0.0), schedule.rate_at(5.0), schedule.rate_at(45.0)),
            (0.0, 100.0, 500.0)
        );
        assert_eq!(schedule.next_step_after(30.0), Some(60.0));
        assert_eq!((schedule.next_step_after(60.0), schedule.end()), (None, 60.0));
        let start = Instant::now() - Duration::from_secs(45);
        let mut signal = LoadSignal::Schedule { start, schedule };
        assert_eq!(signal.sample(&[]), Some(500.0));
    }
}
