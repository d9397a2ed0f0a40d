//! Linear regression (least squares, y = a + b·x) over points stored as Phoenix stores them:
//! two bytes per point, x then y. The sums are exact integers, so the fit does not depend on
//! how the input was split.

use crate::app::{add_i64s, bytes_i64s, i64s_bytes, App, Args, Jobs, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;

/// The linear regression app.
pub struct LinearRegression;

/// n, Σx, Σy, Σx², Σy², Σxy.
type Sums = [i64; 6];

// Never inlined: the map and the direct Rayon version run one compiled kernel, so the
// benchmarks time what is around it (inlined, the two copies compiled differently: linear
// regression's ran half as fast inside Rayon's fold).
#[inline(never)]
fn sums(points: &[u8]) -> Sums {
    let mut s = [0i64; 6];
    for p in points.chunks_exact(2) {
        let (x, y) = (p[0] as i64, p[1] as i64);
        for (acc, v) in s.iter_mut().zip([1, x, y, x * x, y * y, x * y]) {
            *acc += v;
        }
    }
    s
}

impl App for LinearRegression {
    fn name(&self) -> &'static str {
        "linreg"
    }

    fn about(&self) -> &'static str {
        "least-squares line through points of two bytes each (x, y)"
    }

    fn split_unit(&self, _stage: u32, _params: &[u8]) -> SplitUnit {
        SplitUnit::Fixed(2)
    }

    fn map(&self, _stage: u32, _params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        out.emit(b"sums", &i64s_bytes(&sums(split)));
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_i64s(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        check(input.len(), args)?;
        let input = jobs.put_input(input)?;
        let records = jobs.run(self, 0, input, &[])?;
        let s: Vec<i64> = records.first().map(|(_, v)| bytes_i64s(v)).unwrap_or_default();
        let s: Sums = s.try_into().map_err(|_| MrError::JobFailed("linreg's job returned no sums".into()))?;
        Ok(render(&s))
    }
}

/// Refuses arguments and an input that is not at least two whole points.
fn check(len: u64, args: &Args) -> Result<(), MrError> {
    args.only(LinearRegression.name(), &[])?;
    if len < 4 || !len.is_multiple_of(2) {
        return Err(MrError::BadInput(format!(
            "input of {len} bytes is not at least two points of 2 bytes (x, y)"
        )));
    }
    Ok(())
}

/// The same fit written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`).
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    check(input.len(), args)?;
    let add = |mut a: Sums, b: Sums| {
        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
        a
    };
    let s = super::fold_pieces(input, SplitUnit::Fixed(2), || [0i64; 6], |a, p| add(a, sums(p)), add)?;
    Ok(render(&s))
}

fn render(s: &Sums) -> Rendered {
    let [n, sx, sy, sxx, syy, sxy] = s.map(|v| v as f64);
    let denominator = n * sxx - sx * sx;
    let b = if denominator == 0.0 { 0.0 } else { (n * sxy - sx * sy) / denominator };
    let a = (sy - b * sx) / n;
    let text = format!("y = {a} + {b} x  (n={n}, Σx={sx}, Σy={sy}, Σx²={sxx}, Σy²={syy}, Σxy={sxy})\n");
    let json = serde_json::json!({ "a": a, "b": b, "n": s[0], "sx": s[1], "sy": s[2], "sxx": s[3], "syy": s[4], "sxy": s[5] });
    Rendered { text, json }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn the_fit_equals_a_single_threaded_fit() {
        let mut rng = Rng(9);
        let points: Vec<u8> = (0..30_000)
            .flat_map(|_| {
                let x = rng.below(256);
                [x as u8, ((x * 3 / 5 + rng.below(40)) % 256) as u8]
            })
            .collect();
        let mut s = [0i64; 6];
        for p in points.chunks(2) {
            let (x, y) = (p[0] as i64, p[1] as i64);
            s[0] += 1;
            s[1] += x;
            s[2] += y;
            s[3] += x * x;
            s[4] += y * y;
            s[5] += x * y;
        }
        let got = run_local(&LinearRegression, &points, &[]).unwrap();
        assert_eq!(got, render(&s));
        assert!((got.json["b"].as_f64().unwrap() - 0.6).abs() < 0.05, "{}", got.text);
    }

    #[test]
    fn odd_or_tiny_inputs_are_refused() {
        assert!(run_local(&LinearRegression, &[1, 2, 3], &[]).unwrap_err().to_string().contains("3 bytes"));
    }
}
