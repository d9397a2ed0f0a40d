//! memcached's binary protocol (doc/protocol-binary.txt): a 24-byte header, then extras, key
//! and value, all lengths in the header.
//!
//! A get of one key is one `GETK`, answered by one packet (status 0 with 4 bytes of flags and
//! the value, or 1: not found). A multiget is what libmemcached sends: a quiet `GETKQ` per key,
//! answered only for hits (and errors), then a `NOOP` whose answer ends the reply. A set is a
//! `SET` with flags 0 and no expiry, answered by one packet (status 0: stored).

use super::{Parsed, Reply, UnexpectedReply};
use crate::keys::Key;
// The wire's constants are the protocol crate's, which the server parses with.
use shoal_proto::binary::{opcode, Status, HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC};
use shoal_proto::MAX_VALUE_BYTES;

/// The statuses replies are matched on, as numbers.
const STATUS_SUCCESS: u16 = Status::Success as u16;
const STATUS_KEY_NOT_FOUND: u16 = Status::KeyNotFound as u16;

/// A get hit's extras: the item's 4 bytes of flags.
const GET_EXTRAS_BYTES: usize = 4;
/// A set's extras: 4 bytes of flags, 4 of expiry (both 0 here).
const SET_EXTRAS: [u8; 8] = [0; 8];

/// The longest body a reply may declare: memcached's largest value with room for extras and
/// key. A longer one is garbage, and waiting for it would buffer without bound.
const MAX_BODY_BYTES: usize = MAX_VALUE_BYTES + 512;

/// Appends a request header for a body of `extras`, a `key_len`-byte key and `value_len`
/// bytes of value.
fn request_header(out: &mut Vec<u8>, opcode: u8, extras: usize, key_len: usize, value_len: usize) {
    let body = u32::try_from(extras + key_len + value_len).expect("--value-size caps values at 1 GiB");
    let key_len = u16::try_from(key_len).expect("keys are at most KEY_MAX bytes");
    out.extend_from_slice(&[REQUEST_MAGIC, opcode]);
    out.extend_from_slice(&key_len.to_be_bytes());
    out.extend_from_slice(&[extras as u8, 0, 0, 0]); // extras length, data type, vbucket
    out.extend_from_slice(&body.to_be_bytes());
    out.extend_from_slice(&[0; 12]); // opaque and CAS
}

/// Appends a get of `keys`: one `GETK` for one key, `GETKQ` per key and a `NOOP` for more.
pub fn encode_get(keys: impl IntoIterator<Item = Key>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut count = 0;
    for key in keys {
        request_header(out, opcode::GETKQ, 0, key.as_bytes().len(), 0);
        out.extend_from_slice(key.as_bytes());
        count += 1;
    }
    if count == 1 {
        out[start + 1] = opcode::GETK; // alone, the get is answered hit or miss: no NOOP needed
    } else {
        request_header(out, opcode::NOOP, 0, 0, 0);
    }
}

/// Appends a `SET` of `key` to `value`, flags 0 and no expiry.
pub fn encode_set(key: &Key, value: &[u8], out: &mut Vec<u8>) {
    request_header(out, opcode::SET, SET_EXTRAS.len(), key.as_bytes().len(), value.len());
    out.extend_from_slice(&SET_EXTRAS);
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(value);
}

/// The header of one whole response packet.
#[derive(Debug)]
struct Packet {
    opcode: u8,
    status: u16,
    extras: usize,
    /// Header and body.
    len: usize,
}

/// The response packet at the start of `buf`, `None` if it has not all arrived. A first byte
/// that is not the response magic is refused at once: a text reply (`ERROR\r\n`) is shorter
/// than a header and would otherwise be waited on for ever.
fn next_packet(buf: &[u8]) -> Result<Option<Packet>, UnexpectedReply> {
    match buf.first() {
        None => return Ok(None),
        Some(&RESPONSE_MAGIC) => {}
        Some(_) => return Err(not_binary(buf)),
    }
    let Some(header) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let key_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let extras = usize::from(header[4]);
    let status = u16::from_be_bytes([header[6], header[7]]);
    let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
    if body > MAX_BODY_BYTES {
        return Err(UnexpectedReply(format!(
            "{} (a binary response declaring a {body}-byte body, over the {MAX_BODY_BYTES}-byte cap)",
            hex(header)
        )));
    }
    if extras + key_len > body {
        return Err(UnexpectedReply(format!(
            "{} (a binary response whose {extras} bytes of extras and {key_len} of key exceed its {body}-byte body)",
            hex(header)
        )));
    }
    let len = HEADER_LEN + body;
    Ok((buf.len() >= len).then_some(Packet { opcode: header[1], status, extras, len }))
}

/// Looks for the whole reply to a get of `keys` at the start of `buf`.
pub fn parse_get(keys: u32, buf: &[u8]) -> Result<Parsed, UnexpectedReply> {
    if keys == 1 {
        let Some(packet) = next_packet(buf)? else { return Ok(Parsed::Incomplete) };
        let reply = get_answer(&packet, opcode::GETK, buf)?;
        return Ok(Parsed::Complete { reply, consumed: packet.len });
    }
    let mut reply = Reply::default();
    let mut pos = 0;
    loop {
        let Some(packet) = next_packet(&buf[pos..])? else { return Ok(Parsed::Incomplete) };
        let packet_bytes = &buf[pos..pos + packet.len];
        pos += packet.len;
        if packet.opcode == opcode::NOOP && packet.status == STATUS_SUCCESS {
            reply.misses = keys - reply.hits - reply.errors; // the keys not answered
            return Ok(Parsed::Complete { reply, consumed: pos });
        }
        let answer = get_answer(&packet, opcode::GETKQ, packet_bytes)?;
        // A quiet miss is not sent, but one that is counts as not answered (a miss at the NOOP).
        reply.hits += answer.hits;
        reply.errors += answer.errors;
        if reply.hits + reply.errors > keys {
            return Err(UnexpectedReply(format!(
                "{} (more answers than the {keys} GETKQ keys asked for, before the NOOP's)",
                hex(&packet_bytes[..HEADER_LEN])
            )));
        }
    }
}

/// What one get answer says: a hit (status 0, flags in the extras), a miss (not found) or an
/// error (any other status).
fn get_answer(packet: &Packet, opcode: u8, bytes: &[u8]) -> Result<Reply, UnexpectedReply> {
    if packet.opcode != opcode {
        return Err(out_of_step(packet, opcode, bytes));
    }
    Ok(match packet.status {
        STATUS_SUCCESS if packet.extras == GET_EXTRAS_BYTES => Reply { hits: 1, ..Reply::default() },
        STATUS_SUCCESS => {
            return Err(UnexpectedReply(format!(
                "{} (a get hit with {} bytes of extras, not the 4 of its flags)",
                hex(&bytes[..HEADER_LEN]),
                packet.extras
            )))
        }
        STATUS_KEY_NOT_FOUND => Reply { misses: 1, ..Reply::default() },
        _ => Reply { errors: 1, ..Reply::default() },
    })
}

/// Looks for the answer to a `SET` at the start of `buf`: status 0 is stored; any other
/// (exists, not stored, too large, out of memory…) counts as an error.
pub fn parse_set(buf: &[u8]) -> Result<Parsed, UnexpectedReply> {
    let Some(packet) = next_packet(buf)? else { return Ok(Parsed::Incomplete) };
    if packet.opcode != opcode::SET {
        return Err(out_of_step(&packet, opcode::SET, buf));
    }
    let errors = u32::from(packet.status != STATUS_SUCCESS);
    Ok(Parsed::Complete { reply: Reply { errors, ..Reply::default() }, consumed: packet.len })
}

fn out_of_step(packet: &Packet, expected: u8, bytes: &[u8]) -> UnexpectedReply {
    UnexpectedReply(format!(
        "{} (a binary response to opcode {:#04x} where one to {expected:#04x} was due: out of step)",
        hex(&bytes[..HEADER_LEN]),
        packet.opcode
    ))
}

/// The error for bytes that do not start with the response magic: most likely the text
/// protocol's answer from a server that does not accept binary.
fn not_binary(buf: &[u8]) -> UnexpectedReply {
    let start = &buf[..buf.len().min(HEADER_LEN)];
    let shown = if start[0].is_ascii_alphabetic() {
        let line = start.split(|&b| b == b'\r' || b == b'\n').next().unwrap_or_default();
        String::from_utf8_lossy(line).into_owned()
    } else {
        hex(start)
    };
    UnexpectedReply(format!(
        "{shown} (not a binary response, whose first byte is {RESPONSE_MAGIC:#04x}: if the server answers in \
         text it does not accept binary; start memcached or shoal server with -B auto)"
    ))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::KeySpace;

    fn key(index: u64) -> Key {
        KeySpace::new(100, 6).unwrap().key(index)
    }

    fn encoded(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    /// The packets below are written out field by field from doc/protocol-binary.txt.
    #[rustfmt::skip]
    const GETK_KEY07: [u8; 30] = [
        0x80, 0x0c, 0x00, 0x06, // magic, opcode GETK, key length 6
        0x00, 0x00, 0x00, 0x00, // extras length, data type, vbucket
        0x00, 0x00, 0x00, 0x06, // total body length
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // opaque, CAS
        b'k', b'e', b'y', b':', b'0', b'7',
    ];

    #[test]
    fn a_single_get_is_one_getk() {
        assert_eq!(encoded(|o| encode_get([key(7)], o)), GETK_KEY07);
    }

    #[test]
    fn a_multiget_is_a_getkq_per_key_then_a_noop() {
        let wire = encoded(|o| encode_get([key(7), key(8)], o));
        let mut expected = GETK_KEY07.to_vec();
        expected[1] = 0x0d; // GETKQ
        expected.extend_from_slice(&GETK_KEY07);
        expected[30 + 1] = 0x0d;
        expected[30 + 29] = b'8';
        #[rustfmt::skip]
        expected.extend_from_slice(&[
            0x80, 0x0a, 0, 0, 0, 0, 0, 0, // NOOP: no key, no extras
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // no body; opaque, CAS
        ]);
        assert_eq!(wire, expected);
    }

    #[test]
    fn a_set_carries_zero_flags_and_expiry_then_key_and_value() {
        #[rustfmt::skip]
        let expected: [u8; 41] = [
            0x80, 0x01, 0x00, 0x06, // magic, opcode SET, key length 6
            0x08, 0x00, 0x00, 0x00, // 8 bytes of extras, data type, vbucket
            0x00, 0x00, 0x00, 0x11, // total body 8 + 6 + 3 = 17
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // opaque, CAS
            0, 0, 0, 0, 0, 0, 0, 0, // flags 0, expiry 0
            b'k', b'e', b'y', b':', b'0', b'7', b'a', b'b', b'c',
        ];
        assert_eq!(encoded(|o| encode_set(&key(7), b"abc", o)), expected);
    }

    /// A response packet: `extras`, `key` and `value` after a header with `opcode` and `status`.
    fn response(opcode: u8, status: u16, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut packet = vec![RESPONSE_MAGIC, opcode];
        packet.extend_from_slice(&(key.len() as u16).to_be_bytes());
        packet.extend_from_slice(&[extras.len() as u8, 0]);
        packet.extend_from_slice(&status.to_be_bytes());
        packet.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        packet.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]); // opaque 0, CAS 1
        [packet, extras.to_vec(), key.to_vec(), value.to_vec()].concat()
    }

    fn hit(opcode: u8, key: &[u8]) -> Vec<u8> {
        response(opcode, STATUS_SUCCESS, &[0, 0, 0, 5], key, b"value")
    }

    fn complete(hits: u32, misses: u32, errors: u32, consumed: usize) -> Result<Parsed, UnexpectedReply> {
        Ok(Parsed::Complete { reply: Reply { hits, misses, errors }, consumed })
    }

    /// Every proper prefix of `reply` is incomplete.
    fn incomplete_until_whole(parse: impl Fn(&[u8]) -> Result<Parsed, UnexpectedReply>, reply: &[u8]) {
        for cut in 0..reply.len() {
            assert_eq!(parse(&reply[..cut]), Ok(Parsed::Incomplete), "cut at {cut} of {}", reply.len());
        }
    }

    #[test]
    fn single_get_answers_are_a_hit_a_miss_or_an_error() {
        let get = |buf: &[u8]| parse_get(1, buf);
        let found = hit(opcode::GETK, b"key:07");
        incomplete_until_whole(get, &found);
        assert_eq!(get(&found), complete(1, 0, 0, found.len()));
        let mut two = found.clone();
        two.extend_from_slice(&found);
        assert_eq!(get(&two), complete(1, 0, 0, found.len()), "stops at the packet's end");
        let missing = response(opcode::GETK, STATUS_KEY_NOT_FOUND, &[], b"key:07", b"");
        incomplete_until_whole(get, &missing);
        assert_eq!(get(&missing), complete(0, 1, 0, missing.len()));
        let too_large = response(opcode::GETK, 0x0003, &[], b"", b"Too large.");
        assert_eq!(get(&too_large), complete(0, 0, 1, too_large.len()));
        let no_flags = response(opcode::GETK, STATUS_SUCCESS, &[], b"key:07", b"value");
        assert!(get(&no_flags).unwrap_err().0.contains("not the 4 of its flags"));
    }

    #[test]
    fn multiget_answers_are_the_hits_then_the_noop() {
        let get = |buf: &[u8]| parse_get(3, buf);
        let noop = response(opcode::NOOP, STATUS_SUCCESS, &[], b"", b"");
        let reply = [hit(opcode::GETKQ, b"key:00"), hit(opcode::GETKQ, b"key:02"), noop.clone()].concat();
        incomplete_until_whole(get, &reply);
        assert_eq!(get(&reply), complete(2, 1, 0, reply.len()));
        assert_eq!(get(&noop), complete(0, 3, 0, noop.len()), "all quiet misses");
        let out_of_memory = response(opcode::GETKQ, 0x0082, &[], b"", b"Out of memory");
        let with_error = [out_of_memory, hit(opcode::GETKQ, b"key:01"), noop.clone()].concat();
        assert_eq!(get(&with_error), complete(1, 1, 1, with_error.len()));
        let loud_miss = response(opcode::GETKQ, STATUS_KEY_NOT_FOUND, &[], b"key:00", b"");
        let with_loud_miss = [loud_miss, noop.clone()].concat();
        assert_eq!(get(&with_loud_miss), complete(0, 3, 0, with_loud_miss.len()));
        let too_many: Vec<u8> = (0..4).flat_map(|_| hit(opcode::GETKQ, b"key:00")).collect();
        assert!(get(&too_many).unwrap_err().0.contains("more answers than the 3"));
        let unquiet = [hit(opcode::GETK, b"key:00"), noop].concat();
        assert!(get(&unquiet).unwrap_err().0.contains("out of step"));
    }

    #[test]
    fn set_answers_are_stored_or_counted_as_errors() {
        let stored = response(opcode::SET, STATUS_SUCCESS, &[], b"", b"");
        incomplete_until_whole(parse_set, &stored);
        assert_eq!(parse_set(&stored), complete(0, 0, 0, 24));
        for refusal in [0x0002, 0x0005, 0x0003, 0x0082] {
            let refused = response(opcode::SET, refusal, &[], b"", b"Not stored.");
            assert_eq!(parse_set(&refused), complete(0, 0, 1, refused.len()), "status {refusal:#x}");
        }
        assert!(parse_set(&hit(opcode::GETK, b"k")).unwrap_err().0.contains("out of step"));
    }

    #[test]
    fn garbage_is_refused_at_once_never_waited_for() {
        let error = parse_get(1, b"ERROR\r\n").unwrap_err().0;
        assert!(error.starts_with("ERROR (not a binary response") && error.contains("-B auto"), "{error}");
        assert!(parse_set(b"E").unwrap_err().0.starts_with("E (not a binary"));
        let request_echo = encoded(|o| encode_get([key(1)], o));
        assert!(parse_get(1, &request_echo).unwrap_err().0.starts_with("80 0c 00 06"));
        let mut huge = response(opcode::GETK, STATUS_SUCCESS, &[0; 4], b"k", b"");
        huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_get(1, &huge[..HEADER_LEN]).unwrap_err().0.contains("over the"));
        let mut overlapping = response(opcode::GETK, STATUS_SUCCESS, &[0; 4], b"key", b"");
        overlapping[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert!(parse_get(1, &overlapping).unwrap_err().0.contains("exceed its 7-byte body"));
    }
}
