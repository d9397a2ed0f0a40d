//! Splitting a command line into tokens and reading numbers and keys out of them, the way
//! memcached does (with the differences listed in the crate docs).

/// The space-separated tokens of (part of) a command line, produced lazily so that a multiget
/// of any number of keys costs no allocation and one pass. Only the space byte separates, as in
/// memcached: runs of spaces are skipped; a tab is part of a token.
#[derive(Clone, Debug, Default)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// The tokens of `rest`.
    pub fn new(rest: &'a [u8]) -> Self {
        Tokens { rest }
    }

    /// The unsplit remainder, leading spaces skipped.
    #[inline]
    pub(crate) fn remainder(&self) -> &'a [u8] {
        // Tokens are mostly one space apart: a byte loop beats anything wider here.
        let start = self.rest.iter().position(|&b| b != b' ').unwrap_or(self.rest.len());
        &self.rest[start..]
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = self.remainder();
        if rest.is_empty() {
            self.rest = rest;
            return None;
        }
        let end = find_byte(rest, b' ').unwrap_or(rest.len());
        self.rest = &rest[end..];
        Some(&rest[..end])
    }
}

/// The position of the first `byte` in `hay`. It looks at eight bytes per step (a word's
/// bytes compared at once, "SWAR"): every request line is searched for its newline and every
/// key for its end, and a byte at a time those searches were a fifth of a get's instructions.
#[inline]
pub(crate) fn find_byte(hay: &[u8], byte: u8) -> Option<usize> {
    search(hay, byte, false)
}

/// [`find_byte`] for a request line's newline, which is most often among the last bytes
/// received: the bytes after the last whole word are searched as one word ending where `hay`
/// ends, not one at a time (kept out of [`find_byte`], whose tokens rarely end there).
#[inline]
pub(crate) fn find_newline(hay: &[u8]) -> Option<usize> {
    search(hay, b'\n', true)
}

#[inline(always)]
fn search(hay: &[u8], byte: u8, tail_word: bool) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let pattern = ONES * u64::from(byte);
    // A byte of `x` is zero where `byte` is. The lowest flagged byte is exact (a false flag
    // needs a borrow from a zero byte below it), which is all this search needs.
    let first = |x: u64| {
        let zeros = x.wrapping_sub(ONES) & !x & HIGHS;
        (zeros != 0).then(|| zeros.trailing_zeros() as usize / 8)
    };
    let mut words = hay.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        if let Some(i) = first(u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ pattern) {
            return Some(at + i);
        }
        at += 8;
    }
    let rest = words.remainder();
    if tail_word && !rest.is_empty() && hay.len() >= 8 {
        // The last word overlaps bytes already searched: none of them is `byte`, so none is
        // zero in `x` or lends a borrow, and the lowest flagged byte is still exact.
        let start = hay.len() - 8;
        return first(u64::from_le_bytes(hay[start..].try_into().expect("8 bytes")) ^ pattern)
            .map(|i| start + i);
    }
    rest.iter().position(|&b| b == byte).map(|i| at + i)
}

/// Two token lists are equal when they yield the same tokens (spacing may differ).
impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.clone().eq(other.clone())
    }
}

impl Eq for Tokens<'_> {}

/// Reads the first `N` tokens of `tokens` and counts all of them (without storing the rest),
/// so that commands with a fixed shape can check their arity in one pass.
pub(crate) fn split<'a, const N: usize>(tokens: Tokens<'a>) -> ([&'a [u8]; N], usize) {
    let mut out = [&[][..]; N];
    let mut count = 0;
    for t in tokens {
        if let Some(slot) = out.get_mut(count) {
            *slot = t;
        }
        count += 1;
    }
    (out, count)
}

/// Decimal digits only, no sign, no overflow.
pub fn digits(t: &[u8]) -> Option<u64> {
    if t.is_empty() {
        return None;
    }
    t.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// An unsigned number as `strtoull` reads it: an optional `+`, then digits. Unlike memcached
/// (which lets `-0` through), any `-` is refused.
pub(crate) fn parse_u64(t: &[u8]) -> Option<u64> {
    digits(t.strip_prefix(b"+").unwrap_or(t))
}

/// A `u32`; memcached silently truncates larger values, we refuse them.
pub(crate) fn parse_u32(t: &[u8]) -> Option<u32> {
    parse_u64(t).and_then(|v| u32::try_from(v).ok())
}

/// A time (an exptime, a TTL, a flush delay) as memcached reads one: a signed number within
/// `i64` (`strtol`), kept to its low 32 bits as a signed number (`safe_strtol` stores it in an
/// `int32_t`). So `4294967295` is -1, expired at once: what pylibmc sends for Django's
/// timeout 0, which Django turns into -1.
pub(crate) fn parse_time(t: &[u8]) -> Option<i64> {
    // Truncation is the point: memcached's value is the number modulo 2^32, signed.
    parse_i64(t).map(|v| i64::from(v as i32))
}

/// A signed number: an optional `+` or `-`, then digits, within `i64`.
pub(crate) fn parse_i64(t: &[u8]) -> Option<i64> {
    match t.strip_prefix(b"-") {
        Some(magnitude) => {
            let m = digits(magnitude)?;
            if m == 1 << 63 {
                Some(i64::MIN)
            } else {
                i64::try_from(m).ok().map(|v| -v)
            }
        }
        None => parse_u64(t).and_then(|v| i64::try_from(v).ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_skip_runs_of_spaces_only() {
        let t: Vec<&[u8]> = Tokens::new(b"  get a  b\tc ").collect();
        assert_eq!(t, [&b"get"[..], b"a", b"b\tc"]);
        assert_eq!(Tokens::new(b"   ").next(), None);
        assert_eq!(Tokens::new(b"a  b"), Tokens::new(b"a b"));
    }

    #[test]
    fn find_byte_finds_the_first_at_every_position_and_length() {
        for len in 0..40 {
            for at in 0..=len {
                let mut hay = vec![b'a'; len];
                // Bytes next to the one sought (one below, one above), and a second match.
                hay.iter_mut().enumerate().for_each(|(i, b)| *b = [b'a', b'\x1f', b'!', 0x80, 0xff][i % 5]);
                let expected = (at < len).then_some(at);
                if at < len {
                    hay[at] = b' ';
                    if at + 3 < len {
                        hay[at + 3] = b' ';
                    }
                }
                assert_eq!(find_byte(&hay, b' '), expected, "{hay:?}");
                assert_eq!(find_byte(&hay, b' '), hay.iter().position(|&b| b == b' '));
                // The same for a newline, its neighbours included.
                let line: Vec<u8> = hay
                    .iter()
                    .map(|&b| match b {
                        b' ' => b'\n',
                        b'!' => b'\n' + 1,
                        b'\x1f' => b'\n' - 1,
                        other => other,
                    })
                    .collect();
                assert_eq!(find_newline(&line), expected, "{line:?}");
            }
        }
        assert_eq!(find_byte(b"\n\n", b'\n'), Some(0));
        assert_eq!(find_byte(&[0xff; 17], 0xff), Some(0));
        assert_eq!(find_byte(&[0; 17], 0), Some(0));
        assert_eq!(find_byte(&[1, 0, 0, 0, 0, 0, 0, 0, 0], 0), Some(1));
    }

    #[test]
    fn split_counts_beyond_capacity() {
        let (first, n) = split::<2>(Tokens::new(b"a b c d"));
        assert_eq!((first, n), ([&b"a"[..], b"b"], 4));
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"+5"), Some(5));
        for bad in [&b""[..], b"-1", b"-0", b"+", b"1x", b" 1", b"++1"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"-9223372036854775809"), None);
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"-+1"), None);
        assert_eq!(parse_i64(b"-"), None);
    }

    #[test]
    fn times_are_read_as_memcached_reads_them_into_an_int32() {
        assert_eq!(parse_time(b"4294967295"), Some(-1));
        assert_eq!(parse_time(b"4294967296"), Some(0));
        assert_eq!(parse_time(b"2147483648"), Some(i64::from(i32::MIN)));
        assert_eq!(parse_time(b"-1"), Some(-1));
        assert_eq!(parse_time(b"+30"), Some(30));
        assert_eq!(parse_time(b"2592000"), Some(2_592_000));
        assert_eq!(parse_time(b"9223372036854775808"), None);
        assert_eq!(parse_time(b"1x"), None);
    }
}
