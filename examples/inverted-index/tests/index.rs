//! The example program end to end: its index of a directory of text files, written by the
//! test, equals one computed here directly — with worker processes it starts, and with two
//! workers joining a region, one of them SIGKILLed while it holds tasks; its progress bar
//! shows on a terminal and stays out of `--json` output.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PROGRAM: &str = env!("CARGO_BIN_EXE_inverted-index");

/// A scratch directory (files, list, regions), removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("inverted-index-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// A region path in /dev/shm, removed with the scratch.
    fn region(&self) -> PathBuf {
        let name = self.0.file_name().unwrap().to_string_lossy();
        PathBuf::from(format!("/dev/shm/{name}-region"))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.region());
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `files` text files of words under `dir/docs` and their list (`dir/files.txt`);
/// returns the list's path and the index computed directly: word → files (absolute paths).
fn documents(dir: &Path, files: usize) -> (PathBuf, BTreeMap<String, BTreeSet<String>>) {
    let docs = dir.join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let mut index: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut list = String::new();
    let mut x = 7u64;
    for f in 0..files {
        let path = docs.join(format!("doc-{f:03}.txt"));
        let mut text = String::from("Café, the END.\n");
        for i in 0..200 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            text.push_str(&format!("W{} ", (x >> 33) % 300 + f as u64 % 3));
            if i % 9 == 0 {
                text.push('\n');
            }
        }
        std::fs::write(&path, &text).unwrap();
        let absolute = path.canonicalize().unwrap().to_string_lossy().into_owned();
        for word in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
            index.entry(word.to_ascii_lowercase()).or_default().insert(absolute.clone());
        }
        list.push_str(&absolute);
        list.push('\n');
    }
    let list_path = dir.join("files.txt");
    std::fs::write(&list_path, list).unwrap();
    (list_path, index)
}

/// The index in a run's `--json` output.
fn index_of(json: &[u8]) -> BTreeMap<String, BTreeSet<String>> {
    let json: serde_json::Value = serde_json::from_slice(json)
        .unwrap_or_else(|e| panic!("not pure JSON ({e}): {}", String::from_utf8_lossy(json)));
    json["result"]["index"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            let files = entry[1].as_array().unwrap().iter().map(|f| f.as_str().unwrap().to_string());
            (entry[0].as_str().unwrap().to_string(), files.collect())
        })
        .collect()
}

fn program(args: &[&str]) -> Command {
    let mut command = Command::new(PROGRAM);
    command.args(args);
    command
}

fn output(args: &[&str]) -> Output {
    program(args).output().unwrap()
}

/// Waits (up to 30 s) until `info --json` of `region` satisfies `ready`.
fn wait_for(region: &Path, what: &str, ready: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = output(&["info", "--json", region.to_str().unwrap()]);
        if out.status.success() && ready(&serde_json::from_slice(&out.stdout).unwrap()) {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn running(info: &serde_json::Value) -> bool {
    info["jobs"].as_array().is_some_and(|jobs| jobs.iter().any(|j| j["state"] == "running"))
}

/// A coordinator with no workers of its own (`--workers 0`), over small map tasks, with its
/// stderr where given.
fn coordinator(list: &Path, region: &Path, json: bool, stderr: Stdio) -> Child {
    let mut args = vec!["run", "invindex", list.to_str().unwrap(), "--workers", "0"];
    args.extend(["--region", region.to_str().unwrap(), "--split-bytes", "512", "--reduce-tasks", "3"]);
    if json {
        args.push("--json");
    }
    program(&args).stdout(Stdio::piped()).stderr(stderr).spawn().unwrap()
}

/// A worker process on `region`, killed and reaped if still running when dropped.
struct Worker(Child);

impl Worker {
    fn start(region: &Path, extra: &[&str]) -> Worker {
        let mut args = vec!["worker", region.to_str().unwrap(), "--threads", "2"];
        args.extend(extra);
        Worker(program(&args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_index_with_worker_processes_it_starts_equals_a_direct_one() {
    let scratch = Scratch::new("spawned");
    let (list, expected) = documents(&scratch.0, 12);
    let list = list.to_str().unwrap();
    let out = output(&[
        "run",
        "invindex",
        list,
        "--workers",
        "2",
        "--threads",
        "1",
        "--split-bytes",
        "256",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(index_of(&out.stdout), expected);
    let text = output(&["run", "invindex", list]);
    let first = String::from_utf8(text.stdout).unwrap().lines().next().unwrap().to_string();
    let (word, files) = expected.iter().next().unwrap();
    assert_eq!(first, format!("{word}: {}", files.iter().cloned().collect::<Vec<_>>().join(", ")));
}

#[test]
fn a_worker_killed_holding_tasks_loses_nothing() {
    let scratch = Scratch::new("killed");
    let (list, expected) = documents(&scratch.0, 40);
    let region = scratch.region();
    let run = coordinator(&list, &region, true, Stdio::null());
    wait_for(&region, "the job", running);
    // The victim holds each claim for a minute, with a lease as long: only its death frees
    // its two tasks.
    let victim = Worker::start(&region, &["--lease-ms", "60000", "--hold-ms", "60000"]);
    let pid = victim.0.id();
    wait_for(&region, "the victim's claims", |info| {
        let claims = info["jobs"][0]["claims"].as_array().unwrap();
        claims.iter().filter(|c| c["pid"] == pid).count() == 2
    });
    drop(victim); // SIGKILL, reaped
    let _rescuer = Worker::start(&region, &[]);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(index_of(&out.stdout), expected);
}

#[test]
fn bad_arguments_and_missing_files_are_named_before_any_work() {
    let scratch = Scratch::new("bad");
    let list = scratch.0.join("files.txt");
    std::fs::write(&list, "/nonexistent/doc.txt\n").unwrap();
    let list = list.to_str().unwrap();
    for (args, says) in [
        (vec!["run", "invindex", list], "cannot read listed file /nonexistent/doc.txt"),
        (vec!["run", "invindex", list, "--arg", "k=1"], "app invindex takes no argument \"k\""),
        (vec!["run", "nope", list], "no app named \"nope\"; the apps are: wordcount"),
        (vec!["run", "invindex", list, "--mode", "rayon"], "no direct Rayon version"),
        (vec!["generate", "invindex", list], "no input generator"),
    ] {
        let out = output(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
        assert!(err.starts_with("inverted-index: "), "{err}");
    }
    let apps = output(&["apps", "--json"]);
    let apps: serde_json::Value = serde_json::from_slice(&apps.stdout).unwrap();
    assert_eq!(apps.as_array().unwrap().last().unwrap()["name"], "invindex", "built-in apps, then its own");
}

/// A pseudo-terminal: the master to read what a child writes to the slave.
fn terminal() -> (std::fs::File, OwnedFd) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors it opened; the null name, termios and size are
    // allowed.
    let rc = unsafe {
        libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: fcntl on descriptors we own. Close-on-exec: the processes other tests start
        // meanwhile must not hold the slave open (the reader waits for its last holder).
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) }, 0);
    }
    // SAFETY: both descriptors are ours alone from here on.
    unsafe { (std::fs::File::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) }
}

/// Runs the job with the coordinator's stderr on a terminal, its one worker started once
/// `ready` holds for what the terminal has shown (or the job runs); returns what the terminal
/// showed and the run's output.
fn run_on_a_terminal(json: bool, ready: impl Fn(&str) -> bool) -> (String, Output) {
    let scratch = Scratch::new(if json { "tty-json" } else { "tty" });
    let (list, expected) = documents(&scratch.0, 12);
    let region = scratch.region();
    let (mut master, slave) = terminal();
    let run = coordinator(&list, &region, json, Stdio::from(slave));
    let shown = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let shown = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child, the last holder of the slave, exits.
            while let Ok(n @ 1..) = master.read(&mut buf) {
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    wait_for(&region, "the job", running);
    while !ready(&String::from_utf8_lossy(&shown.lock().unwrap())) {
        assert!(Instant::now() < deadline, "the terminal never showed what was awaited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _worker = Worker::start(&region, &[]);
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "the run failed");
    reader.join().unwrap();
    if json {
        assert_eq!(index_of(&out.stdout), expected);
    }
    let shown = String::from_utf8_lossy(&shown.lock().unwrap()).into_owned();
    (shown, out)
}

#[test]
fn progress_shows_on_a_terminal_and_stays_out_of_json_output() {
    // With no worker yet, the bar shows the map phase: none of its tasks done, no workers.
    let (shown, _) = run_on_a_terminal(false, |shown| shown.contains("0 workers"));
    assert!(shown.contains("map [") && shown.contains("tasks  job 0 stage 0, 0 workers"), "{shown:?}");
    let (shown, out) = run_on_a_terminal(true, |shown| shown.contains("join with"));
    assert!(!shown.contains("tasks") && !shown.contains("workers"), "no bar under --json: {shown:?}");
    assert!(out.stdout.starts_with(b"{\"app\":\"invindex\""));
}
