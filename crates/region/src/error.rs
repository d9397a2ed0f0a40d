//! Errors of opening a region and of operations on it. Messages say what to do about them.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a region could not be created or attached.
#[derive(Debug)]
pub enum RegionError {
    /// The operating system refused an operation on the region file.
    Io {
        /// The region file.
        path: PathBuf,
        /// What we were doing.
        action: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file does not start with Shoal's magic: it is not a region, or its creation never
    /// finished.
    BadMagic,
    /// The region was written by a Shoal with another layout version.
    UnsupportedVersion {
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The header's size disagrees with the file's.
    SizeMismatch {
        /// Size recorded in the header.
        header: usize,
        /// Size of the file.
        file: usize,
    },
    /// The header's geometry is inconsistent.
    Corrupt(String),
    /// Another live process is attached as the writer.
    InUse {
        /// That process, as recorded in the header.
        pid: u32,
    },
    /// The requested configuration is impossible or differs from the existing region's.
    Config(String),
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionError::Io { path, action, source } => {
                write!(f, "cannot {action} region file {}: {source}", path.display())
            }
            RegionError::BadMagic => write!(
                f,
                "not a Shoal region (bad magic): the file belongs to something else or its \
                 creation was interrupted; remove it to start afresh"
            ),
            RegionError::UnsupportedVersion { found, supported } => write!(
                f,
                "region layout version {found} is not supported (this build reads version \
                 {supported}); use the Shoal release that created it, or remove the file"
            ),
            RegionError::SizeMismatch { header, file } => write!(
                f,
                "region header says {header} bytes but the file has {file}: the file was \
                 truncated or resized; remove it to start afresh"
            ),
            RegionError::Corrupt(what) => {
                write!(f, "corrupt region header: {what}; remove the file to start afresh")
            }
            RegionError::InUse { pid } => write!(
                f,
                "region is already attached by a running writer (pid {pid}); stop it first or \
                 use another region path"
            ),
            RegionError::Config(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for RegionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RegionError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why an operation on items failed. Nothing stored is changed by a failed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// Keys are at least one byte long.
    KeyEmpty,
    /// Keys are at most [`MAX_KEY_LEN`](crate::layout::MAX_KEY_LEN) bytes long.
    KeyTooLong(usize),
    /// The item would exceed the region's maximum item size.
    ValueTooLarge {
        /// Size of the value.
        len: usize,
        /// Largest value the region accepts under this key.
        max: usize,
    },
    /// No memory is left and eviction is disabled (or nothing can be evicted).
    OutOfMemory,
    /// A writer held the item's bucket for too long (it died mid-write); retry over the
    /// network, where the server has recovered the region.
    Busy,
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::KeyEmpty => write!(f, "key is empty"),
            OpError::KeyTooLong(n) => {
                write!(f, "key is {n} bytes long; the limit is {}", crate::layout::MAX_KEY_LEN)
            }
            OpError::ValueTooLarge { len, max } => {
                write!(f, "value of {len} bytes is too large: at most {max} bytes fit the maximum item size")
            }
            OpError::OutOfMemory => write!(f, "out of memory storing object"),
            OpError::Busy => write!(f, "region bucket held by a writer that stopped responding"),
        }
    }
}

impl std::error::Error for OpError {}
