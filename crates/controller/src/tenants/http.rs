//! `--http`: the dashboard (`/`, one self-contained page: inline script and SVG, no network
//! fetches but its own `/api/state`), the controller's state as JSON (`/api/state`) and
//! Prometheus metrics (`/metrics`), served by the endpoint every Shoal daemon shares
//! (`shoal-metrics`, `tiny_http` on a thread of its own).

use super::state::Shared;
use shoal_metrics::prometheus_client::metrics::family::Family;
use shoal_metrics::prometheus_client::metrics::gauge::Gauge;
use shoal_metrics::prometheus_client::registry::Registry;
use shoal_metrics::{register, OPENMETRICS};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// The dashboard page.
pub const DASHBOARD: &str = include_str!("dashboard.html");

/// Starts serving on `address`, from a thread of its own, for as long as the process runs.
pub fn spawn(address: &str, shared: Arc<Mutex<Shared>>) -> Result<(), String> {
    let page = move |url: &str| {
        let path = url.split('?').next().unwrap_or(url);
        match path {
            "/" | "/index.html" => Some((DASHBOARD.to_string(), "text/html; charset=utf-8")),
            "/api/state" => Some((lock(&shared).to_json().to_string(), "application/json")),
            "/metrics" => Some((render(&lock(&shared)), OPENMETRICS)),
            _ => None,
        }
    };
    let not_found = "not found: see / (the dashboard), /api/state and /metrics\n";
    shoal_metrics::spawn_for("--http", address, not_found, page, || true).map(drop)
}

fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

type Labels = Vec<(String, String)>;

/// The metrics text of one scrape: per tenant (labels `server`, `tenant`) its size, planned
/// size, request rate, hit ratio and whether its objective is met; per server whether it
/// answered; the rounds, resizes and refusals so far.
pub fn render(shared: &Shared) -> String {
    let mut registry = Registry::with_prefix("shoal_controller");
    let family = || Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let (size, planned, rate, hit_ratio, slo_met, up) =
        (family(), family(), family(), family(), family(), family());
    for server in &shared.servers {
        up.get_or_create(&vec![("server".into(), server.address.clone())])
            .set(f64::from(u8::from(server.up)));
        for tenant in &server.tenants {
            let labels =
                vec![("server".into(), server.address.clone()), ("tenant".into(), tenant.stats.name.clone())];
            size.get_or_create(&labels).set(tenant.stats.limit_bytes as f64);
            let optional = [
                (&planned, tenant.planned_bytes.map(|b| b as f64)),
                (&rate, tenant.requests_per_second),
                (&hit_ratio, tenant.hit_ratio),
                (&slo_met, tenant.slo_met().map(|m| f64::from(u8::from(m)))),
            ];
            for (metric, value) in optional {
                if let Some(value) = value {
                    metric.get_or_create(&labels).set(value);
                }
            }
        }
    }
    let families = [
        ("tenant_size_bytes", "the tenant's size in force", size),
        ("tenant_planned_bytes", "the size the last plan gave the tenant", planned),
        ("tenant_requests_per_second", "the tenant's gets per second over the last round", rate),
        ("tenant_hit_ratio", "the tenant's hit ratio over the last round", hit_ratio),
        ("tenant_slo_met", "1 when the tenant's hit ratio met its objective over the last round", slo_met),
        ("server_up", "1 when the server answered in the last round", up),
    ];
    for (name, help, metric) in families {
        registry.register(name, help, metric);
    }
    register(&mut registry, "rounds", "rounds done", shared.round as f64, false);
    register(&mut registry, "resizes", "tenant resizes applied", shared.resizes as f64, false);
    register(&mut registry, "refusals", "tenant resizes the servers refused", shared.refusals as f64, false);
    shoal_metrics::text(&registry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::control::Mode;
    use crate::tenants::state::ServerState;

    #[test]
    fn metrics_name_every_server_and_the_counts() {
        let shared = Shared {
            mode: Mode::Slo,
            interval_seconds: 20.0,
            dry_run: false,
            round: 3,
            resizes: 2,
            refusals: 1,
            servers: vec![ServerState::new("127.0.0.1:1")],
            decisions: Default::default(),
        };
        let text = render(&shared);
        assert!(text.contains("shoal_controller_server_up{server=\"127.0.0.1:1\"} 0.0"), "{text}");
        assert!(
            text.contains("shoal_controller_rounds_total 3")
                && text.contains("shoal_controller_refusals_total 1")
        );
    }

    #[test]
    fn the_dashboard_is_self_contained() {
        assert!(DASHBOARD.contains("/api/state"));
        for outside in ["<script src", "stylesheet", "http://", "https://", "@import", "url("] {
            assert!(!DASHBOARD.contains(outside), "the page loads nothing from elsewhere ({outside})");
        }
    }
}
