//! Region files and child processes.

use super::*;

/// Tests here run one at a time: they time things and the machine is small.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A region file in /dev/shm (and its companion files), removed on drop.
pub struct ShmFile {
    pub path: PathBuf,
}

impl ShmFile {
    pub fn new(tag: &str) -> ShmFile {
        let path = PathBuf::from(format!(
            "/dev/shm/shoal-xproc-{tag}-{}-{:x}",
            std::process::id(),
            fresh_seed() as u32
        ));
        let f = ShmFile { path };
        f.remove();
        f
    }

    pub fn companion(&self, suffix: &str) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(suffix);
        PathBuf::from(p)
    }

    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(self.companion(".cas"));
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A child process running one `child_*` test; killed on drop if still running.
pub struct Proc {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub lines: mpsc::Receiver<String>,
    pub role: String,
}

impl Proc {
    pub fn spawn(role: &str, region: &Path, env: &[(&str, String)]) -> Proc {
        let exe = std::env::current_exe().expect("test binary path");
        let test = format!("child_{role}");
        let mut cmd = Command::new(exe);
        cmd.args(["--exact", &test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(REGION, region)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel();
        let tag = format!("[{role} {}]", child.id());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest prints "test child_x ... " without a newline before the test runs.
                match line.find("SHOAL-") {
                    Some(at) => {
                        if tx.send(line[at..].to_owned()).is_err() {
                            break;
                        }
                    }
                    // libtest's own lines about the one child test.
                    None if line.trim().is_empty()
                        || line == "running 1 test"
                        || line.trim() == "ok"
                        || line.starts_with("test result: ok.") => {}
                    None => println!("{tag} {line}"),
                }
            }
        });
        Proc { child, stdin, lines, role: role.to_owned() }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line starting with `prefix` (other `SHOAL-` lines are skipped).
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(line) => println!("[{} {}] {line}", self.role, self.pid()),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{} child {} sent no {prefix} line within {timeout:?}", self.role, self.pid())
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    panic!("{} child {} ended ({status:?}) before sending {prefix}", self.role, self.pid())
                }
            }
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).expect("write to child");
    }

    /// Sends a command and returns the reply (without its `SHOAL-REPLY ` prefix).
    pub fn ask(&mut self, line: &str) -> String {
        self.send(line);
        let reply = self.expect("SHOAL-REPLY ", Duration::from_secs(60));
        reply["SHOAL-REPLY ".len()..].to_owned()
    }

    /// Closes the child's stdin: its signal to finish.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for child") {
                return status;
            }
            if Instant::now() >= deadline {
                self.kill();
                panic!("{} child {} did not finish within {timeout:?}", self.role, self.pid());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the child with SIGKILL and reaps it; returns its exit status.
    pub fn kill(&mut self) -> ExitStatus {
        let _ = self.child.kill(); // SIGKILL on Unix
        self.child.wait().expect("reap child")
    }

    pub fn still_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.still_running() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
