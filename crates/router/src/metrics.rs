//! `--metrics-listen`: the router's numbers in Prometheus's text format at `/metrics`, served
//! by `shoal-metrics`' thread (the workers' runtimes never see a scrape).
//!
//! Router-wide counters are `shoal_router_<name>`; each destination's state is a family
//! labelled `destination="<address>"`: `up` (1, or 0 while TKO), `behind` (1 while it catches
//! up on invalidations it missed), requests `sent` and `failed`, deletes `spooled` and not yet
//! delivered, requests `pending` (sent, not yet answered). A pool with `"hot_replicas"` has
//! `hot_keys`, `hot_copy_hits` and `hot_copies_made` labelled `pool="<name>"` (a pool under
//! several routes: their sum; its hot keys: the most any of them knows).

use crate::state::Router;
use shoal_metrics::prometheus_client::metrics::counter::Counter;
use shoal_metrics::prometheus_client::metrics::family::Family;
use shoal_metrics::prometheus_client::metrics::gauge::Gauge;
use shoal_metrics::prometheus_client::registry::Registry;
use shoal_metrics::register;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

type Labels = Vec<(String, String)>;

/// Starts serving `/metrics` on `address` for as long as the router runs.
pub fn spawn(address: &str, router: Arc<Router>) -> Result<(), String> {
    shoal_metrics::spawn(
        address,
        "not found: metrics are at /metrics\n",
        move |url| (url == "/metrics").then(|| (render(&router), shoal_metrics::OPENMETRICS)),
        || true,
    )?;
    Ok(())
}

/// The metrics text of one scrape.
pub fn render(router: &Router) -> String {
    let mut registry = Registry::with_prefix("shoal_router");
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64;
    register(
        &mut registry,
        "uptime_seconds",
        "seconds since the router started",
        router.started.elapsed().as_secs_f64(),
        true,
    );
    register(&mut registry, "requests", "requests read from clients", load(&router.requests), false);
    let (connections, buffers) = router.connections.open_now();
    register(&mut registry, "connections", "client connections open", connections as f64, true);
    register(
        &mut registry,
        "client_buffers",
        "read buffers lent to client connections (reading, or holding a request cut short)",
        buffers as f64,
        true,
    );
    register(
        &mut registry,
        "resident_bytes",
        "the router's resident memory (VmRSS)",
        crate::state::resident_bytes() as f64,
        true,
    );
    register(&mut registry, "errors", "requests answered with an error", load(&router.errors), false);
    register(
        &mut registry,
        "config_reloads",
        "configuration files loaded after the first",
        load(&router.reloads),
        false,
    );
    register(
        &mut registry,
        "config_reload_failures",
        "changed configuration files that did not load (the last good one kept serving)",
        load(&router.reload_failures),
        false,
    );
    register(
        &mut registry,
        "spool_delivered",
        "spooled deletes delivered",
        load(&router.spools.delivered),
        false,
    );
    register(
        &mut registry,
        "spool_refused",
        "spooled deliveries a destination answered with something other than an acknowledgement",
        load(&router.spools.refused),
        false,
    );
    register(
        &mut registry,
        "spool_full",
        "deletes refused because their destination's spool was full",
        load(&router.spools.full),
        false,
    );
    register(
        &mut registry,
        "spool_files_refused",
        "spool files left by an earlier run that were damaged or foreign, set aside unread",
        load(&router.spools.files_refused),
        false,
    );
    let up = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let behind = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let sent = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let failed = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let spooled = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let pending = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let depths = router.spools.depths();
    let mut addresses: Vec<String> = depths.iter().map(|(a, _)| a.clone()).collect();
    let destinations = router.transport.destinations();
    addresses.extend(destinations.iter().map(|(a, _)| a.clone()));
    addresses.extend(router.config().destinations.iter().map(|d| d.address.clone()));
    addresses.sort();
    addresses.dedup();
    for address in addresses {
        let labels = vec![("destination".to_string(), address.clone())];
        let health = destinations.iter().find(|(a, _)| *a == address).map(|(_, h)| h);
        up.get_or_create(&labels).set(i64::from(!health.is_some_and(|h| h.is_tko())));
        behind.get_or_create(&labels).set(i64::from(router.spools.is_behind(&address)));
        let count = |n: Option<&AtomicU64>| n.map_or(0, |n| n.load(Ordering::Relaxed));
        sent.get_or_create(&labels).inc_by(count(health.map(|h| &h.sent)));
        failed.get_or_create(&labels).inc_by(count(health.map(|h| &h.failed)));
        pending.get_or_create(&labels).set(count(health.map(|h| &h.pending)) as i64);
        let depth = depths.iter().find(|(a, _)| *a == address).map_or(0, |(_, n)| *n);
        spooled.get_or_create(&labels).set(depth as i64);
    }
    registry.register("destination_up", "1 while the destination is up, 0 while it is TKO", up);
    registry.register(
        "destination_behind",
        "1 while the destination catches up on invalidations it missed (it gets no reads)",
        behind,
    );
    registry.register("destination_sent", "requests the destination answered", sent);
    registry.register("destination_failed", "requests to the destination that failed", failed);
    registry.register(
        "destination_spooled",
        "deletes in the destination's spool, not yet delivered",
        spooled,
    );
    registry.register(
        "destination_pending",
        "requests sent to the destination and not answered yet",
        pending,
    );
    hot_pools(&mut registry, router);
    shoal_metrics::text(&registry)
}

/// The hot-key numbers of every pool with `"hot_replicas"`, by pool name.
fn hot_pools(registry: &mut Registry, router: &Router) {
    let mut pools: std::collections::BTreeMap<&str, crate::route::hot::HotCounts> = Default::default();
    let config = router.config();
    if config.hot.is_empty() {
        return;
    }
    for (pool, hot) in &config.hot {
        let counts = hot.counts();
        let sum = pools.entry(pool.as_str()).or_default();
        sum.hot_keys = sum.hot_keys.max(counts.hot_keys);
        sum.copy_hits += counts.copy_hits;
        sum.copies_made += counts.copies_made;
    }
    let keys = Family::<Labels, Gauge<i64, AtomicI64>>::default();
    let copy_hits = Family::<Labels, Counter<u64, AtomicU64>>::default();
    let copies_made = Family::<Labels, Counter<u64, AtomicU64>>::default();
    for (pool, counts) in pools {
        let labels = vec![("pool".to_string(), pool.to_string())];
        keys.get_or_create(&labels).set(counts.hot_keys as i64);
        copy_hits.get_or_create(&labels).inc_by(counts.copy_hits);
        copies_made.get_or_create(&labels).inc_by(counts.copies_made);
    }
    registry.register("hot_keys", "keys in the pool's hot set, read from their replicas", keys);
    registry.register("hot_copy_hits", "gets of hot keys a copy (not the owner) answered", copy_hits);
    registry.register("hot_copies_made", "copies of hot keys made after a copy missed", copies_made);
}
