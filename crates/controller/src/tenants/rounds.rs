//! The control loop's rounds: for each server, read its tenants and curves, plan, apply the
//! changed sizes (shrinks first), and log every decision with its reason.
//!
//! A server that is down or answers garbage is logged and skipped; the others go on. A resize
//! the server refuses undoes the round's resizes on that server (it stays at the plan in force)
//! and no plan is applied to that server for the next [`RETRY_AFTER_ROUNDS`] rounds: every
//! attempt shrinks a tenant first, and a shrink evicts, so a refusal that persists must not
//! cost items every round.

use super::control::{self, Counters, Mode, Proposal};
use super::poll::{Connection, ServerError, TenantStats};
use super::state::{unix_now, Event, Refusal, Sample, ServerState, Shared, TenantState, HISTORY_SAMPLES};
use shoal_curves::HitRatioCurve;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rounds after a refusal before a plan is applied to that server again.
pub const RETRY_AFTER_ROUNDS: u64 = 5;

/// How the controller plans and acts.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// The goal.
    pub mode: Mode,
    /// The fraction a new plan must gain to replace the sizes in force.
    pub hysteresis: f64,
    /// Show plans, apply nothing.
    pub dry_run: bool,
    /// Log JSON lines on standard output (text on standard error otherwise).
    pub json: bool,
    /// Connection and I/O timeout per server.
    pub timeout: Duration,
}

/// The loop's own memory, published to [`Shared`] after every round.
pub struct Controller {
    settings: Settings,
    servers: Vec<ServerState>,
    shared: Arc<Mutex<Shared>>,
    round: u64,
}

impl Controller {
    /// A controller of `servers`, publishing to `shared`.
    pub fn new(settings: Settings, servers: &[String], shared: Arc<Mutex<Shared>>) -> Controller {
        Controller {
            settings,
            servers: servers.iter().map(|a| ServerState::new(a)).collect(),
            shared,
            round: 0,
        }
    }

    /// One round over every server; its decisions are logged and published.
    pub fn round(&mut self) {
        self.round += 1;
        let mut events = Vec::new();
        for i in 0..self.servers.len() {
            let server_events = self.server_round(i);
            for event in &server_events {
                if let Some(name) = &event.tenant {
                    if let Some(t) = self.servers[i].tenants.iter_mut().find(|t| &t.stats.name == name) {
                        t.last_decision = Some(event.clone());
                    }
                }
            }
            events.extend(server_events);
        }
        for event in &events {
            if self.settings.json {
                println!("{}", event.to_json());
            } else {
                eprintln!("{}", event.to_text());
            }
        }
        let mut shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        shared.round = self.round;
        shared.servers = self.servers.clone();
        shared.resizes += events.iter().filter(|e| e.kind == "resized").count() as u64;
        shared.refusals += events.iter().filter(|e| e.kind == "refused").count() as u64;
        shared.record(&events);
    }

    fn event(&self, i: usize, tenant: Option<&str>, kind: &'static str, reason: String) -> Event {
        Event {
            time: unix_now(),
            round: self.round,
            server: self.servers[i].address.clone(),
            tenant: tenant.map(str::to_string),
            kind,
            from_bytes: None,
            to_bytes: None,
            reason,
        }
    }

    fn server_round(&mut self, i: usize) -> Vec<Event> {
        let (mut connection, stats, curves) = match read(&self.servers[i].address, self.settings.timeout) {
            Ok(reading) => reading,
            Err(e) => {
                let server = &mut self.servers[i];
                server.up = false;
                server.error = Some(e.to_string());
                let kind = if matches!(e, ServerError::Down(_)) { "down" } else { "unreadable" };
                return vec![self.event(i, None, kind, format!("{}; skipped this round", e.reason()))];
            }
        };
        let measured = self.update(i, stats, curves);
        if !measured {
            let why = "request rates need two readings (first round, a restart or a new tenant)";
            return vec![self.event(i, None, "measuring", why.into())];
        }
        let server = &mut self.servers[i];
        let tenants: Vec<TenantStats> = server.tenants.iter().map(|t| t.stats.clone()).collect();
        let curves: Vec<HitRatioCurve> = server.tenants.iter().map(|t| t.curve.clone()).collect();
        let rates: Vec<f64> = server.tenants.iter().map(|t| t.requests_per_second.unwrap_or(0.0)).collect();
        // No requests: no curve says anything new, so the sizes stay and the log says so once.
        let was_idle = std::mem::replace(&mut server.idle, rates.iter().all(|&r| r == 0.0));
        if server.idle {
            for t in &mut server.tenants {
                t.planned_bytes = Some(t.stats.limit_bytes);
            }
            if was_idle {
                return Vec::new();
            }
            let why =
                "no requests since the last reading: the sizes in force stay (quiet until requests return)";
            return vec![self.event(i, None, "idle", why.into())];
        }
        let proposal =
            match control::propose(self.settings.mode, self.settings.hysteresis, &tenants, &curves, &rates) {
                Ok(p) => p,
                Err(e) => {
                    self.servers[i].error = Some(e.clone());
                    return vec![self.event(i, None, "unplannable", e)];
                }
            };
        for (t, &size) in self.servers[i].tenants.iter_mut().zip(&proposal.sizes) {
            t.planned_bytes = Some(size);
        }
        if proposal.kept {
            let why = match proposal.reasons.first() {
                Some(r) if r.starts_with("kept: ") => r["kept: ".len()..].to_string(),
                _ => "the plan is the sizes in force".into(),
            };
            let why = format!("{why} ({:.1} weighted hits/s)", proposal.objective_now);
            return vec![self.event(i, None, "kept", why)];
        }
        if self.settings.dry_run {
            return self.changes(i, &tenants, &proposal, "planned");
        }
        if let Some(refused) = &self.servers[i].refused {
            if self.round < refused.round + RETRY_AFTER_ROUNDS {
                let why = format!(
                    "a plan was refused in round {} ({}); plans are applied again from round {}",
                    refused.round,
                    refused.reason,
                    refused.round + RETRY_AFTER_ROUNDS
                );
                return vec![self.event(i, None, "not-retried", why)];
            }
        }
        self.apply(i, &mut connection, &tenants, &proposal)
    }

    /// Takes in a reading: new tenant states (history carried over by name), rates since the
    /// last reading. Whether every tenant has a rate.
    fn update(&mut self, i: usize, stats: Vec<TenantStats>, curves: Vec<HitRatioCurve>) -> bool {
        let now = Instant::now();
        let server = &mut self.servers[i];
        let seconds = server.read_at.map(|at| now.duration_since(at).as_secs_f64());
        let mut old = std::mem::take(&mut server.tenants);
        let mut measured = true;
        for (stats, curve) in stats.into_iter().zip(curves) {
            let before = old.iter().position(|t| t.stats.name == stats.name).map(|p| old.swap_remove(p));
            let counters = |s: &TenantStats| Counters { cmd_get: s.cmd_get, get_hits: s.get_hits };
            let rates = match (&before, seconds) {
                (Some(b), Some(seconds)) => control::rates(counters(&b.stats), counters(&stats), seconds),
                _ => None,
            };
            measured &= rates.is_some();
            let (planned_bytes, last_decision, mut history) = match before {
                Some(b) => (b.planned_bytes, b.last_decision, b.history),
                None => (None, None, VecDeque::new()),
            };
            if history.len() == HISTORY_SAMPLES {
                history.pop_front();
            }
            let hit_ratio = rates.and_then(|r| r.hit_ratio);
            history.push_back(Sample { time: unix_now(), hit_ratio, size_bytes: stats.limit_bytes });
            server.tenants.push(TenantState {
                stats,
                curve,
                requests_per_second: rates.map(|r| r.requests_per_second),
                hit_ratio,
                planned_bytes,
                last_decision,
                history,
            });
        }
        server.read_at = Some(now);
        server.up = true;
        server.error = None;
        measured
    }

    /// One event per tenant whose size changes, of `kind`.
    fn changes(
        &self,
        i: usize,
        tenants: &[TenantStats],
        proposal: &Proposal,
        kind: &'static str,
    ) -> Vec<Event> {
        control::resize_order(&tenants.iter().map(|t| t.limit_bytes).collect::<Vec<_>>(), &proposal.sizes)
            .into_iter()
            .map(|t| {
                self.resize_event(i, &tenants[t], proposal.sizes[t], kind, self.plan_reason(proposal, t))
            })
            .collect()
    }

    fn plan_reason(&self, proposal: &Proposal, t: usize) -> String {
        format!(
            "{} (goal {}: {:.1} → {:.1} weighted hits/s)",
            proposal.reasons[t],
            self.settings.mode.name(),
            proposal.objective_now,
            proposal.objective_planned
        )
    }

    fn resize_event(
        &self,
        i: usize,
        tenant: &TenantStats,
        to: u64,
        kind: &'static str,
        reason: String,
    ) -> Event {
        Event {
            from_bytes: Some(tenant.limit_bytes),
            to_bytes: Some(to),
            ..self.event(i, Some(&tenant.name), kind, reason)
        }
    }

    /// Applies `proposal` (shrinks first); on a refusal, undoes what this round applied.
    fn apply(
        &mut self,
        i: usize,
        connection: &mut Connection,
        tenants: &[TenantStats],
        proposal: &Proposal,
    ) -> Vec<Event> {
        let current: Vec<u64> = tenants.iter().map(|t| t.limit_bytes).collect();
        let mut events = Vec::new();
        let mut applied = Vec::new();
        for t in control::resize_order(&current, &proposal.sizes) {
            let (tenant, size) = (&tenants[t], proposal.sizes[t]);
            match connection.set_tenant_limit(&tenant.name, size) {
                Ok(()) => {
                    applied.push(t);
                    events.push(self.resize_event(i, tenant, size, "resized", self.plan_reason(proposal, t)));
                }
                Err(e) => {
                    let why =
                        format!("{}; the sizes in force stay (this round's resizes are undone)", e.reason());
                    events.push(self.resize_event(i, tenant, size, "refused", why));
                    self.servers[i].refused = Some(Refusal {
                        sizes: proposal.sizes.clone(),
                        reason: e.reason().to_string(),
                        round: self.round,
                    });
                    // Undo in reverse: the grows applied shrink back first, then the shrinks grow.
                    for &u in applied.iter().rev() {
                        let back = connection.set_tenant_limit(&tenants[u].name, current[u]);
                        let why = match back {
                            Ok(()) => "undone after the refusal".to_string(),
                            Err(e) => format!("could not be undone ({e}): the next round plans from what is"),
                        };
                        let undone = TenantStats { limit_bytes: proposal.sizes[u], ..tenants[u].clone() };
                        events.push(self.resize_event(i, &undone, current[u], "rolled-back", why));
                    }
                    return events;
                }
            }
        }
        self.servers[i].refused = None;
        for &t in &applied {
            self.servers[i].tenants[t].stats.limit_bytes = proposal.sizes[t];
        }
        events
    }
}

/// One reading of a server: its tenants and their curves, and the connection to act on.
fn read(
    address: &str,
    timeout: Duration,
) -> Result<(Connection, Vec<TenantStats>, Vec<HitRatioCurve>), ServerError> {
    let mut connection = Connection::open(address, timeout)?;
    let stats = connection.tenant_stats()?;
    let curves = stats.iter().map(|t| connection.curve(&t.name)).collect::<Result<Vec<_>, _>>()?;
    Ok((connection, stats, curves))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenants::state::HISTORY_SAMPLES;

    fn stats(name: &str, cmd_get: u64, get_hits: u64) -> TenantStats {
        TenantStats {
            name: name.into(),
            limit_bytes: 1 << 20,
            min_bytes: 0,
            max_bytes: 1 << 22,
            bytes: 0,
            items: 0,
            cmd_get,
            get_hits,
            evictions: 0,
            priority: 1.0,
            slo_hit_ratio: None,
            policy: "fifo".into(),
            segment_bytes: 1 << 20,
        }
    }

    #[test]
    fn readings_become_rates_and_history_by_tenant_name() {
        let settings = Settings {
            mode: Mode::Global,
            hysteresis: 0.0,
            dry_run: true,
            json: false,
            timeout: Duration::from_secs(1),
        };
        let shared = Arc::new(Mutex::new(Shared {
            mode: Mode::Global,
            interval_seconds: 1.0,
            dry_run: true,
            round: 0,
            resizes: 0,
            refusals: 0,
            servers: Vec::new(),
            decisions: VecDeque::new(),
        }));
        let mut controller = Controller::new(settings, &["127.0.0.1:1".into()], shared);
        let curve = || HitRatioCurve::new(1 << 20, vec![0.0, 0.5]);
        assert!(!controller.update(0, vec![stats("a", 10, 5)], vec![curve()]), "one reading: no rates");
        std::thread::sleep(Duration::from_millis(5));
        let measured =
            controller.update(0, vec![stats("b", 0, 0), stats("a", 30, 20)], vec![curve(), curve()]);
        assert!(!measured, "b is new: no rate for it yet");
        let a = &controller.servers[0].tenants[1];
        assert_eq!((a.stats.name.as_str(), a.hit_ratio, a.history.len()), ("a", Some(0.75), 2));
        assert!(a.requests_per_second.unwrap() > 0.0);
        for _ in 0..HISTORY_SAMPLES + 3 {
            std::thread::sleep(Duration::from_millis(1));
            assert!(controller.update(0, vec![stats("a", 30, 20), stats("b", 0, 0)], vec![curve(), curve()]));
        }
        let server = &controller.servers[0];
        assert_eq!(server.tenants[0].history.len(), HISTORY_SAMPLES, "history is bounded");
        assert_eq!(server.tenants[0].hit_ratio, None, "no gets since the last round");
        assert!(server.up && server.error.is_none());
    }
}
