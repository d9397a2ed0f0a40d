//! # shoal-metrics: the `--metrics-listen` endpoint
//!
//! What `shoal server`, `shoal router` and `shoal invalidator` share for Prometheus: a thread of
//! its own serving HTTP (`tiny_http`), so no worker's event loop ever sees a scrape, and a
//! helper that registers one number as a counter or a gauge (`prometheus-client`). Each caller
//! renders its own pages.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

pub use prometheus_client;

/// The content type of Prometheus's text format as `prometheus-client` encodes it.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A page to answer: its body and content type.
pub type Page = (String, &'static str);

/// Serves `page(url)` on `address` from a thread named `metrics`; a URL it has no page for
/// (`None`) is answered 404 with `not_found`. Between requests, at least every 100 ms, the
/// thread asks `alive()` and ends when it says no.
pub fn spawn<P, A>(
    address: &str,
    not_found: &'static str,
    page: P,
    alive: A,
) -> Result<std::thread::JoinHandle<()>, String>
where
    P: Fn(&str) -> Option<Page> + Send + 'static,
    A: Fn() -> bool + Send + 'static,
{
    spawn_for("--metrics-listen", address, not_found, page, alive)
}

/// [`spawn`] for an address given by the option `flag` (named in the error when it cannot
/// listen there).
pub fn spawn_for<P, A>(
    flag: &str,
    address: &str,
    not_found: &'static str,
    page: P,
    alive: A,
) -> Result<std::thread::JoinHandle<()>, String>
where
    P: Fn(&str) -> Option<Page> + Send + 'static,
    A: Fn() -> bool + Send + 'static,
{
    let http = tiny_http::Server::http(address)
        .map_err(|e| format!("{flag} {address}: cannot listen there ({e})"))?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || loop {
            let request = match http.recv_timeout(Duration::from_millis(100)) {
                Ok(Some(request)) => request,
                Ok(None) | Err(_) if alive() => continue,
                Ok(None) | Err(_) => return,
            };
            let response = match page(request.url()) {
                Some((body, kind)) => tiny_http::Response::from_string(body).with_header(
                    format!("Content-Type: {kind}").parse::<tiny_http::Header>().expect("a valid header"),
                ),
                None => tiny_http::Response::from_string(not_found).with_status_code(404),
            };
            let _ = request.respond(response);
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))
}

/// A registry in Prometheus's text format.
pub fn text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("writing to a String cannot fail");
    text
}

/// Registers one value as a gauge, or as a counter (whose exposed name gains `_total`).
pub fn register(registry: &mut Registry, name: &str, help: &str, value: f64, gauge: bool) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn get(port: u16, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    #[test]
    fn serves_pages_answers_404_and_stops_when_asked() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let running = Arc::new(AtomicBool::new(true));
        let alive = running.clone();
        let thread = spawn(
            &format!("127.0.0.1:{port}"),
            "not here\n",
            |url| {
                let mut registry = Registry::with_prefix("t");
                register(&mut registry, "things", "things seen", 3.0, false);
                register(&mut registry, "level", "a level", 1.5, true);
                (url == "/metrics").then_some((text(&registry), OPENMETRICS))
            },
            move || alive.load(Ordering::Relaxed),
        )
        .unwrap();
        let page = get(port, "/metrics");
        assert!(page.starts_with("HTTP/1.") && page.contains(" 200 "), "{page}");
        assert!(page.contains("t_things_total 3") && page.contains("t_level 1.5"), "{page}");
        assert!(page.contains(OPENMETRICS), "{page}");
        let missing = get(port, "/other");
        assert!(missing.contains(" 404 ") && missing.ends_with("not here\n"), "{missing}");
        running.store(false, Ordering::Relaxed);
        thread.join().unwrap();
    }
}
