//! `shoal bench balance`: how evenly each placement spreads keys and requests over a pool of
//! `n` servers, for every `n` up to the pool's size, with the servers turned on in a fixed
//! order (Proteus's setting) — and the Proteus digest's size and false-positive rate.
//!
//! Key-space shares: Proteus's are computed exactly from its ring's arcs; the other schemes'
//! are sampled from uniformly random keys. Request shares: the YCSB key space (the `ycsb`
//! bench's keys and Zipf skew) drawn `--requests` times and routed. Both are reported as the
//! largest server's share over the mean share (1 is perfect balance).
//!
//! Hot keys (`--hot-per-server`, issue #28): with all `--servers` on, the `k` most requested
//! keys are spread over R replicas each (`shoal_route::hot`: the owner and its successors,
//! reads spread evenly over them, as the pool client's and router's round-robin does). Shares
//! here are exact expectations from the distribution's probabilities over the workload's keys
//! (no sampling noise), and the smallest `k` that brings the largest share to the target is
//! found by moving keys into the hot set one at a time, hottest first (the smallest from which
//! every larger hot set, up to 1000·n keys, stays within it).

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
    /// Hot-set sizes to measure, in hot keys per server (`k = m·n`); none: no hot-key table.
    #[arg(long, value_delimiter = ',')]
    pub hot_per_server: Vec<u64>,
    /// Replicas of each hot key (`all`: every server).
    #[arg(long, value_delimiter = ',', default_value = "3,all", value_parser = parse_replicas)]
    pub hot_replicas: Vec<usize>,
    /// The largest share ÷ mean share the hot set must reach (default 1.02 for uniform keys,
    /// 1.05 otherwise).
    #[arg(long)]
    pub hot_target: Option<f64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `all` (every server: 0, as `shoal_route::ReplicaSet` takes it) or a count of at least 1.
fn parse_replicas(text: &str) -> Result<usize, String> {
    match text {
        "all" => Ok(0),
        _ => text
            .parse()
            .ok()
            .filter(|&r| r >= 1)
            .ok_or_else(|| format!("replicas: {text:?} is not `all` or a count ≥ 1")),
    }
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
    /// Hot keys spread over replicas, with every server on (empty without `--hot-per-server`).
    pub hot: Vec<HotRow>,
}

/// One placement and replica count with hot keys spread.
#[derive(Debug, Clone)]
pub struct HotRow {
    /// The placement.
    pub hashing: Hashing,
    /// Replicas per hot key (0: every server).
    pub replicas: usize,
    /// `(hot keys, largest request share ÷ mean)` for each `--hot-per-server` size.
    pub sizes: Vec<(u64, f64)>,
    /// The smallest hot set from which every larger one, up to `HOT_SEARCH_PER_SERVER · n`
    /// keys, keeps the largest share within the target (`None`: the largest is still above).
    pub reaches_target: Option<u64>,
}

/// How far the search for the smallest hot set goes, in keys per server.
const HOT_SEARCH_PER_SERVER: u64 = 1000;

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
    let hot = if o.hot_per_server.is_empty() { Vec::new() } else { measure_hot(o, &addresses, &space)? };
    Ok(BalanceReport { options: o.clone(), rows, digest: measure_digest(o)?, hot })
}

/// The key index of the `rank`-th most requested key, and its probability, under `o`'s
/// distribution over `o.records` keys (`norm`: the Zipf normalizer).
fn ranked_key(o: &BalanceOptions, norm: f64, rank: u64) -> (u64, f64) {
    let n = o.records;
    match o.distribution {
        Distribution::Uniform => (rank, 1.0 / n as f64),
        Distribution::Zipf { skew } => (rank, (rank as f64 + 1.0).powf(-skew) / norm),
        // `latest`: the key written last (the last index after the prefill) is rank 0.
        Distribution::Latest { skew } => (n - 1 - rank, (rank as f64 + 1.0).powf(-skew) / norm),
    }
}

/// Every placement and replica count with every server on: the exact expected request shares
/// with the `--hot-per-server` sizes of hot set, and the smallest hot set within the target.
fn measure_hot(o: &BalanceOptions, addresses: &[Server], space: &KeySpace) -> Result<Vec<HotRow>, String> {
    let n = o.servers;
    let target = o.hot_target.unwrap_or(if o.distribution == Distribution::Uniform { 1.02 } else { 1.05 });
    let norm = match o.distribution {
        Distribution::Uniform => 1.0,
        Distribution::Zipf { skew } | Distribution::Latest { skew } => {
            (1..=o.records).map(|k| (k as f64).powf(-skew)).sum()
        }
    };
    let limit = (HOT_SEARCH_PER_SERVER * n as u64).min(o.records);
    let mut rows = Vec::new();
    for &hashing in &o.hashing {
        let placement = Placement::new(hashing, addresses.to_vec()).map_err(|e| e.to_string())?;
        // Each key's owner, by rank: computed once, shared by every replica count.
        let owners: Vec<u32> = (0..o.records)
            .map(|r| placement.owner(space.key(ranked_key(o, norm, r).0).as_bytes()) as u32)
            .collect();
        for &replicas in &o.hot_replicas {
            // Start with nothing hot, then move keys into the hot set hottest first.
            let mut loads = vec![0f64; n];
            for (rank, &owner) in owners.iter().enumerate() {
                loads[owner as usize] += ranked_key(o, norm, rank as u64).1;
            }
            let wanted: Vec<u64> = o.hot_per_server.iter().map(|m| (m * n as u64).min(o.records)).collect();
            let mut sizes = Vec::new();
            // The largest hot set still above the target: the answer is the next size up.
            let mut last_above = None;
            let last = limit.max(wanted.iter().copied().max().unwrap_or(0));
            for k in 0..=last {
                let ratio = max_share_over_mean(&loads);
                wanted.iter().filter(|&&w| w == k).for_each(|&w| sizes.push((w, ratio)));
                if ratio > target {
                    last_above = Some(k);
                }
                if k == last {
                    break;
                }
                let (owner, p) = (owners[k as usize] as usize, ranked_key(o, norm, k).1);
                let set = shoal_route::ReplicaSet::new(owner, n, replicas);
                loads[owner] -= p;
                set.iter().for_each(|s| loads[s] += p / set.count as f64);
            }
            let reaches_target = match last_above {
                None => Some(0),
                Some(k) => (k < last).then_some(k + 1),
            };
            rows.push(HotRow { hashing, replicas, sizes, reaches_target });
        }
    }
    Ok(rows)
}

fn max_share_over_mean(loads: &[f64]) -> f64 {
    let total: f64 = loads.iter().sum();
    loads.iter().copied().fold(0.0, f64::max) * loads.len() as f64 / total
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

/// A replica count as the options write it.
fn replicas_name(replicas: usize) -> String {
    if replicas == 0 {
        "all".to_string()
    } else {
        replicas.to_string()
    }
}

impl BalanceReport {
    /// The target the hot-set search used.
    pub fn hot_target(&self) -> f64 {
        let o = &self.options;
        o.hot_target.unwrap_or(if o.distribution == Distribution::Uniform { 1.02 } else { 1.05 })
    }

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
            "hot": self.hot.iter().map(|h| json!({
                "hashing": h.hashing.to_string(), "replicas": replicas_name(h.replicas),
                "sizes": h.sizes.iter().map(|&(k, r)| json!({"hot_keys": k, "requests_max_over_mean": r})).collect::<Vec<_>>(),
                "smallest_hot_set_within_target": h.reaches_target, "target": self.hot_target(),
            })).collect::<Vec<_>>(),
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
        )?;
        if self.hot.is_empty() {
            return Ok(());
        }
        let n = o.servers;
        writeln!(f)?;
        writeln!(
            f,
            "Hot keys spread over replicas, {n} servers on: largest request share ÷ mean (exact expectation), k hottest keys hot; smallest k within {}:",
            self.hot_target()
        )?;
        writeln!(f)?;
        write!(f, "| placement | replicas |")?;
        o.hot_per_server.iter().try_for_each(|m| write!(f, " k={} ({m}·n) |", m * n as u64))?;
        writeln!(f, " smallest k ≤ {} | vs 10·n |", self.hot_target())?;
        write!(f, "|---|---|")?;
        o.hot_per_server.iter().try_for_each(|_| write!(f, "---:|"))?;
        writeln!(f, "---:|---:|")?;
        for h in &self.hot {
            write!(f, "| {} | {} |", h.hashing, replicas_name(h.replicas))?;
            h.sizes.iter().try_for_each(|(_, r)| write!(f, " {r:.3} |"))?;
            match h.reaches_target {
                Some(k) => writeln!(f, " {k} | {:.2}× |", k as f64 / (10 * n) as f64)?,
                None => writeln!(f, " > {} | — |", (HOT_SEARCH_PER_SERVER * n as u64).min(o.records))?,
            }
        }
        Ok(())
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
            hot_per_server: Vec::new(),
            hot_replicas: vec![3],
            hot_target: None,
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

    #[test]
    fn hot_keys_spread_over_every_server_balance_exactly() {
        let o = BalanceOptions {
            servers: 4,
            hashing: vec![Hashing::Proteus, Hashing::KetamaWeighted],
            records: 1000,
            distribution: Distribution::Zipf { skew: 0.99 },
            requests: 1000,
            samples: 1000,
            digest_keys: 100,
            digest_fp: 1e-2,
            digest_queries: 100,
            hot_per_server: vec![0, 250],
            hot_replicas: vec![0, 2],
            hot_target: Some(1.05),
            json: false,
        };
        let report = run_balance(&o).unwrap();
        assert_eq!(report.hot.len(), 4);
        for h in &report.hot {
            let (none, all) = (h.sizes[0], h.sizes[1]);
            assert_eq!((none.0, all.0), (0, 1000));
            assert!(none.1 > 1.0, "{h:?}");
            if h.replicas == 0 {
                // Every key hot on every server: each server takes exactly 1/n.
                assert!((all.1 - 1.0).abs() < 1e-9, "{h:?}");
                assert!(h.reaches_target.is_some_and(|k| k <= 1000), "{h:?}");
            }
        }
        assert!(report.to_string().contains("| proteus | all |"));
        assert_eq!(parse_replicas("all"), Ok(0));
        assert!(parse_replicas("0").is_err() && parse_replicas("x").is_err());
    }
}
