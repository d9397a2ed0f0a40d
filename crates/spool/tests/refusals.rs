//! A destination that refuses some deletes (a router whose server for those keys is down): the
//! refused ones are held and sent again, the later ones are not held behind them; a process
//! killed with -9 while it holds refused deletes loses none of them.

use shoal_spool::Spools;
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A destination on a free port: `delete down:…` is answered `SERVER_ERROR` while `refusing`,
/// everything else `DELETED`.
#[derive(Default)]
struct Destination {
    refusing: AtomicBool,
    /// Keys acknowledged at least once.
    taken: Mutex<HashSet<String>>,
    /// Times each key was sent.
    sent: Mutex<HashMap<String, u32>>,
}

impl Destination {
    fn start() -> (String, Arc<Destination>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let destination = Arc::new(Destination { refusing: AtomicBool::new(true), ..Default::default() });
        let serving = destination.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let serving = serving.clone();
                std::thread::spawn(move || serving.serve(stream));
            }
        });
        (address, destination)
    }

    fn serve(&self, stream: std::net::TcpStream) {
        let mut answers = stream.try_clone().unwrap();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let key = line.trim_start_matches("delete ").to_string();
            *self.sent.lock().unwrap().entry(key.clone()).or_default() += 1;
            let answer: &[u8] = if key.starts_with("down:") && self.refusing.load(Ordering::SeqCst) {
                b"SERVER_ERROR down\r\n"
            } else {
                self.taken.lock().unwrap().insert(key);
                b"DELETED\r\n"
            };
            if answers.write_all(answer).is_err() {
                break;
            }
        }
    }

    fn taken(&self, key: &str) -> bool {
        self.taken.lock().unwrap().contains(key)
    }

    fn sent(&self, key: &str) -> u32 {
        self.sent.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-spool-refusals-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Polls `done` for up to 60 s.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_refused_delete_holds_only_itself_and_goes_once_the_destination_takes_it() {
    let (address, destination) = Destination::start();
    let dir = scratch("holds");
    let delivered = Arc::new(AtomicU64::new(0));
    let observer: shoal_spool::Observer = {
        let delivered = delivered.clone();
        Arc::new(move |_: &str, d: shoal_spool::Delivered| {
            delivered.fetch_add(u64::from(d.answers), Ordering::SeqCst);
        })
    };
    let spools = Spools::open_with(&dir, 1 << 20, "test", true, Some(observer)).unwrap();
    spools.append_batch(&address, b"delete down:1\r\ndelete up:1\r\n", 2, 5).unwrap();
    eventually("the first refusal", || destination.sent("down:1") >= 1);
    // Records after the refused delete: with one ordered queue, all but the 64 sent with it in
    // one write waited behind it for as long as it was refused.
    spools.append_batch(&address, b"delete down:2\r\ndelete up:2\r\n", 2, 6).unwrap();
    let ups: Vec<String> = (1..=200).map(|i| format!("up:{i}")).collect();
    for up in &ups[2..] {
        spools.append(&address, format!("delete {up}\r\n").as_bytes()).unwrap();
    }
    eventually("every delete the destination takes", || ups.iter().all(|k| destination.taken(k)));
    eventually("the refused ones sent again", || {
        destination.sent("down:1") >= 3 && destination.sent("down:2") >= 2
    });
    assert_eq!(spools.depths(), [(address.clone(), 2)], "the two refused deletes wait");
    assert!(spools.is_failing(&address));
    let (_, _, held) = spools.activity(&address).unwrap();
    assert_eq!(held, 2);
    assert_eq!(delivered.load(Ordering::SeqCst), 200);
    // Each acknowledged delete went once: what is held is what was refused, nothing more.
    assert!(ups.iter().all(|k| destination.sent(k) == 1));
    // The destination takes them again: the held deletes go, and the spool drains.
    destination.refusing.store(false, Ordering::SeqCst);
    eventually("the refused deletes taken", || destination.taken("down:1") && destination.taken("down:2"));
    eventually("drained", || spools.depths() == [(address.clone(), 0)] && !spools.is_failing(&address));
    assert_eq!(delivered.load(Ordering::SeqCst), 202);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Where the child process of the kill test keeps its spools, and its destination.
const CHILD_DIR: &str = "SHOAL_SPOOL_TEST_CHILD_DIR";
const CHILD_DESTINATION: &str = "SHOAL_SPOOL_TEST_CHILD_DESTINATION";

/// The child of `a_kill_while_refused_deletes_are_held_loses_none`: appends a refused and a taken
/// delete per record, saying `appended N` once each append has returned, until it is killed.
/// Does nothing when run as a test of its own.
#[test]
#[ignore = "run by a_kill_while_refused_deletes_are_held_loses_none as its child"]
fn child_appends_until_killed() {
    let (Ok(dir), Ok(address)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_DESTINATION)) else {
        return;
    };
    let first: u64 = std::env::var("SHOAL_SPOOL_TEST_CHILD_FIRST").unwrap().parse().unwrap();
    let spools = Spools::open_with(Path::new(&dir), 64 << 20, "child", true, None).unwrap();
    let mut out = std::io::stdout();
    for i in first.. {
        let record = format!("delete down:{i}\r\ndelete up:{i}\r\n");
        spools.append_batch(&address, record.as_bytes(), 2, 0).unwrap();
        writeln!(out, "appended {i}").unwrap();
        out.flush().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_kill_while_refused_deletes_are_held_loses_none() {
    let (address, destination) = Destination::start();
    let dir = scratch("kill");
    let mut appended = 0u64;
    for _ in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_appends_until_killed",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_DIR, &dir)
            .env(CHILD_DESTINATION, &address)
            .env("SHOAL_SPOOL_TEST_CHILD_FIRST", appended.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let last = Arc::new(AtomicU64::new(appended));
        let reading = {
            let last = last.clone();
            let stdout = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(n) = line.strip_prefix("appended ") {
                        last.store(n.parse::<u64>().unwrap() + 1, Ordering::SeqCst);
                    }
                }
            })
        };
        // Killed while it holds refused deletes it has sent again, and appends new ones.
        let start = last.load(Ordering::SeqCst);
        eventually("refused deletes sent again", || {
            last.load(Ordering::SeqCst) > start + 50 && destination.sent(&format!("down:{start}")) >= 2
        });
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reading.join().unwrap();
        appended = last.load(Ordering::SeqCst);
    }
    // Every delete an append returned for is in the spool: a new process delivers all of them.
    destination.refusing.store(false, Ordering::SeqCst);
    let spools = Spools::open_with(&dir, 64 << 20, "test", true, None).unwrap();
    eventually("every appended delete taken", || {
        (0..appended)
            .all(|i| destination.taken(&format!("down:{i}")) && destination.taken(&format!("up:{i}")))
    });
    eventually("drained", || spools.depths() == [(address.clone(), 0)]);
    let _ = std::fs::remove_dir_all(&dir);
}
