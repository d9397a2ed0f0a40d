//! Saying when deletes run late. A commit whose deletes reach the spools, or are acknowledged
//! by a destination, more than [`LATE`] after it was made is said on standard error with the
//! unix time (at most once a second for each place), so that a long fault run's stale reads
//! can be placed against what held their deletes: the commit log (the commits were read
//! late), the replica gate or the spools (read in time, spooled late), or a destination
//! (spooled in time, acknowledged late). docs/design/faults.md, "What it found".
//!
//! ```text
//!   follow: a batch read ──► replica gate ──► Handing::on spools it ──► spooled(...) line
//!   spool observer: a record acknowledged ──► acknowledged(...) line
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Older than this is late: the fault harness's bound within a region.
pub const LATE: Duration = Duration::from_secs(1);

/// How often one place may say so.
const SAY_EVERY: Duration = Duration::from_secs(1);

/// At most one line every [`SAY_EVERY`].
#[derive(Debug, Default)]
pub struct Throttle(Mutex<Option<Instant>>);

impl Throttle {
    /// Whether a line may be said now (and, if so, that it was).
    pub fn ready(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < SAY_EVERY) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }
}

/// Seconds since the epoch, now: the time the harness's logs and the lines share.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// Commits reached the spools late: `age` after the oldest was made, `since_read` after the
/// commit log gave them (the rest of `age` is the log's own lateness).
pub fn spooled(age: Duration, since_read: Duration, commits: usize) -> String {
    format!(
        "shoal invalidator: late: {commits} commits reached the spools {:.2} s after the oldest was made \
         (read from the commit log {:.2} s after it, then {:.2} s to the spools); unix time {:.3}",
        age.as_secs_f64(),
        age.saturating_sub(since_read).as_secs_f64(),
        since_read.as_secs_f64(),
        unix_now()
    )
}

/// A destination acknowledged deletes of a commit made `age` before.
pub fn acknowledged(destination: &str, age: Duration) -> String {
    format!(
        "shoal invalidator: late: {destination} acknowledged deletes of a commit made {:.2} s before; unix time {:.3}",
        age.as_secs_f64(),
        unix_now()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_one_line_through_a_second() {
        let throttle = Throttle::default();
        assert!(throttle.ready());
        assert!(!throttle.ready());
    }

    #[test]
    fn a_spooled_line_splits_the_age_into_the_log_and_the_rest() {
        let line = spooled(Duration::from_millis(2500), Duration::from_millis(400), 7);
        assert!(line.contains("7 commits reached the spools 2.50 s after"), "{line}");
        assert!(line.contains("read from the commit log 2.10 s after it, then 0.40 s"), "{line}");
        assert!(acknowledged("h:1", Duration::from_millis(1200))
            .contains("h:1 acknowledged deletes of a commit made 1.20 s"));
    }
}
