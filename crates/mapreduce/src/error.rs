//! Errors of the MapReduce framework. Each message names the bad value and, where there is
//! one, the fix.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Everything that can go wrong creating or attaching a job region, running a job or a worker.
#[derive(Debug)]
pub enum MrError {
    /// The operating system refused an operation on a file.
    Io {
        /// The file.
        path: PathBuf,
        /// What we were doing.
        action: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file is not a job region (or its creation never finished).
    BadMagic(PathBuf),
    /// The job region was written by a build with another layout version.
    UnsupportedVersion {
        /// The region file.
        path: PathBuf,
        /// Version in the file.
        found: u64,
    },
    /// The region's header, job table or a task disagrees with itself or the file.
    Corrupt {
        /// The region file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Every job in the region is done and its coordinators have left.
    Finished(PathBuf),
    /// The region has grown to its maximum and has no room left for a job's data.
    RegionFull {
        /// The region file.
        path: PathBuf,
        /// Its maximum size.
        size: u64,
        /// A size that holds what the job asked for.
        needed: u64,
    },
    /// The file system holding the region has no room to grow it.
    NoSpace {
        /// The region file.
        path: PathBuf,
        /// The size it had to grow to.
        grow_to: u64,
        /// Bytes free on its file system.
        free: u64,
    },
    /// The job or task table is full.
    TableFull(String),
    /// No app has that name.
    UnknownApp {
        /// The name asked for.
        name: String,
        /// The apps there are.
        known: Vec<&'static str>,
    },
    /// A job's app is not one this program registers: its map and combine are another
    /// program's code.
    ForeignApp {
        /// The region file.
        path: PathBuf,
        /// The job.
        job: u64,
        /// The app the job names.
        app: String,
        /// The program its coordinator runs, when this process can see it.
        coordinator: Option<PathBuf>,
    },
    /// The input is malformed for the app, or an app argument is bad.
    BadInput(String),
    /// A job failed in a worker (its message says why).
    JobFailed(String),
}

impl fmt::Display for MrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MrError::Io { path, action, source } => write!(f, "cannot {action} {}: {source}", path.display()),
            MrError::BadMagic(path) => write!(
                f,
                "{} is not a Shoal job region (bad magic): it belongs to something else or its creation \
                 was interrupted",
                path.display()
            ),
            MrError::UnsupportedVersion { path, found } => write!(
                f,
                "job region {} has layout version {found}, this build reads version {}: use the shoal \
                 that created it, or start the job again in a new region",
                path.display(),
                crate::layout::LAYOUT_VERSION
            ),
            MrError::Corrupt { path, what } => {
                write!(f, "job region {} is corrupt: {what}; no worker will touch it", path.display())
            }
            MrError::Finished(path) => {
                write!(f, "job region {} is finished: every job in it is done", path.display())
            }
            MrError::RegionFull { path, size, needed } => write!(
                f,
                "job region {} is full at its maximum of {size} bytes; rerun with --region-max {needed} (or more)",
                path.display()
            ),
            MrError::NoSpace { path, grow_to, free } => write!(
                f,
                "job region {} must grow to {grow_to} bytes but its file system has only {free} bytes free: \
                 free memory there, or put the region elsewhere with --region",
                path.display()
            ),
            MrError::TableFull(what) => write!(f, "{what}"),
            MrError::UnknownApp { name, known } => {
                write!(
                    f,
                    "no app named {name:?}; the apps are: {}. An app of your own is run by the program \
                     that registers it (shoal_mapreduce::main; docs/MAPREDUCE.md, \"Writing your own app\")",
                    known.join(", ")
                )
            }
            MrError::ForeignApp { path, job, app, coordinator } => {
                write!(
                    f,
                    "job {job} of region {} runs app {app:?}, which this program does not register: its \
                     workers must be run by the program that registers it",
                    path.display()
                )?;
                match coordinator {
                    Some(program) => write!(
                        f,
                        " (its coordinator runs {}: start workers with `{} worker {}`)",
                        program.display(),
                        program.display(),
                        path.display()
                    ),
                    None => write!(f, " (the one whose `run {app}` published the job)"),
                }
            }
            MrError::BadInput(what) => write!(f, "{what}"),
            MrError::JobFailed(what) => write!(f, "job failed: {what}"),
        }
    }
}

impl std::error::Error for MrError {}
