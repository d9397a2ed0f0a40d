//! What the controller knows and has done: every server's tenants (stats, curve, rates, sizes
//! in force and planned, hit ratio over time) and the decisions of the last rounds with their
//! reasons. The control loop writes it; the HTTP side reads a consistent copy of it
//! (`/api/state`, `/metrics`).

use super::control::Mode;
use super::poll::TenantStats;
use serde_json::{json, Value};
use shoal_curves::HitRatioCurve;
use std::collections::VecDeque;
use std::time::SystemTime;

/// Hit-ratio samples kept per tenant.
pub const HISTORY_SAMPLES: usize = 120;
/// Rounds whose decisions are kept.
pub const DECISION_ROUNDS: u64 = 50;

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// One point of a tenant's history, taken each round.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When (Unix seconds).
    pub time: f64,
    /// Its hit ratio since the round before (`None`: no gets).
    pub hit_ratio: Option<f64>,
    /// Its size then.
    pub size_bytes: u64,
}

/// What the controller decided or saw, and why: a line of its log.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When (Unix seconds).
    pub time: f64,
    /// The round it belongs to (from 1).
    pub round: u64,
    /// The server's address.
    pub server: String,
    /// The tenant concerned (`None`: the whole server).
    pub tenant: Option<String>,
    /// What: `resized`, `planned` (dry run), `refused`, `rolled-back`, `kept`, `measuring`,
    /// `idle` (once, when requests stop), `not-retried`, `down`.
    pub kind: &'static str,
    /// Its size before (resizes).
    pub from_bytes: Option<u64>,
    /// Its size after (resizes).
    pub to_bytes: Option<u64>,
    /// Why.
    pub reason: String,
}

impl Event {
    /// As a JSON object (the `--json` log line and `/api/state`'s decisions).
    pub fn to_json(&self) -> Value {
        json!({ "time": self.time, "round": self.round, "server": self.server, "tenant": self.tenant,
                "event": self.kind, "from_bytes": self.from_bytes, "to_bytes": self.to_bytes,
                "reason": self.reason })
    }

    /// As a line of text (the log without `--json`).
    pub fn to_text(&self) -> String {
        let tenant = self.tenant.as_deref().map(|t| format!(" {t}")).unwrap_or_default();
        let sizes = match (self.from_bytes, self.to_bytes) {
            (Some(from), Some(to)) => format!(" {from} → {to} bytes"),
            _ => String::new(),
        };
        format!("shoal controller: {}{tenant}: {}{sizes}: {}", self.server, self.kind, self.reason)
    }
}

/// One tenant of one server.
#[derive(Debug, Clone)]
pub struct TenantState {
    /// Its last `stats tenants` line.
    pub stats: TenantStats,
    /// Its last curve.
    pub curve: HitRatioCurve,
    /// Gets per second over the last round (`None` until two readings).
    pub requests_per_second: Option<f64>,
    /// Hit ratio over the last round.
    pub hit_ratio: Option<f64>,
    /// The size the last plan gave it.
    pub planned_bytes: Option<u64>,
    /// The last decision about it.
    pub last_decision: Option<Event>,
    /// Hit ratio and size per round, oldest first.
    pub history: VecDeque<Sample>,
}

impl TenantState {
    /// Whether its objective was met over the last round (`None`: no objective, or no gets).
    pub fn slo_met(&self) -> Option<bool> {
        Some(self.hit_ratio? >= self.stats.slo_hit_ratio?)
    }

    fn to_json(&self) -> Value {
        let s = &self.stats;
        let history: Vec<Value> = self
            .history
            .iter()
            .map(|h| json!({ "time": h.time, "hit_ratio": h.hit_ratio, "size_bytes": h.size_bytes }))
            .collect();
        json!({
            "name": s.name, "size_bytes": s.limit_bytes, "planned_bytes": self.planned_bytes,
            "min_bytes": s.min_bytes, "max_bytes": s.max_bytes, "bytes": s.bytes, "items": s.items,
            "evictions": s.evictions, "priority": s.priority, "policy": s.policy,
            "slo_hit_ratio": s.slo_hit_ratio, "slo_met": self.slo_met(),
            "requests_per_second": self.requests_per_second, "hit_ratio": self.hit_ratio,
            "curve": { "step_bytes": self.curve.step(), "hit_ratios": self.curve.points() },
            "history": history,
            "last_decision": self.last_decision.as_ref().map(Event::to_json),
        })
    }
}

/// A plan a server refused: nothing is applied to it for a few rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The sizes refused.
    pub sizes: Vec<u64>,
    /// The server's reason.
    pub reason: String,
    /// The round it was refused in.
    pub round: u64,
}

/// One server.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// `host:port`.
    pub address: String,
    /// Whether it answered in the last round.
    pub up: bool,
    /// Why not, or what went wrong last.
    pub error: Option<String>,
    /// Its tenants, in its order.
    pub tenants: Vec<TenantState>,
    /// When its tenants were last read (for rates).
    pub read_at: Option<std::time::Instant>,
    /// The last plan it refused.
    pub refused: Option<Refusal>,
    /// Whether its last reading saw no requests (said once, then quiet until traffic returns).
    pub idle: bool,
}

impl ServerState {
    /// A server not read yet.
    pub fn new(address: &str) -> ServerState {
        ServerState {
            address: address.to_string(),
            up: false,
            error: Some("not read yet".into()),
            tenants: Vec::new(),
            read_at: None,
            refused: None,
            idle: false,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "address": self.address, "up": self.up, "error": self.error, "idle": self.idle,
            "memory_bytes": self.tenants.iter().map(|t| t.stats.limit_bytes).sum::<u64>(),
            "segment_bytes": self.tenants.first().map(|t| t.stats.segment_bytes),
            "refused": self.refused.as_ref().map(|r| json!({ "sizes": r.sizes, "reason": r.reason, "round": r.round })),
            "tenants": self.tenants.iter().map(TenantState::to_json).collect::<Vec<_>>(),
        })
    }
}

/// Everything the HTTP side shows.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The goal planned for.
    pub mode: Mode,
    /// Seconds between rounds.
    pub interval_seconds: f64,
    /// Plans are shown, not applied.
    pub dry_run: bool,
    /// Rounds done.
    pub round: u64,
    /// Resizes applied.
    pub resizes: u64,
    /// Resizes refused.
    pub refusals: u64,
    /// Every server, in the order given.
    pub servers: Vec<ServerState>,
    /// The decisions of the last [`DECISION_ROUNDS`] rounds, oldest first.
    pub decisions: VecDeque<Event>,
}

impl Shared {
    /// Adds a round's decisions, dropping those of rounds past [`DECISION_ROUNDS`].
    pub fn record(&mut self, events: &[Event]) {
        self.decisions.extend(events.iter().cloned());
        while self.decisions.front().is_some_and(|e| e.round + DECISION_ROUNDS <= self.round) {
            self.decisions.pop_front();
        }
    }

    /// `/api/state`.
    pub fn to_json(&self) -> Value {
        json!({
            "time": unix_now(), "goal": self.mode.name(), "interval_seconds": self.interval_seconds,
            "dry_run": self.dry_run, "round": self.round, "resizes": self.resizes, "refusals": self.refusals,
            "servers": self.servers.iter().map(ServerState::to_json).collect::<Vec<_>>(),
            "decisions": self.decisions.iter().map(Event::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(round: u64) -> Event {
        Event {
            time: 0.0,
            round,
            server: "s".into(),
            tenant: Some("t".into()),
            kind: "resized",
            from_bytes: Some(1),
            to_bytes: Some(2),
            reason: "r".into(),
        }
    }

    #[test]
    fn decisions_of_old_rounds_are_dropped() {
        let mut shared = Shared {
            mode: Mode::Global,
            interval_seconds: 1.0,
            dry_run: false,
            round: 0,
            resizes: 0,
            refusals: 0,
            servers: vec![ServerState::new("s")],
            decisions: VecDeque::new(),
        };
        for round in 1..=DECISION_ROUNDS + 5 {
            shared.round = round;
            shared.record(&[event(round)]);
        }
        assert_eq!(shared.decisions.len() as u64, DECISION_ROUNDS);
        assert_eq!(shared.decisions.front().unwrap().round, 6);
        let state = shared.to_json();
        assert_eq!(state["decisions"][0]["event"], "resized");
        assert_eq!(state["servers"][0]["up"], false);
        assert_eq!(event(1).to_text(), "shoal controller: s t: resized 1 → 2 bytes: r");
    }
}
