//! memcached over UDP: every datagram starts with an 8-byte frame header (request id,
//! sequence number, total datagrams, reserved; big-endian u16s). A request must fit one
//! datagram; the answer is split into as many datagrams as it needs, each with the request's
//! id, its sequence number and the total.

use crate::exec::Context;
use crate::server::Shared;
use shoal_proto::{Parse, Parser};
use std::net::UdpSocket;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// memcached's largest UDP answer datagram, frame header included.
const MAX_DATAGRAM: usize = 1400;
const HEADER: usize = 8;

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
    let mut cx = Context::new(shared, &shared.counters[shared.settings.threads]);
    let mut datagram = vec![0u8; 65536];
    let mut out = Vec::new();
    let mut frame = Vec::with_capacity(MAX_DATAGRAM);
    while !shared.stopping() {
        let Ok((n, peer)) = socket.recv_from(&mut datagram) else { continue };
        let Some(request_id) = answer(&mut cx, &datagram[..n], &mut out) else { continue };
        let chunks: Vec<&[u8]> = out.chunks(MAX_DATAGRAM - HEADER).collect();
        let total = chunks.len().min(u16::MAX as usize) as u16;
        for (seq, chunk) in chunks.iter().take(total as usize).enumerate() {
            frame.clear();
            frame.extend_from_slice(&request_id.to_be_bytes());
            frame.extend_from_slice(&(seq as u16).to_be_bytes());
            frame.extend_from_slice(&total.to_be_bytes());
            frame.extend_from_slice(&[0, 0]);
            frame.extend_from_slice(chunk);
            let _ = socket.send_to(&frame, peer);
        }
    }
}

/// Executes the requests of one datagram into `out`; the request id if there is an answer to
/// send. Malformed frames, and requests spread over several datagrams (which memcached does not
/// support either), are dropped.
fn answer(cx: &mut Context<'_>, datagram: &[u8], out: &mut Vec<u8>) -> Option<u16> {
    out.clear();
    let (header, mut body) = datagram.split_at_checked(HEADER)?;
    let id = u16::from_be_bytes([header[0], header[1]]);
    let total = u16::from_be_bytes([header[4], header[5]]);
    if total != 1 {
        return None;
    }
    let mut parser = Parser::new(cx.shared.settings.max_item_bytes);
    while !body.is_empty() {
        match parser.parse(body) {
            Parse::Done { request, consumed } => {
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
    (!out.is_empty()).then_some(id)
}
