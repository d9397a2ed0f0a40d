//! The data path's options and counts (`-o io_uring`, `SHOAL_SERVER_IO`, `stats shoal`): a
//! plain part that the settings and the shared state hold, apart from [`crate::uring`], which
//! serves with them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Receive buffers per worker, unless `-o io_uring_buffers=N` says otherwise.
pub const DEFAULT_BUFFERS: u16 = 256;
/// Bytes per receive buffer.
pub const BUFFER_BYTES: usize = 8 << 10;

/// How the server's connections are served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoOptions {
    /// io_uring rather than epoll.
    pub uring: bool,
    /// Whether `-o io_uring` asked for it (rather than `SHOAL_SERVER_IO`).
    pub explicit: bool,
    /// Receive buffers per worker (a power of two).
    pub buffers: u16,
}

impl IoOptions {
    /// The default: epoll, unless the environment has `SHOAL_SERVER_IO=uring`.
    pub fn from_env() -> Result<IoOptions, String> {
        let uring = match std::env::var("SHOAL_SERVER_IO").as_deref() {
            Err(_) | Ok("" | "epoll") => false,
            Ok("uring") => true,
            Ok(other) => return Err(format!("SHOAL_SERVER_IO={other}: `uring` or `epoll`")),
        };
        Ok(IoOptions { uring, explicit: false, buffers: DEFAULT_BUFFERS })
    }

    /// Takes one `-o` sub-option if it is one of these: `None` if not, else whether its value was good.
    pub fn suboption(&mut self, name: &str, value: &str) -> Option<Result<(), String>> {
        match name {
            "io_uring" => (self.uring, self.explicit) = (true, true),
            "no_io_uring" => (self.uring, self.explicit) = (false, true),
            "io_uring_buffers" => {
                let n = value.parse::<u16>().ok().filter(|n| n.is_power_of_two());
                match n {
                    Some(n) => self.buffers = n,
                    None => {
                        return Some(Err(format!(
                            "-o io_uring_buffers={value}: receive buffers per worker, a power of two from 1 to 32768, e.g. io_uring_buffers=256"
                        )))
                    }
                }
            }
            _ => return None,
        }
        Some(Ok(()))
    }

    /// The options once `-Z` is known: TLS is not served on io_uring, so `-o io_uring` with
    /// `-Z` is refused, and the environment's default gives way to epoll.
    pub fn checked(mut self, tls: bool) -> Result<IoOptions, String> {
        if self.uring && tls {
            if self.explicit {
                return Err("-o io_uring does not serve TLS (-Z) yet: drop one of them".into());
            }
            self.uring = false;
        }
        Ok(self)
    }
}

/// The data path's counts, shown by `stats shoal` (the leak checks' witnesses).
#[derive(Debug, Default)]
pub struct IoStats {
    /// Whether the io_uring path serves (false on epoll, and after a fallback).
    pub uring: AtomicBool,
    /// Receive buffers, all workers.
    pub buffers: AtomicU64,
    /// Buffers the kernel filled that a worker has not given back yet.
    pub buffers_lent: AtomicU64,
    /// Receives that found the buffer ring empty (ENOBUFS), re-armed once buffers came back.
    pub ring_empty: AtomicU64,
    /// Operations submitted whose last completion has not arrived.
    pub ops_in_flight: AtomicU64,
}

impl IoStats {
    /// `stats shoal`'s lines for the data path, through `line` (name, value).
    pub fn write(&self, mut line: impl FnMut(&str, u64)) {
        line("io_uring", u64::from(self.uring.load(Ordering::Relaxed)));
        line("open_fds", open_fds());
        if self.uring.load(Ordering::Relaxed) {
            line("uring_buffers", self.buffers.load(Ordering::Relaxed));
            line("uring_buffers_lent", self.buffers_lent.load(Ordering::Relaxed));
            line("uring_ring_empty", self.ring_empty.load(Ordering::Relaxed));
            line("uring_ops_in_flight", self.ops_in_flight.load(Ordering::Relaxed));
        }
    }
}

/// The process's open file descriptors.
fn open_fds() -> u64 {
    // One of them is the directory being read.
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count().saturating_sub(1) as u64)
}
