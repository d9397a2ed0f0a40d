//! `shoal bench balance`: how evenly each placement spreads keys and requests over a pool of
//! `n` servers, for every `n` up to the pool's size, with the servers turned on in a fixed
//! order (Proteus's setting) — and the Proteus digest's size and false-positive rate.
//!
//! Key-space shares: Proteus's are computed exactly from its ring's arcs; the other schemes'
//! are sampled from uniformly random keys. Request shares: the YCSB key space (the `ycsb`
//! bench's keys and Zipf skew) drawn `--requests` times and routed. Both are reported as the
//! largest server's share over the mean share (1 is perfect balance).

use crate::keys::{Distribution, KeyChooser, KeySpace};
use crate::random::Rng;
use clap::Args;
use serde_json::{json, Value};
use shoal_route::digest::Digest;
use shoal_route::{Hashing, Placement, ProteusRing, Server};
use std::fmt;

/// Options of `shoal bench balance`.
#[derive(Args, Debug, Clone)]
pub struct BalanceOptions {
    /// Servers in the pool (turned on one by one, in order).
    #[arg(long, default_value_t = 8)]
    pub servers: usize,
    /// Placements to compare.
    #[arg(long, value_delimiter = ',', default_value = "proteus,ketama_weighted,ketama,jump,modulo")]
    pub hashing: Vec<Hashing>,
    /// Keys of the workload (YCSB's `user…` keys).
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// How requests pick keys (`zipf[:skew]`, `uniform`).
    #[arg(long, default_value = "zipf")]
    pub distribution: Distribution,
    /// Requests routed per placement and server count.
    #[arg(long, default_value_t = 1_000_000)]
    pub requests: u64,
    /// Random keys sampled for the key-space shares of schemes other than Proteus.
    #[arg(long, default_value_t = 1_000_000)]
    pub samples: u64,
    /// The digest's expected keys (per server).
    #[arg(long, default_value_t = 50_000)]
    pub digest_keys: u64,
    /// The digest's target false-positive rate.
    #[arg(long, default_value_t = 1e-4)]
    pub digest_fp: f64,
    /// Absent keys queried to measure the digest's false-positive rate.
    #[arg(long, default_value_t = 10_000_000)]
    pub digest_queries: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One placement with `n` servers on.
#[derive(Debug, Clone)]
pub struct BalanceRow {
    /// The placement.
    pub hashing: Hashing,
    /// Servers on.
    pub active: usize,
    /// Largest key-space share over the mean (`exact`: computed from the ring, not sampled).
    pub keyspace_max_over_mean: f64,
    /// Whether the key-space figure is exact.
    pub exact: bool,
    /// Largest request share over the mean, on the workload.
    pub requests_max_over_mean: f64,
}

/// The digest's geometry and what it measured.
#[derive(Debug, Clone)]
pub struct DigestRow {
    /// Expected keys it was sized for.
    pub keys: u64,
    /// Its target false-positive rate.
    pub target: f64,
    /// Counters.
    pub counters: u64,
    /// Hash positions per key.
    pub positions: u32,
    /// Its snapshot's bytes.
    pub bytes: usize,
    /// Absent keys found "present", over the keys queried.
    pub measured: f64,
    /// The bound on the chance that any counter saturates.
    pub overflow_bound: f64,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct BalanceReport {
    /// The options it ran with.
    pub options: BalanceOptions,
    /// Every placement and server count.
    pub rows: Vec<BalanceRow>,
    /// The digest's row.
    pub digest: DigestRow,
}

fn max_over_mean(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let max = counts.iter().copied().max().unwrap_or(0);
    if total == 0 {
        return 1.0;
    }
    max as f64 * counts.len() as f64 / total as f64
}

/// Proteus's key-space shares with `active` servers on, exactly, from the ring's arcs.
fn proteus_shares(ring: &ProteusRing, active: usize) -> Vec<u128> {
    let mut units = vec![0u128; active];
    for arc in ring.arcs() {
        units[arc.owner_with(active)] += arc.len;
    }
    units
}

/// Measures every placement for every server count, and the digest.
pub fn run_balance(o: &BalanceOptions) -> Result<BalanceReport, String> {
    if o.servers == 0 || o.records == 0 || o.requests == 0 || o.samples == 0 {
        return Err("--servers, --records, --requests and --samples must be at least 1".into());
    }
    let addresses: Vec<Server> = (0..o.servers).map(|i| Server::tcp("127.0.0.1", 11211 + i as u16)).collect();
    let space = KeySpace::new(o.records, crate::ycsb::KEY_BYTES)?;
    let chooser = KeyChooser::new(o.distribution, o.records);
    let mut rows = Vec::new();
    let bar = crate::progress::progress_bar("placements", Some((o.hashing.len() * o.servers) as u64));
    for &hashing in &o.hashing {
        for active in 1..=o.servers {
            let placement = match hashing {
                // Proteus places with the whole pool's ring and the first `active` servers on.
                Hashing::Proteus => Placement::new(hashing, addresses.clone()),
                _ => Placement::new(hashing, addresses[..active].to_vec()),
            }
            .map_err(|e| e.to_string())?;
            let owner = |key: &[u8]| match placement.proteus() {
                Some(ring) => ring.owner_with(active, key).expect("1 ≤ active ≤ servers"),
                None => placement.owner(key),
            };
            let (keyspace_max_over_mean, exact) = match placement.proteus() {
                Some(ring) => {
                    let units = proteus_shares(ring, active);
                    let max = units.iter().max().copied().unwrap_or(0);
                    // Exact rational arithmetic: max · n / L.
                    (
                        max as f64 * active as f64 / ring.units() as f64,
                        units.iter().all(|&u| u * active as u128 == ring.units()),
                    )
                }
                None => {
                    let mut rng = Rng::new(7);
                    let mut counts = vec![0u64; active];
                    for _ in 0..o.samples {
                        counts[owner(format!("random:{:016x}", rng.next_u64()).as_bytes())] += 1;
                    }
                    (max_over_mean(&counts), false)
                }
            };
            let mut rng = Rng::new(11);
            let mut counts = vec![0u64; active];
            for _ in 0..o.requests {
                counts[owner(space.key(chooser.next_get(&mut rng)).as_bytes())] += 1;
            }
            rows.push(BalanceRow {
                hashing,
                active,
                keyspace_max_over_mean,
                exact,
                requests_max_over_mean: max_over_mean(&counts),
            });
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(BalanceReport { options: o.clone(), rows, digest: measure_digest(o)? })
}

fn measure_digest(o: &BalanceOptions) -> Result<DigestRow, String> {
    let mut digest = Digest::sized(o.digest_keys, o.digest_fp).map_err(|e| e.to_string())?;
    for i in 0..o.digest_keys {
        digest.insert(format!("user{i}").as_bytes());
    }
    let positives =
        (0..o.digest_queries).filter(|i| digest.may_contain(format!("absent{i}").as_bytes())).count();
    Ok(DigestRow {
        keys: o.digest_keys,
        target: o.digest_fp,
        counters: digest.counters(),
        positions: digest.hashes(),
        bytes: digest.to_snapshot().len(),
        measured: positives as f64 / o.digest_queries as f64,
        overflow_bound: digest.overflow_bound(o.digest_keys),
    })
}

impl BalanceReport {
    /// Everything as JSON.
    pub fn to_json(&self) -> Value {
        let o = &self.options;
        let d = &self.digest;
        json!({
            "servers": o.servers, "records": o.records, "distribution": o.distribution.to_string(),
            "requests": o.requests, "samples": o.samples,
            "rows": self.rows.iter().map(|r| json!({
                "hashing": r.hashing.to_string(), "active": r.active,
                "keyspace_max_over_mean": r.keyspace_max_over_mean, "keyspace_exact": r.exact,
                "requests_max_over_mean": r.requests_max_over_mean,
            })).collect::<Vec<_>>(),
            "digest": { "keys": d.keys, "target_fp": d.target, "counters": d.counters, "positions": d.positions,
                        "bytes": d.bytes, "measured_fp": d.measured, "overflow_bound": d.overflow_bound },
        })
    }
}

impl fmt::Display for BalanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "Largest share ÷ mean share with n of {} servers on ({} keys, {} requests drawn {}):",
            o.servers, o.records, o.requests, o.distribution
        )?;
        writeln!(f)?;
        write!(f, "| placement | share |")?;
        (1..=o.servers).try_for_each(|n| write!(f, " n={n} |"))?;
        writeln!(f)?;
        write!(f, "|---|---|")?;
        (1..=o.servers).try_for_each(|_| write!(f, "---:|"))?;
        writeln!(f)?;
        for &hashing in &o.hashing {
            let rows: Vec<&BalanceRow> = self.rows.iter().filter(|r| r.hashing == hashing).collect();
            let exact = rows.iter().all(|r| r.exact);
            write!(f, "| {hashing} | key space{} |", if exact { " (exact)" } else { " (sampled)" })?;
            rows.iter().try_for_each(|r| write!(f, " {:.3} |", r.keyspace_max_over_mean))?;
            writeln!(f)?;
            write!(f, "| {hashing} | requests |")?;
            rows.iter().try_for_each(|r| write!(f, " {:.3} |", r.requests_max_over_mean))?;
            writeln!(f)?;
        }
        let d = &self.digest;
        writeln!(f)?;
        writeln!(
            f,
            "Digest sized for {} keys at {:e}: {} counters, {} positions per key, {} bytes; measured false-positive rate {:.2e} over {} absent keys; counter-overflow bound {:.1e}.",
            d.keys, d.target, d.counters, d.positions, d.bytes, d.measured, o.digest_queries, d.overflow_bound
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proteus_shares_are_exact_and_others_are_measured() {
        let o = BalanceOptions {
            servers: 4,
            hashing: vec![Hashing::Proteus, Hashing::Modulo],
            records: 1000,
            distribution: Distribution::Uniform,
            requests: 20_000,
            samples: 20_000,
            digest_keys: 1000,
            digest_fp: 1e-3,
            digest_queries: 10_000,
            json: false,
        };
        let report = run_balance(&o).unwrap();
        assert_eq!(report.rows.len(), 8);
        for r in report.rows.iter().filter(|r| r.hashing == Hashing::Proteus) {
            assert!(r.exact && (r.keyspace_max_over_mean - 1.0).abs() < 1e-12, "{r:?}");
        }
        for r in &report.rows {
            assert!(r.requests_max_over_mean >= 1.0 && r.requests_max_over_mean < 1.2, "{r:?}");
        }
        assert!(report.digest.measured < 5e-3, "{:?}", report.digest);
        assert_eq!(max_over_mean(&[1, 1, 2]), 1.5);
        assert!(report.to_string().contains("| proteus | key space (exact) |"));
    }
}
