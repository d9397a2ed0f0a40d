//! Shoal's `stats hotkeys` answer (docs/PROTOCOL.md): a server's hottest keys by request rate,
//! hottest first, which pool clients and routers read to spread those keys over replicas.
//!
//! ```text
//!   STAT <key> <requests per second>\r\n     0 to K lines, rates not increasing,
//!   ...                                      a rate is <digits>[.<1 to 3 digits>]
//!   END\r\n
//! ```
//!
//! The server writes it with [`encode_hotkeys`]; a reader frames it with
//! [`frame_within`](crate::frame_within), [`Shape::Stats`](crate::Shape) and
//! [`hotkeys_limits`], then reads it with [`parse_hotkeys`], which refuses anything else whole:
//! the answer comes from another process, and a reader keeps its last good hot set rather
//! than act on part of a bad one.

use crate::answer::{is_error_line, Limits};
use crate::key::valid_key;
use std::collections::HashSet;
use std::fmt;

/// The most keys a server may be asked to track and list (its `-o hotkeys=K`).
pub const MAX_HOTKEYS: usize = 1024;

/// Digits before a rate's decimal point at most: rates stay below 10¹² requests per second, so
/// that a rate of 12 + 3 digits reads into an `f64` and writes back to the same digits.
const MAX_RATE_INT_DIGITS: usize = 12;

/// The largest rate the answer carries; [`encode_hotkeys`] writes larger rates as this.
pub const MAX_RATE: f64 = 999_999_999_999.999;

/// The longest line of the answer, `\r\n` included: `STAT `, a key, a space, a rate.
const MAX_LINE: usize = "STAT ".len() + crate::KEY_MAX + 1 + MAX_RATE_INT_DIGITS + 4 + 2;

/// One hot key: the key, and the requests per second the server counts for it.
#[derive(Clone, Debug, PartialEq)]
pub struct HotKey {
    pub key: Vec<u8>,
    pub rate: f64,
}

/// Why an answer is not a hot-key list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HotKeysError {
    /// The server answered with an error line (`ERROR`: it does not know `stats hotkeys`, as
    /// memcached does not).
    Refused(String),
    /// More `STAT` lines than the reader takes.
    TooMany { limit: usize },
    /// Line `line` (1-based) is not `STAT <key> <rate>\r\n`; `why` says what is wrong.
    BadLine { line: usize, why: &'static str },
    /// The answer does not end with `END\r\n`.
    MissingEnd,
    /// Bytes after `END\r\n`.
    TrailingBytes,
}

impl fmt::Display for HotKeysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HotKeysError::Refused(line) => write!(f, "the server refused `stats hotkeys`: {line}"),
            HotKeysError::TooMany { limit } => write!(f, "a hot-key answer of more than {limit} keys"),
            HotKeysError::BadLine { line, why } => write!(f, "hot-key answer line {line}: {why}"),
            HotKeysError::MissingEnd => f.write_str("a hot-key answer without END"),
            HotKeysError::TrailingBytes => f.write_str("bytes after the END of a hot-key answer"),
        }
    }
}

impl std::error::Error for HotKeysError {}

/// The bounds to frame a hot-key answer of at most `limit` keys with
/// [`frame_within`](crate::frame_within): a longer line or more lines cannot be one.
pub const fn hotkeys_limits(limit: usize) -> Limits {
    Limits { line: MAX_LINE, value: 0, stat_lines: limit }
}

/// Reads a whole `stats hotkeys` answer, `END\r\n` included, of at most `limit` keys. Every
/// key must be valid ([`valid_key`]) and listed once, rates must not increase, and nothing may
/// follow `END\r\n`.
pub fn parse_hotkeys(answer: &[u8], limit: usize) -> Result<Vec<HotKey>, HotKeysError> {
    let mut hot: Vec<HotKey> = Vec::new();
    let mut seen = HashSet::new();
    let mut rest = answer;
    loop {
        let Some(nl) = rest.iter().take(MAX_LINE).position(|&b| b == b'\n') else {
            return Err(if rest.len() < MAX_LINE {
                HotKeysError::MissingEnd
            } else {
                HotKeysError::BadLine { line: hot.len() + 1, why: "longer than any hot-key line" }
            });
        };
        let (line, after) = (&rest[..nl], &rest[nl + 1..]);
        let at = hot.len() + 1;
        let bad = |why| HotKeysError::BadLine { line: at, why };
        let line = line.strip_suffix(b"\r").ok_or_else(|| bad("does not end in \\r\\n"))?;
        if line == b"END" {
            return if after.is_empty() { Ok(hot) } else { Err(HotKeysError::TrailingBytes) };
        }
        if hot.is_empty() && is_error_line(line) {
            return Err(HotKeysError::Refused(String::from_utf8_lossy(line).into_owned()));
        }
        if hot.len() == limit {
            return Err(HotKeysError::TooMany { limit });
        }
        let fields = line.strip_prefix(b"STAT ").ok_or_else(|| bad("neither STAT nor END"))?;
        let space = fields.iter().position(|&b| b == b' ').ok_or_else(|| bad("no rate"))?;
        let (key, rate) = (&fields[..space], &fields[space + 1..]);
        if !valid_key(key) {
            return Err(bad("not a valid key"));
        }
        let rate = parse_rate(rate).ok_or_else(|| bad("the rate is not <digits>[.<1 to 3 digits>]"))?;
        if hot.last().is_some_and(|previous| rate > previous.rate) {
            return Err(bad("a rate above the line before (hottest first)"));
        }
        if !seen.insert(key) {
            return Err(bad("a key listed twice"));
        }
        hot.push(HotKey { key: key.to_vec(), rate });
        rest = after;
    }
}

/// A rate, `<digits>[.<1 to 3 digits>]` with at most [`MAX_RATE_INT_DIGITS`] before the point.
fn parse_rate(word: &[u8]) -> Option<f64> {
    let (whole, fraction) = match word.iter().position(|&b| b == b'.') {
        Some(dot) => (&word[..dot], Some(&word[dot + 1..])),
        None => (word, None),
    };
    let digits =
        |part: &[u8], max: usize| (1..=max).contains(&part.len()) && part.iter().all(u8::is_ascii_digit);
    if !digits(whole, MAX_RATE_INT_DIGITS) || !fraction.is_none_or(|f| digits(f, 3)) {
        return None;
    }
    // Only digits and one point: valid UTF-8, and a finite, non-negative number.
    std::str::from_utf8(word).ok()?.parse().ok()
}

/// Appends the `stats hotkeys` answer listing `hot` (hottest first, as the caller ranks them)
/// to `out`. Keys that the text protocol cannot carry (binary keys stored through the binary
/// or meta protocol) are left out; rates are written with 3 decimals, clamped to
/// `0..=`[`MAX_RATE`].
pub fn encode_hotkeys(hot: &[HotKey], out: &mut Vec<u8>) {
    use std::io::Write;
    for HotKey { key, rate } in hot.iter().filter(|h| valid_key(&h.key)) {
        out.extend_from_slice(b"STAT ");
        out.extend_from_slice(key);
        let rate = if rate.is_nan() { 0.0 } else { rate.clamp(0.0, MAX_RATE) };
        write!(out, " {rate:.3}\r\n").expect("writing to a Vec cannot fail");
    }
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{frame_within, Frame, Shape};

    fn hot(key: &str, rate: f64) -> HotKey {
        HotKey { key: key.as_bytes().to_vec(), rate }
    }

    #[test]
    fn encoded_answers_read_back() {
        let keys = vec![hot("user:1", 1532.25), hot("feed:7", 12.0), hot("x", 0.001), hot("y", 0.0)];
        let mut out = Vec::new();
        encode_hotkeys(&keys, &mut out);
        assert_eq!(
            out,
            b"STAT user:1 1532.250\r\nSTAT feed:7 12.000\r\nSTAT x 0.001\r\nSTAT y 0.000\r\nEND\r\n"
        );
        assert_eq!(parse_hotkeys(&out, 4), Ok(keys));
        assert_eq!(parse_hotkeys(b"END\r\n", 0), Ok(vec![]));
        // Fewer fractional digits are rates too.
        assert_eq!(
            parse_hotkeys(b"STAT a 7\r\nSTAT b 6.5\r\nEND\r\n", 8),
            Ok(vec![hot("a", 7.0), hot("b", 6.5)])
        );
    }

    #[test]
    fn framed_by_the_stats_shape() {
        let mut out = Vec::new();
        encode_hotkeys(&[hot(&"k".repeat(crate::KEY_MAX), MAX_RATE)], &mut out);
        assert_eq!(out.len(), MAX_LINE + "END\r\n".len(), "the longest line is MAX_LINE");
        let frame = frame_within(&out, Shape::Stats, &hotkeys_limits(1)).unwrap();
        assert_eq!(frame.map(|Frame { len, .. }| len), Some(out.len()));
        assert!(frame_within(&out, Shape::Stats, &hotkeys_limits(0)).is_err(), "over the limit");
        assert_eq!(parse_hotkeys(&out, 1).unwrap()[0].rate, MAX_RATE);
    }

    #[test]
    fn encoding_drops_binary_keys_and_clamps_rates() {
        let mut out = Vec::new();
        let keys = [hot("a b", 3.0), hot("big", 1e20), hot("neg", -1.0), hot("nan", f64::NAN)];
        encode_hotkeys(&keys, &mut out);
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "STAT big 999999999999.999\r\nSTAT neg 0.000\r\nSTAT nan 0.000\r\nEND\r\n"
        );
    }

    #[test]
    fn malformed_answers_are_refused_whole() {
        let bad = |line, why| HotKeysError::BadLine { line, why };
        let cases: &[(&[u8], HotKeysError)] = &[
            (b"", HotKeysError::MissingEnd),
            (b"STAT a 1\r\n", HotKeysError::MissingEnd),
            (b"END\r\nSTAT a 1\r\n", HotKeysError::TrailingBytes),
            (b"END\r\n\r\n", HotKeysError::TrailingBytes),
            (b"ERROR\r\n", HotKeysError::Refused("ERROR".into())),
            (b"STAT a 1\r\nSTAT b 1\r\nSTAT c 1\r\nEND\r\n", HotKeysError::TooMany { limit: 2 }),
            (b"END\n", bad(1, "does not end in \\r\\n")),
            (b"VALUE a 0 1\r\nEND\r\n", bad(1, "neither STAT nor END")),
            (b"STAT a\r\nEND\r\n", bad(1, "no rate")),
            (b"STATa\r\nEND\r\n", bad(1, "neither STAT nor END")),
            (b"STAT a 1\r\nSTAT  1\r\nEND\r\n", bad(2, "not a valid key")),
            (b"STAT a b 1\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a\x01 1\r\nEND\r\n", bad(1, "not a valid key")),
            (b"STAT a 1 \r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a 1.2345\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a -1\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a inf\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a NaN\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a 1e3\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a .5\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a 5.\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a 1000000000000\r\nEND\r\n", bad(1, "the rate is not <digits>[.<1 to 3 digits>]")),
            (b"STAT a 1\r\nSTAT b 2\r\nEND\r\n", bad(2, "a rate above the line before (hottest first)")),
            (b"STAT a 2\r\nSTAT a 1\r\nEND\r\n", bad(2, "a key listed twice")),
        ];
        for (answer, expected) in cases {
            assert_eq!(
                parse_hotkeys(answer, 2).as_ref(),
                Err(expected),
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
        let endless = vec![b'S'; 10 * MAX_LINE];
        assert_eq!(parse_hotkeys(&endless, 2), Err(bad(1, "longer than any hot-key line")));
        let message = parse_hotkeys(b"STAT a -1\r\nEND\r\n", 2).unwrap_err().to_string();
        assert_eq!(message, "hot-key answer line 1: the rate is not <digits>[.<1 to 3 digits>]");
    }
}
