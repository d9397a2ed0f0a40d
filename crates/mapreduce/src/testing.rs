//! Helpers for the apps' unit tests: a job run in a fresh region by two worker threads, with
//! small splits so that every job has many map tasks.

use crate::app::{App, Args, Rendered};
use crate::coordinator::{Coordinator, JobOptions};
use crate::error::MrError;
use crate::region::tests::TempPath;
use crate::region::JobRegion;
use crate::worker::{Worker, WorkerOptions};
use std::sync::Arc;

/// Runs `app` over `input` with `args` (`name=value`) in a fresh region.
pub(crate) fn run_local(app: &dyn App, input: &[u8], args: &[&str]) -> Result<Rendered, MrError> {
    let path = TempPath::new(app.name());
    let region = Arc::new(JobRegion::create(&path.0, 4 << 20, 1 << 30, 1 << 14)?);
    let worker = Worker::start(Arc::clone(&region), WorkerOptions::threads(2));
    let args = Args::parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())?;
    let options = JobOptions { split_bytes: (input.len() as u64 / 9).max(64), reduce_tasks: 5 };
    let rendered = Coordinator::new(&region, options, |_| {})?.run_app(app, input, &args);
    worker.stop()?;
    rendered
}

/// SplitMix64, for generated inputs.
pub(crate) struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }

    /// Uniform in `0..n` (near enough).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}
