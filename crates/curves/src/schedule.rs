//! Load schedules: requests per second over time, from a file (a daily curve compressed into
//! minutes, for experiments).
//!
//! A schedule is a load curve, as a hit-ratio curve is a cache's: the control plane plans from
//! it. It lives here, below both of its users, because neither may depend on the other:
//! `shoal provision --schedule` (shoal-controller) turns servers on and off to follow one, and
//! `shoal bench ycsb --rate-schedule` (shoal-bench) generates its load from the same file.

use std::path::Path;

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
        let text = shoal_textfile::read_text(path, option, shoal_textfile::DEFAULT_MAX_BYTES)?;
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
    }
}
