//! The hints handoff is input from any local user who may connect to the handoff socket, and
//! the `HANDOFF` answer is input to the client: whatever bytes arrive, and however they are cut
//! into writes, with or without a descriptor, parsing must not panic, a message is accepted only
//! whole and exact, and the server's reading of the socket ends when the sender does.
//!
//! Input: one byte (bits 0–5: the size of each write, 1 to 63; bit 6: a descriptor comes with
//! the first write), then the bytes sent — also parsed as a `HANDOFF` answer line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use shoal_proto::handoff::{message, parse_answer, parse_message, push_answer, Message, MESSAGE_BYTES};
use std::io::{IoSlice, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

fuzz_target!(|input: &[u8]| {
    let Some((&shape, bytes)) = input.split_first() else { return };
    let bytes = &bytes[..bytes.len().min(256)];

    if let Some((token, path)) = parse_answer(bytes) {
        let mut line = Vec::new();
        push_answer(&mut line, &token, path);
        assert_eq!(parse_answer(line.strip_suffix(b"\r\n").unwrap()), Some((token, path)));
    }

    for end in 0..=bytes.len() {
        match parse_message(&bytes[..end]) {
            Message::Done(token) => assert_eq!(&bytes[..end], &message(&token)[..]),
            Message::Incomplete => assert!(end < MESSAGE_BYTES),
            Message::Invalid(_) => {}
        }
    }

    let (mut client, server) = UnixStream::pair().unwrap();
    let chunk = usize::from(shape & 0x3f).max(1);
    let null = std::fs::File::open("/dev/null").unwrap();
    let fds = [null.as_raw_fd()];
    for (i, piece) in bytes.chunks(chunk).enumerate() {
        if i == 0 && shape & 0x40 != 0 {
            let rights = [ControlMessage::ScmRights(&fds)];
            sendmsg::<()>(client.as_raw_fd(), &[IoSlice::new(piece)], &rights, MsgFlags::empty(), None)
                .unwrap();
        } else {
            client.write_all(piece).unwrap();
        }
    }
    drop(client); // the sender is done: the server must not wait for more
    if let Ok((token, _area)) = shoal_server::handoff::receive(&server) {
        assert!(shape & 0x40 != 0, "accepted without a descriptor");
        assert_eq!(&bytes[..MESSAGE_BYTES], &message(&token)[..]);
    }
});
