//! Random numbers for workloads: a small fast generator and a Zipfian sampler.
//!
//! Every connection owns its own [`Rng`], seeded from its index, so runs are reproducible and
//! threads share nothing on the hot path.

/// SplitMix64: one multiply-xorshift chain per draw; statistically sound for choosing keys and
/// operations, and much cheaper than the request it helps build.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`, with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[0, bound)` (multiply-shift; the bias is below 2^-64 × bound). `bound > 0`.
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// Zipf's law over ranks `0..n`: rank `k` is drawn with probability proportional to
/// `1 / (k + 1)^skew`, for any `skew > 0` (YCSB's default is 0.99).
///
/// Sampling is rejection-inversion (Hörmann and Derflinger, "Rejection-inversion to generate
/// variates from monotone discrete distributions", 1996): constant time and memory whatever
/// `n`, no table of probabilities, and about 1.1 uniform draws per sample.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    skew: f64,
    /// H(1.5) - 1, where H is the integral of the hat function `h(x) = x^-skew`.
    h_integral_x1: f64,
    /// H(n + 0.5).
    h_integral_n: f64,
    /// Below this distance from the rounded point, a candidate is accepted without the test.
    squeeze: f64,
}

impl Zipf {
    /// The distribution over `n >= 1` ranks with exponent `skew > 0`.
    pub fn new(n: u64, skew: f64) -> Self {
        assert!(n >= 1, "Zipf needs at least one rank");
        assert!(skew > 0.0 && skew.is_finite(), "Zipf skew must be positive");
        let n = n as f64;
        let mut zipf = Zipf { n, skew, h_integral_x1: 0.0, h_integral_n: 0.0, squeeze: 0.0 };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(n + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// A rank in `0..n`; 0 is the most probable.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
    }

    /// The hat function, `x^-skew`.
    fn h(&self, x: f64) -> f64 {
        (-self.skew * x.ln()).exp()
    }

    /// `H(x) = (x^(1-skew) - 1) / (1 - skew)`, continuous through `skew = 1` (where it is ln x).
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        exp_m1_over_x((1.0 - self.skew) * log_x) * log_x
    }

    /// The inverse of [`Zipf::h_integral`].
    fn h_integral_inverse(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.skew)).max(-1.0);
        (ln_1p_over_x(t) * y).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn ln_1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x / 2.0 + x * x / 3.0
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn exp_m1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x / 2.0 + x * x / 6.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Pearson's chi-square statistic of `observed` counts against `expected` probabilities.
    pub(crate) fn chi_square(observed: &[u64], expected: &[f64]) -> f64 {
        let total: u64 = observed.iter().sum();
        observed
            .iter()
            .zip(expected)
            .map(|(&o, &p)| {
                let e = p * total as f64;
                (o as f64 - e).powi(2) / e
            })
            .sum()
    }

    /// Exact Zipf probabilities of ranks `0..n`.
    pub(crate) fn zipf_probabilities(n: usize, skew: f64) -> Vec<f64> {
        let weights: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-skew)).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    }

    /// 99.9th percentile of chi-square with 99 degrees of freedom: a correct sampler exceeds
    /// it one run in a thousand (and the seeds are fixed, so a pass stays a pass).
    pub(crate) const CHI_SQUARE_99_DOF_P999: f64 = 148.23;

    #[test]
    fn zipf_matches_its_distribution_for_several_skews() {
        for skew in [0.5, 0.99, 1.0, 1.5] {
            let zipf = Zipf::new(100, skew);
            let mut rng = Rng::new(7);
            let mut counts = vec![0u64; 100];
            for _ in 0..400_000 {
                counts[zipf.sample(&mut rng) as usize] += 1;
            }
            let chi = chi_square(&counts, &zipf_probabilities(100, skew));
            assert!(chi < CHI_SQUARE_99_DOF_P999, "skew {skew}: chi-square {chi:.1}");
        }
    }

    #[test]
    fn zipf_stays_in_range_for_one_rank_and_for_many() {
        let mut rng = Rng::new(1);
        let single = Zipf::new(1, 0.99);
        assert!((0..1000).all(|_| single.sample(&mut rng) == 0));
        let large = Zipf::new(10_000_000, 0.99);
        let draws: Vec<u64> = (0..100_000).map(|_| large.sample(&mut rng)).collect();
        assert!(draws.iter().all(|&k| k < 10_000_000));
        // The head of a 10M-key Zipf(0.99): rank 0 has probability 1/H(10M, 0.99) ≈ 5.5 %.
        let top = draws.iter().filter(|&&k| k == 0).count() as f64 / draws.len() as f64;
        assert!((0.05..0.062).contains(&top), "rank 0 drawn {top}");
    }

    #[test]
    fn uniform_draws_cover_the_range_evenly() {
        let mut rng = Rng::new(3);
        let mut counts = vec![0u64; 100];
        for _ in 0..200_000 {
            counts[rng.below(100) as usize] += 1;
        }
        let chi = chi_square(&counts, &[0.01; 100]);
        assert!(chi < CHI_SQUARE_99_DOF_P999, "chi-square {chi:.1}");
        assert!((0..1000).map(|_| rng.next_f64()).all(|x| (0.0..1.0).contains(&x)));
    }
}
