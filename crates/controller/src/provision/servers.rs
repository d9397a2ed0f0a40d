//! `--spawn`: the provisioner starts and stops the pool's `shoal server` processes itself
//! (servers on this host). A server is started before it is announced and stopped only after
//! its drain period, so no router is ever sent to a server that is not there yet.

use shoal_client::{Client, Options};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pool's server processes this provisioner started.
pub struct Servers {
    /// The `shoal` binary.
    program: PathBuf,
    /// Arguments given to every server, after `server -l <host> -p <port>`.
    args: Vec<String>,
    addresses: Vec<String>,
    children: Vec<Option<Child>>,
    /// Servers to stop, and when.
    pending: Vec<(usize, Instant)>,
}

/// How long a drained server keeps running after its transition ended: routers stop asking
/// old owners at the transition's end by their own clocks, but one may still be loading the
/// configuration that says so.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Whether `address` answers `version`.
pub fn answers(address: &str) -> bool {
    let timeout = Some(Duration::from_millis(300));
    let options = Options { connect_timeout: timeout, io_timeout: timeout, local: false };
    Client::connect(address, options).and_then(|mut c| c.version()).is_ok()
}

impl Servers {
    /// Servers at `addresses` (each `127.0.0.1:<port>` or `localhost:<port>`: they run here).
    pub fn new(program: PathBuf, args: Vec<String>, addresses: &[String]) -> Result<Servers, String> {
        for address in addresses {
            let host = address.rsplit_once(':').map(|(h, _)| h);
            if !matches!(host, Some("127.0.0.1" | "localhost" | "[::1]")) {
                return Err(format!(
                    "--spawn starts servers on this host: {address} is not 127.0.0.1:<port> or localhost:<port>"
                ));
            }
        }
        Ok(Servers {
            program,
            args,
            addresses: addresses.to_vec(),
            children: addresses.iter().map(|_| None).collect(),
            pending: Vec::new(),
        })
    }

    /// Starts server `i` (unless something already answers there: a server still in its
    /// grace period is kept) and waits until it answers.
    pub fn start(&mut self, i: usize) -> Result<(), String> {
        self.pending.retain(|(j, _)| *j != i);
        let address = self.addresses[i].clone();
        if answers(&address) {
            return Ok(());
        }
        let (host, port) = address.rsplit_once(':').expect("checked in new");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let child = Command::new(&self.program)
            .args(["server", "-l", host, "-p", port])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {} server for {address}: {e}", self.program.display()))?;
        self.children[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answers(&address) {
            if let Some(status) = self.children[i].as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.children[i] = None;
                return Err(format!("the server for {address} exited at once ({status})"));
            }
            if Instant::now() > deadline {
                self.stop(i);
                return Err(format!("the server for {address} did not answer within 10 s"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops server `i` after [`STOP_GRACE`] (see [`Servers::stop_due`]).
    pub fn stop_later(&mut self, i: usize) {
        self.pending.push((i, Instant::now() + STOP_GRACE));
    }

    /// Stops the servers whose grace period is over.
    pub fn stop_due(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self.pending.iter().filter(|(_, at)| *at <= now).map(|(i, _)| *i).collect();
        self.pending.retain(|(_, at)| *at > now);
        due.into_iter().for_each(|i| self.stop(i));
    }

    /// Stops server `i` if this provisioner started it (SIGTERM, then waits for it).
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            // SIGTERM, so the server detaches its region cleanly (a warm restart can use it).
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).is_err() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        (0..self.children.len()).for_each(|i| self.stop(i));
    }
}
