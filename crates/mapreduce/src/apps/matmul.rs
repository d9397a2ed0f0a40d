//! Matrix multiply, MapReduce style: C = A·B for integer matrices. The input is text: a line
//! `n m p`, then n lines of A (m integers each), then m lines of B (p integers each). The
//! coordinator parses it once and sends B to every map as the job's parameters; the job's
//! input is A's rows as binary records (`[row index u64][m × i64]`, little-endian: a map does
//! not parse text again); a map emits one row of C per row of A (key: row index, big-endian,
//! so the result comes sorted).

use crate::app::{
    add_i64s, bytes_i64s, i64s_bytes, le_u64, lines, parse_ints, App, Args, Jobs, Rendered, SplitUnit,
};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;
use rayon::prelude::*;

/// The matrix multiply app.
pub struct MatrixMultiply;

impl App for MatrixMultiply {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn about(&self) -> &'static str {
        "C = A·B; text input: `n m p`, n rows of A, m rows of B (integers)"
    }

    fn split_unit(&self, _stage: u32, params: &[u8]) -> SplitUnit {
        // Whole rows of A; damaged parameters give some unit, and the map refuses them.
        let m = params.get(..8).map_or(0, le_u64).min(1 << 20) as usize;
        SplitUnit::Fixed(8 * (m + 1))
    }

    fn map(&self, _stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        // B is read in place, as little-endian bytes: a map is called per piece of its split.
        let numbers = params.len() / 8;
        let (m, p) = match bytes_i64s(&params[..16.min(params.len())])[..] {
            [m, p]
                if m > 0
                    && p > 0
                    && params.len().is_multiple_of(8)
                    && m.checked_mul(p) == Some(numbers as i64 - 2) =>
            {
                (m as usize, p as usize)
            }
            _ => return Err(format!("matmul's parameters hold {numbers} numbers, not m, p and B")),
        };
        let b = &params[16..];
        let record = 8 * (m + 1);
        if !split.len().is_multiple_of(record) {
            return Err(format!(
                "a split of {} bytes is not whole rows of A ({record} bytes each)",
                split.len()
            ));
        }
        let mut a = vec![0i64; m];
        for row in split.chunks_exact(record) {
            for (x, bytes) in a.iter_mut().zip(row[8..].chunks_exact(8)) {
                *x = i64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            }
            out.emit_owned(&le_u64(&row[..8]).to_be_bytes(), i64s_bytes(&multiply_row(&a, b, p)));
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_i64s(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        args.only(self.name(), &[])?;
        let (n, m, p, a, b) = parse(input.contents()?).map_err(MrError::BadInput)?;
        // Serial work here delays the whole job: A's rows are laid out by every thread.
        let mut rows = vec![0u8; 8 * n * (m + 1)];
        rows.par_chunks_mut(8 * (m + 1)).zip(a.par_chunks(m)).enumerate().for_each(|(i, (record, row))| {
            record[..8].copy_from_slice(&(i as u64).to_le_bytes());
            for (at, v) in record[8..].chunks_exact_mut(8).zip(row) {
                at.copy_from_slice(&v.to_le_bytes());
            }
        });
        let mut params = vec![m as i64, p as i64];
        params.extend_from_slice(&b);
        let input = jobs.put_bytes(&rows)?;
        let c: Vec<Vec<i64>> = jobs
            .run(self, 0, input, &i64s_bytes(&params))?
            .into_par_iter()
            .map(|(_, v)| bytes_i64s(&v))
            .collect();
        Ok(render(&c))
    }
}

/// One row of A times B (p columns, its numbers as little-endian bytes), wrapping on
/// overflow.
fn multiply_row(a: &[i64], b: &[u8], p: usize) -> Vec<i64> {
    let mut row = vec![0i64; p];
    for (k, &x) in a.iter().enumerate() {
        for (c, y) in row.iter_mut().zip(b[8 * k * p..8 * (k + 1) * p].chunks_exact(8)) {
            let y = i64::from_le_bytes(y.try_into().expect("8 bytes"));
            *c = c.wrapping_add(x.wrapping_mul(y));
        }
    }
    row
}

/// The dimensions n, m, p and the matrices A (n×m) and B (m×p), row by row.
type Parsed = (usize, usize, usize, Vec<i64>, Vec<i64>);

/// The matrices of matmul's input, or what is wrong with it.
fn parse(input: &[u8]) -> Result<Parsed, String> {
    let mut rows = lines(input);
    let dims = parse_ints(rows.next().ok_or("matmul's input is empty: it starts with a line `n m p`")?)?;
    let [n, m, p] = dims[..] else { return Err(format!("the first line must be `n m p`, not {dims:?}")) };
    if [n, m, p].iter().any(|&d| !(1..=1 << 20).contains(&d)) {
        return Err(format!("dimensions {n} {m} {p} must be between 1 and 2^20"));
    }
    let (n, m, p) = (n as usize, m as usize, p as usize);
    let mut take = |count: usize, width: usize, name: &str| -> Result<Vec<i64>, String> {
        let mut out = Vec::with_capacity(count * width);
        for r in 0..count {
            let row = parse_ints(rows.next().ok_or(format!("{name} has {r} rows, not {count}"))?)?;
            if row.len() != width {
                return Err(format!("row {r} of {name} has {} numbers, not {width}", row.len()));
            }
            out.extend(row);
        }
        Ok(out)
    };
    let a = take(n, m, "A")?;
    let b = take(m, p, "B")?;
    Ok((n, m, p, a, b))
}

/// The same product written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`): the input parsed once, rows of C in parallel.
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    let input = input.contents()?;
    args.only(MatrixMultiply.name(), &[])?;
    let (_, m, p, a, b) = parse(input).map_err(MrError::BadInput)?;
    let b = i64s_bytes(&b);
    let c: Vec<Vec<i64>> = a.par_chunks(m).map(|row| multiply_row(row, &b, p)).collect();
    Ok(render(&c))
}

fn render(c: &[Vec<i64>]) -> Rendered {
    let text =
        c.iter().map(|row| row.iter().map(i64::to_string).collect::<Vec<_>>().join(" ") + "\n").collect();
    Rendered { text, json: serde_json::json!({ "c": c }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn the_product_equals_a_single_threaded_product() {
        let mut rng = Rng(11);
        let (n, m, p) = (37, 23, 19);
        let mut text = format!("{n} {m} {p}\n");
        let mut a = vec![vec![0i64; m]; n];
        let mut b = vec![vec![0i64; p]; m];
        for row in a.iter_mut().chain(b.iter_mut()) {
            for v in row.iter_mut() {
                *v = rng.below(201) as i64 - 100;
            }
            text.push_str(&(row.iter().map(i64::to_string).collect::<Vec<_>>().join(" ") + "\n"));
        }
        let mut c = vec![vec![0i64; p]; n];
        for i in 0..n {
            for j in 0..p {
                c[i][j] = (0..m).map(|k| a[i][k] * b[k][j]).sum();
            }
        }
        assert_eq!(run_local(&MatrixMultiply, text.as_bytes(), &[]).unwrap(), render(&c));
    }

    #[test]
    fn malformed_matrices_are_named() {
        for (input, says) in [
            ("", "empty"),
            ("2 2\n", "n m p"),
            ("1 2 1\n1 2\n3\n", "rows, not 2"),
            ("1 2 1\n1 x\n3\n4\n", "\"x\""),
            ("1 2 1\n1 2 3\n3\n4\n", "3 numbers, not 2"),
        ] {
            let err = run_local(&MatrixMultiply, input.as_bytes(), &[]).unwrap_err().to_string();
            assert!(err.contains(says), "{input:?}: {err}");
        }
    }
}
