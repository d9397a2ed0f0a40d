//! `shoal bench tenants`: several tenants' look-aside traffic against one server (issue 16).
//!
//! Each tenant is a key prefix with a key count, a popularity law (Zipf with an exponent, or a
//! scan that walks its keys in order — one-hit wonders until it wraps), a value size and a
//! share of the requests. A round asks each tenant for `share × batch` keys in one multiget and
//! sets the misses back (`noreply`), as an application in front of a database would. The
//! streams are fixed by the seed, so `--offline` can replay exactly the same rounds into exact
//! LRU simulations (`shoal_curves::Shards::exact`): one per tenant and one for all of them
//! sharing a cache, giving the hit ratios of a shared cache, an equal split and the optimum
//! partition (`shoal_curves::optimum`) of `--memory-mb`, and the sizes of that optimum.
//! Online, `--local F` reads a share F of each tenant's keys from its region through
//! shoal-client's shared-memory path (as co-located clients do), the rest over the network
//! ([`online`]).
//!
//! ```text
//!  --tenant specs ─► Stream per tenant (seeded) ─► rounds ─┬─► server: get (local or network),
//!                                                          │   set misses (online; online.rs)
//!                                                          └─► Shards::exact per tenant + shared (offline)
//!  online: per interval and per tenant, hits / gets  ─► JSON lines (--trace), totals at the end,
//!          --curves: each tenant's size and its curve's hit ratio there, on a cliff or not
//! ```

mod online;

use crate::random::{Rng, Zipf};
use clap::Args;
use online::Endpoint;
use serde_json::{json, Value};
use shoal_curves::{optimum, Goal, HitRatioCurve, PlanConfig, Shards, Tenant};
use std::io::{BufWriter, Write};
use std::str::FromStr;
use std::time::Instant;

/// Bytes an item takes beyond its key and value (the region's item header).
const ITEM_OVERHEAD: u64 = shoal_region::layout::ITEM_HEADER_BYTES as u64;

/// Options of `shoal bench tenants`.
#[derive(Args, Debug)]
pub struct TenantsOptions {
    /// the server (host:port); its tenants file should give each prefix a tenant
    #[arg(long, default_value = "127.0.0.1:11211")]
    pub server: String,
    /// a tenant's workload: name=<n>,keys=<count>,dist=zipf:<s>|scan,value=<bytes>[,share=<k>]
    /// [,server=<host:port>] (its keys are "<name>:<index>"; server: where its requests go, its
    /// own listener, instead of --server); repeat for each tenant
    #[arg(long = "tenant", value_name = "SPEC", required = true)]
    pub tenants: Vec<Workload>,
    /// rounds to run (each asks every tenant for share × batch keys); with --seconds, whichever
    /// ends first
    #[arg(long, default_value_t = u64::MAX, hide_default_value = true)]
    pub rounds: u64,
    /// seconds to run
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// the share of each tenant's reads served from its region through shared memory
    /// (shoal-client's local path; the server must be on this host, and each tenant reached
    /// through its own listener, `server=` in --tenant); the rest go over the network
    #[arg(long, default_value_t = 0.0, value_parser = share)]
    pub local: f64,
    /// at the end, ask --server each tenant's size and curve: the hit ratio the curve predicts
    /// at that size, and whether the size is on a cliff of the curve
    #[arg(long)]
    pub curves: bool,
    /// keys per multiget of a tenant with share 1
    #[arg(long, default_value_t = 50)]
    pub batch: usize,
    /// at <seconds>, replace a tenant's workload: <seconds>@<spec> (online only)
    #[arg(long = "change", value_name = "SECONDS@SPEC")]
    pub changes: Vec<Change>,
    /// seconds between the hit-ratio samples written to --trace
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// write a JSON line per tenant per interval here: {"t", "tenant", "gets", "hits"}
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// do not touch a server: replay the same rounds (--rounds) into exact LRU simulations and
    /// report the hit ratios of a shared cache, an equal split and the optimum partition of
    /// this many MiB
    #[arg(long, value_name = "MiB")]
    pub offline_memory_mb: Option<u64>,
    /// the unit partitions move in, for --offline-memory-mb (MiB)
    #[arg(long, default_value_t = 1)]
    pub unit_mb: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

/// One tenant's workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub keys: u64,
    /// Zipf's exponent, or `None` for a scan.
    pub zipf: Option<f64>,
    pub value_bytes: usize,
    /// Multigets per round.
    pub share: usize,
    /// Where its requests go (its own listener), instead of `--server`.
    pub server: Option<String>,
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(text: &str) -> Result<Workload, String> {
        let mut w = Workload {
            name: String::new(),
            keys: 0,
            zipf: Some(0.99),
            value_bytes: 100,
            share: 1,
            server: None,
        };
        for field in text.split(',') {
            let (name, value) =
                field.split_once('=').ok_or_else(|| format!("{field:?}: expected name=value"))?;
            let number =
                |v: &str| v.parse::<u64>().map_err(|_| format!("{name}={v}: expected a whole number"));
            match name {
                "name" => w.name = value.to_string(),
                "keys" => w.keys = number(value)?,
                "value" => w.value_bytes = number(value)? as usize,
                "share" => w.share = number(value)? as usize,
                "server" => w.server = Some(value.to_string()),
                "dist" if value == "scan" => w.zipf = None,
                "dist" => {
                    let skew = value.strip_prefix("zipf:").and_then(|s| s.parse::<f64>().ok());
                    w.zipf = Some(
                        skew.filter(|s| *s > 0.0)
                            .ok_or_else(|| format!("dist={value}: use zipf:<s> or scan"))?,
                    );
                }
                _ => {
                    return Err(format!("unknown field {name:?}: use name, keys, dist, value, share, server"))
                }
            }
        }
        if w.name.is_empty() || w.keys == 0 || w.share == 0 || w.value_bytes == 0 {
            return Err(format!("{text:?}: a tenant needs a name, keys > 0, value > 0 and share > 0"));
        }
        Ok(w)
    }
}

/// A workload that replaces a tenant's at a time.
#[derive(Debug, Clone)]
pub struct Change {
    pub at_seconds: f64,
    pub workload: Workload,
}

impl FromStr for Change {
    type Err = String;

    fn from_str(text: &str) -> Result<Change, String> {
        let (at, spec) = text.split_once('@').ok_or("a change is <seconds>@<tenant spec>")?;
        let at_seconds = at.parse::<f64>().map_err(|_| format!("{at:?}: seconds"))?;
        Ok(Change { at_seconds, workload: spec.parse()? })
    }
}

/// A share: a number from 0 to 1.
fn share(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=1.0).contains(s))
        .ok_or_else(|| format!("{text:?}: a share from 0 to 1"))
}

/// A tenant's key stream.
struct Stream {
    workload: Workload,
    zipf: Option<Zipf>,
    /// Scatters Zipf ranks over the keys (see [`scatter`]).
    multiplier: u64,
    rng: Rng,
    next_scan: u64,
}

impl Stream {
    fn new(workload: Workload, seed: u64) -> Stream {
        let zipf = workload.zipf.map(|s| Zipf::new(workload.keys, s));
        let multiplier = coprime_multiplier(workload.keys);
        Stream { workload, zipf, multiplier, rng: Rng::new(seed), next_scan: 0 }
    }

    /// The next key index.
    fn next(&mut self) -> u64 {
        match &self.zipf {
            // Ranks are scattered over the key space, so popularity is not ordered by name.
            Some(z) => scatter(z.sample(&mut self.rng), self.workload.keys, self.multiplier),
            None => {
                let k = self.next_scan;
                self.next_scan = (self.next_scan + 1) % self.workload.keys;
                k
            }
        }
    }

    /// The next key.
    fn next_key(&mut self) -> String {
        let index = self.next();
        format!("{}:{index}", self.workload.name)
    }

    fn item_bytes(&self, key: &str) -> u64 {
        (key.len() + self.workload.value_bytes) as u64 + ITEM_OVERHEAD
    }
}

/// A fixed permutation of `0..n` that scatters ranks over the key space: multiplication by
/// a constant coprime to `n` (a bijection modulo `n`).
fn scatter(rank: u64, n: u64, multiplier: u64) -> u64 {
    ((u128::from(rank) * u128::from(multiplier)) % u128::from(n)) as u64
}

/// The first multiplier from the golden ratio's up that is coprime to `n`.
fn coprime_multiplier(n: u64) -> u64 {
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    (2_654_435_761u64..).find(|&m| gcd(m, n) == 1).expect("some number is coprime to n")
}

/// Runs the benchmark (online or offline) and returns its report.
pub fn run_tenants(o: &TenantsOptions) -> Result<TenantsReport, String> {
    let streams: Vec<Stream> =
        o.tenants.iter().enumerate().map(|(i, w)| Stream::new(w.clone(), o.seed + i as u64)).collect();
    match o.offline_memory_mb {
        Some(mb) => offline(o, streams, mb),
        None => online(o, streams),
    }
}

/// Per tenant: gets and hits, whole run and its second half.
#[derive(Debug, Clone, Default)]
struct Count {
    gets: u64,
    hits: u64,
    late_gets: u64,
    late_hits: u64,
    /// Reads served from shared memory.
    local: u64,
}

/// What a run found.
pub struct TenantsReport {
    json: Value,
    text: String,
}

impl TenantsReport {
    /// The report as JSON.
    pub fn to_json(&self) -> Value {
        self.json.clone()
    }
}

impl std::fmt::Display for TenantsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

fn ratio(hits: u64, gets: u64) -> f64 {
    if gets == 0 {
        0.0
    } else {
        hits as f64 / gets as f64
    }
}

fn online(o: &TenantsOptions, mut streams: Vec<Stream>) -> Result<TenantsReport, String> {
    let mut endpoints = streams
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let address = s.workload.server.as_deref().unwrap_or(&o.server);
            Endpoint::connect(address, o.local, o.seed + i as u64)
                .map_err(|e| format!("tenant {}: {e}", s.workload.name))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut trace = match &o.trace {
        Some(path) => Some(BufWriter::new(
            std::fs::File::create(path).map_err(|e| format!("--trace {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let mut changes = o.changes.clone();
    changes.sort_by(|a, b| a.at_seconds.total_cmp(&b.at_seconds));
    let mut changes = changes.into_iter().peekable();
    let mut counts = vec![Count::default(); streams.len()];
    let mut window = vec![(0u64, 0u64); streams.len()];
    let started = Instant::now();
    let mut next_sample = o.interval;
    let half = o.seconds / 2.0;
    let mut round = 0u64;
    while round < o.rounds && started.elapsed().as_secs_f64() < o.seconds {
        let now = started.elapsed().as_secs_f64();
        while changes.peek().is_some_and(|c| c.at_seconds <= now) {
            let change = changes.next().expect("peeked");
            let i = streams
                .iter()
                .position(|s| s.workload.name == change.workload.name)
                .ok_or_else(|| format!("--change names no tenant {:?}", change.workload.name))?;
            // The tenant's endpoint stays: a change is a new workload, not a new tenant.
            streams[i] = Stream::new(
                Workload { server: streams[i].workload.server.clone(), ..change.workload },
                o.seed + 1000 + i as u64,
            );
        }
        let late = now >= half;
        for (i, (s, e)) in streams.iter_mut().zip(&mut endpoints).enumerate() {
            for _ in 0..s.workload.share {
                let keys: Vec<String> = (0..o.batch).map(|_| s.next_key()).collect();
                let found = e.read(&keys, o.local)?;
                e.fill(&keys, &found.hits, s.workload.value_bytes)?;
                let hits = found.hits.iter().filter(|h| **h).count() as u64;
                let c = &mut counts[i];
                c.gets += keys.len() as u64;
                c.hits += hits;
                c.local += found.local_reads;
                if late {
                    c.late_gets += keys.len() as u64;
                    c.late_hits += hits;
                }
                window[i].0 += keys.len() as u64;
                window[i].1 += hits;
            }
        }
        round += 1;
        if now >= next_sample {
            next_sample += o.interval;
            if let Some(t) = &mut trace {
                for (s, (gets, hits)) in streams.iter().zip(window.iter_mut()) {
                    let sample = json!({"t": now, "tenant": s.workload.name, "gets": *gets, "hits": *hits});
                    writeln!(t, "{sample}").map_err(|e| e.to_string())?;
                    *gets = 0;
                    *hits = 0;
                }
                t.flush().map_err(|e| e.to_string())?;
            }
        }
    }
    endpoints.iter_mut().try_for_each(Endpoint::flush)?;
    let mut report = report(&streams, &counts, round, started.elapsed().as_secs_f64());
    if o.curves {
        let curves = online::curves_at_sizes(o)?;
        for t in curves.as_array().into_iter().flatten() {
            report.text.push_str(&format!(
                "{:>12}: size {} MiB, its curve there {:.4}{}\n",
                t["tenant"].as_str().unwrap_or("?"),
                t["size_bytes"].as_u64().unwrap_or(0) >> 20,
                t["curve_hit_ratio"].as_f64().unwrap_or(0.0),
                if t["on_cliff"].as_bool() == Some(true) { " (ON A CLIFF)" } else { "" }
            ));
        }
        report.json["curves"] = curves;
    }
    Ok(report)
}

fn report(streams: &[Stream], counts: &[Count], rounds: u64, seconds: f64) -> TenantsReport {
    let mut text = format!("{rounds} rounds in {seconds:.1} s\n");
    let mut tenants = Vec::new();
    for (s, c) in streams.iter().zip(counts) {
        let (all, late) = (ratio(c.hits, c.gets), ratio(c.late_hits, c.late_gets));
        text.push_str(&format!(
            "{:>12}: {} gets, hit ratio {all:.4} (second half {late:.4})\n",
            s.workload.name, c.gets
        ));
        tenants
            .push(json!({"tenant": s.workload.name, "gets": c.gets, "hits": c.hits, "local_reads": c.local,
            "hit_ratio": all, "late_gets": c.late_gets, "late_hits": c.late_hits, "late_hit_ratio": late}));
    }
    let sum = |f: fn(&Count) -> u64| counts.iter().map(f).sum::<u64>();
    let (all, late) =
        (ratio(sum(|c| c.hits), sum(|c| c.gets)), ratio(sum(|c| c.late_hits), sum(|c| c.late_gets)));
    text.push_str(&format!("{:>12}: hit ratio {all:.4} (second half {late:.4})\n", "all"));
    TenantsReport {
        json: json!({"rounds": rounds, "seconds": seconds, "tenants": tenants, "hit_ratio": all, "late_hit_ratio": late}),
        text,
    }
}

fn offline(o: &TenantsOptions, mut streams: Vec<Stream>, memory_mb: u64) -> Result<TenantsReport, String> {
    if o.rounds == u64::MAX {
        return Err("--offline-memory-mb replays --rounds rounds: give --rounds".into());
    }
    let unit = o.unit_mb.max(1) << 20;
    let total = memory_mb << 20;
    let steps = (total / unit) as usize;
    let mut exact: Vec<Shards> = streams.iter().map(|_| Shards::exact(unit, steps)).collect();
    let mut shared = Shards::exact(unit, steps);
    let mut gets = vec![0u64; streams.len()];
    for _ in 0..o.rounds {
        for (i, s) in streams.iter_mut().enumerate() {
            for _ in 0..s.workload.share * o.batch {
                let key = s.next_key();
                let size = s.item_bytes(&key);
                exact[i].access(key.as_bytes(), size);
                shared.access(key.as_bytes(), size);
                gets[i] += 1;
            }
        }
    }
    let curves: Vec<HitRatioCurve> = exact.iter().map(Shards::curve).collect();
    let planned: Vec<Tenant> = streams
        .iter()
        .zip(&curves)
        .zip(&gets)
        .map(|((s, curve), &g)| Tenant {
            name: s.workload.name.clone(),
            curve: curve.clone(),
            requests_per_second: g as f64,
            priority: 1.0,
            min_bytes: 2 * unit,
            max_bytes: total,
            slo_hit_ratio: None,
        })
        .collect();
    let config =
        PlanConfig { total_bytes: total, unit_bytes: unit, goal: Goal::GlobalHitRatio, hysteresis: 0.0 };
    let best = optimum(&planned, &config).ok_or("the tenants' minimums do not fit the memory")?;
    let all_gets: u64 = gets.iter().sum();
    let global = |sizes: &[u64]| {
        planned.iter().zip(sizes).map(|(t, &b)| t.requests_per_second * t.curve.hit_ratio(b)).sum::<f64>()
            / all_gets as f64
    };
    let equal = vec![total / unit / streams.len() as u64 * unit; streams.len()];
    let shared_ratio = shared.curve().hit_ratio(total);
    let mut text = format!(
        "offline, {} rounds, {memory_mb} MiB: exact LRU hit ratio shared {shared_ratio:.4}, equal split {:.4}, optimum partition {:.4}\n",
        o.rounds,
        global(&equal),
        global(&best.sizes)
    );
    let mut tenants = Vec::new();
    for (t, &size) in planned.iter().zip(&best.sizes) {
        text.push_str(&format!(
            "{:>12}: optimum {} MiB (hit ratio {:.4})\n",
            t.name,
            size >> 20,
            t.curve.hit_ratio(size)
        ));
        tenants.push(json!({"tenant": t.name, "gets": t.requests_per_second, "optimum_mb": size >> 20,
            "optimum_hit_ratio": t.curve.hit_ratio(size), "equal_hit_ratio": t.curve.hit_ratio(equal[0])}));
    }
    Ok(TenantsReport {
        json: json!({"rounds": o.rounds, "memory_mb": memory_mb, "shared": shared_ratio,
            "equal_split": global(&equal), "optimum": global(&best.sizes), "tenants": tenants}),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_parse_and_bad_ones_say_why() {
        let w: Workload = "name=web,keys=1000,dist=zipf:0.8,value=300,share=2".parse().unwrap();
        assert_eq!(
            w,
            Workload {
                name: "web".into(),
                keys: 1000,
                zipf: Some(0.8),
                value_bytes: 300,
                share: 2,
                server: None
            }
        );
        let own: Workload = "name=web,keys=10,server=127.0.0.1:11312".parse().unwrap();
        assert_eq!(own.server.as_deref(), Some("127.0.0.1:11312"));
        assert!(share("0.9").is_ok() && share("1.5").is_err() && share("x").is_err());
        let scan: Workload = "name=s,keys=10,dist=scan".parse().unwrap();
        assert_eq!(scan.zipf, None);
        for bad in
            ["keys=10", "name=a,keys=0", "name=a,keys=10,dist=pareto", "name=a,keys=10,colour=red", "name"]
        {
            assert!(bad.parse::<Workload>().is_err(), "{bad}");
        }
        let change: Change = "30@name=web,keys=5".parse().unwrap();
        assert_eq!(change.at_seconds, 30.0);
    }

    #[test]
    fn a_scan_walks_every_key_in_turn_and_zipf_stays_in_range() {
        let mut scan = Stream::new("name=s,keys=3,dist=scan".parse().unwrap(), 1);
        assert_eq!((0..7).map(|_| scan.next()).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2, 0]);
        let mut zipf = Stream::new("name=z,keys=1000,dist=zipf:1.0".parse().unwrap(), 1);
        assert!((0..10_000).all(|_| zipf.next() < 1000));
        for n in [1000, 100_000, 7, 1] {
            let m = coprime_multiplier(n);
            let mut seen: Vec<u64> = (0..n).map(|r| scatter(r, n, m)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "a permutation of 0..{n}");
        }
    }

    #[test]
    fn offline_the_optimum_beats_an_equal_split_when_one_tenant_scans() {
        let o = TenantsOptions {
            server: String::new(),
            tenants: vec![
                "name=hot,keys=100000,dist=zipf:0.9,value=200".parse().unwrap(),
                "name=scan,keys=200000,dist=scan,value=200".parse().unwrap(),
            ],
            rounds: 10000,
            seconds: 0.0,
            local: 0.0,
            curves: false,
            batch: 50,
            changes: Vec::new(),
            interval: 1.0,
            trace: None,
            offline_memory_mb: Some(8),
            unit_mb: 1,
            seed: 1,
            json: true,
        };
        let report = run_tenants(&o).unwrap().to_json();
        let (equal, best) = (report["equal_split"].as_f64().unwrap(), report["optimum"].as_f64().unwrap());
        assert!(best > equal, "{report}");
        // The scan gains nothing from memory: the optimum gives hot more than half.
        assert!(report["tenants"][0]["optimum_mb"].as_u64().unwrap() > 4, "{report}");
        assert!(report["shared"].as_f64().unwrap() < best, "the scan pushes hot keys out of a shared cache");
    }
}
