//! The reader face: a process that maps a region read-only (file opened `O_RDONLY`, mapping
//! `PROT_READ`) and looks items up without any system call. It can never change the region;
//! what it copies is validated against the bucket version and retried if a writer raced it,
//! and expiry and flushes are judged by the server's clock in the header, not the reader's.

use crate::error::{OpError, RegionError};
use crate::hints::Location;
use crate::layout::{Layout, COOKIE_OFFSET};
use crate::region::{Lookup, Region};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;

/// A read-only view of a region owned by a writer in another process (or this one).
pub struct Reader {
    region: Region,
}

impl Reader {
    /// Maps the region at `path` read-only, refusing unknown layouts, bad magic or sizes.
    pub fn open(path: impl AsRef<Path>) -> Result<Reader, RegionError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| RegionError::Io {
            path: path.to_owned(),
            action: "open",
            source,
        })?;
        let meta = file.metadata().map_err(|source| RegionError::Io {
            path: path.to_owned(),
            action: "stat",
            source,
        })?;
        let exact = meta.file_type().is_file();
        let len = if exact {
            meta.len() as usize
        } else {
            use std::io::Seek;
            let mut f = &file;
            f.seek(std::io::SeekFrom::End(0)).map_err(|source| RegionError::Io {
                path: path.to_owned(),
                action: "size",
                source,
            })? as usize
        };
        Ok(Reader { region: Region::attach(file, len, false, path, exact)? })
    }

    /// Looks `key` up; on a hit its value is in `value`.
    #[inline]
    pub fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<Lookup, OpError> {
        Ok(self.region.get(key, value)?.0)
    }

    /// Looks `key` up like [`Reader::get`], and says where a hit was found (for
    /// [`crate::hints::HintsWriter::record`]).
    #[inline]
    pub fn get_located(
        &self,
        key: &[u8],
        value: &mut Vec<u8>,
    ) -> Result<(Lookup, Option<Location>), OpError> {
        let (lookup, found) = self.region.get(key, value)?;
        Ok((lookup, found.as_ref().map(Location::of)))
    }

    /// Whether a writer is attached (or died attached): false once a server detached cleanly,
    /// after which nothing in the region changes any more.
    pub fn writer_attached(&self) -> bool {
        self.region.header().clean.load(Ordering::Acquire) == 0
    }

    /// The region's geometry.
    pub fn layout(&self) -> &Layout {
        &self.region.layout
    }

    /// The locality cookie as it is in the region now (compare with what the server said).
    pub fn cookie(&self) -> u64 {
        self.region.map.u64_at(COOKIE_OFFSET).load(Ordering::Acquire)
    }

    /// How many times a writer has attached: changes when the server restarts on the region.
    pub fn generation(&self) -> u64 {
        self.region.header().generation.load(Ordering::Acquire)
    }

    /// The server clock (Unix seconds) as last published.
    pub fn clock(&self) -> u32 {
        self.region.header().clock.load(Ordering::Acquire)
    }

    /// The server curve's sampling threshold as last published (0: report no reads).
    #[inline]
    pub fn curve_threshold(&self) -> u32 {
        self.region.header().curve_threshold.load(Ordering::Relaxed)
    }
}
