//! A hit-ratio curve: the hit ratio a cache of each size would have, at steps of a fixed number
//! of bytes, and its concave hull (what a planner can get by mixing sizes).

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

    /// Mean absolute difference from `other` over the points both have.
    pub fn mean_absolute_error(&self, other: &HitRatioCurve) -> f64 {
        let n = self.hits.len().min(other.hits.len());
        if n == 0 {
            return 0.0;
        }
        self.hits.iter().zip(&other.hits).map(|(a, b)| (a - b).abs()).sum::<f64>() / n as f64
    }
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
    fn any_size_past_the_curve_has_the_last_points_ratio() {
        // Found by the controller_answers fuzz target: a step of one byte put `u64::MAX` on
        // the last index a `usize` holds, and the next point's index overflowed.
        let curve = HitRatioCurve::new(1, vec![0.1, 0.2]);
        assert_eq!(curve.hit_ratio(u64::MAX), 0.2);
        assert_eq!(curve.hit_ratio(2), 0.2);
        assert_eq!(HitRatioCurve::new(1, vec![]).hit_ratio(u64::MAX), 0.0);
    }
}
