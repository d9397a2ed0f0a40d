//! K-means: clusters points (text lines of integers, all of one dimension) into k groups.
//! Each iteration is one job, chained to the one before: its parameters are the centroids
//! computed from the previous job's output. A map assigns each point to the nearest centroid
//! (ties to the lowest index) and emits per cluster the count and the coordinate sums, exact
//! integers, so the result does not depend on the split. Stops when the centroids stop
//! moving, or after `iterations` jobs.

use crate::app::{add_i64s, bytes_i64s, i64s_bytes, lines, parse_ints, App, Args, Jobs, Rendered};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;
use rayon::prelude::*;

/// The k-means app.
pub struct KMeans;

/// Centroids as the job's parameters: k, d, then k·d `f64`s.
fn encode(centroids: &[Vec<f64>]) -> Vec<u8> {
    let d = centroids.first().map_or(0, Vec::len);
    let mut out = i64s_bytes(&[centroids.len() as i64, d as i64]);
    centroids.iter().flatten().for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
    out
}

fn decode(params: &[u8]) -> (usize, Vec<Vec<f64>>) {
    let head = bytes_i64s(&params[..16.min(params.len())]);
    let (k, d) = (head.first().copied().unwrap_or(0) as usize, head.get(1).copied().unwrap_or(0) as usize);
    let values: Vec<f64> = params[16.min(params.len())..]
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    (d, values.chunks(d.max(1)).take(k).map(<[f64]>::to_vec).collect())
}

/// The index of the centroid nearest to `point`.
fn nearest(point: &[i64], centroids: &[Vec<f64>]) -> usize {
    let distance =
        |c: &Vec<f64>| point.iter().zip(c).map(|(&x, &m)| (x as f64 - m) * (x as f64 - m)).sum::<f64>();
    let mut best = 0;
    for (i, c) in centroids.iter().enumerate().skip(1) {
        if distance(c) < distance(&centroids[best]) {
            best = i;
        }
    }
    best
}

/// New centroids from per-cluster `[count, sums…]`; an empty cluster keeps its centroid.
fn update(old: &[Vec<f64>], sums: &[Option<Vec<i64>>]) -> Vec<Vec<f64>> {
    old.iter()
        .zip(sums)
        .map(|(c, s)| match s {
            Some(s) if s[0] > 0 => s[1..].iter().map(|&v| v as f64 / s[0] as f64).collect(),
            _ => c.clone(),
        })
        .collect()
}

/// The first `k` distinct points, and the dimension; or what is wrong with the input.
fn initial(input: &[u8], k: usize) -> Result<Vec<Vec<f64>>, String> {
    let mut chosen: Vec<Vec<i64>> = Vec::new();
    let mut d = None;
    for line in lines(input) {
        let p = parse_ints(line)?;
        if p.is_empty() || *d.get_or_insert(p.len()) != p.len() {
            return Err(format!(
                "point {p:?} does not have the dimension of the first point ({})",
                d.unwrap_or(0)
            ));
        }
        if chosen.len() < k && !chosen.contains(&p) {
            chosen.push(p);
        }
        if chosen.len() == k {
            break;
        }
    }
    if chosen.len() < k {
        return Err(format!("k-means needs at least k={k} distinct points, the input has {}", chosen.len()));
    }
    Ok(chosen.into_iter().map(|p| p.into_iter().map(|v| v as f64).collect()).collect())
}

impl App for KMeans {
    fn name(&self) -> &'static str {
        "kmeans"
    }

    fn about(&self) -> &'static str {
        "k-means clusters of integer points (text, one per line); args: k=N, iterations=N"
    }

    fn map(&self, _stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        let (d, centroids) = decode(params);
        if centroids.is_empty() || centroids.iter().any(|c| c.len() != d) {
            return Err(format!(
                "k-means parameters of {} bytes hold no centroids of dimension {d}",
                params.len()
            ));
        }
        let mut sums = vec![vec![0i64; d + 1]; centroids.len()];
        for line in lines(split) {
            let p = parse_ints(line)?;
            if p.len() != d {
                return Err(format!("point {p:?} has {} coordinates, not {d}", p.len()));
            }
            assign(&mut sums, &p, &centroids);
        }
        for (i, s) in sums.iter().enumerate().filter(|(_, s)| s[0] > 0) {
            out.emit(&(i as u32).to_be_bytes(), &i64s_bytes(s));
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_i64s(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        let (k, iterations) = arguments(args)?;
        let centroids = initial(input.contents()?, k).map_err(MrError::BadInput)?;
        let input = jobs.put_input(input)?;
        lloyd(centroids, iterations, |centroids| {
            let mut sums = vec![None; k];
            for (key, value) in jobs.run(self, 0, input, &encode(centroids))? {
                let i = u32::from_be_bytes(
                    key[..].try_into().map_err(|_| MrError::JobFailed("a bad cluster key".into()))?,
                );
                if let Some(slot) = sums.get_mut(i as usize) {
                    *slot = Some(bytes_i64s(&value));
                }
            }
            Ok(sums)
        })
    }
}

/// k and the most iterations, after refusing other arguments.
fn arguments(args: &Args) -> Result<(usize, u64), MrError> {
    args.only(KMeans.name(), &["k", "iterations"])?;
    Ok((args.number("k", 3, 1..=4096)? as usize, args.number("iterations", 20, 1..=10_000)?))
}

/// Adds `point` to the `[count, sums…]` of its nearest centroid.
fn assign(sums: &mut [Vec<i64>], point: &[i64], centroids: &[Vec<f64>]) {
    let s = &mut sums[nearest(point, centroids)];
    s[0] += 1;
    s[1..].iter_mut().zip(point).for_each(|(a, v)| *a = a.wrapping_add(*v));
}

/// Lloyd's iterations from `centroids`, each `sums` giving every cluster's `[count, sums…]`
/// (`None`: no point) for the centroids it is given; until they stop moving or `iterations`.
fn lloyd(
    mut centroids: Vec<Vec<f64>>,
    iterations: u64,
    mut sums: impl FnMut(&[Vec<f64>]) -> Result<Vec<Option<Vec<i64>>>, MrError>,
) -> Result<Rendered, MrError> {
    let mut sizes = vec![0i64; centroids.len()];
    let mut ran = 0;
    while ran < iterations {
        ran += 1;
        let sums = sums(&centroids)?;
        sizes = sums.iter().map(|s| s.as_ref().map_or(0, |s| s[0])).collect();
        let next = update(&centroids, &sums);
        let moved = next != centroids;
        centroids = next;
        if !moved {
            break;
        }
    }
    Ok(render(&centroids, &sizes, ran))
}

/// The same clustering written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`): points parsed once, each iteration one parallel
/// pass.
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let input = input.contents()?;
    let (k, iterations) = arguments(args)?;
    let centroids = initial(input, k).map_err(MrError::BadInput)?;
    let d = centroids[0].len();
    let points = super::parse_rows(input)?;
    if let Some(p) = points.iter().find(|p| p.len() != d) {
        return Err(MrError::BadInput(format!("point {p:?} has {} coordinates, not {d}", p.len())));
    }
    lloyd(centroids, iterations, |centroids| {
        let sums = points
            .par_chunks(super::DIRECT_RECORDS)
            .map(|chunk| {
                let mut sums = vec![vec![0i64; d + 1]; k];
                chunk.iter().for_each(|p| assign(&mut sums, p, centroids));
                sums
            })
            .reduce(
                || vec![vec![0i64; d + 1]; k],
                |mut a, b| {
                    a.iter_mut().flatten().zip(b.iter().flatten()).for_each(|(a, b)| *a = a.wrapping_add(*b));
                    a
                },
            );
        Ok(sums.into_iter().map(|s| (s[0] > 0).then_some(s)).collect())
    })
}

fn render(centroids: &[Vec<f64>], sizes: &[i64], iterations: u64) -> Rendered {
    let text = centroids
        .iter()
        .zip(sizes)
        .map(|(c, n)| format!("{n} {}\n", c.iter().map(f64::to_string).collect::<Vec<_>>().join(" ")))
        .collect();
    Rendered {
        text,
        json: serde_json::json!({ "iterations": iterations, "centroids": centroids, "sizes": sizes }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn clusters_equal_a_single_threaded_lloyd() {
        let mut rng = Rng(17);
        let centres = [(0, 0, 0), (500, 80, -300), (-400, 600, 100), (250, -250, 700)];
        let points: Vec<Vec<i64>> = (0..4000)
            .map(|i| {
                let (x, y, z) = centres[i % 4];
                vec![
                    x + rng.below(401) as i64 - 200,
                    y + rng.below(401) as i64 - 200,
                    z + rng.below(401) as i64 - 200,
                ]
            })
            .collect();
        let text: String = points.iter().map(|p| format!("{} {} {}\n", p[0], p[1], p[2])).collect();
        // Lloyd's algorithm, one pass per iteration over all points.
        let mut centroids = initial(text.as_bytes(), 4).unwrap();
        let (mut ran, mut sizes) = (0, vec![]);
        while ran < 30 {
            ran += 1;
            let mut sums = vec![None; 4];
            for p in &points {
                let s = sums[nearest(p, &centroids)].get_or_insert_with(|| vec![0i64; 4]);
                s[0] += 1;
                (0..3).for_each(|j| s[j + 1] += p[j]);
            }
            sizes = sums.iter().map(|s| s.as_ref().map_or(0, |s| s[0])).collect();
            let next = update(&centroids, &sums);
            let done = next == centroids;
            centroids = next;
            if done {
                break;
            }
        }
        assert!(ran > 1 && ran < 30, "the test data converges in a few iterations ({ran})");
        let got = run_local(&KMeans, text.as_bytes(), &["k=4", "iterations=30"]).unwrap();
        assert_eq!(got, render(&centroids, &sizes, ran));
    }

    #[test]
    fn too_few_points_or_mixed_dimensions_are_refused() {
        assert!(run_local(&KMeans, b"1 2\n1 2\n", &["k=2"])
            .unwrap_err()
            .to_string()
            .contains("at least k=2"));
        assert!(run_local(&KMeans, b"1 2\n3\n", &["k=2"]).unwrap_err().to_string().contains("dimension"));
        assert!(run_local(&KMeans, b"1 2\n3 4\n5\n", &["k=2"]).unwrap_err().to_string().contains("not 2"));
    }
}
