//! The API an application is written against: an [`App`] maps splits of its input to
//! key/value records and combines values of one key; its [`App::drive`] runs one or more
//! jobs through [`Jobs`] (several for chained apps such as k-means and PCA) and renders the
//! result. `docs/MAPREDUCE.md` is the guide to writing one.

use crate::error::MrError;
use crate::input::Input;
pub use crate::input::InputRef;
use crate::records::Emit;

/// How an app's input may be cut into map splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitUnit {
    /// Splits end just after a newline (text records).
    Lines,
    /// Splits are whole multiples of this many bytes (fixed-size binary records).
    Fixed(usize),
}

/// A result, for people and for scripts.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// What `shoal mr run` prints.
    pub text: String,
    /// What `shoal mr run --json` prints.
    pub json: serde_json::Value,
}

/// Records of a finished job, sorted by key.
pub type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// Runs jobs for an app's [`App::drive`]: the coordinator implements it.
pub trait Jobs {
    /// Makes `input` the input of jobs to come, once however many jobs read it: a reference
    /// to its file, which workers read in place, or (bytes, or a run with `--copy-input`) a
    /// copy in the region.
    fn put_input(&mut self, input: &Input) -> Result<InputRef, MrError>;
    /// Copies `bytes` (an input the app computed, e.g. from the previous job) into the region.
    fn put_bytes(&mut self, bytes: &[u8]) -> Result<InputRef, MrError>;
    /// Runs one job of `app` (its map and combine for `stage`) over `input` with `params`,
    /// and returns its records. A chained job passes what an earlier job returned, or
    /// something computed from it, as its `params` or input.
    fn run(&mut self, app: &dyn App, stage: u32, input: InputRef, params: &[u8]) -> Result<Records, MrError>;
}

/// Arguments given to an app on the command line (`--arg name=value`, repeatable).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Args(pub Vec<(String, String)>);

impl Args {
    /// Parses `name=value` strings.
    pub fn parse(items: &[String]) -> Result<Args, MrError> {
        items
            .iter()
            .map(|item| match item.split_once('=') {
                Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
                _ => Err(MrError::BadInput(format!("app argument {item:?} is not of the form name=value"))),
            })
            .collect::<Result<_, _>>()
            .map(Args)
    }

    /// Refuses arguments whose names are not in `known`.
    pub fn only(&self, app: &str, known: &[&str]) -> Result<(), MrError> {
        match self.0.iter().find(|(name, _)| !known.contains(&name.as_str())) {
            None => Ok(()),
            Some((name, _)) => Err(MrError::BadInput(format!(
                "app {app} takes no argument {name:?}; it takes: {}",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ))),
        }
    }

    /// Every value given for `name`, in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.0.iter().filter(|(n, _)| n == name).map(|(_, v)| v.as_str()).collect()
    }

    /// The number given for `name` (the last one), `default` if none, within `range`.
    pub fn number(
        &self,
        name: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, MrError> {
        let Some(text) = self.values(name).pop() else { return Ok(default) };
        text.parse::<u64>().ok().filter(|n| range.contains(n)).ok_or_else(|| {
            MrError::BadInput(format!(
                "argument {name}={text:?} must be a number from {} to {}",
                range.start(),
                range.end()
            ))
        })
    }
}

/// A MapReduce application.
pub trait App: Send + Sync {
    /// The name `shoal mr run` knows it by (at most 16 ASCII bytes).
    fn name(&self) -> &'static str;
    /// One line for the app list.
    fn about(&self) -> &'static str;
    /// How the input of `stage` may be split, given the job's `params` (whose record size may
    /// depend on them; they may be damaged, so any bytes must give some unit).
    fn split_unit(&self, _stage: u32, _params: &[u8]) -> SplitUnit {
        SplitUnit::Lines
    }
    /// Maps one split of the input of `stage`; `params` are the job's parameters. An `Err`
    /// (malformed input) fails the job with that message.
    fn map(&self, stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String>;
    /// Merges `value` into `acc`, both values of one key in `stage`: used map-side (the
    /// combiner) and by reducers. Must be associative and commutative.
    fn combine(&self, stage: u32, acc: &mut Vec<u8>, value: &[u8]);
    /// [`App::combine`] as workers call it, given the job's `params` too: for an app whose
    /// combine is chosen by its parameters (`shoal.mr`'s Python jobs name their combine
    /// there). Others keep this default.
    fn combine_with(&self, stage: u32, _params: &[u8], acc: &mut Vec<u8>, value: &[u8]) {
        self.combine(stage, acc, value)
    }
    /// Runs the app's jobs over `input` and renders the result.
    fn drive(&self, input: &Input, args: &Args, jobs: &mut dyn Jobs) -> Result<Rendered, MrError>;
}

/// Decodes a little-endian `u64` value (apps' counters); a value of another length is 0.
pub fn le_u64(bytes: &[u8]) -> u64 {
    bytes.try_into().map_or(0, u64::from_le_bytes)
}

/// Adds two little-endian `u64` counters (apps' combiner for counts); a malformed value
/// counts as 0.
pub fn add_u64(acc: &mut Vec<u8>, value: &[u8]) {
    let sum = le_u64(acc).wrapping_add(le_u64(value)).to_le_bytes();
    // In place: a combiner runs once per record emitted (word count: per word).
    acc.clear();
    acc.extend_from_slice(&sum);
}

/// Combines two equally long vectors of little-endian `i64`s (sums, counts) element-wise.
pub fn add_i64s(acc: &mut [u8], value: &[u8]) {
    // A value of another length (only in a damaged region) adds what overlaps.
    for (a, v) in acc.chunks_exact_mut(8).zip(value.chunks_exact(8)) {
        let sum = i64::from_le_bytes((&*a).try_into().expect("8 bytes"))
            .wrapping_add(i64::from_le_bytes(v.try_into().expect("8 bytes")));
        a.copy_from_slice(&sum.to_le_bytes());
    }
}

/// `i64`s as little-endian bytes.
pub fn i64s_bytes(values: &[i64]) -> Vec<u8> {
    // Sized once: a `flat_map` collect grows byte by byte (matmul emits a row of C per row).
    let mut out = Vec::with_capacity(8 * values.len());
    values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
    out
}

/// Little-endian bytes as `i64`s (a trailing partial word is ignored).
pub fn bytes_i64s(bytes: &[u8]) -> Vec<i64> {
    bytes.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

/// Parses a line of whitespace-separated integers, naming the bad token.
pub fn parse_ints(line: &[u8]) -> Result<Vec<i64>, String> {
    let text = std::str::from_utf8(line)
        .map_err(|_| format!("line {:?} is not UTF-8", String::from_utf8_lossy(line)))?;
    text.split_ascii_whitespace()
        .map(|t| t.parse::<i64>().map_err(|_| format!("{t:?} is not an integer (line {text:?})")))
        .collect()
}

/// The non-blank lines of `bytes`.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|&b| b == b'\n').filter(|l| l.iter().any(|b| !b.is_ascii_whitespace()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_and_bad_ones_are_named() {
        let args = Args::parse(&["k=3".into(), "pattern=a=b".into(), "pattern=c".into()]).unwrap();
        assert_eq!(args.number("k", 1, 1..=10).unwrap(), 3);
        assert_eq!(args.number("iterations", 7, 1..=10).unwrap(), 7);
        assert_eq!(args.values("pattern"), ["a=b", "c"]);
        assert!(args.only("x", &["k", "pattern"]).is_ok());
        let err = args.only("x", &["k"]).unwrap_err().to_string();
        assert!(err.contains("\"pattern\"") && err.contains("takes: k"), "{err}");
        assert!(args.number("k", 1, 5..=10).unwrap_err().to_string().contains("k=\"3\""));
        assert!(Args::parse(&["novalue".into()]).unwrap_err().to_string().contains("novalue"));
    }

    #[test]
    fn integer_helpers_round_trip_and_name_bad_tokens() {
        let mut acc = i64s_bytes(&[1, -2, 3]);
        add_i64s(&mut acc, &i64s_bytes(&[10, 20, -30]));
        assert_eq!(bytes_i64s(&acc), [11, 18, -27]);
        assert_eq!(parse_ints(b" 1  -5 7 ").unwrap(), [1, -5, 7]);
        assert!(parse_ints(b"1 x2").unwrap_err().contains("\"x2\""));
        assert_eq!(lines(b"a\n\n  \nb\n").collect::<Vec<_>>(), [b"a", b"b"]);
        assert_eq!(le_u64(&5u64.to_le_bytes()), 5);
    }
}
