//! `--metrics-listen`: the server's numbers in Prometheus's text format at `/metrics`.
//!
//! A thread of its own serves HTTP (`shoal-metrics`), so the workers' event loops never see it.
//! Each scrape renders the general `stats` (the same function the `stats` command uses, so the
//! two never disagree) and turns every numeric line into a metric named `shoal_<stat>`:
//! counters for what only grows, gauges for the rest; plus the gets and hits that clients
//! served from the region themselves, the region's fill, and the hottest keys' request rates.

use crate::state::Shared;
use crate::stats;
use shoal_metrics::prometheus_client::metrics::family::Family;
use shoal_metrics::prometheus_client::metrics::gauge::Gauge;
use shoal_metrics::prometheus_client::registry::Registry;
use shoal_metrics::register;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// General stats that go up and down, or are not amounts at all; every other number only grows.
const GAUGES: &[&str] = &[
    "pid",
    "uptime",
    "time",
    "time_since_server_cert_refresh",
    "pointer_size",
    "rusage_user",
    "rusage_system",
    "max_connections",
    "curr_connections",
    "connection_structures",
    "limit_maxbytes",
    "accepting_conns",
    "threads",
    "bytes",
    "curr_items",
    "segments",
    "segments_free",
    "segment_bytes",
    "index_bytes",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
    "reserved_fds",
    "hash_power_level",
    "hash_bytes",
    "hash_is_expanding",
    "slab_reassign_running",
    "lru_crawler_running",
    "log_watchers",
    "slab_global_page_pool",
];

/// Starts serving `/metrics` on `address`; the thread ends once the server stops.
pub fn spawn(address: &str, shared: &Arc<Shared>) -> Result<std::thread::JoinHandle<()>, String> {
    // The server is held only while a scrape renders, so stopping never waits for us.
    let (page, alive) = (Arc::downgrade(shared), Arc::downgrade(shared));
    shoal_metrics::spawn(
        address,
        "not found: metrics are at /metrics\n",
        move |url| match page.upgrade() {
            Some(s) if url == "/metrics" => Some((render(&s), shoal_metrics::OPENMETRICS)),
            _ => None,
        },
        move || alive.upgrade().is_some_and(|s| !s.stopping()),
    )
}

/// The metrics text of one scrape.
pub fn render(shared: &Shared) -> String {
    let mut registry = Registry::with_prefix("shoal");
    let mut general = Vec::new();
    stats::general(shared, &mut general);
    stats::shoal(shared, &mut general); // the store's shape (segments, index) besides
    for line in String::from_utf8_lossy(&general).lines() {
        let mut words = line.split(' ');
        let (Some("STAT"), Some(name), Some(value)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        register(&mut registry, name, &format!("memcached's `{name}` stat"), value, GAUGES.contains(&name));
    }
    let local = &shared.hints;
    let local_gets = local.local_gets.load(Ordering::Relaxed) as f64;
    let local_hits = local.local_hits.load(Ordering::Relaxed) as f64;
    register(
        &mut registry,
        "local_gets",
        "gets clients served from the region themselves",
        local_gets,
        false,
    );
    register(&mut registry, "local_hits", "hits among the local gets", local_hits, false);
    let store = shared.tenants.store_stats();
    // Over the segments the memory limit allows, not the room past it (`crate::memory`).
    let limit = store.segments.saturating_sub(store.segments_parked) * store.segment_bytes;
    let fill = if limit == 0 { 0.0 } else { store.bytes as f64 / limit as f64 };
    register(&mut registry, "region_fill_ratio", "item bytes over the memory limit's segments", fill, true);
    register_tenants(&mut registry, shared);
    register_hotkeys(&mut registry, shared);
    shoal_metrics::text(&registry)
}

/// Per tenant (label `tenant`): its partition and requests as `stats tenants` gives them, and
/// its hit-ratio curve at eighths of its largest size (label `bytes`).
fn register_tenants(registry: &mut Registry, shared: &Shared) {
    use crate::tenants::totals;
    type Gauges = Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>;
    let gauges: [(&str, &str); 8] = [
        ("tenant_limit_bytes", "the memory the tenant may use now"),
        ("tenant_bytes", "bytes of the tenant's items"),
        ("tenant_items", "the tenant's items"),
        ("tenant_cmd_get", "the tenant's gets"),
        ("tenant_get_hits", "the tenant's get hits"),
        ("tenant_cmd_set", "the tenant's sets"),
        ("tenant_evictions", "items evicted from the tenant's partition"),
        ("hit_curve_sample_rate", "SHARDS's sampling rate"),
    ];
    let families: Vec<Gauges> = gauges.iter().map(|_| Gauges::default()).collect();
    let curve = Gauges::default();
    for (i, t) in shared.tenants.all().iter().enumerate() {
        let label = vec![("tenant".to_string(), t.spec.name.clone())];
        let store = t.writer.stats();
        let [(_, gets), (_, hits), _, (_, sets)] = totals(&shared.tenant_counters, i);
        let values = [
            t.writer.limit_bytes() as f64,
            store.bytes as f64,
            store.items as f64,
            gets as f64,
            hits as f64,
            sets as f64,
            store.evictions as f64,
        ];
        for (family, value) in families.iter().zip(values) {
            family.get_or_create(&label).set(value);
        }
        if let Some((points, rate, _)) = shared.tenants.curve(i, &shared.tenant_counters) {
            families[7].get_or_create(&label).set(rate);
            let last = points.points().len().saturating_sub(1) as u64 * points.step();
            for eighth in 1..=8u64 {
                let bytes = last * eighth / 8;
                let mut labels = label.clone();
                labels.push(("bytes".into(), bytes.to_string()));
                curve.get_or_create(&labels).set(points.hit_ratio(bytes));
            }
        }
    }
    for ((name, help), family) in gauges.iter().zip(families) {
        registry.register(*name, *help, family);
    }
    registry.register(
        "hit_curve_ratio",
        "hit ratio an LRU cache of this many bytes would have had on the tenant's requests",
        curve,
    );
}

/// The hot keys `/metrics` shows: few enough to stay a handful of series, whatever the workload.
pub const METRICS_HOTKEYS: usize = 10;

/// The [`METRICS_HOTKEYS`] hottest keys' request rates, one series per rank (labels `rank`,
/// from 1, and `key`, the key as text: the series stay bounded as keys come and go).
fn register_hotkeys(registry: &mut Registry, shared: &Shared) {
    let family = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
    for (rank, hot) in shared.hotkeys.top(METRICS_HOTKEYS).iter().enumerate() {
        let labels = vec![
            ("rank".to_string(), (rank + 1).to_string()),
            ("key".to_string(), String::from_utf8_lossy(&hot.key).into_owned()),
        ];
        family.get_or_create(&labels).set(hot.rate);
    }
    registry.register(
        "hotkey_requests_per_second",
        "reads per second of the server's hottest keys (`stats hotkeys`)",
        family,
    );
}
