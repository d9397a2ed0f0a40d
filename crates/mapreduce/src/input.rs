//! A job's input: a file that workers read in place, or bytes copied into the job region.
//!
//! Phoenix reads its input file where it lies; Elastic Phoenix copied it into the shared region
//! so that a worker in another VM needs nothing but the region. Copying costs a pass over the
//! input to write it and the region's pages to hold it, which for apps doing a nanosecond of
//! work per byte (histogram, linear regression) is most of the job. So by default an input
//! that is a regular file is *referenced*: the region stores its path and identity (device,
//! inode, length, modification time), and each worker opens the file and checks the identity
//! before reading a split of it with `pread`. `shoal mr run --copy-input` copies it instead,
//! for workers that cannot see the file or an input that may change while the job runs.
//!
//! ```text
//!  Input::open(path) ── regular file ──► Jobs::put_input ──► FileRef area in the region
//!                    └─ anything else ─► bytes (read once) ─► copied into the region
//!  coordinator, worker: open_input ─► FileRef ─► stat: the same regular file? ─► open
//!                       (non-blocking) ─► Source::File ─► pread, identity checked again
//! ```

use crate::error::MrError;
use crate::region::JobRegion;
use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use std::fs::File;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A job's input as a region refers to it (see [`crate::Jobs::put_input`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputRef {
    /// Offset of the input's bytes: in the region, or in the file `file` names.
    pub offset: u64,
    /// Their length.
    pub len: u64,
    /// 0: the bytes lie in the region; else the area of the reference to the input file
    /// workers read in place.
    pub file: u64,
}

/// A job's input as `shoal mr run` is given it.
pub struct Input {
    /// The file and its identity when opened; `None` for bytes.
    file: Option<(File, FileRef)>,
    /// All of it: given, or read from the file on first use.
    bytes: OnceLock<Vec<u8>>,
}

impl Input {
    /// Bytes in memory (a generated input, a test's): always copied into the region.
    pub fn from_bytes(bytes: Vec<u8>) -> Input {
        Input { file: None, bytes: OnceLock::from(bytes) }
    }

    /// The file at `path`: a regular file can be read in place by workers; anything else (a
    /// pipe, a device) is read whole now.
    pub fn open(path: &Path) -> Result<Input, MrError> {
        let io = |action| move |source| MrError::Io { path: path.to_path_buf(), action, source };
        let file = File::open(path).map_err(io("read input"))?;
        let meta = file.metadata().map_err(io("read input"))?;
        if !meta.is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io("read input"))?;
            return Ok(Input::from_bytes(bytes));
        }
        // Workers run in other directories: they need the absolute path.
        let path = path.canonicalize().map_err(io("find the absolute path of input"))?;
        let reference = FileRef::of(&path, &meta);
        Ok(Input { file: Some((file, reference)), bytes: OnceLock::new() })
    }

    /// Its length in bytes.
    pub fn len(&self) -> u64 {
        match &self.file {
            Some((_, reference)) => reference.len,
            None => self.bytes.get().map_or(0, |bytes| bytes.len() as u64),
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All of it, read on first use: for an app whose coordinator parses its input (matrix
    /// multiply, k-means' first centroids).
    pub fn contents(&self) -> Result<&[u8], MrError> {
        if let Some(bytes) = self.bytes.get() {
            return Ok(bytes);
        }
        let (file, reference) = self.file.as_ref().expect("an input without bytes has a file");
        let mut bytes = vec![0; reference.len as usize];
        file.read_exact_at(&mut bytes, 0).map_err(|source| MrError::Io {
            path: reference.path.clone(),
            action: "read input",
            source,
        })?;
        Ok(self.bytes.get_or_init(|| bytes))
    }

    /// Reads it through `f` as a [`Source`] of its own offsets: the file, or the bytes.
    pub(crate) fn with_source<T>(&self, f: impl FnOnce(&Source) -> Result<T, MrError>) -> Result<T, MrError> {
        match &self.file {
            Some((file, reference)) => f(&Source::File(file, reference)),
            None => f(&Source::Memory(self.contents()?)),
        }
    }

    /// The file workers may read in place, with its identity when opened; `None` for bytes.
    pub(crate) fn file_ref(&self) -> Option<&FileRef> {
        self.file.as_ref().map(|(_, reference)| reference)
    }
}

/// Opens the input file a job reads in place (`input.file`, the area of its reference),
/// after checking that the job's input lies inside it: what the coordinator splits and each
/// worker maps.
pub(crate) fn open_input(region: &JobRegion, input: InputRef) -> Result<(File, FileRef), MrError> {
    let reference = FileRef::read(region, input.file)?;
    if input.offset.checked_add(input.len).is_none_or(|end| end > reference.len) {
        return Err(
            region.corrupt(format!("an input of {} bytes at {} runs past its file", input.len, input.offset))
        );
    }
    Ok((reference.open()?, reference))
}

/// An input file as a job region records it: enough to find the file and to know it is still
/// the file the job was split from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileRef {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
    pub len: u64,
    mtime_ns: i64,
}

/// Bytes before the path in an encoded [`FileRef`]: four words of identity and the length.
const FIXED_BYTES: usize = 32;

impl FileRef {
    fn of(path: &Path, meta: &std::fs::Metadata) -> FileRef {
        FileRef {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec()),
        }
    }

    /// `[dev][ino][len][mtime ns][path]`, little-endian words.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(FIXED_BYTES + self.path.as_os_str().len());
        for word in [self.dev, self.ino, self.len, self.mtime_ns as u64] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(self.path.as_os_str().as_bytes());
        out
    }

    /// Decodes what [`FileRef::encode`] wrote; `None` if it cannot be one.
    pub fn decode(bytes: &[u8]) -> Option<FileRef> {
        if bytes.len() <= FIXED_BYTES || bytes[FIXED_BYTES] != b'/' || bytes[FIXED_BYTES..].contains(&0) {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(FileRef {
            dev: word(0),
            ino: word(1),
            len: word(2),
            mtime_ns: word(3) as i64,
            path: PathBuf::from(std::ffi::OsString::from_vec(bytes[FIXED_BYTES..].to_vec())),
        })
    }

    /// Reads the reference stored in the region's area at `area`.
    pub fn read(region: &JobRegion, area: u64) -> Result<FileRef, MrError> {
        let bytes = region.area(area)?;
        FileRef::decode(&bytes).ok_or_else(|| region.corrupt(format!("the input file reference at {area}")))
    }

    /// Opens the file and checks that it is the one the job was split from. A path that is
    /// not the job's regular file (whatever a damaged region names: a device, a FIFO) is
    /// refused before it is opened — opening some devices does something — and the open is
    /// non-blocking besides.
    pub fn open(&self) -> Result<File, MrError> {
        let io = |source| MrError::Io {
            path: self.path.clone(),
            action: "open the job's input file, which workers read in place (a worker that cannot see \
                     it needs the job started with --copy-input)",
            source,
        };
        let named = std::fs::metadata(&self.path).map_err(io)?;
        if !named.is_file() || FileRef::of(&self.path, &named) != *self {
            return Err(self.changed());
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.path)
            .map_err(io)?;
        // What was opened is still that file (not one swapped in since the stat).
        self.check(&file)?;
        Ok(file)
    }

    /// Checks that `file`, opened from this reference, is still unchanged: a worker checks
    /// after reading each split, so a split read while the file was rewritten in place is
    /// never published.
    pub fn check(&self, file: &File) -> Result<(), MrError> {
        let meta = file.metadata().map_err(|source| MrError::Io {
            path: self.path.clone(),
            action: "inspect the job's input file",
            source,
        })?;
        if FileRef::of(&self.path, &meta) != *self {
            return Err(self.changed());
        }
        Ok(())
    }

    fn changed(&self) -> MrError {
        MrError::JobFailed(format!(
            "the input file {} changed or was replaced since the job started: run the job again, or with \
             --copy-input to give it a copy of its own",
            self.path.display()
        ))
    }
}

/// Where a job's input bytes are read from: the region's arena, or a file in place (or, for
/// the direct Rayon versions of the apps, bytes in memory).
pub(crate) enum Source<'a> {
    /// Offsets are the region's.
    Region(&'a JobRegion),
    /// Offsets are the file's.
    File(&'a File, &'a FileRef),
    /// Offsets are the slice's.
    Memory(&'a [u8]),
}

impl Source<'_> {
    /// For a file: that it has not changed since the job was split (see [`FileRef::check`]).
    pub fn check(&self) -> Result<(), MrError> {
        match self {
            Source::Region(_) | Source::Memory(_) => Ok(()),
            Source::File(file, reference) => reference.check(file),
        }
    }

    /// Appends the `len` bytes at `off` to `out`.
    pub fn read_append(&self, off: u64, len: u64, out: &mut Vec<u8>) -> Result<(), MrError> {
        match self {
            Source::Region(region) => region.read_append(off, len, out),
            Source::Memory(bytes) => {
                let piece = usize::try_from(off)
                    .ok()
                    .and_then(|start| bytes.get(start..start.checked_add(len as usize)?))
                    .ok_or_else(|| MrError::BadInput(format!("{len} bytes at {off} run past the input")))?;
                out.extend_from_slice(piece);
                Ok(())
            }
            Source::File(file, reference) => {
                // An input larger than the page cache is read from disk: this range and the
                // next one (a map reads its split piece after piece) are asked for at once, so
                // the disk reads ahead while this piece is mapped (a 32 GiB linreg from disk:
                // 35 s → 31 s, see BENCHMARKS.md). Advice only: its errors change nothing.
                let ahead = i64::try_from(len.saturating_mul(2)).unwrap_or(i64::MAX);
                let _ = posix_fadvise(file, off as i64, ahead, PosixFadviseAdvice::POSIX_FADV_WILLNEED);
                let at = out.len();
                out.resize(at + len as usize, 0);
                file.read_exact_at(&mut out[at..], off).map_err(|source| MrError::Io {
                    path: reference.path.clone(),
                    action: "read the job's input file",
                    source,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_round_trips_and_damaged_ones_are_refused() {
        let path = std::env::temp_dir().join(format!("shoal-mr-input-{}", std::process::id()));
        std::fs::write(&path, b"hello\n").unwrap();
        let input = Input::open(&path).unwrap();
        assert_eq!((input.len(), input.contents().unwrap()), (6, &b"hello\n"[..]));
        let reference = input.file_ref().unwrap().clone();
        assert_eq!(FileRef::decode(&reference.encode()), Some(reference.clone()));
        assert!(reference.open().is_ok());
        for bad in [&b""[..], &[0; 32], &[0; 40], b"0123456789012345678901234567890123\0/x"] {
            assert_eq!(FileRef::decode(bad), None, "{bad:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&path, b"hello, changed\n").unwrap();
        let err = reference.open().unwrap_err().to_string();
        assert!(err.contains("changed or was replaced") && err.contains("--copy-input"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = reference.open().unwrap_err().to_string();
        assert!(err.contains("--copy-input") && err.contains(&path.display().to_string()), "{err}");
    }

    #[test]
    fn what_is_not_a_regular_file_is_read_whole_and_a_fifo_never_blocks_a_worker() {
        let input = Input::open(Path::new("/dev/null")).unwrap();
        assert!(input.is_empty() && input.file_ref().is_none());
        let fifo = std::env::temp_dir().join(format!("shoal-mr-fifo-{}", std::process::id()));
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let named = FileRef { path: fifo.clone(), dev: 0, ino: 0, len: 0, mtime_ns: 0 };
        assert!(named.open().is_err(), "a FIFO is refused, not waited on");
        std::fs::remove_file(&fifo).unwrap();
    }
}
