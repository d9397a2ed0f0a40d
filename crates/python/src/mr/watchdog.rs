//! Bounds a Python map call by the job's task lease. A worker's heartbeat renews the leases of
//! its claims while its process lives, so a map that never returns would hold its task for
//! ever; instead, a call running past the lease gets [`MapTimeout`] raised in its thread (the
//! interpreter's asynchronous exception, seen at its next bytecode), and the job fails with
//! the map's traceback: where it was stuck. A call blocked inside C code that never returns to
//! the interpreter is not interrupted.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

create_exception!(shoal, MapTimeout, PyException, "A shoal.mr map ran past its job's task lease.");

/// Map calls under way: the Python thread ident of each, and when it must have returned.
static CALLS: Mutex<Option<HashMap<u64, Instant>>> = Mutex::new(None);

/// How often the watchdog looks.
const TICK: Duration = Duration::from_millis(50);

/// Runs `call` (a Python call in this thread, holding the interpreter lock) bounded by `limit`.
pub(crate) fn bounded<T>(_py: Python<'_>, limit: Duration, call: impl FnOnce() -> T) -> T {
    static WATCHDOG: OnceLock<()> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        std::thread::spawn(watch);
    });
    // SAFETY: a plain query of the calling thread's identity.
    let ident = unsafe { pyo3::ffi::PyThread_get_thread_ident() } as u64;
    CALLS.lock().expect("map calls").get_or_insert_default().insert(ident, Instant::now() + limit);
    let returned = call();
    // Removed while this thread still holds the interpreter lock, which the watchdog takes
    // before it raises: no exception lands after the call returned.
    CALLS.lock().expect("map calls").get_or_insert_default().remove(&ident);
    returned
}

fn watch() {
    loop {
        std::thread::sleep(TICK);
        let late = |calls: &HashMap<u64, Instant>| {
            let now = Instant::now();
            calls
                .iter()
                .filter(|(_, deadline)| **deadline <= now)
                .map(|(ident, _)| *ident)
                .collect::<Vec<_>>()
        };
        if CALLS.lock().expect("map calls").as_ref().is_none_or(|calls| late(calls).is_empty()) {
            continue;
        }
        Python::attach(|py| {
            let mut calls = CALLS.lock().expect("map calls");
            let calls = calls.get_or_insert_default();
            for ident in late(calls) {
                calls.remove(&ident);
                let timeout = py.get_type::<MapTimeout>();
                // SAFETY: holding the interpreter lock; the exception type lives in the module.
                unsafe { pyo3::ffi::PyThreadState_SetAsyncExc(ident as _, timeout.as_ptr()) };
            }
        });
    }
}
