//! `shoal.mr`'s native half: a job whose map and combine are Python callables, run on
//! `shoal-mapreduce`'s elastic engine (docs/MAPREDUCE.md, "From Python"). The coordinator and
//! worker loops run with the interpreter lock released; each worker thread takes it only to
//! call the job's map (once per ~1 MiB piece of input) or combine (once per pair of values of
//! one key that meet). The Python side (python/shoal/mr/) checks the callables, starts the
//! worker processes and turns the records into a dict.

mod app;
mod codec;
mod watchdog;

use app::{params, PYTHON_APP};
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use shoal_mapreduce::{
    Coordinator, Input, JobOptions, JobRegion, JobState, Jobs, MrError, Registry, Worker, WorkerOptions,
};
use std::path::PathBuf;
use std::sync::Arc;

create_exception!(
    shoal,
    MapReduceError,
    crate::Error,
    "A shoal.mr job failed (its message says why: a map's traceback, a bad input, a full region)."
);

fn raise(e: MrError) -> PyErr {
    MapReduceError::new_err(e.to_string())
}

/// Runs one job: creates the region at `region`, calls `region_ready()` (which starts the
/// worker processes), works with `threads` threads of this process (0: none) while it
/// coordinates, and returns the job's records as `(key, value)` pairs in key order.
#[pyfunction]
#[pyo3(signature = (region, input, map, combine, threads, lease_ms, split_bytes, reduce_tasks, copy_input, region_ready))]
#[allow(clippy::too_many_arguments)] // the keyword arguments of shoal.mr.run, passed on
fn _mr_run<'py>(
    py: Python<'py>,
    region: PathBuf,
    input: PathBuf,
    map: &str,
    combine: &str,
    threads: usize,
    lease_ms: u64,
    split_bytes: Option<u64>,
    reduce_tasks: u64,
    copy_input: bool,
    region_ready: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    if map.contains('\n') || combine.contains('\n') {
        return Err(MapReduceError::new_err("a module:function has no newline"));
    }
    let input = Input::open(&input).map_err(raise)?;
    let bytes = input.len();
    let size = (2 * bytes).max(64 << 20).div_ceil(64) * 64;
    let max = (16 * bytes).max(64 << 30).div_ceil(64) * 64;
    let job_region = Arc::new(JobRegion::create(&region, size, max, 65536).map_err(raise)?);
    region_ready.call0()?;
    let mut options = JobOptions::for_input(bytes);
    options.split_bytes = split_bytes.unwrap_or(options.split_bytes);
    options.reduce_tasks = reduce_tasks;
    options.copy_input = copy_input;
    let records = py.detach(|| {
        let worker =
            (threads > 0).then(|| Worker::start(Arc::clone(&job_region), worker_options(threads, lease_ms)));
        let outcome = Coordinator::new(&job_region, options, |_| {}).and_then(|mut c| {
            let input = c.put_input(&input)?;
            c.run(&PYTHON_APP, 0, input, &params(map, combine, lease_ms))
        });
        let stopped = worker.map(Worker::stop).transpose();
        Coordinator::finish(&job_region)?;
        stopped?;
        outcome
    });
    let list = PyList::empty(py);
    for (key, value) in records.map_err(raise)? {
        if value.first() == Some(&codec::FAILED) {
            return Err(MapReduceError::new_err(String::from_utf8_lossy(&value[1..]).into_owned()));
        }
        let decode = |bytes: &[u8]| {
            codec::decode(py, bytes)
                .map_err(|e| MapReduceError::new_err(format!("the job's result holds {e}")))
        };
        list.append((decode(&key)?, decode(&value)?))?;
    }
    Ok(list)
}

fn worker_options(threads: usize, lease_ms: u64) -> WorkerOptions {
    let apps = Registry::with(&[&PYTHON_APP]).expect("the name python is free and valid");
    WorkerOptions { apps, lease_ms, ..WorkerOptions::threads(threads) }
}

/// Works on the region at `region` until it is finished (or no coordinator is left), with
/// `threads` threads; returns `(published, lost)` task outputs. `finished_ok`: a region
/// already finished is no error (a worker `shoal.mr.run` started after a short job ended).
#[pyfunction]
#[pyo3(signature = (region, threads, lease_ms, max_tasks=None, hold_ms=0, finished_ok=false))]
fn _mr_work(
    py: Python<'_>,
    region: PathBuf,
    threads: usize,
    lease_ms: u64,
    max_tasks: Option<u64>,
    hold_ms: u64,
    finished_ok: bool,
) -> PyResult<(u64, u64)> {
    let job_region = match JobRegion::attach(&region, false) {
        Err(MrError::Finished(_)) if finished_ok => return Ok((0, 0)),
        attached => Arc::new(attached.map_err(raise)?),
    };
    let options = WorkerOptions { max_tasks, hold_ms, ..worker_options(threads, lease_ms) };
    let report = py.detach(|| Worker::start(job_region, options).wait()).map_err(raise)?;
    Ok((report.published, report.lost))
}

/// The jobs of the region at `region`, as dicts: `index`, `state`, `app`, `maps` and
/// `reduces` (all, done), `claims` (task, pid, is a reduce task) — for `python -m shoal.mr
/// info` and for tests that wait for a phase.
#[pyfunction]
fn _mr_jobs<'py>(py: Python<'py>, region: PathBuf) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let jobs = JobRegion::attach(&region, true).and_then(|r| r.jobs()).map_err(raise)?;
    jobs.into_iter()
        .map(|j| {
            let state = match j.state {
                JobState::Free => "free",
                JobState::Preparing => "preparing",
                JobState::Running => "running",
                JobState::Done => "done",
                JobState::Failed => "failed",
            };
            let dict = PyDict::new(py);
            dict.set_item("index", j.index)?;
            dict.set_item("state", state)?;
            dict.set_item("app", j.app)?;
            dict.set_item("maps", j.maps)?;
            dict.set_item("reduces", j.reduces)?;
            dict.set_item("claims", j.claims)?;
            Ok(dict)
        })
        .collect()
}

/// Adds `shoal.mr`'s native functions (private: `shoal.mr` is their face) and its exception.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_mr_run, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_work, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_jobs, m)?)?;
    m.add("MapReduceError", m.py().get_type::<MapReduceError>())?;
    m.add("MapTimeout", m.py().get_type::<watchdog::MapTimeout>())?;
    Ok(())
}
