use super::*;
use crate::{Parse, Parser, Request, StoreCmd};

fn encoded(op: Op, key: &[u8], exptime: i64, body: Body<&[u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(op, key, exptime, &body, &mut out);
    out
}

/// The one request `wire` parses into, which must take all of it.
fn parsed(wire: &[u8]) -> Request<'_> {
    match Parser::new(1 << 20).parse(wire) {
        Parse::Done { request, consumed } => {
            assert_eq!(consumed, wire.len(), "{}", String::from_utf8_lossy(wire));
            request
        }
        other => panic!("{other:?} for {}", String::from_utf8_lossy(wire)),
    }
}

#[test]
fn storage_requests_parse_back_to_what_was_encoded() {
    for (op, cmd, extra) in [
        (Op::Set, StoreCmd::Set, None),
        (Op::Add, StoreCmd::Add, None),
        (Op::Replace, StoreCmd::Replace, None),
        (Op::Append, StoreCmd::Append, None),
        (Op::Prepend, StoreCmd::Prepend, None),
        (Op::Cas, StoreCmd::Cas(77), Some(77)),
        (Op::LeaseSet, StoreCmd::LeaseSet(9), Some(9)),
    ] {
        for (flags, exptime, data) in
            [(0, 0, &b""[..]), (u32::MAX, -1, b"a\r\nb"), (5, i64::from(i32::MAX), b"xyz")]
        {
            let wire = encoded(op, b"k", exptime, Body::Store { flags, data, extra });
            let Request::Store(store) = parsed(&wire) else { panic!("{wire:?}") };
            assert_eq!(
                (store.cmd, store.key, store.flags, store.exptime, store.data, store.noreply),
                (cmd, &b"k"[..], flags, exptime, data, false)
            );
        }
    }
}

#[test]
fn other_requests_parse_back_to_what_was_encoded() {
    let none = Body::<&[u8]>::None;
    let request = |op, exptime, body| encoded(op, b"key", exptime, body);
    for (hold, parsed_hold) in [(None, 0), (Some(0), 0), (Some(30), 30)] {
        assert_eq!(
            parsed(&request(Op::Delete, 0, Body::Delete { hold })),
            Request::Delete { key: b"key", hold: parsed_hold, noreply: false }
        );
    }
    assert_eq!(
        parsed(&request(Op::Incr, 0, Body::Arith { delta: u64::MAX })),
        Request::Arith { incr: true, key: b"key", delta: u64::MAX, noreply: false }
    );
    assert_eq!(
        parsed(&request(Op::Decr, 0, Body::Arith { delta: 3 })),
        Request::Arith { incr: false, key: b"key", delta: 3, noreply: false }
    );
    assert_eq!(
        parsed(&request(Op::Touch, -5, Body::Touch)),
        Request::Touch { key: b"key", exptime: -5, noreply: false }
    );
    assert_eq!(
        parsed(&request(Op::LeaseGet, 0, Body::LeaseGet { stale: true })),
        Request::LeaseGet { key: b"key", stale: true }
    );
    for delay in [None, Some(0), Some(30), Some(-1)] {
        let wire = request(Op::FlushAll, 0, Body::FlushAll { delay });
        assert_eq!(parsed(&wire), Request::FlushAll { delay, noreply: false });
    }
    for (op, cas, touch) in [
        (Op::Get, false, None),
        (Op::Gets, true, None),
        (Op::Gat, false, Some(60)),
        (Op::Gats, true, Some(-1)),
    ] {
        let wire = request(op, touch.unwrap_or(0), none.clone());
        let Request::Get(get) = parsed(&wire) else { panic!() };
        assert_eq!((get.cas, get.touch, get.keys.collect::<Vec<_>>()), (cas, touch, vec![&b"key"[..]]));
    }
}

#[test]
fn multigets_are_one_line() {
    let mut out = b"mn\r\n".to_vec();
    encode_retrieval(Op::Gats, 60, [&b"a"[..], b"b", b"c"], &mut out);
    assert_eq!(out, b"mn\r\ngats 60 a b c\r\n");
    let Request::Get(get) = parsed(&out[4..]) else { panic!() };
    assert_eq!(get.keys.collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
}

#[test]
fn meta_requests_parse_back_with_their_flags_and_base64_keys() {
    let ms = encoded(Op::MetaSet, b"k", 30, Body::Meta { flags: b"T0 F3", data: Some(b"hi"), base64: false });
    assert_eq!(ms, b"ms k 2 T30 F3\r\nhi\r\n");
    let Request::Meta(meta) = parsed(&ms) else { panic!() };
    assert_eq!((meta.data, meta.order.collect::<Vec<_>>()), (&b"hi"[..], vec![&b"T30"[..], b"F3"]));
    let mg = encoded(Op::MetaGet, b"a b", 0, Body::Meta { flags: b"b v", data: None, base64: true });
    assert_eq!(mg, b"mg YSBi b v\r\n");
    let Request::Meta(meta) = parsed(&mg) else { panic!() };
    assert_eq!(meta.key(&mut [0; crate::KEY_MAX]), b"a b");
    assert_eq!(
        encoded(Op::MetaGet, b"k", 9, Body::Meta { flags: b"T1 v", data: None, base64: false }),
        b"mg k T1 v\r\n"
    );
}

#[test]
fn numbers_are_decimal_whatever_their_size() {
    let mut out = Vec::new();
    // Every length of one to twenty digits, with each digit pair at its boundaries.
    let powers = (0..20).map(|e| 10u64.pow(e));
    let edges = powers.flat_map(|p| [p - 1, p, p + 1, p.saturating_mul(9) + 9, p + p / 10 * 9]);
    let some = [0, 7, 10, 42, 99, 100, 101, 109, 110, 999, 1000, 12_345, 99_999_999, 100_000_000];
    for n in edges.chain(some).chain([1 << 40, u64::MAX]).chain(0..10_000) {
        out.clear();
        out.push(b'x');
        push_u64(&mut out, n);
        assert_eq!(out, format!("x{n}").as_bytes());
    }
}
