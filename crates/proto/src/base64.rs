//! Meta commands' base64 keys (the `b` flag): padded standard base64, encoded when a request
//! is written and decoded when one is parsed.

/// Appends the padded standard base64 of `input` to `out`.
pub fn encode_base64(input: &[u8], out: &mut Vec<u8>) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in input.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |w, (i, &b)| w | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(word >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
}

/// Decodes padded standard base64 (`A–Z a–z 0–9 + /`, `=` padding) into `out`, returning the
/// decoded length; `None` if `input` is not such base64, decodes to nothing, or does not fit.
pub fn decode_base64(input: &[u8], out: &mut [u8]) -> Option<usize> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    if input.is_empty() || !input.len().is_multiple_of(4) {
        return None;
    }
    let quads = input.len() / 4;
    let mut n = 0;
    for (i, quad) in input.chunks_exact(4).enumerate() {
        let pad = if i + 1 == quads { quad.iter().rev().take_while(|&&c| c == b'=').count() } else { 0 };
        if pad > 2 {
            return None;
        }
        let mut word = 0;
        for &c in &quad[..4 - pad] {
            word = word << 6 | sextet(c)?;
        }
        word <<= 6 * pad as u32;
        let bytes = word.to_be_bytes();
        let len = 3 - pad;
        out.get_mut(n..n + len)?.copy_from_slice(&bytes[1..1 + len]);
        n += len;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        let mut out = [0; 8];
        for (input, want) in [
            (&b"YQ=="[..], &b"a"[..]),
            (b"YWI=", b"ab"),
            (b"YWJj", b"abc"),
            (b"YWJjZA==", b"abcd"),
            (b"+/+/", b"\xfb\xff\xbf"),
        ] {
            let n = decode_base64(input, &mut out).unwrap();
            assert_eq!(&out[..n], want, "{input:?}");
            let mut encoded = Vec::new();
            encode_base64(want, &mut encoded);
            assert_eq!(encoded, input, "{want:?}");
        }
        for bad in [&b""[..], b"YQ", b"YQ=", b"Y===", b"YQ==YQ==", b"Y!==", b"===="] {
            assert_eq!(decode_base64(bad, &mut out), None, "{bad:?}");
        }
        assert_eq!(decode_base64(b"YWJjZA==", &mut [0; 3]), None);
    }
}
