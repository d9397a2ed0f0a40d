//! `--metrics-listen`: the server's numbers in Prometheus's text format at `/metrics`.
//!
//! A thread of its own serves HTTP (`tiny_http`), so the workers' event loops never see it.
//! Each scrape renders the general `stats` (the same function the `stats` command uses, so the
//! two never disagree) and turns every numeric line into a metric named `shoal_<stat>`:
//! counters for what only grows, gauges for the rest; plus the gets and hits that clients
//! served from the region themselves, and the region's fill.

use crate::server::Shared;
use crate::stats;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

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
    let http = tiny_http::Server::http(address)
        .map_err(|e| format!("--metrics-listen {address}: cannot listen there ({e})"))?;
    let shared = Arc::downgrade(shared);
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(&http, &shared))
        .map_err(|e| format!("cannot start the metrics thread: {e}"))
}

fn serve(http: &tiny_http::Server, shared: &Weak<Shared>) {
    loop {
        let request = match http.recv_timeout(Duration::from_millis(100)) {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => match shared.upgrade() {
                Some(s) if !s.stopping() => continue,
                _ => return,
            },
        };
        // The server is held only while a scrape renders, so stopping never waits for us.
        let body = match shared.upgrade() {
            Some(s) if request.url() == "/metrics" => Some(render(&s)),
            Some(_) => None,
            None => return,
        };
        let response = match body {
            Some(text) => tiny_http::Response::from_string(text).with_header(
                "Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8"
                    .parse::<tiny_http::Header>()
                    .expect("a valid header"),
            ),
            None => {
                tiny_http::Response::from_string("not found: metrics are at /metrics\n").with_status_code(404)
            }
        };
        let _ = request.respond(response);
    }
}

/// The metrics text of one scrape.
pub fn render(shared: &Shared) -> String {
    let mut registry = Registry::with_prefix("shoal");
    let mut general = Vec::new();
    stats::general(shared, &mut general);
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
    let store = shared.writer.stats();
    let fill = if store.region_bytes == 0 { 0.0 } else { store.bytes as f64 / store.region_bytes as f64 };
    register(&mut registry, "region_fill_ratio", "item bytes over the region's size", fill, true);
    if let Some(curve) = &shared.curve {
        let (points, rate, _) = curve.curve();
        register(&mut registry, "hit_curve_sample_rate", "SHARDS's sampling rate", rate, true);
        let family = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
        let last = points.points().len().saturating_sub(1) as u64 * points.step();
        for eighth in 1..=8u64 {
            let bytes = last * eighth / 8;
            family.get_or_create(&vec![("bytes".into(), bytes.to_string())]).set(points.hit_ratio(bytes));
        }
        registry.register(
            "hit_curve_ratio",
            "hit ratio an LRU cache of this many bytes would have had on the requests served",
            family,
        );
    }
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// Registers one value as a gauge or a counter (whose name gains `_total`).
fn register(registry: &mut Registry, name: &str, help: &str, value: f64, gauge: bool) {
    if gauge {
        let metric = Gauge::<f64, AtomicU64>::default();
        metric.set(value);
        registry.register(name, help, metric);
    } else {
        let metric = Counter::<f64, AtomicU64>::default();
        metric.inc_by(value);
        registry.register(name, help, metric);
    }
}
