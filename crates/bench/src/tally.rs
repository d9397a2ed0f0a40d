//! What a run counted: requests, hits, misses, errors, and a latency histogram; and the
//! percentiles read from it.

use crate::protocol::{Reply, RequestKind};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::time::Duration;

/// Latencies above this are recorded as this (an hour: nothing real gets near it).
const LONGEST_LATENCY_NS: u64 = 3_600_000_000_000;

/// Counts of one thread's, or a whole run's, requests.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Latency of every completed request, in nanoseconds, to 3 significant digits.
    pub latency_ns: Histogram<u64>,
    /// Get requests completed (a multiget counts once).
    pub gets: u64,
    /// Set requests completed.
    pub sets: u64,
    /// Keys that gets found.
    pub hits: u64,
    /// Keys that gets did not find.
    pub misses: u64,
    /// Error answers.
    pub errors: u64,
    /// Open loop only: requests due before the run ended that were never sent, because the
    /// connection's pipeline was full (the server was behind).
    pub behind_schedule: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            latency_ns: Histogram::new_with_bounds(1, LONGEST_LATENCY_NS, 3).expect("valid histogram bounds"),
            gets: 0,
            sets: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            behind_schedule: 0,
        }
    }
}

impl Tally {
    /// Counts one completed request.
    pub fn record(&mut self, kind: RequestKind, reply: Reply, latency: Duration) {
        match kind {
            RequestKind::Get { .. } => self.gets += 1,
            RequestKind::Set => self.sets += 1,
        }
        self.hits += u64::from(reply.hits);
        self.misses += u64::from(reply.misses);
        self.errors += u64::from(reply.errors);
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_ns.saturating_record(nanos.max(1));
    }

    /// Requests completed.
    pub fn requests(&self) -> u64 {
        self.gets + self.sets
    }

    /// Adds another tally's counts to this one.
    pub fn merge(&mut self, other: &Tally) {
        self.latency_ns.add(&other.latency_ns).expect("histograms of the same bounds add");
        self.gets += other.gets;
        self.sets += other.sets;
        self.hits += other.hits;
        self.misses += other.misses;
        self.errors += other.errors;
        self.behind_schedule += other.behind_schedule;
    }

    /// The latency percentiles.
    pub fn latency(&self) -> LatencySummary {
        LatencySummary::of(&self.latency_ns)
    }
}

/// Latency percentiles of a run, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencySummary {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Slowest request.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

impl LatencySummary {
    /// Reads the percentiles of a histogram of nanoseconds (all zero when it is empty).
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let micros = |nanos: u64| nanos as f64 / 1e3;
        let at = |quantile| micros(histogram.value_at_quantile(quantile));
        LatencySummary {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            max: micros(histogram.max()),
            mean: histogram.mean() / 1e3,
        }
    }

    /// `{"p50": …, "p90": …, "p99": …, "p99.9": …, "max": …, "mean": …}`.
    pub fn to_json(&self) -> Value {
        json!({"p50": self.p50, "p90": self.p90, "p99": self.p99, "p99.9": self.p999, "max": self.max, "mean": self.mean})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HIT: Reply = Reply { hits: 1, misses: 0, errors: 0 };

    /// Within the histogram's 3 significant digits.
    fn close(actual: f64, expected: f64) -> bool {
        (actual - expected).abs() <= expected * 1e-3
    }

    #[test]
    fn percentiles_of_a_known_spread() {
        let mut tally = Tally::default();
        for micros in 1..=10_000 {
            tally.record(RequestKind::Get { keys: 1 }, HIT, Duration::from_micros(micros));
        }
        let latency = tally.latency();
        for (actual, expected) in [
            (latency.p50, 5000.0),
            (latency.p90, 9000.0),
            (latency.p99, 9900.0),
            (latency.p999, 9990.0),
            (latency.max, 10_000.0),
            (latency.mean, 5000.5),
        ] {
            assert!(close(actual, expected), "{actual} is not {expected}: {latency:?}");
        }
    }

    #[test]
    fn a_rare_slow_request_shows_only_in_the_tail() {
        let mut tally = Tally::default();
        for _ in 0..9_999 {
            tally.record(RequestKind::Set, Reply::default(), Duration::from_micros(10));
        }
        tally.record(RequestKind::Set, Reply::default(), Duration::from_millis(50));
        let latency = tally.latency();
        assert!(close(latency.p99, 10.0) && close(latency.p999, 10.0), "{latency:?}");
        assert!(close(latency.max, 50_000.0), "{latency:?}");
    }

    #[test]
    fn merged_tallies_add_counts_and_histograms() {
        let mut fast = Tally::default();
        let mut slow = Tally::default();
        for _ in 0..100 {
            fast.record(
                RequestKind::Get { keys: 2 },
                Reply { hits: 1, misses: 1, errors: 0 },
                Duration::from_micros(1),
            );
            slow.record(
                RequestKind::Set,
                Reply { hits: 0, misses: 0, errors: 1 },
                Duration::from_micros(100),
            );
        }
        slow.behind_schedule = 7;
        fast.merge(&slow);
        assert_eq!((fast.gets, fast.sets, fast.requests()), (100, 100, 200));
        assert_eq!((fast.hits, fast.misses, fast.errors, fast.behind_schedule), (100, 100, 100, 7));
        let latency = fast.latency();
        assert!(close(latency.p50, 1.0) && close(latency.p90, 100.0), "{latency:?}");
        assert_eq!(LatencySummary::of(&Tally::default().latency_ns).max, 0.0, "empty");
    }
}
