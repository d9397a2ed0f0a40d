//! `shoal controller` over a `shoal server --tenants` with no traffic (issue 27): it keeps the
//! plan and says once that the server is idle, rather than a "kept" line every round; when
//! requests come back, it plans again (the release binary).

#[path = "../../client/tests/common/mod.rs"]
mod common;

use common::{eventually, free_port, shoal_bin, Server};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A controller whose `--json` decisions are collected as lines.
struct Controller {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    http: String,
}

impl Controller {
    fn start(server: &Server) -> Controller {
        let http = format!("127.0.0.1:{}", free_port());
        let mut child = Command::new(shoal_bin())
            .args(["controller", "--interval", "300ms", "--json", "--http", &http, "--server"])
            .arg(server.address())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = lines.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                collected.lock().unwrap().push(line);
            }
        });
        Controller { child, lines, http }
    }

    /// Its decisions of `kind` so far.
    fn events(&self, kind: &str) -> Vec<String> {
        let needle = format!("\"event\":\"{kind}\"");
        self.lines.lock().unwrap().iter().filter(|l| l.contains(&needle)).cloned().collect()
    }

    /// The rounds it has made (`/api/state`'s `round`), 0 if it does not answer yet.
    fn rounds(&self) -> u64 {
        let Ok(mut s) = std::net::TcpStream::connect(&self.http) else { return 0 };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = String::new();
        let _ = s.write_all(b"GET /api/state HTTP/1.0\r\n\r\n");
        let _ = s.read_to_string(&mut answer);
        // The state's own round is the largest (its decisions carry theirs too).
        answer
            .match_indices("\"round\":")
            .filter_map(|(at, _)| answer[at + 8..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
            .max()
            .unwrap_or(0)
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_idle_server_keeps_its_plan_and_the_controller_says_so_once() {
    let dir = std::env::temp_dir().join(format!("shoal-curve-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tenants = dir.join("tenants.toml");
    let mut text = String::from("default = \"a\"\n");
    for name in ["a", "b"] {
        text += &format!("[[tenant]]\nname = \"{name}\"\nprefixes = [\"{name}:\"]\nmin_mb = 2\nmax_mb = 24\nsize_mb = 16\n");
    }
    std::fs::write(&tenants, text).unwrap();
    let server = Server::shoal("curve-idle", 0, &["-m", "32", "--tenants", tenants.to_str().unwrap()]);
    let controller = Controller::start(&server);
    assert!(eventually(60, || controller.rounds() >= 8), "the controller makes rounds");
    let idle = controller.events("idle");
    assert_eq!(idle.len(), 1, "said once: {:?}", controller.lines.lock().unwrap());
    assert!(idle[0].contains("no requests"), "{idle:?}");
    assert!(controller.events("kept").is_empty(), "{:?}", controller.lines.lock().unwrap());
    assert!(controller.events("resized").is_empty(), "nothing moves");
    // Requests again: the server is planned for again (a decision other than idle).
    let mut c = shoal_client::Client::connect(
        &server.address(),
        shoal_client::Options { local: false, ..Default::default() },
    )
    .unwrap();
    let decided = || {
        let lines = controller.lines.lock().unwrap();
        lines.iter().any(|l| l.contains("\"event\":\"kept\"") || l.contains("\"event\":\"resized\""))
    };
    assert!(
        eventually(60, || {
            for i in 0..200 {
                let key = format!("a:{i}");
                if c.get(key.as_bytes()).unwrap().is_none() {
                    c.set(key.as_bytes(), b"value", 0, 0).unwrap();
                }
            }
            decided()
        }),
        "{:?}",
        controller.lines.lock().unwrap()
    );
    drop(controller);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
