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
    /// Requests per second by time since the start: each `(seconds, rps)` holds until the next.
    Schedule { start: Instant, steps: Vec<(f64, f64)> },
}

impl LoadSignal {
    /// Measured from the servers' `stats`.
    pub fn stats() -> LoadSignal {
        LoadSignal::Stats { last: HashMap::new() }
    }

    /// A schedule file: one `<seconds since start> <requests per second>` per line, seconds
    /// increasing; `#` starts a comment.
    pub fn schedule(path: &Path) -> Result<LoadSignal, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("--schedule {}: {e}", path.display()))?;
        Ok(LoadSignal::Schedule { start: Instant::now(), steps: parse_schedule(&text, path)? })
    }

    /// The load now; `None` while it cannot be told yet (the first sample of `stats`).
    pub fn sample(&mut self, servers: &[String]) -> Option<f64> {
        match self {
            LoadSignal::Schedule { start, steps } => {
                let t = start.elapsed().as_secs_f64();
                steps.iter().take_while(|(at, _)| *at <= t).last().map(|(_, rps)| *rps)
            }
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

fn parse_schedule(text: &str, path: &Path) -> Result<Vec<(f64, f64)>, String> {
    let mut steps: Vec<(f64, f64)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "--schedule {}:{}: {line:?} is not \"<seconds> <requests per second>\" with seconds increasing",
                path.display(),
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
        return Err(format!("--schedule {}: no steps", path.display()));
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_parse_and_bad_lines_are_named() {
        let path = Path::new("s.txt");
        let steps = parse_schedule("# diurnal\n0 100\n30 500 # peak\n\n60 50\n", path).unwrap();
        assert_eq!(steps, [(0.0, 100.0), (30.0, 500.0), (60.0, 50.0)]);
        assert!(parse_schedule("0 100\n0 200\n", path).unwrap_err().contains("s.txt:2"));
        assert!(parse_schedule("0 fast\n", path).unwrap_err().contains("s.txt:1"));
        assert!(parse_schedule("0 1 2\n", path).unwrap_err().contains("s.txt:1"));
        assert!(parse_schedule("-1 2\n", path).unwrap_err().contains("s.txt:1"));
        assert!(parse_schedule("# nothing\n", path).unwrap_err().contains("no steps"));
    }

    #[test]
    fn a_schedule_holds_each_step() {
        let start = Instant::now() - Duration::from_secs(45);
        let mut signal =
            LoadSignal::Schedule { start, steps: vec![(0.0, 100.0), (30.0, 500.0), (60.0, 50.0)] };
        assert_eq!(signal.sample(&[]), Some(500.0));
    }
}
