//! # shoal-mapreduce: elastic MapReduce over a shared-memory job region
//!
//! Owns `shoal mr`'s machinery (Elastic Phoenix; docs/design/mapreduce.md): a job region of its own (one
//! mapped file, offsets only, versioned and validated on attach), a coordinator that splits
//! an app's input into map tasks and merges the reduce outputs, and workers — threads of any
//! number of processes, joining and leaving at any moment, even by SIGKILL — that claim tasks
//! with leases and publish each task's output with one compare-and-swap.
//!
//! ```text
//!  shoal mr run <app> <input>                         shoal mr worker <region> (any number)
//!   Coordinator ── App::drive ── Jobs::run ─┐          Worker threads
//!                                           ▼              │ next_task → try_claim (lease)
//!        job region  header │ jobs │ tasks │ arena ◄───────┤ map: split ─► Emit (combiner)
//!                    (/dev/shm/…, mmap, u64 offsets)       │      ─► area ─► publish (CAS)
//!                                           ▲              │ reduce: partition r of every
//!   merge ◄── reduce outputs ◄──────────────┘              │      map output ─► area ─► CAS
//!   Rendered (text / JSON) ◄── App renders                 heartbeat: renew leases
//! ```
//!
//! `docs/design/mapreduce.md` explains the choices and `docs/MAPREDUCE.md` how to write an app;
//! [`layout`] pins the bytes and [`tasks`] states the claim/publish protocol. `cli` (feature
//! `cli`, which the `shoal` program turns on) is `shoal mr`'s command line: its arguments, and
//! the coordinator, worker processes, progress bar and reports each subcommand runs.
//!
//! **Apps of your own.** A crate depending on this one with the `cli` feature implements
//! [`App`] and gets a coordinator and worker program in one line, `shoal mr` with its apps
//! added to the built-in ones ([`apps::ALL`]):
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     shoal_mapreduce::main(&[&MyApp])
//! }
//! ```
//!
//! Workers run only the jobs of apps their program registers ([`Registry`], carried by
//! [`WorkerOptions::apps`]): `shoal mr worker` refuses a job of `MyApp`, naming the program
//! that runs it. `examples/inverted-index/` is such a program.

mod app;
pub mod apps;
#[cfg(feature = "cli")]
pub mod cli;
mod coordinator;
mod error;
mod input;
mod job;
pub mod layout;
mod records;
mod region;
mod registry;
mod status;
pub mod tasks;
#[cfg(test)]
mod testing;
mod worker;

pub use app::{
    add_i64s, bytes_i64s, i64s_bytes, le_u64, lines, parse_ints, App, Args, InputRef, Jobs, Records,
    Rendered, SplitUnit,
};
#[cfg(feature = "cli")]
pub use cli::main;
pub use coordinator::{Coordinator, JobOptions, Phase, Progress};
pub use error::MrError;
pub use input::Input;
pub use job::MAX_REDUCE_TASKS;
pub use records::Emit;
pub use region::{JobRegion, JobState};
pub use registry::Registry;
pub use status::JobStatus;
pub use worker::{step, Worker, WorkerOptions, WorkerReport, DEFAULT_LEASE_MS};
