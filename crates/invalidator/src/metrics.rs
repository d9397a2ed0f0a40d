//! `--metrics-listen`: Prometheus metrics at `/metrics` and a JSON summary at `/status`
//! (lag percentiles per destination, backlog, position), served by a thread of its own.

use crate::delivery::Delivery;
use crate::Counters;
use shoal_metrics::prometheus_client::metrics::counter::Counter;
use shoal_metrics::prometheus_client::metrics::family::Family;
use shoal_metrics::prometheus_client::metrics::gauge::Gauge;
use shoal_metrics::prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

type Labels = Vec<(String, String)>;

/// Starts serving on `address`.
pub fn spawn(address: &str, delivery: Arc<Delivery>, counters: Arc<Counters>) -> Result<(), String> {
    shoal_metrics::spawn(
        address,
        "not found: see /metrics and /status\n",
        move |url| match url {
            "/metrics" => Some((render(&delivery, &counters), shoal_metrics::OPENMETRICS)),
            "/status" => Some((status(&delivery, &counters).to_string(), "application/json")),
            _ => None,
        },
        || true,
    )?;
    Ok(())
}

fn destination(address: &str) -> Labels {
    vec![("destination".into(), address.into())]
}

/// The metrics text of one scrape.
pub fn render(delivery: &Delivery, counters: &Counters) -> String {
    let mut registry = Registry::with_prefix("shoal_invalidator");
    let counter = |value: u64| {
        let c = Counter::<u64, AtomicU64>::default();
        c.inc_by(value);
        c
    };
    registry.register(
        "transactions",
        "committed transactions with keys read from the log",
        counter(counters.transactions.load(Ordering::Relaxed)),
    );
    registry.register(
        "deletes_spooled",
        "deletes put into every destination's spool",
        counter(counters.deletes.load(Ordering::Relaxed)),
    );
    registry.register(
        "refusals",
        "deliveries a destination answered with an error (sent again)",
        counter(delivery.refusals()),
    );
    registry.register(
        "spool_syncs",
        "spool files flushed to the disk by the group syncer (off the delivery path)",
        counter(delivery.syncs()),
    );
    registry.register(
        "replica_holds",
        "times --hold-replica paused the replica's replay (it had replayed past what the commit log had given)",
        counter(counters.replica_holds.load(Ordering::Relaxed)),
    );
    let held = Counter::<f64, AtomicU64>::default();
    held.inc_by(counters.replica_held_micros.load(Ordering::Relaxed) as f64 / 1e6);
    registry.register("replica_held_seconds", "time the replica's replay was paused by --hold-replica", held);
    registry.register(
        "replica_releases",
        "holds of the replica released at --hold-replica's bound, the commit log still behind",
        counter(counters.replica_releases.load(Ordering::Relaxed)),
    );
    let unconfirmed = Gauge::<i64>::default();
    unconfirmed.set(counters.unconfirmed.load(Ordering::Relaxed) as i64);
    registry.register(
        "unconfirmed_batches",
        "batches spooled whose log position waits until they are flushed or acknowledged everywhere",
        unconfirmed,
    );
    registry.register(
        "source_errors",
        "failed reads of the commit log (reconnected)",
        counter(counters.source_errors.load(Ordering::Relaxed)),
    );
    let problems = Family::<Labels, Counter>::default();
    for (kind, n) in counters.problems() {
        problems.get_or_create(&vec![("kind".into(), kind.into())]).inc_by(n);
    }
    registry.register("problems", "log entries that gave no delete (logged with what to do)", problems);
    let delivered = Family::<Labels, Counter>::default();
    let backlog = Family::<Labels, Gauge>::default();
    let full = Family::<Labels, Gauge>::default();
    let behind = Family::<Labels, Gauge>::default();
    let behind_seconds = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let fell_behind = Family::<Labels, Counter>::default();
    let lag = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (address, waiting) in delivery.backlog() {
        let stats = &delivery.stats[&address];
        delivered.get_or_create(&destination(&address)).inc_by(stats.delivered.load(Ordering::Relaxed));
        backlog.get_or_create(&destination(&address)).set(waiting as i64);
        full.get_or_create(&destination(&address)).set(i64::from(stats.full.load(Ordering::Relaxed)));
        let behind_for = delivery.behind_for(&address);
        behind.get_or_create(&destination(&address)).set(i64::from(behind_for.is_some()));
        behind_seconds.get_or_create(&destination(&address)).set(behind_for.map_or(0.0, |d| d.as_secs_f64()));
        fell_behind.get_or_create(&destination(&address)).inc_by(stats.fell_behind.load(Ordering::Relaxed));
        let histogram = stats.lag.lock().unwrap_or_else(|p| p.into_inner());
        for quantile in ["0.5", "0.99", "0.999"] {
            let value =
                histogram.as_ref().map_or(0, |h| h.value_at_quantile(quantile.parse().unwrap_or(0.5)));
            let mut labels = destination(&address);
            labels.push(("quantile".into(), quantile.into()));
            lag.get_or_create(&labels).set(value as f64 / 1e6);
        }
    }
    registry.register("delivered", "deletes the destination acknowledged", delivered);
    registry.register("backlog_deletes", "deletes waiting in the destination's spool", backlog);
    registry.register("backlog_full", "1 while the destination's spool is full and the log is held", full);
    registry.register(
        "destination_behind",
        "1 from a failed delivery to the destination until its spool drains",
        behind,
    );
    registry.register(
        "destination_behind_seconds",
        "how long the destination has been behind (0 while it is not)",
        behind_seconds,
    );
    registry.register("destination_fell_behind", "times the destination fell behind", fell_behind);
    registry.register("lag_seconds", "commit to acknowledged delete, since start", lag);
    register_second(&mut registry, delivery);
    shoal_metrics::text(&registry)
}

/// The near caches' second deliveries (`--near`): how far behind each is.
fn register_second(registry: &mut Registry, delivery: &Delivery) {
    let owed = Family::<Labels, Gauge>::default();
    let waiting = Family::<Labels, Gauge>::default();
    let waiting_seconds = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let delivered = Family::<Labels, Counter>::default();
    for second in delivery.second_backlog() {
        let labels = vec![("near".to_string(), second.address.clone())];
        owed.get_or_create(&labels).set(second.owed as i64);
        waiting.get_or_create(&labels).set(second.waiting as i64);
        waiting_seconds.get_or_create(&labels).set(second.waiting_for.as_secs_f64());
        let stats = &delivery.second_stats[&second.address];
        delivered.get_or_create(&labels).inc_by(stats.delivered.load(Ordering::Relaxed));
    }
    registry.register(
        "near_second_owed_deletes",
        "deletes a near cache is owed a second time (sent again once every destination acknowledged them)",
        owed,
    );
    registry.register(
        "near_second_waiting_deletes",
        "of those, the deletes still waiting for a destination to acknowledge them",
        waiting,
    );
    registry.register(
        "near_second_waiting_seconds",
        "how long the oldest delete waiting for the destinations has waited (0 while none does)",
        waiting_seconds,
    );
    registry.register(
        "near_second_delivered",
        "deletes the near cache acknowledged a second time",
        delivered,
    );
}

/// The `/status` JSON.
pub fn status(delivery: &Delivery, counters: &Counters) -> serde_json::Value {
    let destinations: Vec<_> = delivery
        .backlog()
        .into_iter()
        .map(|(address, waiting)| {
            let stats = &delivery.stats[&address];
            let behind_for = delivery.behind_for(&address);
            let histogram = stats.lag.lock().unwrap_or_else(|p| p.into_inner());
            let ms = |q: f64| histogram.as_ref().map(|h| h.value_at_quantile(q) as f64 / 1e3);
            serde_json::json!({
                "address": address,
                "backlog": waiting,
                "full": stats.full.load(Ordering::Relaxed),
                "behind": behind_for.is_some(),
                "behind_seconds": behind_for.map_or(0.0, |d| d.as_secs_f64()),
                "fell_behind": stats.fell_behind.load(Ordering::Relaxed),
                "delivered": stats.delivered.load(Ordering::Relaxed),
                "lag_records": histogram.as_ref().map_or(0, |h| h.len()),
                "lag_ms_p50": ms(0.5),
                "lag_ms_p99": ms(0.99),
                "lag_ms_p999": ms(0.999),
                "lag_ms_max": histogram.as_ref().map(|h| h.max() as f64 / 1e3),
            })
        })
        .collect();
    serde_json::json!({
        "position": counters.position.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        "transactions": counters.transactions.load(Ordering::Relaxed),
        "deletes_spooled": counters.deletes.load(Ordering::Relaxed),
        "source_errors": counters.source_errors.load(Ordering::Relaxed),
        "refusals": delivery.refusals(),
        "spool_syncs": delivery.syncs(),
        "unconfirmed_batches": counters.unconfirmed.load(Ordering::Relaxed),
        "problems": counters.problems().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "destinations": destinations,
        "near_second": delivery.second_backlog().into_iter().map(|second| {
            let stats = &delivery.second_stats[&second.address];
            serde_json::json!({
                "address": second.address,
                "owed": second.owed,
                "waiting": second.waiting,
                "waiting_seconds": second.waiting_for.as_secs_f64(),
                "delivered": stats.delivered.load(Ordering::Relaxed),
            })
        }).collect::<Vec<_>>(),
    })
}
