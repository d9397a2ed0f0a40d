//! A worker woken for several connections at once reads them all before serving any, and
//! places (hashes) the key of a `get` it finds at the head of a buffer to start loading its
//! index (`Conn::read_ahead`); that get then uses the placement instead of hashing the key
//! again. Many connections sending at once check that every get still finds its own key,
//! among them gets refused after their key was placed (each followed on its connection by a
//! get of another key of the same length at the same place in the buffer, which must not
//! inherit the placement) and lines that arrive in two parts. Whether a round wakes the
//! worker for several connections depends on timing; the answers must be right either way.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::{read_until, Server};
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

const CONNECTIONS: usize = 16;
const ROUNDS: usize = 40;

/// Keys of one length, so that each round's key sits where the round before's did.
fn key(conn: usize, round: usize) -> String {
    format!("k{conn:03}-{round:03}")
}

fn value(conn: usize, round: usize) -> String {
    format!("value of {conn} in round {round}")
}

/// What a connection sends in a round.
enum Send {
    /// A get of the round's key, in one write.
    Get,
    /// A get of the round's key whose line ends with a stray byte after `\r`: its key is
    /// placed ahead (it ends at the `\r`), then the parser refuses the line.
    Refused,
    /// A get of the round's key with its `\n` sent only after every other connection's
    /// request: placed ahead while incomplete, answered once whole.
    Split,
}

fn what(conn: usize, round: usize) -> Send {
    match (conn + round) % 4 {
        0 => Send::Refused,
        1 => Send::Split,
        _ => Send::Get,
    }
}

#[test]
fn gets_read_ahead_across_connections_find_their_own_keys() {
    let server = Server::shoal("read-ahead", 0, &["-t", "1"]);
    let mut conns: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|_| {
            let s = TcpStream::connect(server.address()).expect("connect");
            // The bound of every read below: a server that stops answering fails the test.
            s.set_read_timeout(Some(Duration::from_secs(60))).expect("read timeout");
            s.set_nodelay(true).expect("nodelay");
            s
        })
        .collect();

    let mut fill = Vec::new();
    for conn in 0..CONNECTIONS {
        for round in 0..ROUNDS {
            let v = value(conn, round);
            fill.extend_from_slice(
                format!("set {} 0 0 {} noreply\r\n{v}\r\n", key(conn, round), v.len()).as_bytes(),
            );
        }
    }
    fill.extend_from_slice(b"version\r\n");
    conns[0].write_all(&fill).expect("fill");
    assert!(read_until(&mut conns[0], b"\r\n").starts_with(b"VERSION "));

    for round in 0..ROUNDS {
        for (conn, stream) in conns.iter_mut().enumerate() {
            let k = key(conn, round);
            let request = match what(conn, round) {
                Send::Get => format!("get {k}\r\n"),
                Send::Refused => format!("get {k}\rX\r\n"),
                Send::Split => format!("get {k}\r"),
            };
            stream.write_all(request.as_bytes()).expect("send a request");
        }
        for (conn, stream) in conns.iter_mut().enumerate() {
            if let Send::Split = what(conn, round) {
                stream.write_all(b"\n").expect("send the end of a line");
            }
        }
        for (conn, stream) in conns.iter_mut().enumerate() {
            let (k, v) = (key(conn, round), value(conn, round));
            let (until, expected) = match what(conn, round) {
                Send::Refused => ("\r\n", "CLIENT_ERROR bad command line format\r\n".to_string()),
                Send::Get | Send::Split => ("END\r\n", format!("VALUE {k} 0 {}\r\n{v}\r\nEND\r\n", v.len())),
            };
            let answer = read_until(stream, until.as_bytes());
            assert_eq!(String::from_utf8_lossy(&answer), expected, "connection {conn}, round {round}");
        }
    }
}
