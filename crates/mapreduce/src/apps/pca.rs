//! PCA's first half, as Phoenix computes it: the mean of each column and the covariance
//! matrix of a matrix of integers (text, one observation per line). Two chained jobs: the
//! first sums each column; the second, given those sums as parameters, sums the products of
//! centred values `(n·x_j − S_j)(n·x_k − S_k)` in exact 128-bit integers, so the result does
//! not depend on the split: cov_jk = that / (n²(n−1)).

use crate::app::{add_i64s, bytes_i64s, i64s_bytes, lines, parse_ints, App, Args, Jobs, Rendered};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;
use rayon::prelude::*;

/// The PCA app.
pub struct Pca;

const SUMS: u32 = 0;
const PRODUCTS: u32 = 1;
/// Most columns: the covariance matrix of 2048 columns is 64 MiB of 128-bit sums per task.
const MAX_COLUMNS: usize = 2048;

/// Rows of `split`, each of `d` values (`d` = 0: any, the first row's).
fn rows(split: &[u8], d: usize) -> Result<Vec<Vec<i64>>, String> {
    let rows: Vec<Vec<i64>> = lines(split).map(parse_ints).collect::<Result<_, _>>()?;
    let d = if d == 0 { rows.first().map_or(0, Vec::len) } else { d };
    match rows.iter().find(|r| r.len() != d) {
        Some(r) => Err(format!("row {r:?} has {} values, not {d}", r.len())),
        None => Ok(rows),
    }
}

fn add_i128s(acc: &mut [u8], value: &[u8]) {
    for (a, v) in acc.chunks_exact_mut(16).zip(value.chunks_exact(16)) {
        let sum = i128::from_le_bytes((&*a).try_into().expect("16 bytes"))
            .wrapping_add(i128::from_le_bytes(v.try_into().expect("16 bytes")));
        a.copy_from_slice(&sum.to_le_bytes());
    }
}

impl App for Pca {
    fn name(&self) -> &'static str {
        "pca"
    }

    fn about(&self) -> &'static str {
        "column means and covariance matrix of integer rows (text, one per line)"
    }

    fn map(&self, stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        if stage == SUMS {
            // Key: the column count (so every task's sums meet); value: count, then sums.
            let rows = rows(split, 0)?;
            let Some(d) = rows.first().map(Vec::len) else { return Ok(()) };
            out.emit(&(d as u32).to_be_bytes(), &i64s_bytes(&column_sums(&rows, d)));
            return Ok(());
        }
        let sums = bytes_i64s(params);
        let Some((&n, s)) = sums.split_first() else {
            return Err("pca's parameters hold no column sums".into());
        };
        let d = s.len();
        if d > MAX_COLUMNS {
            return Err(format!("pca handles up to {MAX_COLUMNS} columns, not {d}"));
        }
        let products = centred_products(&rows(split, d)?, n, s);
        for j in 0..d {
            out.emit(
                &(j as u32).to_be_bytes(),
                &products[j * d..(j + 1) * d].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
            );
        }
        Ok(())
    }

    fn combine(&self, stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        if stage == SUMS {
            add_i64s(acc, value);
        } else {
            add_i128s(acc, value);
        }
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        args.only(self.name(), &[])?;
        let input = jobs.put_input(input)?;
        let sums = jobs.run(self, SUMS, input, &[])?;
        let [(_, sums)] = &sums[..] else {
            return Err(MrError::BadInput(format!(
                "pca needs rows of one width, the input has {} widths",
                sums.len()
            )));
        };
        let sums = bytes_i64s(sums);
        let d = check_sums(&sums)?;
        let mut products = vec![vec![0i128; d]; d];
        for (key, value) in jobs.run(self, PRODUCTS, input, &i64s_bytes(&sums))? {
            let j = u32::from_be_bytes(
                key[..].try_into().map_err(|_| MrError::JobFailed("a bad row key".into()))?,
            );
            for (k, v) in value.chunks_exact(16).enumerate().filter(|_| (j as usize) < d) {
                products[j as usize][k] = i128::from_le_bytes(v.try_into().expect("16 bytes"));
            }
        }
        Ok(render(&sums, &products))
    }
}

/// `[count, column sums…]` of `rows` of `d` values.
fn column_sums(rows: &[Vec<i64>], d: usize) -> Vec<i64> {
    let mut sums = vec![0i64; d + 1];
    for r in rows {
        sums[0] += 1;
        sums[1..].iter_mut().zip(r).for_each(|(s, v)| *s = s.wrapping_add(*v));
    }
    sums
}

/// The column count, if `sums` (`[count, column sums…]`) are of an input pca handles.
fn check_sums(sums: &[i64]) -> Result<usize, MrError> {
    if sums[0] < 2 {
        return Err(MrError::BadInput(format!("pca needs at least 2 rows, the input has {}", sums[0])));
    }
    let d = sums.len() - 1;
    if d > MAX_COLUMNS {
        return Err(MrError::BadInput(format!("pca handles up to {MAX_COLUMNS} columns, the input has {d}")));
    }
    Ok(d)
}

/// The upper triangle (row-major, d·d) of `Σ (n·x_j − S_j)(n·x_k − S_k)` over `rows`, given
/// the row count `n` and column sums `s`.
fn centred_products(rows: &[Vec<i64>], n: i64, s: &[i64]) -> Vec<i128> {
    let (n, d) = (n as i128, s.len());
    let mut products = vec![0i128; d * d];
    for r in rows {
        // Exact for any real input (|n·x| < 2^127); wrapping only for a damaged region's.
        let c: Vec<i128> =
            r.iter().zip(s).map(|(&x, &s)| n.wrapping_mul(x as i128).wrapping_sub(s as i128)).collect();
        for j in 0..d {
            for k in j..d {
                products[j * d + k] = products[j * d + k].wrapping_add(c[j].wrapping_mul(c[k]));
            }
        }
    }
    products
}

/// The same means and covariance written directly with Rayon in one process, without the
/// framework (the baseline of `shoal mr run --mode rayon`): rows parsed once, two parallel
/// passes.
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let input = input.contents()?;
    args.only(Pca.name(), &[])?;
    let rows = super::parse_rows(input)?;
    let d = rows.first().map_or(0, Vec::len);
    if let Some(r) = rows.iter().find(|r| r.len() != d) {
        return Err(MrError::BadInput(format!("row {r:?} has {} values, not {d}", r.len())));
    }
    let add = |mut a: Vec<i64>, b: Vec<i64>| {
        a.iter_mut().zip(b).for_each(|(a, b)| *a = a.wrapping_add(b));
        a
    };
    let chunks = || rows.par_chunks(super::DIRECT_RECORDS);
    let sums = chunks().map(|c| column_sums(c, d)).reduce(|| vec![0; d + 1], add);
    check_sums(&sums)?;
    let products = chunks().map(|c| centred_products(c, sums[0], &sums[1..])).reduce(
        || vec![0; d * d],
        |mut a, b| {
            a.iter_mut().zip(b).for_each(|(a, b)| *a = a.wrapping_add(b));
            a
        },
    );
    Ok(render(&sums, &products.chunks(d.max(1)).map(<[i128]>::to_vec).collect::<Vec<_>>()))
}

/// Means and the (symmetric) covariance matrix from column sums and centred products.
fn render(sums: &[i64], products: &[Vec<i128>]) -> Rendered {
    let n = sums[0] as f64;
    let d = products.len();
    let means: Vec<f64> = sums[1..].iter().map(|&s| s as f64 / n).collect();
    let cov: Vec<Vec<f64>> = (0..d)
        .map(|j| (0..d).map(|k| products[j.min(k)][j.max(k)] as f64 / (n * n * (n - 1.0))).collect())
        .collect();
    let row = |r: &[f64]| r.iter().map(f64::to_string).collect::<Vec<_>>().join(" ");
    let text = format!("mean {}\n", row(&means))
        + &cov.iter().map(|r| format!("cov {}\n", row(r))).collect::<String>();
    Rendered { text, json: serde_json::json!({ "rows": sums[0], "means": means, "covariance": cov }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn means_and_covariance_equal_a_single_threaded_computation() {
        let mut rng = Rng(19);
        let data: Vec<Vec<i64>> = (0..3000)
            .map(|_| {
                let a = rng.below(1000) as i64;
                vec![a, 2 * a + rng.below(50) as i64, rng.below(300) as i64 - 150, -a]
            })
            .collect();
        let text: String =
            data.iter().map(|r| r.iter().map(i64::to_string).collect::<Vec<_>>().join(" ") + "\n").collect();
        let d = 4;
        let n = data.len() as i128;
        let mut sums = vec![data.len() as i64; 1];
        sums.extend((0..d).map(|j| data.iter().map(|r| r[j]).sum::<i64>()));
        let mut products = vec![vec![0i128; d]; d];
        for j in 0..d {
            for k in j..d {
                products[j][k] = data
                    .iter()
                    .map(|r| {
                        (n * r[j] as i128 - sums[j + 1] as i128) * (n * r[k] as i128 - sums[k + 1] as i128)
                    })
                    .sum();
            }
        }
        let got = run_local(&Pca, text.as_bytes(), &[]).unwrap();
        assert_eq!(got, render(&sums, &products));
        let cov = &got.json["covariance"];
        assert!(cov[0][3].as_f64().unwrap() < 0.0 && cov[0][1].as_f64().unwrap() > 0.0, "{}", got.text);
    }

    #[test]
    fn ragged_or_tiny_inputs_are_refused() {
        assert!(run_local(&Pca, b"1 2\n3\n", &[]).unwrap_err().to_string().contains("not 2"));
        assert!(run_local(&Pca, b"1 2\n", &[]).unwrap_err().to_string().contains("at least 2 rows"));
    }
}
