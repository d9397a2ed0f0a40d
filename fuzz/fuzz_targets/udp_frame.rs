//! UDP datagrams come straight from the network: `shoal_server::udp::request` must accept
//! exactly the whole one-datagram requests and never panic; `for_each_frame` must split any
//! answer into numbered datagrams that fit, carry the request id and join back into the
//! answer. (The request bodies themselves go through the parser the `proto_request` target
//! fuzzes.)
//!
//! Input: a datagram; it is also used as an answer to frame.

#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_server::udp::{for_each_frame, request, HEADER, MAX_DATAGRAM};

fuzz_target!(|datagram: &[u8]| {
    let whole = datagram.len() >= HEADER && datagram[4..6] == [0, 1];
    match request(datagram) {
        Some((id, body)) => {
            assert!(whole);
            assert_eq!(id.to_be_bytes(), datagram[..2]);
            assert_eq!(body, &datagram[HEADER..]);
        }
        None => assert!(!whole),
    }
    let id = u16::from_le_bytes([datagram.first().copied().unwrap_or(0), datagram.len() as u8]);
    let (mut joined, mut seq) = (Vec::new(), 0u16);
    for_each_frame(id, datagram, &mut Vec::new(), |frame| {
        assert!(frame.len() > HEADER && frame.len() <= MAX_DATAGRAM);
        assert_eq!(frame[..4], [id.to_be_bytes(), seq.to_be_bytes()].concat()[..]);
        assert_eq!(
            usize::from(u16::from_be_bytes([frame[4], frame[5]])),
            datagram.len().div_ceil(MAX_DATAGRAM - HEADER)
        );
        joined.extend_from_slice(&frame[HEADER..]);
        seq += 1;
    });
    assert_eq!(joined, datagram);
});
