//! A hit-ratio curve: the hit ratio a cache of each size would have, at steps of a fixed number
//! of bytes, and its concave hull (what a planner can get by mixing sizes).

/// How far a measured curve's sizes may be off, as a fraction (a step more comes on top): the
/// sampled distances of SHARDS (a cliff of a key set the 12 288 sampled keys span is placed
/// within about 1/√12288 ≈ 0.9 %), the bytes-per-item calibration to the region's own bytes
/// (about 1 %), and margin for a workload that drifts between readings.
pub const SIZE_ERROR: f64 = 0.03;

/// Hit ratios at `0, step, 2·step, …` bytes: non-decreasing, in `[0, 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HitRatioCurve {
    step: u64,
    hits: Vec<f64>,
}

impl HitRatioCurve {
    /// A curve from hit ratios at steps of `step` bytes (made non-decreasing and clamped).
    pub fn new(step: u64, hits: Vec<f64>) -> HitRatioCurve {
        let mut best: f64 = 0.0;
        let hits = hits
            .into_iter()
            .map(|h| {
                best = best.max(h.clamp(0.0, 1.0));
                best
            })
            .collect();
        HitRatioCurve { step: step.max(1), hits }
    }

    /// Bytes between points.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// The points, from 0 bytes.
    pub fn points(&self) -> &[f64] {
        &self.hits
    }

    /// The hit ratio of a cache of `bytes`, interpolated between points; the last point's
    /// beyond the curve.
    pub fn hit_ratio(&self, bytes: u64) -> f64 {
        let at = bytes as f64 / self.step as f64;
        // `as` saturates, so a size past the curve lands on `usize::MAX`: the `+ 1` must too.
        let below = at.floor() as usize;
        match (self.hits.get(below), self.hits.get(below.saturating_add(1))) {
            (Some(&a), Some(&b)) => a + (b - a) * (at - below as f64),
            (Some(&a), None) => a,
            _ => self.hits.last().copied().unwrap_or(0.0),
        }
    }

    /// The smallest size, in points, whose hit ratio reaches `target` (`None`: never).
    pub fn points_to_reach(&self, target: f64) -> Option<usize> {
        self.hits.iter().position(|&h| h >= target)
    }

    /// The upper concave hull, as a curve on the same points: what mixing two sizes (Moirai's
    /// and Talus's argument) can achieve, and what a greedy planner needs to be optimal.
    pub fn concave_hull(&self) -> HitRatioCurve {
        let mut hull: Vec<usize> = Vec::new();
        for i in 0..self.hits.len() {
            while hull.len() >= 2 {
                let (a, b) = (hull[hull.len() - 2], hull[hull.len() - 1]);
                // b lies on or below the line from a to i: drop it.
                let cross = (self.hits[b] - self.hits[a]) * (i - a) as f64
                    - (self.hits[i] - self.hits[a]) * (b - a) as f64;
                if cross <= 0.0 {
                    hull.pop();
                } else {
                    break;
                }
            }
            hull.push(i);
        }
        let mut hits = vec![0.0; self.hits.len()];
        for pair in hull.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            for (i, h) in hits.iter_mut().enumerate().take(b + 1).skip(a) {
                *h = self.hits[a] + (self.hits[b] - self.hits[a]) * (i - a) as f64 / (b - a) as f64;
            }
        }
        if hull.len() == 1 {
            hits[0] = self.hits[0];
        }
        HitRatioCurve { step: self.step, hits }
    }

    /// The curve as a plan can count on it when its sizes may be off by `size_error` (a
    /// fraction) and a step: at each size, the hit ratio measured at that size less the error
    /// and a step (0 below). A cliff — a steep rise just below a size — moves up by the margin,
    /// so a planner reading this curve never counts on the hits of a size within the curve's
    /// error above a cliff.
    pub fn pessimistic(&self, size_error: f64) -> HitRatioCurve {
        let keep = 1.0 - size_error.clamp(0.0, 1.0);
        let hits = (0..self.hits.len())
            .map(|i| {
                let sure = i as f64 * keep - 1.0;
                if sure < 0.0 {
                    0.0
                } else {
                    self.hit_ratio((sure * self.step as f64) as u64)
                }
            })
            .collect();
        HitRatioCurve { step: self.step, hits }
    }

    /// Whether `bytes` sits on a cliff, as far as the curve's sizes may be off (`size_error`,
    /// a fraction, and a step): the hit ratio drops within that margin below `bytes` by more
    /// than twice what any concave curve could (from `h` at `bytes`, a concave curve through 0
    /// loses at most `h × margin / bytes`), and by more than 0.01.
    pub fn on_cliff(&self, bytes: u64, size_error: f64) -> bool {
        let margin = bytes as f64 * size_error.clamp(0.0, 1.0) + self.step as f64;
        let here = self.hit_ratio(bytes);
        let drop = here - self.hit_ratio((bytes as f64 - margin).max(0.0) as u64);
        drop > 0.01 && drop > 2.0 * here * (margin / bytes.max(1) as f64).min(1.0)
    }

    /// Mean absolute difference from `other` over the points both have.
    pub fn mean_absolute_error(&self, other: &HitRatioCurve) -> f64 {
        let n = self.hits.len().min(other.hits.len());
        if n == 0 {
            return 0.0;
        }
        self.hits.iter().zip(&other.hits).map(|(a, b)| (a - b).abs()).sum::<f64>() / n as f64
    }
}

/// A `curve` answer's lines (without `STAT `): `rate`, `tracked`, `step_bytes`, then
/// `hit_ratio <bytes> <ratio>` at every step from 0.
pub fn parse_curve(lines: &[String]) -> Result<HitRatioCurve, String> {
    let mut step: Option<u64> = None;
    let mut hits = Vec::new();
    for line in lines {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some("step_bytes"), Some(value), None) => {
                step = Some(
                    value.parse().ok().filter(|&s| s > 0).ok_or_else(|| format!("step_bytes {value:?}"))?,
                )
            }
            (Some("hit_ratio"), Some(bytes), Some(ratio)) => {
                let step = step.ok_or("hit_ratio before step_bytes")?;
                let bytes: u64 = bytes.parse().map_err(|_| format!("{line:?}: bytes"))?;
                let ratio: f64 = ratio
                    .parse()
                    .ok()
                    .filter(|r: &f64| (0.0..=1.0).contains(r))
                    .ok_or(format!("{line:?}: ratio"))?;
                // A step so large that the next point's size overflows has no next point.
                let expected = (hits.len() as u64).checked_mul(step);
                if expected != Some(bytes) {
                    return Err(match expected {
                        Some(at) => format!("{line:?}: expected the point at {at} bytes"),
                        None => format!("{line:?}: a point past {} bytes", u64::MAX),
                    });
                }
                hits.push(ratio);
            }
            _ => {} // rate, tracked, and whatever a newer server adds
        }
    }
    let step = step.ok_or("no step_bytes")?;
    if hits.is_empty() {
        return Err("no hit_ratio points".into());
    }
    Ok(HitRatioCurve::new(step, hits))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hull_lies_on_or_above_the_curve_and_is_concave() {
        let curve = HitRatioCurve::new(10, vec![0.0, 0.05, 0.1, 0.5, 0.55, 0.56, 0.9, 0.91]);
        let hull = curve.concave_hull();
        for (h, c) in hull.points().iter().zip(curve.points()) {
            assert!(h + 1e-12 >= *c);
        }
        let slopes: Vec<f64> = hull.points().windows(2).map(|w| w[1] - w[0]).collect();
        assert!(slopes.windows(2).all(|s| s[1] <= s[0] + 1e-12), "{slopes:?}");
        assert!((curve.hit_ratio(15) - 0.075).abs() < 1e-12);
        assert_eq!(curve.points_to_reach(0.5), Some(3));
        assert_eq!(curve.points_to_reach(0.95), None);
    }

    #[test]
    fn a_pessimistic_curve_moves_a_cliff_up_by_the_error_and_a_step() {
        // A scan of 30 MiB: nothing below, everything from 30 MiB.
        let scan = HitRatioCurve::new(1 << 20, (0..=64).map(|i| if i >= 30 { 0.9 } else { 0.0 }).collect());
        let sure = scan.pessimistic(0.05);
        // 30 / 0.95 + 1 = 32.6 MiB.
        assert_eq!(sure.points_to_reach(0.9), Some(33), "{:?}", sure.points());
        assert!(scan.on_cliff(31 << 20, 0.05), "31 MiB is on the cliff");
        assert!(!scan.on_cliff(40 << 20, 0.05), "40 MiB is well past it");
        assert!(!scan.on_cliff(10 << 20, 0.05), "10 MiB is below it");
        // A concave curve, however steep, has no cliff.
        let steep = HitRatioCurve::new(1 << 20, (0..=64).map(|i| (i as f64 / 8.0).min(1.0).sqrt()).collect());
        assert!((1..=64).all(|mib| !steep.on_cliff(mib << 20, 0.05)));
    }

    #[test]
    fn any_size_past_the_curve_has_the_last_points_ratio() {
        // Found by the controller_answers fuzz target: a step of one byte put `u64::MAX` on
        // the last index a `usize` holds, and the next point's index overflowed.
        let curve = HitRatioCurve::new(1, vec![0.1, 0.2]);
        assert_eq!(curve.hit_ratio(u64::MAX), 0.2);
        assert_eq!(curve.hit_ratio(2), 0.2);
        assert_eq!(HitRatioCurve::new(1, vec![]).hit_ratio(u64::MAX), 0.0);
    }
}
