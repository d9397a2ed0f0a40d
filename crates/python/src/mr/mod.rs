//! `shoal.mr`'s native half: a job whose map and combine are Python callables, run on
//! `shoal-mapreduce`'s elastic engine (docs/MAPREDUCE.md, "From Python"). The coordinator and
//! worker loops run with the interpreter lock released; each worker thread takes it only to
//! call the job's map (once per ~1 MiB piece of input) or combine (once per pair of values of
//! one key that meet). The Python side (python/shoal/mr/) checks the callables, starts the
//! worker processes and turns the records into a dict.

mod app;
mod codec;
mod sharded;
mod watchdog;

use app::{params, PYTHON_APP};
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use shoal_mapreduce::{
    Args, Coordinator, Input, JobOptions, JobRegion, JobState, Jobs, MrError, Progress, Records, Registry,
    Worker, WorkerOptions,
};
use std::path::{Path, PathBuf};
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

/// How this process runs the engine for one job: its worker threads, the job's options and
/// who hears of its progress.
struct Engine {
    threads: usize,
    lease_ms: u64,
    split_bytes: Option<u64>,
    reduce_tasks: u64,
    copy_input: bool,
    /// Called with a dict of `phase`, `done`, `tasks` and `workers` each time they change.
    progress: Option<Py<PyAny>>,
}

impl Engine {
    /// Creates a region at `region` sized for `input`, calls `region_ready()` (which starts
    /// the worker processes), and runs `job` as the region's coordinator while `threads`
    /// threads of this process work (0: none); the region is marked finished at the end.
    fn coordinate<'py, T: Send>(
        &self,
        py: Python<'py>,
        region: &Path,
        input: &Input,
        region_ready: Bound<'py, PyAny>,
        job: impl FnOnce(&mut Coordinator<'_>) -> Result<T, MrError> + Send,
    ) -> PyResult<T> {
        let bytes = input.len();
        let size = (2 * bytes).max(64 << 20).div_ceil(64) * 64;
        let max = (16 * bytes).max(64 << 30).div_ceil(64) * 64;
        let job_region = Arc::new(JobRegion::create(region, size, max, 65536).map_err(raise)?);
        region_ready.call0()?;
        let mut options = JobOptions::for_input(bytes);
        options.split_bytes = self.split_bytes.unwrap_or(options.split_bytes);
        options.reduce_tasks = self.reduce_tasks;
        options.copy_input = self.copy_input;
        py.detach(|| {
            let mut worker = (self.threads > 0)
                .then(|| Worker::start(Arc::clone(&job_region), worker_options(self.threads, self.lease_ms)));
            let report = |p: Progress| self.report(p);
            // Should this process's own worker threads fail, the job fails with their error
            // rather than waiting for workers that may never come.
            let outcome = Coordinator::new(&job_region, options, report)
                .map(|c| c.give_up_when(|| worker.as_mut().and_then(Worker::gone)))
                .and_then(|mut c| job(&mut c));
            let stopped = worker.map(Worker::stop).transpose();
            Coordinator::finish(&job_region)?;
            stopped?;
            outcome
        })
        .map_err(raise)
    }

    /// Hands `progress` to the Python callback, if any (called without the interpreter lock,
    /// from the coordinator's poll). A callback that raises is reported as unraisable: the
    /// job goes on.
    fn report(&self, progress: Progress) {
        let Some(callback) = &self.progress else { return };
        Python::attach(|py| {
            let called = (|| {
                let dict = PyDict::new(py);
                dict.set_item("phase", progress.phase.name())?;
                dict.set_item("done", progress.done)?;
                dict.set_item("tasks", progress.tasks)?;
                dict.set_item("workers", progress.workers)?;
                callback.call1(py, (dict,))
            })();
            if let Err(e) = called {
                e.write_unraisable(py, Some(callback.bind(py)));
            }
        });
    }
}

/// Runs one job: creates the region at `region`, calls `region_ready()` (which starts the
/// worker processes), works with `threads` threads of this process (0: none) while it
/// coordinates, reporting to `progress` (if given), and returns the job's records as `(key,
/// value)` pairs in key order.
#[pyfunction]
#[pyo3(signature = (region, input, map, combine, threads, lease_ms, split_bytes, reduce_tasks, copy_input, region_ready, progress=None))]
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
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    if map.contains('\n') || combine.contains('\n') {
        return Err(MapReduceError::new_err("a module:function has no newline"));
    }
    let input = Input::open(&input).map_err(raise)?;
    let engine = Engine { threads, lease_ms, split_bytes, reduce_tasks, copy_input, progress };
    let records = engine.coordinate(py, &region, &input, region_ready, |c| {
        let input = c.put_input(&input)?;
        c.run(&PYTHON_APP, 0, input, &params(map, combine, lease_ms))
    })?;
    let list = PyList::empty(py);
    for (key, value) in records {
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

/// A built-in app's job over one shard (`shoal.mr.dask`), run as `_mr_run` runs a Python
/// job: returns `(stage, params, records, input bytes)`, the records `(key, value)` bytes in
/// key order, unrendered, for `_mr_merge` and `_mr_render`.
#[pyfunction]
#[pyo3(signature = (region, input, app, args, threads, lease_ms, split_bytes, reduce_tasks, copy_input, region_ready))]
#[allow(clippy::too_many_arguments)] // the keyword arguments of shoal.mr.dask.run, passed on
#[allow(clippy::type_complexity)] // the tuple Python receives
fn _mr_run_app<'py>(
    py: Python<'py>,
    region: PathBuf,
    input: PathBuf,
    app: &str,
    args: Vec<String>,
    threads: usize,
    lease_ms: u64,
    split_bytes: Option<u64>,
    reduce_tasks: u64,
    copy_input: bool,
    region_ready: Bound<'py, PyAny>,
) -> PyResult<(u32, Vec<u8>, Records, u64)> {
    let app = sharded::builtin(app).map_err(raise)?;
    let args = Args::parse(&args).map_err(raise)?;
    let input = Input::open(&input).map_err(raise)?;
    let engine = Engine { threads, lease_ms, split_bytes, reduce_tasks, copy_input, progress: None };
    let job = engine
        .coordinate(py, &region, &input, region_ready, |c| sharded::run_one_job(c, app, &input, &args))?;
    Ok((job.stage, job.params, job.records, input.len()))
}

/// Records `a` and `b` of built-in `app`'s job (`stage`, `params`) as one list in key order,
/// the values of a key in both combined by the app: a node of `shoal.mr.dask`'s merge tree.
#[pyfunction]
fn _mr_merge(
    py: Python<'_>,
    app: &str,
    stage: u32,
    params: Vec<u8>,
    a: Records,
    b: Records,
) -> PyResult<Records> {
    let app = sharded::builtin(app).map_err(raise)?;
    Ok(py.detach(|| sharded::merge(app, stage, &params, a, b)))
}

/// Built-in `app`'s result as JSON, rendered from the merged records of its job over an input
/// of `input_bytes` in all (what `shoal mr run --json` prints as `result`).
#[pyfunction]
fn _mr_render(
    app: &str,
    args: Vec<String>,
    input_bytes: u64,
    stage: u32,
    params: Vec<u8>,
    records: Records,
) -> PyResult<String> {
    let app = sharded::builtin(app).map_err(raise)?;
    let args = Args::parse(&args).map_err(raise)?;
    let input = sharded::whole_input(input_bytes).map_err(raise)?;
    sharded::render(app, &args, &input, sharded::Job { stage, params, records }).map_err(raise)
}

/// Refuses an `app` that is not built in, or `args` not of the form name=value, before
/// `shoal.mr.dask` starts any shard (each app checks its arguments' meaning as it runs).
#[pyfunction]
fn _mr_check_app(app: &str, args: Vec<String>) -> PyResult<()> {
    sharded::builtin(app).map_err(raise)?;
    Args::parse(&args).map_err(raise)?;
    Ok(())
}

/// The bytes that stand for `object` as a key (so the job's key order is `sorted(keys,
/// key=_mr_encode)`): `shoal.mr.dask` orders a Python job's merged result by them.
#[pyfunction]
fn _mr_encode(object: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    codec::encoded(object)
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
    m.add_function(wrap_pyfunction!(_mr_run_app, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_merge, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_render, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_encode, m)?)?;
    m.add_function(wrap_pyfunction!(_mr_check_app, m)?)?;
    m.add("MapReduceError", m.py().get_type::<MapReduceError>())?;
    m.add("MapTimeout", m.py().get_type::<watchdog::MapTimeout>())?;
    Ok(())
}
