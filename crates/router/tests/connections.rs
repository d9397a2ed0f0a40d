//! The router's memory over rounds of many client connections (issue #26's load target, kept
//! small): 2 000 connections opened at once through one router, each sending a get before any
//! answer is read, every answer checked, then all closed; three rounds. After each round the
//! router's own counters must come back down (`curr_connections` and `client_buffers` to the
//! one asking, whose `stats` is read from a lent buffer: no connection keeps a read buffer once
//! it is gone), and its resident memory must not keep growing from round to round (a generous
//! bound: the router used to keep two 16 KiB buffers per connection, and its memory grew by
//! tens of megabytes with every round of 10 000; docs/BENCHMARKS.md). Nothing is timed: every
//! wait polls with a generous deadline. `bench/connections.sh` is the 10 000-connection run.

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::router::{pool_route, Router};
use common::{eventually, Server};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const CONNECTIONS: usize = 2_000;
const ROUNDS: usize = 3;
/// How much the router's resident memory may grow from the end of the first round to the end
/// of the last: a tenth of what 2 000 pairs of 16 KiB buffers would be, many times what the
/// router needs now (its own allocator's settling, a worker's free buffers).
const GROWTH_BOUND: u64 = 24 << 20;

/// The router's `stats` value `name`, as a number.
fn number(router: &Router, name: &str) -> u64 {
    router.stat(name).parse().unwrap_or_else(|_| panic!("STAT {name} is a number"))
}

/// One round: every connection opened, a get sent on each, then every answer read.
fn round(address: &str, value: &[u8]) {
    let mut clients: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|i| TcpStream::connect(address).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    for client in &mut clients {
        client.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        client.write_all(b"get shared\r\n").unwrap();
    }
    let expected = [b"VALUE shared 0 ".as_slice(), value.len().to_string().as_bytes(), b"\r\n"].concat();
    for (i, client) in clients.iter_mut().enumerate() {
        let mut reader = BufReader::new(client);
        let mut line = Vec::new();
        reader.read_until(b'\n', &mut line).unwrap();
        assert_eq!(line, expected, "connection {i}: {}", String::from_utf8_lossy(&line));
        let mut rest = vec![0; value.len() + 2 + 5];
        reader.read_exact(&mut rest).unwrap();
        assert_eq!(&rest[..value.len()], value, "connection {i}");
        assert_eq!(&rest[value.len()..], b"\r\nEND\r\n", "connection {i}");
    }
}

#[test]
fn rounds_of_two_thousand_connections_leave_the_router_as_they_found_it() {
    // This process and the router it starts hold a descriptor per connection.
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let needed = (CONNECTIONS as u64 + 200).min(hard);
    if soft < needed {
        setrlimit(Resource::RLIMIT_NOFILE, needed, hard).unwrap();
    }
    assert!(needed >= CONNECTIONS as u64 + 200, "the open-files hard limit {hard} is too low");
    let server = Server::shoal("router-connections", 0, &[]);
    let config = format!(
        r#"{{ "pools": {{ "A": {{ "servers": ["{}"] }} }}, "route": {} }}"#,
        server.address(),
        pool_route("A")
    );
    let router = Router::start("connections", &config);
    let value = vec![b'v'; 100];
    router.client().set(b"shared", &value, 0, 0).unwrap();
    let mut resident = Vec::new();
    for n in 0..ROUNDS {
        round(&router.address(), &value);
        // Closed by this side; the router notices each close in its own time.
        let settled = eventually(60, || number(&router, "curr_connections") <= 1);
        assert!(
            settled,
            "round {n}: the router still counts {} connections",
            router.stat("curr_connections")
        );
        assert!(
            eventually(60, || number(&router, "client_buffers") <= 1),
            "round {n}: connections that are gone still hold {} read buffers",
            router.stat("client_buffers")
        );
        resident.push(number(&router, "rss_bytes"));
        eprintln!(
            "round {n}: the router's resident memory after {CONNECTIONS} connections: {} KiB",
            resident[n] >> 10
        );
    }
    assert!(number(&router, "total_connections") >= (CONNECTIONS * ROUNDS) as u64);
    let growth = resident[ROUNDS - 1].saturating_sub(resident[0]);
    assert!(
        growth <= GROWTH_BOUND,
        "the router's memory grew by {} KiB from the first round to the last: {resident:?}",
        growth >> 10
    );
}
