//! The engine's side of a Python job: one Rust [`App`], `python`, whose map and combine call
//! the job's Python callables. The job's parameters are the callables' `module:function`
//! names, so any worker process attached to the region imports the same functions.
//!
//! ```text
//! map task ─► piece of ~1 MiB of whole lines ─► map(piece: bytes) ─► dict or [(key, value)]
//!          ─► encode each pair (codec) ─► Emit (combines equal keys: combine(a, b))
//! ```

use super::codec::{add, decode, encode, encoded, FAILED};
use super::watchdog::{self, MapTimeout};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use shoal_mapreduce::{App, Args, Emit, Input, Jobs, MrError, Rendered};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The app every Python job runs (its name in the job entry).
pub(crate) struct PythonApp;

/// The one instance, registered by `python -m shoal.mr worker`.
pub(crate) static PYTHON_APP: PythonApp = PythonApp;

/// The callables this process imported, by `module:function` (imported once per process,
/// not per task), and whether each is `shoal.mr.add`.
static CALLABLES: Mutex<Option<Callables>> = Mutex::new(None);

/// Callables by `module:function`: the function, and whether it is `shoal.mr.add`.
type Callables = HashMap<String, (Py<PyAny>, bool)>;

/// A job's parameters: its map's and combine's `module:function` and the bound of a map call
/// in milliseconds (the job's task lease), one a line.
pub(crate) fn params(map: &str, combine: &str, lease_ms: u64) -> Vec<u8> {
    format!("{map}\n{combine}\n{lease_ms}").into_bytes()
}

/// The map, the combine and the bound of a map call that `params` name.
fn specs(params: &[u8]) -> Result<(&str, &str, Duration), String> {
    let mut lines = std::str::from_utf8(params).unwrap_or_default().splitn(3, '\n');
    match (lines.next(), lines.next(), lines.next().and_then(|ms| ms.parse().ok())) {
        (Some(map), Some(combine), Some(ms)) => Ok((map, combine, Duration::from_millis(ms))),
        _ => Err("the job's parameters are not a map, a combine and a lease".to_string()),
    }
}

/// The callable `spec` names, imported by `shoal.mr.load` (whose errors say what is wrong).
fn callable<'py>(py: Python<'py>, spec: &str) -> PyResult<Bound<'py, PyAny>> {
    if let Some((f, _)) = CALLABLES.lock().expect("callables").get_or_insert_default().get(spec) {
        return Ok(f.bind(py).clone());
    }
    let shoal_mr = py.import("shoal.mr")?;
    let f = shoal_mr.getattr("load")?.call1((spec,))?;
    let is_add = f.is(&shoal_mr.getattr("add")?);
    let entry = (f.clone().unbind(), is_add);
    CALLABLES.lock().expect("callables").get_or_insert_default().insert(spec.to_string(), entry);
    Ok(f)
}

/// Whether `spec` is `shoal.mr.add` (whose sums of numbers need no call into Python); `false`
/// until this process has imported it.
fn is_add(spec: &str) -> bool {
    CALLABLES.lock().expect("callables").as_ref().and_then(|c| c.get(spec)).is_some_and(|(_, add)| *add)
}

/// `error` with its Python traceback, as the job's error message.
pub(crate) fn with_traceback(py: Python<'_>, error: &PyErr) -> String {
    let formatted = py
        .import("traceback")
        .and_then(|t| {
            t.call_method1("format_exception", (error.get_type(py), error.value(py), error.traceback(py)))
        })
        .and_then(|lines| lines.extract::<Vec<String>>());
    match formatted {
        Ok(lines) => lines.concat(),
        Err(_) => error.to_string(),
    }
}

/// Emits every `(key, value)` of what a map returned: a dict, or an iterable of pairs.
fn emit_all(result: &Bound<'_, PyAny>, out: &mut Emit) -> PyResult<()> {
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut emit = |k: &Bound<'_, PyAny>, v: &Bound<'_, PyAny>| -> PyResult<()> {
        key.clear();
        value.clear();
        encode(k, &mut key)?;
        encode(v, &mut value)?;
        out.emit(&key, &value);
        Ok(())
    };
    if let Ok(dict) = result.cast::<PyDict>() {
        return dict.iter().try_for_each(|(k, v)| emit(&k, &v));
    }
    for pair in result.try_iter()? {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
        emit(&k, &v)?;
    }
    Ok(())
}

impl App for PythonApp {
    fn name(&self) -> &'static str {
        "python"
    }

    fn about(&self) -> &'static str {
        "map and combine in Python (shoal.mr.run, python -m shoal.mr)"
    }

    fn map(&self, _stage: u32, params: &[u8], split: &[u8], out: &mut Emit) -> Result<(), String> {
        let (map, _, limit) = specs(params)?;
        keep_thread_state();
        Python::attach(|py| {
            let returned = callable(py, map)
                .and_then(|f| watchdog::bounded(py, limit, || f.call1((PyBytes::new(py, split),))));
            returned.and_then(|r| emit_all(&r, out)).map_err(|e| match e.is_instance_of::<MapTimeout>(py) {
                true => format!(
                    "map {map} ran past the task lease ({} ms) and was stopped (raise lease_ms for a slower map):\n{}",
                    limit.as_millis(),
                    with_traceback(py, &e)
                ),
                false => format!("map {map} raised:\n{}", with_traceback(py, &e)),
            })
        })
    }

    /// Python jobs combine through [`App::combine_with`], which knows the job's callable.
    fn combine(&self, _stage: u32, acc: &mut Vec<u8>, _value: &[u8]) {
        *acc = failed("a Python job's values are combined only by workers that read its parameters");
    }

    /// A combine that raises cannot fail the task here (the engine's combine has no error
    /// path): the value becomes its traceback, which absorbs every value combined with it, and
    /// the coordinator raises it when it reads the result.
    fn combine_with(&self, _stage: u32, params: &[u8], acc: &mut Vec<u8>, value: &[u8]) {
        if acc.first() == Some(&FAILED) {
            return;
        }
        if value.first() == Some(&FAILED) {
            *acc = value.to_vec();
            return;
        }
        let combine = match specs(params) {
            Ok((_, combine, _)) => combine,
            Err(e) => return *acc = failed(&e),
        };
        if is_add(combine) {
            if let Some(sum) = add(acc, value) {
                return *acc = sum;
            }
        }
        keep_thread_state();
        *acc = Python::attach(|py| {
            let merged = (|| {
                let a = decode(py, acc).map_err(PyValueError::new_err)?;
                let b = decode(py, value).map_err(PyValueError::new_err)?;
                encoded(&callable(py, combine)?.call1((a, b))?)
            })();
            merged
                .unwrap_or_else(|e| failed(&format!("combine {combine} raised:\n{}", with_traceback(py, &e))))
        });
    }

    fn drive(&self, _input: &Input, _args: &Args, _jobs: &mut dyn Jobs) -> Result<Rendered, MrError> {
        Err(MrError::BadInput("a Python job is run by shoal.mr.run or `python -m shoal.mr run`".into()))
    }
}

fn failed(message: &str) -> Vec<u8> {
    let mut value = vec![FAILED];
    value.extend_from_slice(message.as_bytes());
    value
}

/// Keeps this (worker) thread's Python thread state for the thread's life. Without it every
/// `Python::attach` from a thread the interpreter did not start creates a thread state and
/// destroys it on release, which cost more than the call itself (a combine per record).
/// Called without the interpreter lock.
fn keep_thread_state() {
    /// The thread's first `PyGILState_Ensure` and its thread state, released when the thread
    /// ends (a worker thread ends before its process's interpreter: the worker is joined
    /// inside the call that started it).
    struct Kept(pyo3::ffi::PyGILState_STATE, *mut pyo3::ffi::PyThreadState);
    impl Drop for Kept {
        fn drop(&mut self) {
            // SAFETY: on the thread that made them: take the lock back with the kept state,
            // then the matching release deletes the state and gives the lock up.
            unsafe {
                pyo3::ffi::PyEval_RestoreThread(self.1);
                pyo3::ffi::PyGILState_Release(self.0);
            }
        }
    }
    thread_local! {
        static KEPT: Kept = {
            // SAFETY: the interpreter runs (this module was imported); `Ensure` gives the thread
            // a state and the lock, `SaveThread` gives the lock back but keeps the state.
            unsafe {
                let state = pyo3::ffi::PyGILState_Ensure();
                Kept(state, pyo3::ffi::PyEval_SaveThread())
            }
        };
    }
    KEPT.with(|_| {});
}
