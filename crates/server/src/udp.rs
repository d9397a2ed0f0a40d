//! memcached over UDP: every datagram starts with an 8-byte frame header (request id,
//! sequence number, total datagrams, reserved; big-endian u16s). A request must fit one
//! datagram; the answer is split into as many datagrams as it needs, each with the request's
//! id, its sequence number and the total.

use crate::auth::Session;
use crate::exec::{binary, Context, Flow};
use crate::state::Shared;
use shoal_proto::binary::REQUEST_MAGIC;
use shoal_proto::{BinaryParse, BinaryParser, Parse, Parser};
use std::net::UdpSocket;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// memcached's largest UDP answer datagram, frame header included.
pub const MAX_DATAGRAM: usize = 1400;
/// The frame header's length.
pub const HEADER: usize = 8;

/// Serves UDP requests on its own thread until the server stops.
pub fn spawn(shared: Arc<Shared>, socket: UdpSocket) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name("udp".into())
        .spawn(move || serve(&shared, &socket))
        .expect("spawning the UDP thread")
}

fn serve(shared: &Shared, socket: &UdpSocket) {
    // Wake up now and then to notice a stop.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    let mut cx = Context::new(shared, shared.settings.threads);
    let mut datagram = vec![0u8; 65536];
    let mut out = Vec::new();
    let mut frame = Vec::with_capacity(MAX_DATAGRAM);
    while !shared.stopping() {
        let Ok((n, peer)) = socket.recv_from(&mut datagram) else { continue };
        let Some(request_id) = answer(&mut cx, &datagram[..n], &mut out) else { continue };
        for_each_frame(request_id, &out, &mut frame, |frame| {
            let _ = socket.send_to(frame, peer);
        });
    }
}

/// The request id and body of a datagram, if it is a whole request: memcached drops a frame
/// shorter than its header and requests spread over several datagrams.
pub fn request(datagram: &[u8]) -> Option<(u16, &[u8])> {
    let (header, body) = datagram.split_at_checked(HEADER)?;
    let id = u16::from_be_bytes([header[0], header[1]]);
    let total = u16::from_be_bytes([header[4], header[5]]);
    (total == 1).then_some((id, body))
}

/// Splits an answer into datagrams of at most [`MAX_DATAGRAM`] bytes, each behind its frame
/// header, and hands them to `send` in order (in `frame`, reused). An answer needing more
/// than 65 535 datagrams is cut there, as the header cannot count further.
pub fn for_each_frame(request_id: u16, answer: &[u8], frame: &mut Vec<u8>, mut send: impl FnMut(&[u8])) {
    let total = answer.len().div_ceil(MAX_DATAGRAM - HEADER).min(u16::MAX as usize) as u16;
    for (seq, chunk) in answer.chunks(MAX_DATAGRAM - HEADER).take(total as usize).enumerate() {
        frame.clear();
        frame.extend_from_slice(&request_id.to_be_bytes());
        frame.extend_from_slice(&(seq as u16).to_be_bytes());
        frame.extend_from_slice(&total.to_be_bytes());
        frame.extend_from_slice(&[0, 0]);
        frame.extend_from_slice(chunk);
        send(frame);
    }
}

/// Executes the requests of one datagram into `out`; the request id if there is an answer to
/// send (see [`request`] for the datagrams dropped). As in memcached, a datagram whose body
/// starts with 0x80 is in the binary protocol.
fn answer(cx: &mut Context<'_>, datagram: &[u8], out: &mut Vec<u8>) -> Option<u16> {
    out.clear();
    let (id, body) = request(datagram)?;
    if body.first() == Some(&REQUEST_MAGIC) {
        answer_binary(cx, body, out);
    } else {
        answer_text(cx, body, out);
    }
    (!out.is_empty()).then_some(id)
}

fn answer_text(cx: &mut Context<'_>, mut body: &[u8], out: &mut Vec<u8>) {
    let mut parser = Parser::new(cx.shared.settings.max_item_bytes);
    while !body.is_empty() {
        match parser.parse(body) {
            Parse::Done { ref request, consumed } => {
                cx.execute(request, out);
                body = &body[consumed..];
            }
            Parse::Error { reply, consume, forget } => {
                cx.refuse(reply, forget, out);
                body = body.get(consume..).unwrap_or_default();
            }
            Parse::Incomplete | Parse::Close => break,
        }
    }
}

/// The binary requests of one datagram (SASL cannot be on with UDP: nothing to prove).
fn answer_binary(cx: &mut Context<'_>, mut body: &[u8], out: &mut Vec<u8>) {
    let parser = BinaryParser { max_item_bytes: cx.shared.settings.max_item_bytes, sasl: false };
    let mut session = Session { authenticated: true, sasl_started: false, tenant: None };
    while !body.is_empty() {
        match parser.parse(body, true) {
            BinaryParse::Done { request, consumed } => {
                if binary::execute(cx, request, &mut session, out) != Flow::Continue {
                    break;
                }
                body = &body[consumed..];
            }
            BinaryParse::Refused { opcode, opaque, status, consume, close, forget } => {
                cx.forget(forget, false);
                binary::error(out, opcode, opaque, status, status.message());
                if close {
                    break;
                }
                body = body.get(consume..).unwrap_or_default();
            }
            BinaryParse::Incomplete | BinaryParse::Close => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_need_a_whole_header_and_one_datagram() {
        assert_eq!(request(b"\x01\x02\0\0\0\x01\0\0get a\r\n"), Some((0x0102, &b"get a\r\n"[..])));
        assert_eq!(request(b"\x01\x02\0\0\0\x02\0\0get a\r\n"), None);
        assert_eq!(request(b"\x01\x02\0\0\0"), None);
    }

    #[test]
    fn answers_split_into_numbered_datagrams() {
        let answer: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut frames = Vec::new();
        for_each_frame(7, &answer, &mut Vec::new(), |f| frames.push(f.to_vec()));
        assert_eq!(frames.len(), 3);
        let mut joined = Vec::new();
        for (seq, f) in frames.iter().enumerate() {
            assert!(f.len() <= MAX_DATAGRAM);
            assert_eq!(&f[..HEADER], &[0, 7, 0, seq as u8, 0, 3, 0, 0]);
            joined.extend_from_slice(&f[HEADER..]);
        }
        assert_eq!(joined, answer);
        for_each_frame(7, b"", &mut Vec::new(), |_| panic!("an empty answer sends nothing"));
    }
}
