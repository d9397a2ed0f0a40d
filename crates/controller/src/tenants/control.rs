//! The control loop's decisions, without sockets or clocks: request rates from counters, a
//! server's new sizes from its tenants' curves (`shoal_curves::plan`, per the goal), and the
//! order resizes are applied in.

use super::poll::TenantStats;
use shoal_curves::{plan, Goal, HitRatioCurve, Plan, PlanConfig, Tenant, SIZE_ERROR};

/// What the controller plans for (`--goal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The most hits per second over all tenants: priorities and objectives ignored.
    Global,
    /// Hits per second weighted by each tenant's priority; objectives ignored.
    Priorities,
    /// Every tenant's hit-ratio objective reserved first (highest priority first when they do
    /// not all fit), the rest for the most hits per second.
    Slo,
}

impl Mode {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Global => "global",
            Mode::Priorities => "priorities",
            Mode::Slo => "slo",
        }
    }
}

/// A tenant's counters at one reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counters {
    /// Gets since the server started.
    pub cmd_get: u64,
    /// Of those, hits.
    pub get_hits: u64,
}

/// What a tenant did between two readings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Gets per second.
    pub requests_per_second: f64,
    /// Hits over gets (`None`: no gets).
    pub hit_ratio: Option<f64>,
}

/// The rates between readings `seconds` apart; `None` when the counters went back (the server
/// restarted) or no time passed.
pub fn rates(before: Counters, now: Counters, seconds: f64) -> Option<Rates> {
    let gets = now.cmd_get.checked_sub(before.cmd_get)?;
    let hits = now.get_hits.checked_sub(before.get_hits)?;
    if seconds.is_nan() || seconds <= 0.0 || hits > gets {
        return None;
    }
    Some(Rates {
        requests_per_second: gets as f64 / seconds,
        hit_ratio: (gets > 0).then(|| hits as f64 / gets as f64),
    })
}

/// A server's planned sizes and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// Bytes per tenant, in the server's order.
    pub sizes: Vec<u64>,
    /// Why each got its size.
    pub reasons: Vec<String>,
    /// Whether the sizes in force were kept (hysteresis).
    pub kept: bool,
    /// The goal's value (weighted hits per second on the curves) of the sizes in force.
    pub objective_now: f64,
    /// The goal's value of the proposed sizes.
    pub objective_planned: f64,
}

/// The sizes for one server's tenants: its memory (the sum of their sizes now) planned in
/// whole segments for `mode`, the sizes in force kept unless the plan gains more than
/// `hysteresis`. The curves are read pessimistically ([`HitRatioCurve::pessimistic`] by
/// [`SIZE_ERROR`]), so no size counts on hits within a curve's error above a cliff. Memory
/// no curve gains from is left where it is (then spread up to maximums), so every byte stays
/// with some tenant and the next round plans the same total — except where it would put a
/// tenant on a cliff.
pub fn propose(
    mode: Mode,
    hysteresis: f64,
    tenants: &[TenantStats],
    curves: &[HitRatioCurve],
    requests_per_second: &[f64],
) -> Result<Proposal, String> {
    let unit = tenants.first().map(|t| t.segment_bytes).ok_or("no tenants")?;
    if let Some(other) = tenants.iter().find(|t| t.segment_bytes != unit) {
        return Err(format!(
            "tenants move in different units ({} has segment_bytes {}, {} has {unit})",
            other.name, other.segment_bytes, tenants[0].name
        ));
    }
    let planned: Vec<Tenant> = tenants
        .iter()
        .zip(curves)
        .zip(requests_per_second)
        .map(|((t, curve), &rate)| Tenant {
            name: t.name.clone(),
            curve: curve.pessimistic(SIZE_ERROR),
            requests_per_second: rate,
            priority: if mode == Mode::Global { 1.0 } else { t.priority },
            min_bytes: t.min_bytes,
            max_bytes: t.max_bytes,
            slo_hit_ratio: if mode == Mode::Slo { t.slo_hit_ratio } else { None },
        })
        .collect();
    let current: Vec<u64> = tenants.iter().map(|t| t.limit_bytes).collect();
    let goal = if mode == Mode::Priorities { Goal::Priorities } else { Goal::GlobalHitRatio };
    let config = PlanConfig { total_bytes: current.iter().sum(), unit_bytes: unit, goal, hysteresis };
    let in_force = Plan { sizes: current.clone(), reasons: Vec::new(), objective: 0.0 };
    let mut fresh = plan(&planned, &config, Some(&in_force));
    let objective_now = shoal_curves::plan::objective(&planned, &current, goal);
    let kept = fresh.sizes == current;
    if !kept {
        let maxima: Vec<u64> = tenants.iter().map(|t| t.max_bytes / unit * unit).collect();
        spread_leftover(&mut fresh, &current, &maxima, curves, config.total_bytes, unit);
    }
    Ok(Proposal {
        kept,
        objective_now,
        objective_planned: fresh.objective,
        sizes: fresh.sizes,
        reasons: fresh.reasons,
    })
}

/// Gives the memory a plan left unassigned (no curve gains from it) back to the tenants that
/// had it, so nothing is evicted for nothing, then to any tenant below its maximum — never to
/// a size on its curve's cliff (`curves`, as measured), where the curve's error could make it
/// buy nothing: a tenant is given back only up to below its cliff, or enough to clear it.
fn spread_leftover(
    plan: &mut Plan,
    current: &[u64],
    maxima: &[u64],
    curves: &[HitRatioCurve],
    total: u64,
    unit: u64,
) {
    let mut left = total.saturating_sub(plan.sizes.iter().sum()) / unit;
    let mut returned = vec![0u64; plan.sizes.len()];
    let on_cliff = |i: usize, size: u64| curves[i].on_cliff(size, SIZE_ERROR);
    for (i, size) in plan.sizes.iter_mut().enumerate() {
        let mut back = (current[i].saturating_sub(*size) / unit).min(left);
        while back > 0 && on_cliff(i, *size + back * unit) {
            back -= 1;
        }
        *size += back * unit;
        returned[i] += back;
        left -= back;
    }
    while left > 0 {
        let mut gave = false;
        for (i, size) in plan.sizes.iter_mut().enumerate() {
            // The fewest units that take the tenant to a size off any cliff.
            let step = (1..=left)
                .take_while(|k| *size + k * unit <= maxima[i])
                .find(|k| !on_cliff(i, *size + k * unit));
            if let Some(k) = step {
                *size += k * unit;
                returned[i] += k;
                left -= k;
                gave = true;
            }
        }
        if !gave {
            break; // every tenant is at its maximum, or the rest would put one on a cliff
        }
    }
    for (reason, units) in plan.reasons.iter_mut().zip(returned) {
        if units > 0 {
            reason.push_str(&format!("; +{units} units no curve gains from, left with it"));
        }
    }
}

/// The order to apply `planned` over `current` in: the tenants that shrink, then those that
/// grow, so the sum of sizes never passes the server's memory on the way.
pub fn resize_order(current: &[u64], planned: &[u64]) -> Vec<usize> {
    let shrinking = (0..current.len()).filter(|&i| planned[i] < current[i]);
    let growing = (0..current.len()).filter(|&i| planned[i] > current[i]);
    shrinking.chain(growing).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn tenant(name: &str, size_mib: u64, priority: f64, slo: Option<f64>) -> TenantStats {
        TenantStats {
            name: name.into(),
            limit_bytes: size_mib * MIB,
            min_bytes: 2 * MIB,
            max_bytes: 64 * MIB,
            bytes: 0,
            items: 0,
            cmd_get: 0,
            get_hits: 0,
            evictions: 0,
            priority,
            slo_hit_ratio: slo,
            policy: "fifo".into(),
            segment_bytes: MIB,
        }
    }

    /// Hit ratio rising linearly by `slope` per MiB up to `until` MiB, flat after.
    fn ramp(slope: f64, until: usize) -> HitRatioCurve {
        HitRatioCurve::new(MIB, (0..=64).map(|i| slope * i.min(until) as f64).collect())
    }

    #[test]
    fn rates_come_from_deltas_and_a_restart_gives_none() {
        let at = |cmd_get, get_hits| Counters { cmd_get, get_hits };
        let r = rates(at(100, 50), at(300, 200), 2.0).unwrap();
        assert_eq!((r.requests_per_second, r.hit_ratio), (100.0, Some(0.75)));
        assert_eq!(rates(at(5, 5), at(5, 5), 1.0).unwrap().hit_ratio, None, "no gets: no ratio");
        assert_eq!(rates(at(100, 50), at(10, 5), 1.0), None, "counters went back");
        assert_eq!(rates(at(1, 0), at(2, 1), 0.0), None);
    }

    #[test]
    fn memory_moves_to_the_better_curve_and_the_total_stays() {
        let tenants = [tenant("steep", 16, 1.0, None), tenant("flat", 16, 1.0, None)];
        let curves = [ramp(0.03, 30), ramp(0.0, 0)];
        let p = propose(Mode::Global, 0.01, &tenants, &curves, &[100.0, 100.0]).unwrap();
        assert!(!p.kept);
        assert_eq!(p.sizes, [30 * MIB, 2 * MIB], "{p:?}");
        assert!(p.objective_planned > p.objective_now);
        assert!(p.reasons[0].contains("marginal gain"), "{:?}", p.reasons);
        assert!(p.reasons[1].starts_with("minimum"), "{:?}", p.reasons);
        // Unassigned memory (nobody gains past the top of the ramp at 30 MiB, read with the
        // curve's error: 30 MiB / 0.97 + 1 MiB, 32 MiB) stays with whoever had it.
        let wide = [tenant("steep", 16, 1.0, None), tenant("flat", 24, 1.0, None)];
        let p = propose(Mode::Global, 0.01, &wide, &curves, &[100.0, 100.0]).unwrap();
        assert_eq!(p.sizes, [32 * MIB, 8 * MIB], "{p:?}");
        assert!(p.reasons[1].contains("+6 units no curve gains from"), "{:?}", p.reasons);
        assert_eq!(resize_order(&[16 * MIB, 24 * MIB], &p.sizes), [1, 0], "the shrink first");
    }

    #[test]
    fn a_scan_short_of_its_cliff_gets_its_minimum_and_is_not_put_back_on_it() {
        // The trial: the scan's curve rises from nothing to 0.9 at 30.6 MiB; it holds
        // 31 MiB, within the curve's error of the cliff (32 MiB clears it). A busier Zipf-like
        // tenant gains up to 6 MiB (8 MiB read with its curve's error).
        let scan = HitRatioCurve::new(MIB / 4, (0..=256).map(|i| if i >= 123 { 0.9 } else { 0.0 }).collect());
        let tenants = [tenant("scan", 31, 1.0, None), tenant("zipf", 7, 1.0, None)];
        let curves = [scan.clone(), ramp(0.03, 6)];
        let p = propose(Mode::Global, 0.01, &tenants, &curves, &[1000.0, 3000.0]).unwrap();
        assert!(!p.kept, "31 MiB is counted on for nothing: {p:?}");
        assert!(p.reasons[0].contains("would buy nothing"), "{:?}", p.reasons);
        // What nobody gains from goes back, but the scan only up to below its cliff, and the
        // unit that would put it back on the cliff to the other.
        assert_eq!(p.sizes, [30 * MIB, 8 * MIB], "{p:?}");
        assert!(!scan.on_cliff(p.sizes[0], SIZE_ERROR));
    }

    #[test]
    fn hysteresis_keeps_sizes_and_idle_tenants_keep_theirs() {
        let tenants = [tenant("a", 16, 1.0, None), tenant("b", 16, 1.0, None)];
        let curves = [ramp(0.02, 17), ramp(0.02, 15)];
        let p = propose(Mode::Global, 0.05, &tenants, &curves, &[100.0, 100.0]).unwrap();
        assert!(p.kept && p.sizes == [16 * MIB, 16 * MIB], "a 1-unit gain is under 5 %: {p:?}");
        assert!(p.reasons[0].starts_with("kept"));
        let idle =
            propose(Mode::Global, 0.01, &tenants, &[ramp(0.03, 30), ramp(0.0, 0)], &[0.0, 0.0]).unwrap();
        assert!(idle.kept, "no requests: nothing to gain, nothing moves: {idle:?}");
    }

    #[test]
    fn each_goal_reads_what_it_should() {
        // Same rates; "a" gains 1/32 per MiB, "b" 1/64, has priority 10 and an objective of
        // 0.25 (16 MiB measured; 18 MiB with the curve's error, (16 + 1) / 0.97).
        let tenants = [tenant("a", 24, 1.0, None), tenant("b", 8, 10.0, Some(0.25))];
        let curves = [ramp(1.0 / 32.0, 30), ramp(1.0 / 64.0, 30)];
        let rates = [100.0, 100.0];
        let global = propose(Mode::Global, 0.0, &tenants, &curves, &rates).unwrap();
        assert_eq!(global.sizes, [30 * MIB, 2 * MIB], "{global:?}");
        let weighted = propose(Mode::Priorities, 0.0, &tenants, &curves, &rates).unwrap();
        assert_eq!(weighted.sizes, [2 * MIB, 30 * MIB], "{weighted:?}");
        let slo = propose(Mode::Slo, 0.0, &tenants, &curves, &rates).unwrap();
        assert_eq!(slo.sizes, [14 * MIB, 18 * MIB], "{slo:?}");
        assert!(slo.reasons[1].contains("objective 0.25 needs 18 units"), "{:?}", slo.reasons);
        // The objective comes first even when the sizes in force score higher on hits and
        // hysteresis would keep them.
        let sticky = propose(Mode::Slo, 0.5, &tenants, &curves, &rates).unwrap();
        assert!(sticky.objective_planned < sticky.objective_now, "{sticky:?}");
        assert_eq!(sticky.sizes, [14 * MIB, 18 * MIB], "{sticky:?}");
    }

    #[test]
    fn tenants_in_different_units_are_an_error() {
        let mut b = tenant("b", 16, 1.0, None);
        b.segment_bytes = 2 * MIB;
        let err = propose(
            Mode::Global,
            0.0,
            &[tenant("a", 16, 1.0, None), b],
            &[ramp(0.0, 0), ramp(0.0, 0)],
            &[1.0, 1.0],
        );
        assert!(err.unwrap_err().contains("different units"));
    }
}
