//! What the invalidator's tests share: a private PostgreSQL, a `shoal invalidator` process,
//! and small helpers over real `shoal server`s.

#![allow(dead_code)] // each test file uses a different part

#[path = "../../../client/tests/common/mod.rs"]
pub mod common;

use common::{eventually, free_port, shoal_bin, Server};
use shoal_client::{Client, Options};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A private PostgreSQL on loopback, stopped on drop.
pub struct Postgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// More `-c name=value` settings.
    settings: String,
}

impl Postgres {
    pub fn start(test: &str) -> Postgres {
        let pg = Postgres::scratch(test, String::new());
        let data = pg.dir.join("data");
        assert!(pg.run("initdb", &["-D", data.to_str().unwrap(), "-A", "trust", "-U", "postgres"]), "initdb");
        pg.ctl("start");
        pg
    }

    /// A streaming replica of `self` that applies each commit `delay_ms` late.
    pub fn replica(&self, test: &str, delay_ms: u64) -> Postgres {
        let replica = Postgres::scratch(test, format!(" -c recovery_min_apply_delay={delay_ms}ms"));
        let data = replica.dir.join("data");
        let port = self.port.to_string();
        let args = [
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-U",
            "postgres",
            "-D",
            data.to_str().unwrap(),
            "-R",
            "-X",
            "stream",
        ];
        assert!(replica.run("pg_basebackup", &args), "pg_basebackup");
        replica.ctl("start");
        replica
    }

    pub fn scratch(test: &str, settings: String) -> Postgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|versions| versions.filter_map(|v| v.ok()).map(|v| v.path().join("bin")).max())
            .expect("PostgreSQL is missing: scripts/test.sh installs Debian's postgresql");
        let dir = std::env::temp_dir().join(format!("shoal-invalidator-pg-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if is_root() {
            assert!(Command::new("chown").arg("postgres").arg(&dir).status().unwrap().success());
        }
        Postgres { dir, bin, port: free_port(), settings }
    }

    /// Runs a PostgreSQL program, as the postgres user when we are root (PostgreSQL refuses root).
    pub fn run(&self, program: &str, args: &[&str]) -> bool {
        let path = self.bin.join(program);
        let mut command = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().unwrap().success()
    }

    pub fn ctl(&self, action: &str) {
        let options = format!(
            "-c wal_level=logical -c fsync=off -c max_replication_slots=8 -h 127.0.0.1 -p {} -k {}{}",
            self.port,
            self.dir.display(),
            self.settings
        );
        let data = self.dir.join("data");
        let log = self.dir.join("log");
        let ok = self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &options,
                "-m",
                "fast",
                "-w",
                action,
            ],
        );
        assert!(ok, "pg_ctl {action}: {}", std::fs::read_to_string(&log).unwrap_or_default());
    }

    pub fn conninfo(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.port)
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.conninfo(), postgres::NoTls).unwrap()
    }

    /// Its port, for a proxy in front of it.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Commits a change whose key the invalidator deletes (the emit function's call).
pub fn emit(db: &mut postgres::Client, key: &str) {
    db.execute(shoal_client::invalidation::POSTGRES_EMIT, &[&key]).unwrap();
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        self.run("pg_ctl", &["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// A `shoal invalidator` process, killed with -9 on drop.
pub struct Invalidator {
    pub child: Child,
    pub metrics: u16,
    pub log: PathBuf,
}

impl Invalidator {
    pub fn start(state: &Path, source: &[&str], destinations: &[String], more: &[&str]) -> Invalidator {
        let metrics = free_port();
        let log = state.with_extension(format!("log.{}", free_port()));
        let mut command = Command::new(shoal_bin());
        command.arg("invalidator").args(source).arg("--state-dir").arg(state);
        for d in destinations {
            command.args(["--destination", d]);
        }
        command
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .args(more)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let invalidator = Invalidator { child: command.spawn().unwrap(), metrics, log };
        assert!(eventually(30, || invalidator.try_status().is_some()), "the invalidator serves /status");
        invalidator
    }

    pub fn try_status(&self) -> Option<serde_json::Value> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics)).ok()?;
        s.write_all(b"GET /status HTTP/1.0\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        serde_json::from_str(text.split("\r\n\r\n").nth(1)?).ok()
    }

    pub fn metrics(&self) -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics))
            .expect("the invalidator serves /metrics");
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    pub fn status(&self) -> serde_json::Value {
        self.try_status().expect("the invalidator answers /status")
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Invalidator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn state_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-invalidator-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

pub fn client(server: &Server) -> Client {
    Client::connect(&server.address(), Options { local: false, ..Options::default() }).unwrap()
}

pub fn fill(server: &Server, keys: impl IntoIterator<Item = String>) {
    let mut c = client(server);
    for key in keys {
        c.set(key.as_bytes(), b"cached", 0, 0).unwrap();
    }
}

pub fn present(server: &Server, key: &str) -> bool {
    client(server).get(key.as_bytes()).unwrap().is_some()
}
