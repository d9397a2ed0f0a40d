//! Histogram: how many pixels have each value (0–255) in each channel of a raw 24-bit RGB
//! image (e.g. `convert photo.bmp rgb:photo.raw`). Each map counts its split in a local
//! table and emits at most 768 records.

use crate::app::{add_u64, le_u64, App, Args, Jobs, Rendered, SplitUnit};
use crate::error::MrError;
use crate::input::Input;
use crate::records::Emit;

/// The histogram app.
pub struct Histogram;

const CHANNELS: [&str; 3] = ["red", "green", "blue"];

impl App for Histogram {
    fn name(&self) -> &'static str {
        "histogram"
    }

    fn about(&self) -> &'static str {
        "pixels per value of each channel of a raw RGB image (3 bytes a pixel)"
    }

    fn split_unit(&self, _stage: u32, _params: &[u8]) -> SplitUnit {
        SplitUnit::Fixed(3)
    }

    fn map(&self, _stage: u32, _params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        for (channel, values) in count(split).iter().enumerate() {
            for (value, &n) in values.iter().enumerate().filter(|(_, &n)| n > 0) {
                out.emit(&[channel as u8, value as u8], &n.to_le_bytes());
            }
        }
        Ok(())
    }

    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, value: &[u8]) {
        add_u64(acc, value);
    }

    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        check(input.len(), args)?;
        let input = jobs.put_input(input)?;
        let mut counts = [[0u64; 256]; 3];
        for (key, value) in jobs.run(self, 0, input, &[])? {
            if let [channel @ 0..=2, v] = key[..] {
                counts[channel as usize][v as usize] = le_u64(&value);
            }
        }
        Ok(render(&counts))
    }
}

/// Pixels per value of each channel in `pixels`.
// Never inlined: the map and the direct Rayon version run one compiled kernel, so the
// benchmarks time what is around it (inlined, the two copies compiled differently: linear
// regression's ran half as fast inside Rayon's fold).
#[inline(never)]
fn count(pixels: &[u8]) -> Counts {
    let mut counts = [[0u64; 256]; 3];
    for pixel in pixels.chunks_exact(3) {
        for (channel, &value) in pixel.iter().enumerate() {
            counts[channel][value as usize] += 1;
        }
    }
    counts
}

type Counts = [[u64; 256]; 3];

/// Refuses arguments and an input that is not whole pixels.
/// Refuses arguments and an input of `len` bytes that is not whole pixels.
fn check(len: u64, args: &Args) -> Result<(), MrError> {
    args.only(Histogram.name(), &[])?;
    if !len.is_multiple_of(3) {
        return Err(MrError::BadInput(format!(
            "input of {len} bytes is not a whole number of RGB pixels (3 bytes each)"
        )));
    }
    Ok(())
}

/// The same histogram written directly with Rayon in one process, without the framework (the
/// baseline of `shoal mr run --mode rayon`).
pub(super) fn direct(input: &Input, args: &Args) -> Result<Rendered, MrError> {
    check(input.len(), args)?;
    let add = |mut a: Counts, b: Counts| {
        a.iter_mut().flatten().zip(b.iter().flatten()).for_each(|(a, b)| *a += b);
        a
    };
    let counts =
        super::fold_pieces(input, SplitUnit::Fixed(3), || [[0u64; 256]; 3], |a, p| add(a, count(p)), add)?;
    Ok(render(&counts))
}

fn render(counts: &[[u64; 256]; 3]) -> Rendered {
    let mut text = String::new();
    for (name, values) in CHANNELS.iter().zip(counts) {
        for (v, n) in values.iter().enumerate().filter(|(_, &n)| n > 0) {
            text.push_str(&format!("{name} {v} {n}\n"));
        }
    }
    let json = serde_json::json!({ "red": counts[0].to_vec(), "green": counts[1].to_vec(), "blue": counts[2].to_vec() });
    Rendered { text, json }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{run_local, Rng};

    #[test]
    fn counts_equal_a_single_threaded_count() {
        let mut rng = Rng(5);
        let image: Vec<u8> = (0..3 * 40_000).map(|i| (rng.below(256) / (1 + i as u64 % 3)) as u8).collect();
        let mut counts = [[0u64; 256]; 3];
        for (i, &b) in image.iter().enumerate() {
            counts[i % 3][b as usize] += 1;
        }
        assert_eq!(run_local(&Histogram, &image, &[]).unwrap(), render(&counts));
    }

    #[test]
    fn a_partial_pixel_is_refused() {
        let err = run_local(&Histogram, &[1, 2, 3, 4], &[]).unwrap_err().to_string();
        assert!(err.contains("4 bytes"), "{err}");
    }
}
