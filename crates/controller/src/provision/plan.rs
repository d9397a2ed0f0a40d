//! How many servers a load needs: one step at a time, with hysteresis so the count does not
//! flap around a threshold.
//!
//! With `n` servers on and a target load `t` per server, one more is turned on when the load
//! passes `n · t` (the servers on are past their target), and one is turned off when the load
//! falls under `(n − 1) · t · (1 − h)` (one fewer would still run below target by the margin
//! `h`). Between the two the count stays. Steps are single servers: Proteus moves exactly
//! 1/(n+1) of the keys per step, and a transition ends before the next one starts.

/// The provisioner's limits and thresholds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planner {
    /// Requests per second one server should carry.
    pub target: f64,
    /// The margin under the next lower count's capacity before a server is turned off.
    pub hysteresis: f64,
    /// The fewest servers on.
    pub min_active: usize,
    /// The most servers on (at most the pool's size).
    pub max_active: usize,
}

/// What the planner decided, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The servers that should be on.
    pub active: usize,
    /// Why, in words (logged and shown in `/status`).
    pub reason: String,
}

impl Planner {
    /// Checks the limits; a message naming the bad value otherwise.
    pub fn new(
        target: f64,
        hysteresis: f64,
        min_active: usize,
        max_active: usize,
    ) -> Result<Planner, String> {
        if !(target.is_finite() && target > 0.0) {
            return Err(format!("--target-rps {target}: a positive number of requests per second"));
        }
        if !(0.0..1.0).contains(&hysteresis) {
            return Err(format!("--hysteresis {hysteresis}: a fraction from 0 up to (not including) 1"));
        }
        if min_active == 0 || min_active > max_active {
            return Err(format!("--min-active {min_active}: from 1 up to --max-active ({max_active})"));
        }
        Ok(Planner { target, hysteresis, min_active, max_active })
    }

    /// The count to move to from `active` servers under `load` requests per second.
    pub fn decide(&self, load: f64, active: usize) -> Decision {
        let capacity = active as f64 * self.target;
        let lower = (active.saturating_sub(1)) as f64 * self.target * (1.0 - self.hysteresis);
        if active < self.min_active {
            return Decision {
                active: active + 1,
                reason: format!("below the minimum of {}", self.min_active),
            };
        }
        if active > self.max_active {
            return Decision {
                active: active - 1,
                reason: format!("above the maximum of {}", self.max_active),
            };
        }
        if load > capacity && active < self.max_active {
            let reason = format!("load {load:.0}/s is above {active} × {:.0}/s", self.target);
            return Decision { active: active + 1, reason };
        }
        if load < lower && active > self.min_active {
            let reason = format!(
                "load {load:.0}/s is below {} × {:.0}/s less {:.0} %",
                active - 1,
                self.target,
                self.hysteresis * 100.0
            );
            return Decision { active: active - 1, reason };
        }
        Decision { active, reason: format!("load {load:.0}/s fits {}", super::n_servers(active)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_up_past_capacity_and_down_under_the_margin() {
        let p = Planner::new(1000.0, 0.2, 1, 8).unwrap();
        assert_eq!(p.decide(2500.0, 2).active, 3, "past 2 × 1000");
        assert_eq!(p.decide(2000.0, 2).active, 2, "at capacity: stays");
        assert_eq!(p.decide(900.0, 2).active, 2, "one server would run at 90 %: within the margin");
        assert_eq!(p.decide(799.0, 2).active, 1, "under 1 × 1000 × 0.8");
        assert_eq!(p.decide(50_000.0, 3).active, 4, "one step at a time");
        assert_eq!(p.decide(0.0, 5).active, 4, "one step at a time, down too");
    }

    #[test]
    fn limits_hold() {
        let p = Planner::new(1000.0, 0.2, 2, 4).unwrap();
        assert_eq!(p.decide(0.0, 2).active, 2, "never below the minimum");
        assert_eq!(p.decide(1e9, 4).active, 4, "never above the maximum");
        assert_eq!(p.decide(0.0, 1).active, 2, "a count below the minimum climbs");
        assert_eq!(p.decide(1e9, 6).active, 5, "a count above the maximum comes down");
    }

    #[test]
    fn no_flapping_between_two_thresholds() {
        // A load that oscillates around one server's capacity moves the count once.
        let p = Planner::new(1000.0, 0.25, 1, 8).unwrap();
        let mut active = 1;
        let mut changes = 0;
        for i in 0..100 {
            let load = if i % 2 == 0 { 1050.0 } else { 950.0 };
            let next = p.decide(load, active).active;
            changes += usize::from(next != active);
            active = next;
        }
        assert_eq!((active, changes), (2, 1));
    }

    #[test]
    fn bad_limits_are_named() {
        assert!(Planner::new(0.0, 0.2, 1, 2).unwrap_err().contains("--target-rps"));
        assert!(Planner::new(10.0, 1.0, 1, 2).unwrap_err().contains("--hysteresis"));
        assert!(Planner::new(10.0, 0.2, 3, 2).unwrap_err().contains("--min-active"));
        assert!(Planner::new(10.0, 0.2, 0, 2).unwrap_err().contains("--min-active"));
    }
}
