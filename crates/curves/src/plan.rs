//! The partition planner (docs/design/tenants.md, Moirai §3): sizes for every tenant from its hit-ratio
//! curve, in whole units of memory (segments).
//!
//! 1. Every tenant's minimum is reserved.
//! 2. Service-level objectives (a minimum hit ratio) are reserved next, highest priority
//!    first: the smallest size whose curve reaches the objective. One that does not fit is
//!    given what is left and reported unmet.
//! 3. The rest goes one unit at a time to the tenant whose *concave hull* gains most from it,
//!    weighted by its request rate (goal: global hit ratio) or by rate × priority (goal:
//!    priorities), up to each maximum. On concave curves this greedy is optimal (tested
//!    against [`optimum`]); the hull makes it so for the rest, as mixing two sizes would.
//!    A tenant the hull led part way up to a cliff, where its own curve is no higher than at
//!    fewer units, gets back to those fewer (its minimum, when it gains nothing below the
//!    cliff) and stops growing; the units go again by marginal gain to the others, where they
//!    buy hits. (Curves read with [`HitRatioCurve::pessimistic`] put every cliff a curve's
//!    error higher, so a plan on them never counts on a size within that error of a cliff.)
//! 4. Hysteresis: the previous plan stays unless the new one is better by more than a fraction,
//!    or meets a hit-ratio objective the previous one misses.

use crate::curve::HitRatioCurve;

/// What the planner maximises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// Hits per second over all tenants.
    GlobalHitRatio,
    /// Hits per second weighted by each tenant's priority.
    Priorities,
}

/// One tenant as the planner sees it.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Its name, for reasons.
    pub name: String,
    /// Its measured curve.
    pub curve: HitRatioCurve,
    /// Requests per second it makes.
    pub requests_per_second: f64,
    /// Its weight under [`Goal::Priorities`] (1: ordinary).
    pub priority: f64,
    /// Bytes it always gets.
    pub min_bytes: u64,
    /// Bytes it never passes.
    pub max_bytes: u64,
    /// A hit ratio it must reach, if it can.
    pub slo_hit_ratio: Option<f64>,
}

/// How to plan.
#[derive(Debug, Clone, Copy)]
pub struct PlanConfig {
    /// Memory to share.
    pub total_bytes: u64,
    /// Sizes move in whole units of this many bytes.
    pub unit_bytes: u64,
    /// What to maximise.
    pub goal: Goal,
    /// The previous plan stays unless the new one's objective is higher by more than this
    /// fraction (0.01: 1 %).
    pub hysteresis: f64,
}

/// Sizes and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Bytes per tenant, in the order given.
    pub sizes: Vec<u64>,
    /// Why each tenant got its size.
    pub reasons: Vec<String>,
    /// The goal's value (hits per second, weighted) on the measured curves.
    pub objective: f64,
}

fn weight(tenant: &Tenant, goal: Goal) -> f64 {
    match goal {
        Goal::GlobalHitRatio => tenant.requests_per_second,
        Goal::Priorities => tenant.requests_per_second * tenant.priority,
    }
}

/// The goal's value of giving each tenant `sizes` bytes, on the measured curves.
pub fn objective(tenants: &[Tenant], sizes: &[u64], goal: Goal) -> f64 {
    tenants.iter().zip(sizes).map(|(t, &bytes)| weight(t, goal) * t.curve.hit_ratio(bytes)).sum()
}

/// The plan for `tenants` (see the module's steps); `previous` is the plan in force.
pub fn plan(tenants: &[Tenant], config: &PlanConfig, previous: Option<&Plan>) -> Plan {
    let unit = config.unit_bytes.max(1);
    let mut left = config.total_bytes / unit;
    let min_units = |t: &Tenant| t.min_bytes.div_ceil(unit);
    let max_units = |t: &Tenant| (t.max_bytes / unit).max(min_units(t));
    let mut units = vec![0u64; tenants.len()];
    let mut reasons: Vec<Vec<String>> = vec![Vec::new(); tenants.len()];
    let mut by_priority: Vec<usize> = (0..tenants.len()).collect();
    by_priority.sort_by(|&a, &b| tenants[b].priority.total_cmp(&tenants[a].priority));
    for &i in &by_priority {
        let want = min_units(&tenants[i]);
        units[i] = want.min(left);
        left -= units[i];
        if want > 0 {
            reasons[i].push(format!("minimum {} units", units[i]));
        }
        if units[i] < want {
            reasons[i].push(format!("minimum short by {} units: the memory is spoken for", want - units[i]));
        }
    }
    for &i in &by_priority {
        let Some(target) = tenants[i].slo_hit_ratio else { continue };
        let curve = &tenants[i].curve;
        let needed = curve.points_to_reach(target).map(|p| (p as u64 * curve.step()).div_ceil(unit));
        match needed {
            Some(needed) if needed <= max_units(&tenants[i]) => {
                let extra = needed.saturating_sub(units[i]).min(left);
                units[i] += extra;
                left -= extra;
                if units[i] >= needed {
                    reasons[i].push(format!("hit-ratio objective {target} needs {needed} units"));
                } else {
                    reasons[i].push(format!(
                        "hit-ratio objective {target} unmet: needs {needed} units, got {}",
                        units[i]
                    ));
                }
            }
            _ => reasons[i].push(format!(
                "hit-ratio objective {target} unmet: its curve never reaches it within its maximum"
            )),
        }
    }
    let hulls: Vec<HitRatioCurve> = tenants.iter().map(|t| t.curve.concave_hull()).collect();
    let gain = |i: usize, at: u64| {
        let bytes = |u: u64| u * unit;
        weight(&tenants[i], config.goal) * (hulls[i].hit_ratio(bytes(at + 1)) - hulls[i].hit_ratio(bytes(at)))
    };
    let reserved = units.clone();
    // Tenants taken back from a size that buys nothing: they grow no more.
    let mut settled = vec![false; tenants.len()];
    loop {
        while left > 0 {
            let best = (0..tenants.len())
                .filter(|&i| !settled[i] && units[i] < max_units(&tenants[i]))
                .map(|i| (gain(i, units[i]), i))
                .max_by(|a, b| {
                    a.0.total_cmp(&b.0).then(tenants[a.1].priority.total_cmp(&tenants[b.1].priority))
                });
            let Some((g, i)) = best else { break };
            if g <= 0.0 {
                break; // nobody gains: the rest stays unassigned rather than be spread for nothing
            }
            units[i] += 1;
            left -= 1;
        }
        let mut trimmed = false;
        for i in 0..tenants.len() {
            let Some(enough) = buys_nothing_past(&tenants[i].curve, unit, reserved[i], units[i]) else {
                continue;
            };
            let freed = units[i] - enough;
            reasons[i].push(if enough == reserved[i] {
                format!(
                    "{} units would buy nothing (its curve rises only past them, at a cliff): \
                     kept at {enough}, the {freed} units go where they buy hits",
                    units[i]
                )
            } else {
                format!("{freed} units past {enough} would buy nothing (short of a cliff): they go where they buy hits")
            });
            units[i] = enough;
            left += freed;
            settled[i] = true;
            trimmed = true;
        }
        if !trimmed {
            break;
        }
    }
    for (i, (u, r)) in units.iter().zip(&reserved).enumerate() {
        if u > r {
            reasons[i].push(format!("+{} units by marginal gain on the concave hull", u - r));
        }
    }
    let sizes: Vec<u64> = units.iter().map(|u| u * unit).collect();
    let fresh = Plan {
        objective: objective(tenants, &sizes, config.goal),
        sizes,
        reasons: reasons
            .into_iter()
            .map(|r| if r.is_empty() { "nothing: no gain".into() } else { r.join("; ") })
            .collect(),
    };
    match previous {
        Some(old)
            if old.sizes.len() == tenants.len() && old.sizes.iter().sum::<u64>() <= config.total_bytes =>
        {
            let kept = objective(tenants, &old.sizes, config.goal);
            // An objective the new plan meets and the old one misses is worth any loss of hits.
            let meets = |sizes: &[u64], t: &Tenant, i: usize| {
                t.slo_hit_ratio.is_some_and(|target| t.curve.hit_ratio(sizes[i]) >= target)
            };
            let meets_more = tenants
                .iter()
                .enumerate()
                .any(|(i, t)| meets(&fresh.sizes, t, i) && !meets(&old.sizes, t, i));
            if !meets_more && fresh.objective <= kept * (1.0 + config.hysteresis) {
                let why = if fresh.objective <= 0.0 {
                    "kept: no plan gains a hit (no requests, or no curve rises)".to_string()
                } else {
                    format!(
                        "kept: the new plan gains {:.3}% (hysteresis {:.3}%)",
                        (fresh.objective / kept.max(f64::MIN_POSITIVE) - 1.0) * 100.0,
                        config.hysteresis * 100.0
                    )
                };
                return Plan { sizes: old.sizes.clone(), reasons: vec![why; tenants.len()], objective: kept };
            }
            fresh
        }
        _ => fresh,
    }
}

/// The fewest units, from `reserved` up, with the hit ratio of `units` on `curve`, when fewer
/// than `units` (the rest would buy nothing: the hull led part way up to a cliff).
fn buys_nothing_past(curve: &HitRatioCurve, unit: u64, reserved: u64, units: u64) -> Option<u64> {
    let at = curve.hit_ratio(units * unit);
    (reserved..units).find(|&u| curve.hit_ratio(u * unit) >= at - 1e-12)
}

/// The best sizes by exhaustive dynamic programming over the raw curves (minimums and
/// maximums honoured, objectives ignored): the yardstick for [`plan`] in tests and benchmarks.
/// `None` when the minimums do not fit.
pub fn optimum(tenants: &[Tenant], config: &PlanConfig) -> Option<Plan> {
    let unit = config.unit_bytes.max(1);
    let total = (config.total_bytes / unit) as usize;
    // best[u]: the best value of the tenants so far with u units; choice[i][u]: tenant i's units.
    let mut best = vec![f64::NEG_INFINITY; total + 1];
    best[0] = 0.0;
    let mut choices: Vec<Vec<usize>> = Vec::new();
    for t in tenants {
        let (low, high) = (t.min_bytes.div_ceil(unit) as usize, ((t.max_bytes / unit) as usize).min(total));
        let mut next = vec![f64::NEG_INFINITY; total + 1];
        let mut choice = vec![0usize; total + 1];
        for (used, &value) in best.iter().enumerate() {
            if value == f64::NEG_INFINITY {
                continue;
            }
            for k in low..=high.max(low) {
                if used + k > total {
                    break;
                }
                let v = value + weight(t, config.goal) * t.curve.hit_ratio((k as u64) * unit);
                if v > next[used + k] {
                    next[used + k] = v;
                    choice[used + k] = k;
                }
            }
        }
        best = next;
        choices.push(choice);
    }
    let (mut at, value) = best.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1))?;
    if *value == f64::NEG_INFINITY {
        return None;
    }
    let mut sizes = vec![0u64; tenants.len()];
    for i in (0..tenants.len()).rev() {
        let k = choices[i][at];
        sizes[i] = k as u64 * unit;
        at -= k;
    }
    Some(Plan {
        objective: objective(tenants, &sizes, config.goal),
        sizes,
        reasons: vec!["exhaustive optimum".into(); tenants.len()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn tenant(name: &str, hits: Vec<f64>, rps: f64) -> Tenant {
        Tenant {
            name: name.into(),
            curve: HitRatioCurve::new(MIB, hits),
            requests_per_second: rps,
            priority: 1.0,
            min_bytes: 0,
            max_bytes: u64::MAX,
            slo_hit_ratio: None,
        }
    }

    /// A concave curve from decreasing gains.
    fn concave(gains: &[f64]) -> Vec<f64> {
        let mut sorted = gains.to_vec();
        sorted.sort_by(|a, b| b.total_cmp(a));
        let total: f64 = sorted.iter().sum::<f64>().max(1e-9) * 1.25;
        let mut hits = vec![0.0];
        for g in sorted {
            hits.push(hits.last().unwrap() + g / total);
        }
        hits
    }

    fn config(total_mib: u64) -> PlanConfig {
        PlanConfig {
            total_bytes: total_mib * MIB,
            unit_bytes: MIB,
            goal: Goal::GlobalHitRatio,
            hysteresis: 0.0,
        }
    }

    proptest! {
        #[test]
        fn greedy_on_concave_curves_is_the_optimum(
            gains in proptest::collection::vec(proptest::collection::vec(0.0f64..1.0, 12), 2..5),
            rates in proptest::collection::vec(1.0f64..1000.0, 5),
            total in 1u64..30,
        ) {
            let tenants: Vec<Tenant> =
                gains.iter().enumerate().map(|(i, g)| tenant(&format!("t{i}"), concave(g), rates[i])).collect();
            let planned = plan(&tenants, &config(total), None);
            let best = optimum(&tenants, &config(total)).expect("no minimums");
            prop_assert!((planned.objective - best.objective).abs() <= 1e-9 * best.objective.max(1.0),
                "{} vs {}", planned.objective, best.objective);
            prop_assert!(planned.sizes.iter().sum::<u64>() <= total * MIB);
        }

        #[test]
        fn greedy_never_beats_the_optimum_and_respects_limits(
            hits in proptest::collection::vec(proptest::collection::vec(0.0f64..1.0, 10), 2..4),
            total in 1u64..25,
            min in 0u64..3,
            max in 3u64..9,
        ) {
            let tenants: Vec<Tenant> = hits
                .iter()
                .enumerate()
                .map(|(i, h)| Tenant { min_bytes: min * MIB, max_bytes: max * MIB, ..tenant(&format!("t{i}"), h.clone(), 10.0) })
                .collect();
            let planned = plan(&tenants, &config(total), None);
            let Some(best) = optimum(&tenants, &config(total)) else {
                prop_assert!(min * tenants.len() as u64 > total, "only minimums that do not fit have no optimum");
                return Ok(());
            };
            prop_assert!(planned.objective <= best.objective + 1e-9);
            for &size in &planned.sizes {
                prop_assert!(size >= min * MIB && size <= max * MIB, "{:?}", planned.sizes);
            }
        }
    }

    #[test]
    fn objectives_come_first_and_priorities_weigh() {
        let flat = tenant("batch", concave(&[0.5; 10]), 1000.0);
        let steep = Tenant {
            slo_hit_ratio: Some(0.6),
            ..tenant("shop", concave(&[0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]), 10.0)
        };
        let planned = plan(&[flat.clone(), steep.clone()], &config(10), None);
        let needed = steep.curve.points_to_reach(0.6).unwrap() as u64 * MIB;
        assert!(planned.sizes[1] >= needed, "{planned:?}");
        assert!(planned.reasons[1].contains("objective 0.6 needs"), "{:?}", planned.reasons);
        // An objective the curve never reaches is reported, not pursued.
        let hopeless = Tenant { slo_hit_ratio: Some(0.99), ..steep.clone() };
        let planned = plan(&[flat.clone(), hopeless], &config(10), None);
        assert!(planned.reasons[1].contains("unmet"), "{:?}", planned.reasons);
        // Priorities: the same two curves, the small tenant weighted up, gets more.
        let global = plan(&[flat.clone(), steep.clone()], &config(6), None);
        let weighted = Tenant { priority: 500.0, slo_hit_ratio: None, ..steep };
        let prioritized = plan(&[flat, weighted], &PlanConfig { goal: Goal::Priorities, ..config(6) }, None);
        assert!(prioritized.sizes[1] >= global.sizes[1], "{global:?} {prioritized:?}");
    }

    /// A scan of `cliff_mib` (steps of 256 KiB): no hits below, 0.9 from there.
    fn scan(cliff_mib: f64) -> HitRatioCurve {
        let step = MIB / 4;
        HitRatioCurve::new(
            step,
            (0..=256).map(|i| if i as f64 * 0.25 >= cliff_mib { 0.9 } else { 0.0 }).collect(),
        )
    }

    /// A Zipf-like tenant: gains halving every 4 MiB, nothing past 24 MiB.
    fn zipf() -> Vec<f64> {
        concave(&(0..24).map(|i| 0.5f64.powf(i as f64 / 4.0)).collect::<Vec<_>>())
    }

    fn with_minimum(t: Tenant) -> Tenant {
        Tenant { min_bytes: 2 * MIB, ..t }
    }

    #[test]
    fn a_tenant_the_hull_leads_short_of_its_cliff_gets_its_minimum() {
        // The scan's hull (0.9 over 30 MiB, 0.03 a MiB) beats the Zipf tenant's tail, so the
        // greedy hands the scan units it cannot turn into hits in 24 MiB.
        let tenants = [
            with_minimum(Tenant { curve: scan(30.0), ..tenant("scan", vec![], 1000.0) }),
            with_minimum(tenant("zipf", zipf(), 1000.0)),
        ];
        let planned = plan(&tenants, &config(24), None);
        assert_eq!(planned.sizes, [2 * MIB, 22 * MIB], "{planned:?}");
        assert!(planned.reasons[0].contains("would buy nothing"), "{:?}", planned.reasons);
        assert!(planned.reasons[1].contains("marginal gain"), "{:?}", planned.reasons);
        assert!(planned.objective >= optimum(&tenants, &config(24)).unwrap().objective - 1e-9);
    }

    #[test]
    fn on_pessimistic_curves_no_tenant_lands_within_the_error_of_a_cliff() {
        // The trial: a scan whose curve's cliff is at 30.6 MiB. On the raw curve the
        // plan gives it 31 MiB, within the curve's error of the cliff.
        let error = 0.03;
        let raw = [
            with_minimum(Tenant { curve: scan(30.6), ..tenant("scan", vec![], 1000.0) }),
            with_minimum(tenant("zipf", zipf(), 1000.0)),
        ];
        let trusting = plan(&raw, &config(48), None);
        assert_eq!(trusting.sizes[0], 31 * MIB, "{trusting:?}");
        assert!(raw[0].curve.on_cliff(31 * MIB, error));
        let careful: Vec<Tenant> =
            raw.iter().map(|t| Tenant { curve: t.curve.pessimistic(error), ..t.clone() }).collect();
        for total in [24, 32, 40, 48, 64] {
            let planned = plan(&careful, &config(total), None);
            for (t, &size) in raw.iter().zip(&planned.sizes) {
                assert!(
                    !t.curve.on_cliff(size, error),
                    "{total} MiB: {} at {size} is within the error of a cliff: {planned:?}",
                    t.name
                );
            }
            // The scan fits whole, with a margin, or gets its minimum.
            assert!(planned.sizes[0] == 2 * MIB || planned.sizes[0] >= 32 * MIB, "{total}: {planned:?}");
        }
        assert_eq!(plan(&careful, &config(48), None).sizes[0], 32 * MIB);
    }

    #[test]
    fn hysteresis_keeps_a_plan_against_a_small_gain() {
        let a = tenant("a", concave(&[0.5, 0.4, 0.3, 0.2, 0.1]), 100.0);
        let b = tenant("b", concave(&[0.5, 0.4, 0.3, 0.2, 0.1]), 101.0);
        let first = plan(&[a.clone(), b.clone()], &config(6), None);
        let slightly = Tenant { requests_per_second: 104.0, ..b.clone() };
        let settings = PlanConfig { hysteresis: 0.05, ..config(6) };
        let again = plan(&[a.clone(), slightly], &settings, Some(&first));
        assert_eq!(again.sizes, first.sizes);
        assert!(again.reasons[0].starts_with("kept"), "{:?}", again.reasons);
        let much = Tenant { requests_per_second: 10_000.0, ..b.clone() };
        let moved = plan(&[a.clone(), much], &settings, Some(&first));
        assert_ne!(moved.sizes, first.sizes, "a large change moves memory");
        // An objective the previous plan misses moves memory even at a loss of hits.
        let demanding = Tenant { slo_hit_ratio: Some(b.curve.hit_ratio(first.sizes[1] + MIB)), ..b };
        let met = plan(&[a, demanding], &PlanConfig { hysteresis: 0.5, ..settings }, Some(&first));
        assert!(met.sizes[1] > first.sizes[1], "{first:?} {met:?}");
    }
}
