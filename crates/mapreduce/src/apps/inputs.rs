//! Generated inputs for every app, of any size and reproducible from a seed: for benchmarks
//! (`shoal mr generate`) and for tests that compare an app's ways of running.

use crate::error::MrError;

/// SplitMix64: a fast, seedable generator (inputs need to be reproducible, not secret).
pub(crate) struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Uniform in `0..n` (near enough).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// The largest input [`generate`] makes (it builds it in memory).
const MAX_GENERATED: u64 = 16 << 30;

/// An input of about `bytes` bytes for the app called `name`, the same for the same `seed`,
/// and the `--arg`s (`name=value`) to run it with.
///
/// - `wordcount`: lines of words from a 20 000-word vocabulary, skewed as natural text is;
/// - `histogram`, `linreg`: raw bytes (RGB pixels; points with y ≈ 0.6 x + noise);
/// - `matmul`: n×n times n×n with n chosen so the text is about `bytes` (its run time grows as n³);
/// - `strmatch`: lines of syllables, with three patterns;
/// - `kmeans`: 3-D points around six centres (k=6); `pca`: rows of 12 correlated columns.
pub fn generate(name: &str, bytes: u64, seed: u64) -> Result<(Vec<u8>, Vec<String>), MrError> {
    let app = super::find(name)?.name();
    if bytes > MAX_GENERATED {
        return Err(MrError::BadInput(format!(
            "inputs are generated in memory: at most {} GiB, not {bytes} bytes",
            MAX_GENERATED >> 30
        )));
    }
    let mut rng = Rng(seed);
    let size = bytes as usize;
    let mut out = Vec::with_capacity(size + 256);
    let args: &[&str] = match app {
        "wordcount" => {
            let vocabulary: Vec<Vec<u8>> = (0..20_000)
                .map(|_| (0..2 + rng.below(9)).map(|_| b'a' + rng.below(26) as u8).collect())
                .collect();
            for i in 0u64.. {
                if out.len() >= size {
                    break;
                }
                let n = vocabulary.len() as u64;
                let word = &vocabulary[(rng.below(n) * rng.below(n) / n) as usize];
                let start = out.len();
                out.extend_from_slice(word);
                if i % 7 == 0 {
                    out[start] = out[start].to_ascii_uppercase();
                }
                out.extend_from_slice(if i % 12 == 11 { b".\n" } else { b" " });
            }
            &[]
        }
        "histogram" | "linreg" => {
            while out.len() < size / 6 * 6 {
                let r = rng.next().to_le_bytes();
                if app == "histogram" {
                    out.extend_from_slice(&[r[0], r[1] / 2, r[2] / 3, r[3], r[4] / 2, r[5] / 3]);
                } else {
                    for p in [[r[0], r[1]], [r[2], r[3]], [r[4], r[5]]] {
                        out.extend_from_slice(&[p[0], (p[0] as u16 * 3 / 5 + p[1] as u16 % 40) as u8]);
                    }
                }
            }
            &[]
        }
        "matmul" => {
            // About 3.5 bytes a number, 2 n² numbers.
            let n = ((bytes as f64 / 7.0).sqrt() as usize).max(1);
            out.extend_from_slice(format!("{n} {n} {n}\n").as_bytes());
            for _ in 0..2 * n {
                let row: Vec<String> = (0..n).map(|_| (rng.below(199) as i64 - 99).to_string()).collect();
                out.extend_from_slice(row.join(" ").as_bytes());
                out.push(b'\n');
            }
            &[]
        }
        "strmatch" => {
            let syllables = ["ka", "ro", "mi", "shoal", "tu", "ne", "sa", "ri"];
            while out.len() < size {
                for s in 0..1 + rng.below(12) {
                    if s > 0 {
                        out.push(b' ');
                    }
                    out.extend_from_slice(syllables[rng.below(8) as usize].as_bytes());
                }
                out.push(b'\n');
            }
            &["pattern=shoal", "pattern=ka ro", "pattern=mimi"]
        }
        "kmeans" => {
            let centres = [
                [0, 0, 0],
                [500, 80, -300],
                [-400, 600, 100],
                [250, -250, 700],
                [900, 900, 900],
                [-800, -100, -600],
            ];
            while out.len() < size {
                let c = centres[rng.below(6) as usize];
                let p: Vec<String> =
                    c.iter().map(|v| (v + rng.below(401) as i64 - 200).to_string()).collect();
                out.extend_from_slice(p.join(" ").as_bytes());
                out.push(b'\n');
            }
            &["k=6"]
        }
        _ => {
            // pca: column j is a multiple of a hidden factor plus noise, so columns correlate.
            while out.len() < size {
                let factor = rng.below(100) as i64;
                let row: Vec<String> =
                    (0..12).map(|j| (factor * (j % 4) + rng.below(50) as i64 - 25).to_string()).collect();
                out.extend_from_slice(row.join(" ").as_bytes());
                out.push(b'\n');
            }
            &[]
        }
    };
    Ok((out, args.iter().map(|a| a.to_string()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_reproducible_about_the_size_asked_and_unknown_apps_are_named() {
        for app in crate::apps::ALL {
            let (a, _) = generate(app.name(), 10_000, 1).unwrap();
            assert_eq!(generate(app.name(), 10_000, 1).unwrap().0, a, "{}", app.name());
            assert_ne!(generate(app.name(), 10_000, 2).unwrap().0, a, "{}", app.name());
            assert!((8_000..12_000).contains(&a.len()), "{}: {} bytes", app.name(), a.len());
        }
        assert!(generate("nope", 10, 1).unwrap_err().to_string().contains("\"nope\""));
        assert!(generate("linreg", 1 << 40, 1).unwrap_err().to_string().contains("at most 16 GiB"));
    }
}
