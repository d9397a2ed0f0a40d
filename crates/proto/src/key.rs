//! The key rule of memcached's text protocol, the one place it is written: every parser,
//! client, router and load generator of Shoal asks here.

/// The longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX: usize = 250;

/// Whether memcached's text protocol would take `key` as a key. memcached itself only checks
/// the length; we also refuse control characters, which protocol.txt forbids (binary keys
/// travel base64-encoded in the meta protocol).
#[inline]
pub fn valid_key(key: &[u8]) -> bool {
    if key.is_empty() || key.len() > KEY_MAX {
        return false;
    }
    // Eight bytes at a time, without an early exit; the last word overlaps the one before it,
    // and a key shorter than a word is padded with a byte that passes.
    if key.len() < 8 {
        let mut word = [b'k'; 8];
        word[..key.len()].copy_from_slice(key);
        return word_ok(u64::from_le_bytes(word));
    }
    let last = u64::from_le_bytes(key[key.len() - 8..].try_into().expect("8 bytes"));
    if key.len() <= 16 {
        // The common length: two words, which may overlap, and no loop.
        return word_ok(u64::from_le_bytes(key[..8].try_into().expect("8 bytes"))) & word_ok(last);
    }
    let words =
        key.chunks_exact(8).fold(true, |ok, w| ok & word_ok(u64::from_le_bytes(w.try_into().expect("8"))));
    words & word_ok(last)
}

/// Whether every byte of `word` is above a space and not DEL (0x7f): bytes of 0x80 and up
/// pass; for the others, adding 0x5f sets a byte's top bit from 0x21 on and adding 1 only at
/// 0x7f (neither carries into the next byte).
#[inline(always)]
fn word_ok(word: u64) -> bool {
    const TOP: u64 = 0x8080_8080_8080_8080;
    key_bytes(word) == TOP
}

/// The number of keys in `keys`, the space-separated tokens of a `get` line after its command
/// word, if each is a key [`valid_key`] takes and the line is at most [`KEY_MAX`] bytes (so no
/// token can be too long); `None` otherwise (the caller takes the tokenizer's path, which
/// finds the fault or the long keys). One pass of eight bytes a step: a multiget's line is
/// judged and counted without being split (the server splits it once, as it looks the keys up).
#[inline]
pub(crate) fn count_keys(keys: &[u8]) -> Option<usize> {
    const TOP: u64 = 0x8080_8080_8080_8080;
    if keys.len() > KEY_MAX {
        return None;
    }
    let (mut starts, mut bad, mut before) = (0u64, 0u64, 0u64);
    let mut judge = |word: u64| {
        let (ok, space) = (key_bytes(word), space_bytes(word));
        bad |= !(ok | space) & TOP;
        // A key starts at a key byte after a space (or the line's start): a one in that byte's
        // lane of `starts`, summed once at the end rather than counted per word (`count_ones`
        // is a dozen instructions without the POPCNT instruction, which the baseline x86-64
        // target lacks). A lane takes at most one a word, and a line has at most 33 words.
        starts += (ok & !((ok << 8) | before)) >> 7;
        before = ok >> 56;
    };
    let mut words = keys.chunks_exact(8);
    words.by_ref().for_each(|w| judge(u64::from_le_bytes(w.try_into().expect("8 bytes"))));
    let mut last = [b' '; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    judge(u64::from_le_bytes(last));
    // The lanes' sum lands in the top byte: [`KEY_MAX`] bytes hold at most 125 keys, so no sum
    // along the way carries out of its byte.
    let count = starts.wrapping_mul(0x0101_0101_0101_0101) >> 56;
    (bad == 0 && count > 0).then_some(count as usize)
}

/// How many bytes at the start of `bytes` [`valid_key`] would take in a key: where the key
/// that starts there ends, found eight bytes a step (a server reading a `get`'s key ahead of
/// parsing its line).
#[inline]
pub fn key_run(bytes: &[u8]) -> usize {
    const TOP: u64 = 0x8080_8080_8080_8080;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for word in words.by_ref() {
        // Exact per byte (no carries): the lowest flagged byte is the first that is no key's.
        let other = !key_bytes(u64::from_le_bytes(word.try_into().expect("8 bytes"))) & TOP;
        if other != 0 {
            return at + other.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    at + words.remainder().iter().take_while(|&&b| b > b' ' && b != 0x7f).count()
}

/// The top bit of each byte of `word` that [`valid_key`] takes in a key (as [`word_ok`]).
#[inline(always)]
fn key_bytes(word: u64) -> u64 {
    const TOP: u64 = 0x8080_8080_8080_8080;
    let low = word & !TOP;
    let above_space = low + 0x5f5f_5f5f_5f5f_5f5f;
    let del = low + 0x0101_0101_0101_0101;
    (word | (above_space & !del)) & TOP
}

/// The top bit of each byte of `word` that is a space (exact per byte: no carries).
#[inline(always)]
fn space_bytes(word: u64) -> u64 {
    const TOP: u64 = 0x8080_8080_8080_8080;
    let x = word ^ 0x2020_2020_2020_2020;
    // A byte of `x` is zero exactly where its low seven bits add up to no top bit and it has none.
    !(((x & !TOP) + !TOP) | x) & TOP
}

/// Why [`valid_key`] refuses `key`, in words a user can act on (`None`: it does not).
pub fn key_fault(key: &[u8]) -> Option<&'static str> {
    if valid_key(key) {
        None
    } else if key.is_empty() {
        Some("is empty")
    } else if key.len() > KEY_MAX {
        Some("is longer than 250 bytes")
    } else {
        Some("contains a space or a control character")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(valid_key(&[b'k'; KEY_MAX]));
        assert!(!valid_key(&[b'k'; KEY_MAX + 1]));
        assert!(!valid_key(b""));
        assert!(!valid_key(b"a\x01b"));
        assert!(!valid_key(b"a\x7f"));
        assert!(valid_key("ключ".as_bytes()));
    }

    #[test]
    fn every_byte_at_every_place_is_judged_as_the_rule_says() {
        for len in 1..=20 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut key = vec![b'k'; len];
                    key[at] = byte;
                    assert_eq!(valid_key(&key), byte > b' ' && byte != 0x7f, "{byte:#x} at {at} of {len}");
                }
            }
        }
    }

    /// `count_keys` against splitting on spaces and asking `valid_key` of each token.
    fn count_by_tokens(line: &[u8]) -> Option<usize> {
        let tokens: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|t| !t.is_empty()).collect();
        (line.len() <= KEY_MAX && !tokens.is_empty() && tokens.iter().all(|t| valid_key(t)))
            .then_some(tokens.len())
    }

    #[test]
    fn count_keys_agrees_with_splitting_and_checking_each_key() {
        let mut lines: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b" ".to_vec(),
            b"a".to_vec(),
            b"a b".to_vec(),
            b"  a   b  ".to_vec(),
            b"abcdefgh abcdefgh".to_vec(),
            b"abcdefg habcdefg h".to_vec(),
            vec![b'k'; KEY_MAX],
            vec![b'k'; KEY_MAX + 1],
            // The most keys a line holds (125), so the lanes' sum is at its largest.
            b"k ".repeat(KEY_MAX / 2),
            [b" ".as_slice(), &b"k ".repeat(KEY_MAX / 2 - 1), b"k"].concat(),
            b"k ".repeat(KEY_MAX / 2 + 1),
        ];
        // Every byte at every place of lines of up to 20 bytes, around a space.
        for len in 1..=20 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut line = vec![b'k'; len];
                    line[len / 2] = b' ';
                    line[at] = byte;
                    lines.push(line);
                }
            }
        }
        for line in &lines {
            assert_eq!(count_keys(line), count_by_tokens(line), "{line:?}");
        }
    }

    #[test]
    fn key_run_ends_at_the_first_byte_no_key_may_hold() {
        for len in 0..=20 {
            for at in 0..=len {
                for byte in 0..=255u8 {
                    let mut bytes = vec![b'k'; len];
                    if at < len {
                        bytes[at] = byte;
                    }
                    let expected = bytes.iter().take_while(|&&b| b > b' ' && b != 0x7f).count();
                    assert_eq!(key_run(&bytes), expected, "{byte:#x} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn faults_name_the_broken_rule() {
        assert_eq!(key_fault(b"user:42"), None);
        assert_eq!(key_fault(b""), Some("is empty"));
        assert_eq!(key_fault(&[b'k'; KEY_MAX + 1]), Some("is longer than 250 bytes"));
        assert_eq!(key_fault(b"a b"), Some("contains a space or a control character"));
        assert_eq!(key_fault(b"a\r\n"), Some("contains a space or a control character"));
    }
}
