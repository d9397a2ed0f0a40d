//! `shoal server --config FILE` against the built binary: a file in the format of Debian's
//! /etc/memcached.conf configures a server that answers, the command line comes after the file,
//! and a bad file stops the start before anything is created (no pid file, no region, no
//! listener) with the file and line named.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory, removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("shoal-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Kills the server when the test ends, passed or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn shoal(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shoal"));
    command.arg("server").args(args).stdin(Stdio::null());
    command
}

/// Connects once the server listens; a server that exits first fails the test with its status.
fn connect(server: &mut Server, port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("the server exited with {status} before listening");
        }
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            return stream;
        }
        assert!(Instant::now() < deadline, "the server did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn version(stream: &mut TcpStream) -> String {
    stream.write_all(b"version\r\n").unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line
}

fn run_to_exit(args: &[&str]) -> Output {
    shoal(args).output().unwrap()
}

#[test]
fn a_memcached_conf_configures_the_server_and_the_command_line_comes_after_it() {
    let scratch = Scratch::new("good");
    let region = scratch.0.join("cache.region");
    let (file_port, port) = (free_port(), free_port());
    let conf = scratch.file(
        "shoal.conf",
        &format!(
            "# as Debian writes it\n-d\nlogfile /var/log/memcached.log\n-m 8\n-p {file_port}\n-U 0\n\
             -l 127.0.0.1\n-e {}   # the region\n--rejoin-hold 0\n-o no_lru_crawler\n",
            region.display()
        ),
    );
    let port_arg = port.to_string();
    let mut server = Server(shoal(&["--config", conf.to_str().unwrap(), "-p", &port_arg]).spawn().unwrap());
    let mut stream = connect(&mut server, port);
    assert!(version(&mut stream).starts_with("VERSION 1.6.18"));
    stream.write_all(b"stats settings\r\n").unwrap();
    let mut settings = String::new();
    let mut reader = BufReader::new(&stream);
    while !settings.ends_with("END\r\n") {
        assert!(reader.read_line(&mut settings).unwrap() > 0);
    }
    assert!(settings.contains("STAT maxbytes 8388608\r\n"), "-m 8 from the file:\n{settings}");
    assert!(settings.contains(&format!("STAT tcpport {port}\r\n")), "-p from the command line:\n{settings}");
    assert!(settings.contains("STAT lru_crawler no\r\n"), "-o from the file:\n{settings}");
    assert!(region.exists(), "-e from the file");
    assert!(TcpStream::connect(("127.0.0.1", file_port)).is_err(), "the file's -p was overridden");
    assert!(server.0.try_wait().unwrap().is_none(), "-d in the file is skipped: still in the foreground");
}

#[test]
fn a_bad_file_stops_the_start_before_anything_is_created() {
    let scratch = Scratch::new("bad");
    let region = scratch.0.join("cache.region");
    let pidfile = scratch.0.join("shoal.pid");
    let port = free_port();
    let head = format!("-P {}\n-e {}\n-p {port}\n-U 0\n-l 127.0.0.1\n", pidfile.display(), region.display());
    let cases = [
        ("-m 64\n-k\n", ":7: unexpected argument '-k' found"),
        ("-m 64\n-m 128\n", ":7: -m is already set on line 6"),
        ("-m lots\n", ":6: invalid value 'lots' for '--memory-limit <MB>'"),
        ("-m 64 -M\n", ":6: one flag per line"),
        ("-m 64\n-I 1000\n", "Item max size cannot be less than 1024 bytes."),
        ("-m 64\n-I 40m\n", "Cannot set item size limit higher than 1/2 of memory max."),
    ];
    for (tail, message) in cases {
        let conf = scratch.file("shoal.conf", &format!("{head}{tail}"));
        let out = run_to_exit(&["--config", conf.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{tail:?}: {stderr}");
        assert!(stderr.contains(message), "{tail:?}: expected {message:?} in {stderr}");
        if message.starts_with(':') {
            assert!(stderr.contains(&format!("{}{message}", conf.display())), "names the file: {stderr}");
        }
        assert!(!pidfile.exists() && !region.exists(), "{tail:?}: nothing half-applied");
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err(), "{tail:?}: nothing listens");
    }
    let missing = scratch.0.join("missing.conf");
    let out = run_to_exit(&["--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("No such file"));
    assert!(!Path::new(&region).exists());
}
