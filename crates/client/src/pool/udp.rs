//! Facebook's UDP gets (Scaling Memcache §3.1): a get sent as one datagram needs no connection
//! and no server-side connection state. memcached's UDP frame puts an 8-byte header before
//! each datagram (request id, sequence number, datagram count, reserved); an answer may span
//! several datagrams, and memcached 1.6 sends each `VALUE` as a message of its own under the
//! request's id, so an answer is complete at its `END`. A datagram that is lost, arrives out of order, or does not parse makes
//! the whole request a miss — counted, and never a wrong value: only answers from the server
//! asked, with the request's id, in sequence, for keys that were asked, are taken.

use super::batch::in_order;
use super::Pool;
use crate::client::read_values_each;
use crate::conn::Connection;
use crate::hits::Hits;
use shoal_proto::{encode_retrieval, Op};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

/// Bytes of memcached's UDP frame header.
const HEADER_BYTES: usize = 8;
/// The most request bytes per datagram (a path MTU's worth; memcached reads up to 64 KiB).
const MAX_REQUEST_BYTES: usize = 1400;

/// The pool's UDP socket and each member's UDP address (the TCP port, on UDP).
pub(crate) struct UdpGets {
    socket: Option<UdpSocket>,
    addresses: Vec<Option<SocketAddr>>,
    next_id: u16,
}

/// One request in flight: whose, which keys, and the datagrams of its answer so far.
struct Pending {
    id: u16,
    from: SocketAddr,
    keys: Vec<usize>,
    next_sequence: u16,
    answer: Vec<u8>,
    complete: bool,
    broken: bool,
}

impl UdpGets {
    /// UDP for members given as `host:port`; unix-socket members keep using their socket.
    pub(crate) fn new(addresses: &[String]) -> UdpGets {
        let addresses = addresses
            .iter()
            .map(|a| if a.contains('/') { None } else { a.to_socket_addrs().ok().and_then(|mut i| i.next()) })
            .collect();
        UdpGets { socket: None, addresses, next_id: 0 }
    }

    /// Whether `member` is asked over UDP.
    pub(crate) fn serves(&self, member: usize) -> bool {
        self.addresses[member].is_some()
    }
}

/// memcached's frame header for a one-datagram request.
fn frame(id: u16, request: &[u8]) -> Vec<u8> {
    let mut datagram = Vec::with_capacity(HEADER_BYTES + request.len());
    datagram.extend_from_slice(&id.to_be_bytes());
    datagram.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
    datagram.extend_from_slice(request);
    datagram
}

/// Runs of `indexes` whose `get` line fits in one datagram.
fn datagram_runs(keys: &[&[u8]], indexes: &[usize]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0;
    for &i in indexes {
        // "gets " and "\r\n" around the keys, a space after each.
        if runs.is_empty() || bytes + keys[i].len() + 1 > MAX_REQUEST_BYTES - HEADER_BYTES - 7 {
            runs.push(Vec::new());
            bytes = 0;
        }
        runs.last_mut().expect("pushed").push(i);
        bytes += keys[i].len() + 1;
    }
    runs
}

impl Pool {
    /// Gets `keys[i]` for every `i` of `per_member[m]` from member `m` over UDP, waiting up to
    /// the client's I/O timeout; hits are added to `found`, everything unanswered is a miss.
    pub(crate) fn udp_get(&mut self, keys: &[&[u8]], per_member: Vec<Vec<usize>>, found: &mut Hits) {
        let timeout = self.client.io_timeout.unwrap_or(Duration::from_secs(1));
        let udp = self.udp.as_mut().expect("UDP gets are on");
        if udp.socket.is_none() {
            udp.socket = UdpSocket::bind(("0.0.0.0", 0)).ok();
        }
        let mut pending = Vec::new();
        let mut unsent = 0;
        for (member, indexes) in per_member.into_iter().enumerate() {
            for run in datagram_runs(keys, &indexes) {
                let id = udp.next_id;
                udp.next_id = udp.next_id.wrapping_add(1);
                let to = udp.addresses[member].expect("a UDP member");
                let mut request = Vec::new();
                encode_retrieval(Op::Gets, 0, run.iter().map(|&i| keys[i]), &mut request);
                let sent = udp.socket.as_ref().is_some_and(|s| s.send_to(&frame(id, &request), to).is_ok());
                if sent {
                    let p = Pending {
                        id,
                        from: to,
                        keys: run,
                        next_sequence: 0,
                        answer: Vec::new(),
                        complete: false,
                        broken: false,
                    };
                    pending.push(p);
                } else {
                    unsent += run.len();
                }
            }
        }
        self.counters.udp_requests += pending.len() as u64;
        if let Some(socket) = &self.udp.as_ref().expect("on").socket {
            receive(socket, &mut pending, Instant::now() + timeout);
        }
        let mut misses = unsent;
        for p in pending {
            let mark = found.mark();
            let mut next = 0;
            let read = (p.complete && !p.broken).then(|| {
                read_values_each(&mut Connection::finished(p.answer), |key, item| {
                    if let Some(i) = in_order(keys, &p.keys, &mut next, key) {
                        found.push(i, item);
                    }
                })
            });
            if !matches!(read, Some(Ok(()))) {
                found.rewind(mark);
                misses += p.keys.len();
            }
        }
        self.counters.udp_misses += misses as u64;
    }
}

/// Collects the datagrams of every pending request until all are complete or `deadline`.
fn receive(socket: &UdpSocket, pending: &mut [Pending], deadline: Instant) {
    let mut datagram = vec![0u8; 65_536];
    while pending.iter().any(|p| !p.complete && !p.broken) {
        let now = Instant::now();
        if now >= deadline || socket.set_read_timeout(Some(deadline - now)).is_err() {
            return;
        }
        let Ok((n, from)) = socket.recv_from(&mut datagram) else { return };
        if n < HEADER_BYTES {
            continue;
        }
        let word = |at: usize| u16::from_be_bytes([datagram[at], datagram[at + 1]]);
        let (id, sequence, total) = (word(0), word(2), word(4));
        let Some(p) = pending.iter_mut().find(|p| p.id == id && p.from == from && !p.complete) else {
            continue; // a late answer to an earlier request, or from elsewhere
        };
        if sequence != p.next_sequence || total == 0 || sequence >= total {
            p.broken = true; // lost or reordered: the request is a miss
            continue;
        }
        p.answer.extend_from_slice(&datagram[HEADER_BYTES..n]);
        p.next_sequence += 1;
        if p.next_sequence == total {
            // A message ends here; memcached 1.6 sends each VALUE as a message of its own
            // (sequence 0 of 1, same id), so the answer ends only with its last line.
            p.next_sequence = 0;
            p.complete = answer_ended(&p.answer);
        }
    }
}

/// Whether `answer` holds a whole retrieval answer: `END`, or an error line.
fn answer_ended(answer: &[u8]) -> bool {
    let Some(body) = answer.strip_suffix(b"\r\n") else { return false };
    let last = body.rsplit(|&b| b == b'\n').next().unwrap_or(body);
    last == b"END"
        || last == b"ERROR"
        || last.starts_with(b"SERVER_ERROR")
        || last.starts_with(b"CLIENT_ERROR")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_ends_at_end_or_an_error() {
        assert!(answer_ended(b"VALUE k 0 1\r\nx\r\nEND\r\n"));
        assert!(answer_ended(b"END\r\n") && answer_ended(b"SERVER_ERROR out of memory\r\n"));
        assert!(!answer_ended(b"VALUE k 0 1\r\nx\r\n") && !answer_ended(b"VALUE k 0 1\r\nx\r\nEN"));
    }

    #[test]
    fn requests_are_framed_and_split_to_fit_a_datagram() {
        assert_eq!(frame(0x0102, b"gets k\r\n"), b"\x01\x02\x00\x00\x00\x01\x00\x00gets k\r\n");
        let keys: Vec<Vec<u8>> = (0..40).map(|i| vec![b'a' + (i % 26) as u8; 200]).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let runs = datagram_runs(&refs, &(0..40).collect::<Vec<_>>());
        assert!(runs.len() > 1);
        assert_eq!(runs.concat(), (0..40).collect::<Vec<_>>());
        for run in runs {
            let mut request = Vec::new();
            encode_retrieval(Op::Gets, 0, run.iter().map(|&i| refs[i]), &mut request);
            assert!(frame(0, &request).len() <= MAX_REQUEST_BYTES);
        }
    }
}
