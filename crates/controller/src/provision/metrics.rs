//! `--metrics-listen`: the provisioner's state in Prometheus text at `/metrics` (servers on,
//! whether a transition runs, the load, transitions started) and as JSON at `/status`, served
//! by the endpoint every Shoal daemon shares (`shoal-metrics`).

use super::Status;
use serde_json::json;
use shoal_metrics::prometheus_client::registry::Registry;
use shoal_metrics::{register, OPENMETRICS};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Starts serving on `address`, from a thread of its own, for as long as the process runs.
pub fn spawn(address: &str, status: Arc<Mutex<Status>>) -> Result<(), String> {
    let page = move |url: &str| {
        let status = status.lock().unwrap_or_else(|p| p.into_inner());
        match url {
            "/metrics" => Some((render(&status), OPENMETRICS)),
            "/status" => Some((status_json(&status).to_string(), "application/json")),
            _ => None,
        }
    };
    shoal_metrics::spawn(address, "not found: see /metrics and /status\n", page, || true).map(drop)
}

fn in_transition(status: &Status) -> bool {
    status.state.transition.is_some_and(|t| SystemTime::now() < t.until)
}

/// The metrics text of one scrape.
pub fn render(status: &Status) -> String {
    let mut registry = Registry::with_prefix("shoal_provision");
    let state = &status.state;
    let from = state.transition.filter(|_| in_transition(status)).map_or(state.active, |t| t.from);
    let gauges = [
        ("servers", "servers in the pool", state.servers.len() as f64),
        ("active", "servers on (owning keys)", state.active as f64),
        ("in_transition", "1 while a transition runs", f64::from(u8::from(in_transition(status)))),
        (
            "transition_from",
            "servers on before the transition under way (else the active count)",
            from as f64,
        ),
    ];
    for (name, help, value) in gauges {
        register(&mut registry, name, help, value, true);
    }
    if let Some(load) = status.load {
        register(&mut registry, "load_rps", "the load last measured, requests per second", load, true);
    }
    register(
        &mut registry,
        "turned_on",
        "transitions that turned a server on",
        status.turned_on as f64,
        false,
    );
    register(
        &mut registry,
        "turned_off",
        "transitions that turned a server off",
        status.turned_off as f64,
        false,
    );
    shoal_metrics::text(&registry)
}

fn status_json(status: &Status) -> serde_json::Value {
    json!({
        "state": status.state.to_json(),
        "in_transition": in_transition(status),
        "load_rps": status.load,
        "turned_on": status.turned_on,
        "turned_off": status.turned_off,
        "reason": status.reason,
    })
}
