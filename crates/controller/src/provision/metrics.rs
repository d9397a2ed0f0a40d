//! `--metrics-listen`: the provisioner's state in Prometheus text at `/metrics` (servers on,
//! whether a transition runs, the load, transitions started) and as JSON at `/status`.

use super::Status;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// Starts serving on `address`, from a thread of its own.
pub fn spawn(address: &str, status: Arc<Mutex<Status>>) -> Result<(), String> {
    let http = tiny_http::Server::http(address)
        .map_err(|e| format!("--metrics-listen {address}: cannot listen there ({e})"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for request in http.incoming_requests() {
                let status = status.lock().unwrap_or_else(|p| p.into_inner());
                let (body, kind, code) = match request.url() {
                    "/metrics" => {
                        (render(&status), "application/openmetrics-text; version=1.0.0; charset=utf-8", 200)
                    }
                    "/status" => (status_json(&status).to_string(), "application/json", 200),
                    _ => ("not found: see /metrics and /status\n".to_string(), "text/plain", 404),
                };
                drop(status);
                let header =
                    format!("Content-Type: {kind}").parse::<tiny_http::Header>().expect("a valid header");
                let response =
                    tiny_http::Response::from_string(body).with_header(header).with_status_code(code);
                let _ = request.respond(response);
            }
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(())
}

fn in_transition(status: &Status) -> bool {
    status.state.transition.is_some_and(|t| SystemTime::now() < t.until)
}

/// The metrics text of one scrape.
pub fn render(status: &Status) -> String {
    let mut registry = Registry::with_prefix("shoal_provision");
    let gauge = |value: usize| {
        let g = Gauge::<i64>::default();
        g.set(value as i64);
        g
    };
    let counter = |value: u64| {
        let c = Counter::<u64, AtomicU64>::default();
        c.inc_by(value);
        c
    };
    registry.register("servers", "servers in the pool", gauge(status.state.servers.len()));
    registry.register("active", "servers on (owning keys)", gauge(status.state.active));
    registry.register(
        "in_transition",
        "1 while a transition runs",
        gauge(usize::from(in_transition(status))),
    );
    registry.register(
        "transition_from",
        "servers on before the transition under way (the active count when none runs)",
        gauge(
            status.state.transition.filter(|_| in_transition(status)).map_or(status.state.active, |t| t.from),
        ),
    );
    if let Some(load) = status.load {
        let gauge = Gauge::<f64, AtomicU64>::default();
        gauge.set(load);
        registry.register("load_rps", "the load last measured, requests per second", gauge);
    }
    registry.register("turned_on", "transitions that turned a server on", counter(status.turned_on));
    registry.register("turned_off", "transitions that turned a server off", counter(status.turned_off));
    let mut text = String::new();
    encode(&mut text, &registry).expect("writing to a String");
    text
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
