//! Built-in (Rust) apps over inputs larger than one host (`shoal.mr.dask`): each host runs an
//! app's job over its shard on the engine and hands back the job's records rather than their
//! rendering; hosts' records meet in a tree of merges by the app's own combine; the root's
//! records are rendered by the app's own `drive`, replayed.
//!
//! ```text
//! shard ─► _mr_run_app (engine, this host) ─► Job { stage, params, records } + input bytes
//!       ─► _mr_merge(a, b) (combine_with, key order) ─► … ─► _mr_render (drive, replayed) ─► JSON
//! ```
//!
//! Only an app whose result is the combine of its shards' results runs shard by shard: one
//! job, over the app's input as given. [`Capture`] refuses the others (chained jobs such as
//! k-means', or a job over an input the app computes, as matrix multiply's) saying so.

use shoal_mapreduce::{App, Args, Coordinator, Input, InputRef, Jobs, MrError, Records, Registry};
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// The one job of a sharded app: how its records were made (so that merges combine them with
/// the same stage and parameters) and the records, in key order.
pub(crate) struct Job {
    pub(crate) stage: u32,
    pub(crate) params: Vec<u8>,
    pub(crate) records: Records,
}

/// The built-in app called `name` (not `python`: a Python job's shards merge in Python).
pub(crate) fn builtin(name: &str) -> Result<&'static dyn App, MrError> {
    Registry::builtin().find(name)
}

/// Runs `app`'s drive over `input` on `coordinator` and keeps its one job.
pub(crate) fn run_one_job(
    coordinator: &mut Coordinator<'_>,
    app: &dyn App,
    input: &Input,
    args: &Args,
) -> Result<Job, MrError> {
    let mut capture = Capture { coordinator, input: None, job: None };
    app.drive(input, args, &mut capture)?;
    capture.job.ok_or_else(|| MrError::BadInput(format!("{} ran no job", app.name())))
}

/// `a` and `b` (each in key order) as one list in key order, the values of a key in both
/// combined by `app`.
pub(crate) fn merge(app: &dyn App, stage: u32, params: &[u8], a: Records, b: Records) -> Records {
    let mut merged = Vec::with_capacity(a.len().max(b.len()));
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let order = match (a.peek(), b.peek()) {
            (Some((x, _)), Some((y, _))) => x.cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => return merged,
        };
        let next = match order {
            Ordering::Less => a.next(),
            Ordering::Greater => b.next(),
            Ordering::Equal => {
                let ((key, mut acc), (_, value)) = (a.next().expect("peeked"), b.next().expect("peeked"));
                app.combine_with(stage, params, &mut acc, &value);
                Some((key, acc))
            }
        };
        merged.extend(next);
    }
}

/// The app's rendering of `job`, the merged job of every shard, as JSON (what `shoal mr run
/// --json` prints as `result`); `input` stands for the whole input ([`whole_input`]).
pub(crate) fn render(app: &dyn App, args: &Args, input: &Input, job: Job) -> Result<String, MrError> {
    Ok(app.drive(input, args, &mut Replay(Some(job)))?.json.to_string())
}

/// [`Jobs`] that hands a drive's job to the coordinator and keeps its records.
struct Capture<'a, 'c> {
    coordinator: &'a mut Coordinator<'c>,
    /// The app's input in the region, once put there.
    input: Option<InputRef>,
    job: Option<Job>,
}

impl Jobs for Capture<'_, '_> {
    fn put_input(&mut self, input: &Input) -> Result<InputRef, MrError> {
        let put = self.coordinator.put_input(input)?;
        self.input = Some(put);
        Ok(put)
    }

    fn put_bytes(&mut self, bytes: &[u8]) -> Result<InputRef, MrError> {
        self.coordinator.put_bytes(bytes)
    }

    fn run(&mut self, app: &dyn App, stage: u32, input: InputRef, params: &[u8]) -> Result<Records, MrError> {
        let why = match (&self.job, self.input) {
            (Some(_), _) => "runs chained jobs, each needing the previous one's result over the whole input",
            (None, put) if put != Some(input) => {
                "runs its job over an input it computes from the whole input"
            }
            _ => {
                let records = self.coordinator.run(app, stage, input, params)?;
                self.job = Some(Job { stage, params: params.to_vec(), records: records.clone() });
                return Ok(records);
            }
        };
        Err(MrError::BadInput(format!(
            "{} {why}, so it cannot run shard by shard: run it on one host (shoal mr run)",
            app.name()
        )))
    }
}

/// [`Jobs`] that answers a drive's one job with records computed already.
struct Replay(Option<Job>);

impl Jobs for Replay {
    fn put_input(&mut self, input: &Input) -> Result<InputRef, MrError> {
        Ok(InputRef { offset: 0, len: input.len(), file: 0 })
    }

    fn put_bytes(&mut self, bytes: &[u8]) -> Result<InputRef, MrError> {
        Ok(InputRef { offset: 0, len: bytes.len() as u64, file: 0 })
    }

    fn run(
        &mut self,
        app: &dyn App,
        stage: u32,
        _input: InputRef,
        params: &[u8],
    ) -> Result<Records, MrError> {
        match self.0.take() {
            Some(job) if job.stage == stage && job.params == params => Ok(job.records),
            _ => Err(MrError::BadInput(format!(
                "the merged records are not those of {}'s job with these arguments",
                app.name()
            ))),
        }
    }
}

/// An input of `len` bytes standing for all the shards at once, for [`render`]: a drive that
/// does not parse its input reads only its length (the apps that parse theirs, computing their
/// job's input from it, never get here: [`Capture`] refuses them). A sparse file, unlinked at
/// once, so it costs no disk.
pub(crate) fn whole_input(len: u64) -> Result<Input, MrError> {
    static RENDERS: AtomicU64 = AtomicU64::new(0);
    let n = RENDERS.fetch_add(1, AtomicOrdering::Relaxed);
    let path = std::env::temp_dir().join(format!("shoal-mr-render-{}-{n}", std::process::id()));
    let io = |action| {
        let path = path.clone();
        move |source| MrError::Io { path, action, source }
    };
    let file = std::fs::File::create_new(&path).map_err(io("create the stand-in input"))?;
    let sized = file.set_len(len).map_err(io("size the stand-in input"));
    let opened = sized.and_then(|()| Input::open(&path));
    std::fs::remove_file(&path).map_err(io("remove the stand-in input"))?;
    opened
}
