use super::opcode::*;
use super::*;

const PARSER: BinaryParser = BinaryParser { max_item_bytes: 1024, sasl: false };

/// A request: header, extras, key, value.
/// Leaked, so that parse results can borrow it anywhere in a test.
fn request(op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> &'static mut [u8] {
    let mut r = vec![REQUEST_MAGIC, op];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.push(extras.len() as u8);
    r.extend_from_slice(&[0, 0, 0]);
    r.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    r.extend_from_slice(&0xdead_beef_u32.to_be_bytes());
    r.extend_from_slice(&cas.to_be_bytes());
    r.extend_from_slice(extras);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r.leak()
}

fn done(parse: BinaryParse<'_>) -> (BinaryRequest<'_>, usize) {
    match parse {
        BinaryParse::Done { request, consumed } => (request, consumed),
        other => panic!("{other:?}"),
    }
}

fn refused(parse: BinaryParse<'_>) -> (Status, usize, bool) {
    match parse {
        BinaryParse::Refused { status, consume, close, opaque, .. } => {
            assert_eq!(opaque, 0xdead_beef);
            (status, consume, close)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_prefix_is_incomplete_and_the_whole_is_one_request() {
    let extras = [0, 0, 0, 5, 0, 0, 0, 60];
    let set = request(SETQ, &extras, b"key", b"value", 77);
    for cut in 0..set.len() {
        assert_eq!(PARSER.parse(&set[..cut], true), BinaryParse::Incomplete, "{cut}");
    }
    let mut two = set.to_vec();
    two.extend_from_slice(request(NOOP, &[], &[], &[], 0));
    let (r, consumed) = done(PARSER.parse(&two, true));
    assert_eq!(consumed, set.len());
    assert_eq!((r.opcode, r.opaque, r.cas, r.quiet), (SETQ, 0xdead_beef, 77, true));
    let store = Command::Store(StoreRequest {
        mode: StoreMode::Set,
        key: b"key",
        value: b"value",
        flags: 5,
        exptime: 60,
    });
    assert_eq!(r.command, store);
    let (noop, _) = done(PARSER.parse(&two[consumed..], true));
    assert_eq!((noop.command, noop.quiet), (Command::Noop, false));
}

#[test]
fn commands_decode_their_extras() {
    let (r, _) = done(PARSER.parse(request(GETKQ, &[], b"k", &[], 0), true));
    assert_eq!((r.command, r.quiet), (Command::Get { key: b"k", with_key: true }, true));
    let mut incr = Vec::new();
    incr.extend_from_slice(&5u64.to_be_bytes());
    incr.extend_from_slice(&100u64.to_be_bytes());
    incr.extend_from_slice(&NO_CREATE.to_be_bytes());
    let (r, _) = done(PARSER.parse(request(DECREMENT, &incr, b"n", &[], 0), true));
    let arith =
        Command::Arith(ArithRequest { incr: false, key: b"n", delta: 5, initial: 100, exptime: NO_CREATE });
    assert_eq!(r.command, arith);
    let (r, _) = done(PARSER.parse(request(GATK, &9u32.to_be_bytes(), b"g", &[], 0), true));
    assert_eq!(r.command, Command::GetAndTouch { key: b"g", with_key: true, exptime: 9 });
    let (r, _) = done(PARSER.parse(request(TOUCH, &9u32.to_be_bytes(), b"g", &[], 0), true));
    assert_eq!(r.command, Command::Touch { key: b"g", exptime: 9 });
    let (r, _) = done(PARSER.parse(request(FLUSHQ, &3u32.to_be_bytes(), &[], &[], 0), true));
    assert_eq!((r.command, r.quiet), (Command::Flush { delay: Some(3) }, true));
    let (r, _) = done(PARSER.parse(request(FLUSH, &[], &[], &[], 0), true));
    assert_eq!(r.command, Command::Flush { delay: None });
    let (r, _) = done(PARSER.parse(request(APPEND, &[], b"a", b"tail", 0), true));
    let append = Command::Store(StoreRequest {
        mode: StoreMode::Append,
        key: b"a",
        value: b"tail",
        flags: 0,
        exptime: 0,
    });
    assert_eq!(r.command, append);
    let (r, _) = done(PARSER.parse(request(STAT, &[], b"settings", &[], 0), true));
    assert_eq!(r.command, Command::Stat { group: b"settings" });
}

#[test]
fn a_wrong_magic_closes_once_a_header_is_in() {
    assert_eq!(PARSER.parse(b"get foo\r\n", true), BinaryParse::Incomplete);
    assert_eq!(PARSER.parse(b"get foo\r\nget foo\r\nget foo\r\n", true), BinaryParse::Close);
}

#[test]
fn malformed_requests_get_memcacheds_answers() {
    // Key longer than the body: unknown command, close.
    let r = request(GET, &[], b"key", &[], 0);
    r[11] = 1;
    assert_eq!(refused(PARSER.parse(r, true)), (Status::UnknownCommand, 27, true));
    // A key over 250 bytes: invalid arguments, close.
    let long = request(GET, &[], &[b'k'; 251], &[], 0);
    assert_eq!(refused(PARSER.parse(long, true)), (Status::InvalidArguments, long.len(), true));
    // Extras of the wrong shape.
    let bad = request(SET, &[0; 4], b"k", b"v", 0);
    assert_eq!(refused(PARSER.parse(bad, true)).0, Status::InvalidArguments);
    let bad = request(NOOP, &[], b"k", &[], 0);
    assert_eq!(refused(PARSER.parse(bad, true)).0, Status::InvalidArguments);
    // An unknown opcode skips its body after the extras and key (memcached's count).
    let unknown = request(0x50, &[1, 2], b"kk", b"vvvv", 0);
    assert_eq!(refused(PARSER.parse(unknown, true)), (Status::UnknownCommand, 24 + 4 + 8, false));
}

#[test]
fn a_value_over_the_limit_is_skipped_not_buffered() {
    let big = request(SET, &[0; 8], b"k", &[], 0);
    big[8..12].copy_from_slice(&(9 + 5000u32).to_be_bytes());
    match PARSER.parse(big, true) {
        BinaryParse::Refused { status, consume, close, forget, .. } => {
            assert_eq!(
                (status, consume, close, forget),
                (Status::TooLarge, 33 + 5000, false, Some(&b"k"[..]))
            );
        }
        other => panic!("{other:?}"),
    }
    // A body length near 4 GiB is skipped the same way.
    big[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    let (status, consume, _) = refused(PARSER.parse(big, true));
    assert_eq!((status, consume), (Status::TooLarge, 24 + u32::MAX as usize));
    // append keeps the old value when refused.
    let append = request(APPEND, &[], b"k", &[], 0);
    append[8..12].copy_from_slice(&2000u32.to_be_bytes());
    assert!(matches!(PARSER.parse(append, true), BinaryParse::Refused { forget: None, .. }));
}

#[test]
fn before_authentication_only_sasl_and_version_pass() {
    let sasl = BinaryParser { sasl: true, ..PARSER };
    let get = request(GET, &[], b"k", &[], 0);
    assert_eq!(refused(sasl.parse(get, false)), (Status::AuthError, get.len(), true));
    assert!(matches!(sasl.parse(get, true), BinaryParse::Done { .. }));
    let version = request(VERSION, &[], &[], &[], 0);
    assert!(matches!(sasl.parse(version, false), BinaryParse::Done { .. }));
    let (r, _) = done(sasl.parse(request(SASL_LIST_MECHS, &[], &[], &[], 0), false));
    assert_eq!(r.command, Command::SaslListMechs);
    let auth = request(SASL_AUTH, &[], b"PLAIN", b"\0u\0p", 0);
    let (r, consumed) = done(sasl.parse(auth, false));
    assert_eq!(
        (r.command, consumed),
        (Command::SaslAuth { mechanism: b"PLAIN", data: b"\0u\0p" }, auth.len())
    );
    // Without SASL the SASL commands are unknown; their data is skipped.
    assert_eq!(refused(PARSER.parse(auth, true)), (Status::UnknownCommand, auth.len(), false));
    let long = request(SASL_AUTH, &[], &[b'M'; 33], b"x", 0);
    assert_eq!(refused(sasl.parse(long, false)), (Status::InvalidArguments, long.len(), false));
}

#[test]
fn response_headers_are_big_endian() {
    let mut out = Vec::new();
    let h = ResponseHeader {
        opcode: GETK,
        status: Status::KeyNotFound,
        extras_len: 4,
        key_len: 3,
        body_len: 0x0102_0304,
        opaque: 7,
        cas: 0x1122,
    };
    h.write(&mut out);
    assert_eq!(out, [0x81, 0x0c, 0, 3, 4, 0, 0, 1, 1, 2, 3, 4, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0x11, 0x22]);
}
