//! Helpers for the apps' unit tests: a job run in a fresh region by two worker threads, with
//! small splits so that every job has many map tasks.

use crate::app::{App, Args, Rendered};
use crate::coordinator::{Coordinator, JobOptions};
use crate::error::MrError;
use crate::input::Input;
use crate::region::tests::TempPath;
use crate::region::JobRegion;
use crate::worker::{Worker, WorkerOptions};
use std::sync::Arc;

pub(crate) use crate::apps::Rng;

/// Runs `app` over `input` with `args` (`name=value`) in a fresh region.
pub(crate) fn run_local(app: &dyn App, input: &[u8], args: &[&str]) -> Result<Rendered, MrError> {
    let args = Args::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())?;
    run_local_args(app, input, &args, WorkerOptions::threads(2))
}

/// [`run_local`] with parsed arguments and the workers' options; the input is copied into
/// the region.
pub(crate) fn run_local_args(
    app: &dyn App,
    input: &[u8],
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    run_local_input(app, &Input::from_bytes(input.to_vec()), args, workers)
}

/// [`run_local_args`] with the input written to a file that the workers read in place.
pub(crate) fn run_local_in_place(
    app: &dyn App,
    input: &[u8],
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    let file = TempPath::new("input");
    std::fs::write(&file.0, input).expect("write a test input");
    run_local_input(app, &Input::open(&file.0)?, args, workers)
}

fn run_local_input(
    app: &dyn App,
    input: &Input,
    args: &Args,
    workers: WorkerOptions,
) -> Result<Rendered, MrError> {
    let path = TempPath::new(app.name());
    let region = Arc::new(JobRegion::create(&path.0, 4 << 20, 1 << 30, 1 << 14)?);
    let worker = Worker::start(Arc::clone(&region), workers);
    let options = JobOptions { split_bytes: (input.len() / 9).max(64), reduce_tasks: 5, copy_input: false };
    let rendered = Coordinator::new(&region, options, |_| {})?.run_app(app, input, args);
    worker.stop()?;
    rendered
}
