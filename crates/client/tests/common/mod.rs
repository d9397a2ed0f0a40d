//! Real servers for the client's tests: `shoal server` (the release build in target/release,
//! or $SHOAL_BIN) and Debian's memcached, on loopback, killed on drop.

#![allow(dead_code)] // each test file uses a different part

pub mod router;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server process.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub scratch: PathBuf,
}

/// The `shoal` binary the tests run.
pub fn shoal_bin() -> PathBuf {
    let bin = std::env::var_os("SHOAL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/shoal"));
    assert!(bin.exists(), "{} is missing: build it first (cargo build --release -p shoal)", bin.display());
    bin
}

impl Server {
    /// `shoal server` with `args`, on `port` (0: an ephemeral one).
    pub fn shoal(test: &str, port: u16, args: &[&str]) -> Server {
        let mut command = Command::new(shoal_bin());
        command.arg("server").args(args);
        Server::start(test, command, port)
    }

    /// Debian's memcached, on `port` (0: an ephemeral one).
    pub fn memcached(test: &str, port: u16) -> Server {
        Server::memcached_with(test, port, &[])
    }

    /// Debian's memcached with `args`, on `port` (0: an ephemeral one).
    pub fn memcached_with(test: &str, port: u16, args: &[&str]) -> Server {
        let mut command = Command::new("/usr/bin/memcached");
        command.args(["-m", "64"]).args(args);
        if std::fs::metadata("/proc/self").unwrap().uid() == 0 {
            command.args(["-u", "root"]);
        }
        Server::start(test, command, port)
    }

    fn start(test: &str, mut command: Command, port: u16) -> Server {
        let scratch = std::env::temp_dir().join(format!("shoal-client-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch).unwrap();
        // A server that drops root (`-u`) writes its port file after the drop.
        std::fs::set_permissions(&scratch, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let ports = scratch.join("ports");
        let _ = std::fs::remove_file(&ports);
        let port_arg = if port == 0 { "-1".to_string() } else { port.to_string() };
        if !command.get_args().any(|a| a == "-U") {
            command.args(["-U", "0"]);
        }
        command
            .args(["-l", "127.0.0.1", "-p", &port_arg])
            .env("MEMCACHED_PORT_FILENAME", &ports)
            .stdout(Stdio::null());
        // Killed and waited for on drop, like every server here.
        let mut server = Server { child: command.spawn().expect("the server starts"), port: 0, scratch };
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.port == 0 {
            assert!(Instant::now() < deadline, "the server did not start listening");
            std::thread::sleep(Duration::from_millis(10));
            // A fixed port can be taken for a moment by another test's outgoing connection:
            // a server that exited at once (address in use) is started again.
            if port != 0 && server.child.try_wait().is_ok_and(|status| status.is_some()) {
                server.child = command.spawn().expect("the server starts");
            }
            let text = std::fs::read_to_string(&ports).unwrap_or_default();
            if let Some(port) = text.lines().find_map(|l| l.strip_prefix("TCP INET: ")) {
                server.port = port.parse().unwrap();
            }
        }
        server
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Sends `signal` (`"USR1"`, `"TERM"`, …) and waits for the process to end.
    pub fn stop_with(mut self, signal: &str) {
        self.signal(signal);
        self.child.wait().unwrap();
    }

    /// Freezes the server (SIGSTOP) and waits until every thread of it has stopped: `kill`
    /// returns once the signal is queued, and a thread running on the other core may still
    /// answer a request before it stops.
    pub fn pause(&self) {
        self.signal("STOP");
        let tasks = format!("/proc/{}/task", self.child.id());
        let stopped = |task: std::fs::DirEntry| {
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised name, which may itself hold ") ".
            stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with(['T', 't']))
        };
        let all_stopped = || std::fs::read_dir(&tasks).unwrap().flatten().all(stopped);
        assert!(eventually(30, all_stopped), "the server did not stop within 30 s");
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status();
        assert!(sent.unwrap().success(), "kill -{name}");
    }

    /// One raw request and the answer up to `until`, over a fresh connection.
    pub fn raw(&self, request: &[u8], until: &[u8]) -> Vec<u8> {
        raw(&self.address(), request, until)
    }
}

/// Sends `request` to `address` over a fresh connection and reads the answer up to `until`.
pub fn raw(address: &str, request: &[u8], until: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(address).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    read_until(&mut s, until)
}

/// Reads from `s` until the answer ends with `until`. A read interrupted by a signal is read
/// again: a blocking socket read with a timeout is never restarted by the kernel (signal(7)),
/// and a loaded CI machine once delivered one mid-test.
pub fn read_until(s: &mut std::net::TcpStream, until: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut answer = Vec::new();
    let mut buf = [0u8; 65536];
    while !answer.ends_with(until) {
        let n = match s.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("reading an answer ending {:?}: {e}", String::from_utf8_lossy(until)),
        };
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    answer
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// A server on loopback that answers each request line with what `answer` gives for it
/// (nothing: no answer), told which connection (from 0) the line came on; its address, and how
/// many connections it accepted. For what no real server does: garbage, silence, odd answers.
pub fn scripted_server(
    answer: impl Fn(usize, &str) -> Option<Vec<u8>> + Send + Sync + 'static,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let connection = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = answer.clone();
            std::thread::spawn(move || {
                let lines = std::io::BufReader::new(stream.try_clone().unwrap()).lines();
                for line in lines.map_while(Result::ok) {
                    if let Some(bytes) = answer(connection, &line) {
                        if stream.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (address, accepted)
}

/// A port free on loopback for both TCP and UDP right now.
pub fn free_port() -> u16 {
    loop {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Polls `condition` for up to `seconds`.
pub fn eventually(seconds: u64, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    condition()
}
