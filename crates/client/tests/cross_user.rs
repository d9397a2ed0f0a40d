//! Local reads across users: a client of another user than the server hands its hints area
//! over the server's handoff socket (`shm handoff`), so its reads through shared memory still
//! count at the server and mark what they hit — the server as root with a client as `nobody`,
//! and the server as `nobody` (`-u`) with a client as root. Also what others can not do with
//! the handoff socket.
//!
//! The other user's client is this test binary itself, run again as `nobody` for the ignored
//! test [`child_reads_as_told`] (std's `Command::uid` drops root's groups too). Every test
//! here needs root, and says so and passes without it.

mod common;

use common::{eventually, Server};
use shoal_client::{Client, Options};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;

const NOBODY: u32 = 65534;
const CHILD_ADDRESS: &str = "SHOAL_CROSS_USER_ADDRESS";
const CHILD_EXPECTS_LOCAL: &str = "SHOAL_CROSS_USER_LOCAL";
const CHILD_CONNECT: &str = "SHOAL_CROSS_USER_CONNECT";
/// Local reads the child makes of the key `shared`.
const CHILD_READS: u64 = 300;

fn root() -> bool {
    let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root {
        eprintln!("skipped: switching users needs root (run the tests as root)");
    }
    root
}

/// Run as another user by the tests below: reads `shared` [`CHILD_READS`] times and checks
/// whether that was local as the parent expects.
#[test]
#[ignore = "the other user's side of the cross-user tests, which run it"]
fn child_reads_as_told() {
    if let Ok(socket) = std::env::var(CHILD_CONNECT) {
        let refused = UnixStream::connect(&socket).unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied, "uid {}: {refused}", nix_uid());
        return;
    }
    let Ok(address) = std::env::var(CHILD_ADDRESS) else { return };
    let expect_local = std::env::var(CHILD_EXPECTS_LOCAL).unwrap() == "yes";
    let mut c = Client::connect(&address, Options::default()).unwrap();
    assert_eq!(c.is_local(), expect_local, "local as expected, as uid {}", nix_uid());
    for _ in 0..CHILD_READS {
        assert_eq!(c.get(b"shared").unwrap().unwrap().value, b"across users");
    }
    assert_eq!(c.is_local(), expect_local, "still");
    // Stay connected until the reads were folded in: the parent reads the counters first.
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

fn nix_uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// This binary, to run as `uid`:`gid` on [`child_reads_as_told`].
fn child_command(uid: u32, gid: u32) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["child_reads_as_told", "--exact", "--ignored", "--nocapture", "--test-threads", "1"])
        .uid(uid)
        .gid(gid)
        .stdin(std::process::Stdio::piped());
    command
}

/// Starts this binary as `uid`:`gid` reading from `server`, locally or not as expected.
fn child(server: &Server, uid: u32, gid: u32, expect_local: bool) -> std::process::Child {
    child_command(uid, gid)
        .env(CHILD_ADDRESS, server.address())
        .env(CHILD_EXPECTS_LOCAL, if expect_local { "yes" } else { "no" })
        .spawn()
        .unwrap()
}

/// A free loopback port for `--metrics-listen`.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `shoal_local_hits_total` from the server's `/metrics`: hits clients served themselves.
fn local_hits(metrics_port: u16) -> u64 {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", metrics_port)) else { return 0 };
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("shoal_local_hits_total "))
        .map_or(0, |n| n.trim().parse::<f64>().unwrap() as u64)
}

/// Whether `key` was hit since it was stored (meta's `h` flag; asking sets it, so ask once).
fn hit_before(c: &mut Client, key: &str) -> bool {
    let reply = c.meta(&format!("mg {key} h"), None).unwrap().unwrap();
    reply.line.split(' ').any(|flag| flag == "h1")
}

/// A server with `args` (and metrics on), `shared` stored in it, and a client of another
/// user (`uid`, `gid`) reading it: its reads must be local, counted and marked at the server.
fn reads_locally_across_users(test: &str, args: &[&str], uid: u32, gid: u32) {
    let metrics = free_port();
    let listen = format!("127.0.0.1:{metrics}");
    let mut all = vec!["--metrics-listen", &listen];
    all.extend_from_slice(args);
    let server = Server::shoal(test, 0, &all);
    let mut c = Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    c.set(b"shared", b"across users", 0, 0).unwrap();
    assert!(eventually(30, || local_hits(metrics) == 0), "metrics are served");
    let mut reader = child(&server, uid, gid, true);
    let folded = eventually(30, || local_hits(metrics) == CHILD_READS);
    let _ = reader.stdin.take().unwrap().write_all(b"done\n"); // it may have failed already
    assert!(reader.wait().unwrap().success(), "the other user's client read locally");
    assert!(folded, "its {CHILD_READS} local hits reached the server (saw {})", local_hits(metrics));
    assert!(hit_before(&mut c, "shared"), "its hits marked the item read in the server's index");
}

#[test]
fn a_client_as_nobody_reads_locally_from_a_root_server_whose_region_its_group_may_read() {
    if !root() {
        return;
    }
    reads_locally_across_users(
        "xuser-root-server",
        &["--region-group", &NOBODY.to_string(), "--region-mode", "640"],
        NOBODY,
        NOBODY,
    );
}

#[test]
fn a_root_client_reads_locally_from_a_server_that_dropped_to_nobody() {
    if !root() {
        return;
    }
    reads_locally_across_users("xuser-nobody-server", &["-u", "nobody"], 0, 0);
}

#[test]
fn a_client_as_nobody_reads_locally_from_a_server_that_dropped_to_daemon() {
    // Neither user may open the other's /proc/<pid>/fd: only the handoff brings the area over
    // (a root server, above, could still have opened it by path).
    if !root() {
        return;
    }
    let group = ["--region-group", &NOBODY.to_string(), "--region-mode", "640"].map(String::from);
    let args = ["-u", "daemon", &group[0], &group[1], &group[2], &group[3]];
    reads_locally_across_users("xuser-daemon-server", &args, NOBODY, NOBODY);
}

#[test]
fn without_the_regions_group_a_client_of_another_user_reads_over_the_network() {
    if !root() {
        return;
    }
    let server = Server::shoal("xuser-private", 0, &[]);
    let mut c = Client::connect(&server.address(), Options::default()).unwrap();
    c.set(b"shared", b"across users", 0, 0).unwrap();
    let mut reader = child(&server, NOBODY, NOBODY, false);
    reader.stdin.take().unwrap().write_all(b"done\n").unwrap();
    assert!(reader.wait().unwrap().success(), "nobody's client read over the network");
}

/// Asks `shm handoff` on `conn`: the token and the socket's path.
fn ask(conn: &mut std::net::TcpStream) -> (shoal_proto::handoff::Token, std::path::PathBuf) {
    conn.write_all(b"shm handoff\r\n").unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8];
    while !answer.ends_with(b"\r\n") {
        conn.read_exact(&mut byte).unwrap();
        answer.push(byte[0]);
    }
    let line = answer.strip_suffix(b"\r\n").unwrap();
    let (token, socket) = shoal_proto::handoff::parse_answer(line)
        .unwrap_or_else(|| panic!("a HANDOFF answer, not {}", String::from_utf8_lossy(line)));
    (token, std::path::PathBuf::from(String::from_utf8(socket.to_vec()).unwrap()))
}

/// A fresh connection to `server` and what `shm handoff` gave it.
fn offer(server: &Server) -> (std::net::TcpStream, shoal_proto::handoff::Token, std::path::PathBuf) {
    let mut conn = std::net::TcpStream::connect(server.address()).unwrap();
    let (token, socket) = ask(&mut conn);
    (conn, token, socket)
}

/// Sends `message` with `fd` on the handoff socket at `socket`; the server's answer.
fn hand_over(socket: &std::path::Path, message: &[u8], fd: std::os::fd::RawFd) -> String {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let mut stream = UnixStream::connect(socket).unwrap();
    let fds = [fd];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[std::io::IoSlice::new(message)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn a_token_registers_only_its_own_connection_once_and_nobody_guesses_one() {
    use shoal_proto::handoff::{message, Token};
    let server = Server::shoal("xuser-tokens", 0, &[]);
    let area = shoal_region::hints::HintsWriter::create().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&area.fd());
    let (conn, token, socket) = offer(&server);
    // A made-up token (the real one with one bit changed) registers nothing, and does not
    // use up the real one.
    let mut guessed = token;
    guessed.0[0] ^= 1;
    let refused = hand_over(&socket, &message(&guessed), fd);
    assert!(refused.starts_with("SERVER_ERROR no connection was given this token"), "{refused}");
    assert_eq!(hand_over(&socket, &message(&token), fd), "OK\r\n");
    // One use only: a token seen once (by whoever) cannot register again.
    assert!(hand_over(&socket, &message(&token), fd).starts_with("SERVER_ERROR no connection"));
    // A newer offer replaces the connection's older one.
    let (mut conn2, first, _) = offer(&server);
    let (second, _) = ask(&mut conn2);
    assert!(hand_over(&socket, &message(&first), fd).starts_with("SERVER_ERROR no connection"));
    // Closing a connection drops its pending token: once the server saw the close (one fewer
    // connection), the token registers nothing.
    let mut watcher =
        Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap();
    let mut connections = || -> u64 {
        let stats = watcher.stats(None).unwrap();
        stats.into_iter().find(|(name, _)| name == "curr_connections").unwrap().1.parse().unwrap()
    };
    let before = connections();
    drop(conn2);
    assert!(eventually(30, || connections() == before - 1), "the server saw the close");
    assert!(hand_over(&socket, &message(&second), fd).starts_with("SERVER_ERROR no connection"));
    // Whatever is not a sealed hints area is refused, token or not.
    let (_conn4, token4, _) = offer(&server);
    let null = std::fs::File::open("/dev/null").unwrap();
    let refused = hand_over(&socket, &message(&token4), std::os::fd::AsRawFd::as_raw_fd(&null));
    assert!(refused.contains("is not a hints area"), "{refused}");
    let garbage = hand_over(&socket, b"let me in\r\n", fd);
    assert!(garbage.starts_with("SERVER_ERROR the message is not"), "{garbage}");
    assert_eq!(Token::from_hex(b"not hex"), None);
    drop(conn);
}

#[test]
fn other_users_may_not_connect_to_the_handoff_socket_of_a_private_region() {
    if !root() {
        return;
    }
    let server = Server::shoal("xuser-private-socket", 0, &[]);
    let (_conn, _token, socket) = offer(&server);
    let mode = std::fs::metadata(&socket).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600, "the socket opens to the region's readers only");
    // Connecting as nobody (this binary again, only trying to connect) is refused.
    let mut connect = child_command(NOBODY, NOBODY).env(CHILD_CONNECT, &socket).spawn().unwrap();
    drop(connect.stdin.take());
    assert!(connect.wait().unwrap().success(), "nobody was refused {}", socket.display());
}
