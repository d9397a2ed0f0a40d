//! What the controller's tests against real servers share: a scratch directory with a tenants
//! file, the tenants' sizes as the server reports them, a load thread, and a running
//! `shoal controller --json` whose log lines are collected.
#![allow(dead_code)] // each test file uses some of it

use crate::common::{free_port, shoal_bin, Server};
use serde_json::Value;
use shoal_client::{Client, Options};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const MIB: u64 = 1 << 20;

/// A scratch directory in /dev/shm for a test's tenants file and regions, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        let dir = PathBuf::from(format!("/dev/shm/shoal-controller-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A tenants file: `(name, size MiB, max MiB)` each, its keys under `<name>:`.
    pub fn tenants(&self, tenants: &[(&str, u64, u64)]) -> String {
        let mut text = format!("default = \"{}\"\n", tenants[0].0);
        for (name, size, max) in tenants {
            text += &format!(
                "[[tenant]]\nname = \"{name}\"\nprefixes = [\"{name}:\"]\nregion = \"{}/{name}.region\"\n\
                 min_mb = 2\nmax_mb = {max}\nsize_mb = {size}\n",
                self.0.display()
            );
        }
        let path = self.0.join("tenants.toml");
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Each tenant's `limit_maxbytes`, from `stats tenants`.
pub fn sizes(server: &Server) -> Vec<(String, u64)> {
    let answer = String::from_utf8(server.raw(b"stats tenants\r\n", b"END\r\n")).unwrap();
    answer
        .lines()
        .filter_map(|l| l.strip_prefix("STAT ")?.split_once(":limit_maxbytes "))
        .map(|(tenant, bytes)| (tenant.to_string(), bytes.trim().parse().unwrap()))
        .collect()
}

pub fn size(server: &Server, tenant: &str) -> u64 {
    sizes(server).into_iter().find(|(t, _)| t == tenant).unwrap().1
}

/// Gets (and a set on each miss, of 8 KiB) from a thread until `stop`: of `keys` keys drawn
/// uniformly at random, or of new keys forever (a scan) when `None`. (Random rather than a
/// loop: a loop larger than a FIFO cache never hits, and the server learns an item's size from
/// its hits.)
pub fn load(
    address: String,
    prefix: &'static str,
    keys: Option<u64>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let options = Options { local: false, ..Options::default() };
        let mut client = Client::connect(&address, options).unwrap();
        let value = vec![b'v'; 8 << 10];
        let (mut i, mut random) = (0u64, 0x9E37_79B9_7F4A_7C15u64);
        while !stop.load(Ordering::Relaxed) {
            let key = format!("{prefix}:{}", keys.map_or(i, |k| xorshift(&mut random) % k));
            if client.get(key.as_bytes()).unwrap().is_none() {
                client.set(key.as_bytes(), &value, 0, 0).unwrap();
            }
            i += 1;
        }
    })
}

/// A running `shoal controller --json`, its log lines collected; killed on drop.
pub struct Controller {
    pub child: Child,
    pub events: Arc<Mutex<Vec<Value>>>,
    pub http: String,
}

impl Controller {
    pub fn start(servers: &[String], extra: &[&str]) -> Controller {
        let http = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(shoal_bin());
        command.args(["controller", "--interval", "1s", "--json", "--http", &http]).args(extra);
        for server in servers {
            command.args(["--server", server]);
        }
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let collected = events.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected.lock().unwrap().push(serde_json::from_str::<Value>(&line).expect("a JSON line"));
            }
        });
        Controller { child, events, http }
    }

    pub fn events(&self, kind: &str) -> Vec<Value> {
        self.events.lock().unwrap().iter().filter(|e| e["event"] == kind).cloned().collect()
    }

    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(&self.http) else { return String::new() };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = String::new();
        let _ = s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes());
        let _ = s.read_to_string(&mut answer);
        answer.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
    }

    pub fn state(&self) -> Value {
        serde_json::from_str(&self.get("/api/state")).unwrap_or(Value::Null)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next of xorshift64's numbers after `state` (which it becomes): a fixed,
/// dependency-free sequence of keys.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
