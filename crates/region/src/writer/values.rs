//! Value rules shared with the server: expiry for `touch`, counters (`incr`/`decr` parsing and
//! formatting as memcached does), and how a change keeps an item's metadata.

use super::*;

/// The absolute expiry `touch` (and meta's `T`) give an item: memcached's `exptime` rules,
/// except that a time already passed is kept as 1, which every clock has passed.
pub fn touch_expiry(exptime: i64, now: u32) -> u32 {
    absolute_expiry(exptime, now).unwrap_or(1)
}

impl NewItem {
    /// A new version of a live item with its flags, expiry and key form (not stale, no token
    /// out, fresh CAS).
    pub fn keeping(info: ItemInfo, value: Value) -> NewItem {
        let marks = Marks { binary_key: info.marks.binary_key, ..Marks::default() };
        NewItem { value, flags: info.flags, expiry: Some(info.expiry), cas: None, marks }
    }
}

/// The live item unless it is a lease record ([`Marks::hidden`]), which the memcached
/// commands other than `add` and `delete` treat as absent.
pub fn visible(current: Option<Current<'_>>) -> Option<Current<'_>> {
    current.filter(|c| !c.info.marks.hidden)
}

/// `incr`/`decr`: the counter's new value, written as memcached does.
pub(super) fn counter_change(current: Option<Current<'_>>, op: impl Fn(u64) -> u64) -> Plan<Delta> {
    let Some(c) = visible(current) else { return (Change::Keep, Delta::NotFound) };
    let Some(n) = parse_counter(c.value) else { return (Change::Keep, Delta::NonNumeric) };
    let n = op(n);
    (Change::Store(NewItem::keeping(c.info, Value::Owned(counter_text(n, c.value.len())))), Delta::Value(n))
}

/// A counter's new text: memcached rewrites a shorter number in place, padding with spaces to
/// the old length; clients see those spaces, so we keep them too.
pub fn counter_text(n: u64, old_len: usize) -> Vec<u8> {
    let mut text = n.to_string().into_bytes();
    if text.len() < old_len {
        text.resize(old_len, b' ');
    }
    text
}

pub(super) fn never_if_zero(expiry: u32) -> u32 {
    if expiry == 0 {
        NEVER
    } else {
        expiry
    }
}

/// memcached's reading of a counter (`safe_strtoull`): optional leading white space, an
/// optional sign, decimal digits that fit 64 bits, then the end or white space (anything after
/// that is ignored). A minus sign makes the number wrap, as `strtoull` does, and is refused
/// when the wrapped result reads as negative (so only `-0` passes).
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = value.iter().position(|b| !is_space(b))?;
    let rest = &value[start..];
    let (negative, rest) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let digits = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
    if digits == 0 || !rest[digits..].first().is_none_or(is_space) {
        return None;
    }
    let n =
        rest[..digits].iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add((d - b'0') as u64))?;
    let n = if negative { n.wrapping_neg() } else { n };
    (!(negative && (n as i64) < 0)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_like_memcached() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"9 "), Some(9));
        assert_eq!(parse_counter(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b" 1"), Some(1));
        assert_eq!(parse_counter(b"+7\t"), Some(7));
        assert_eq!(parse_counter(b"12 ab"), Some(12));
        assert_eq!(parse_counter(b"000000000000000000000001"), Some(1));
        assert_eq!(parse_counter(b"1a"), None);
        assert_eq!(parse_counter(b"-1"), None);
        assert_eq!(parse_counter(b"-0"), Some(0));
        assert_eq!(parse_counter(b"  "), None);
    }
}
