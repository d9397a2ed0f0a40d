//! The reader face: a process that maps a region read-only (file opened `O_RDONLY`, mapping
//! `PROT_READ`) and looks items up without any system call. It can never change the region;
//! what it copies is validated against the bucket version and retried if a writer raced it,
//! and expiry and flushes are judged by the server's clock in the header, not the reader's.

use crate::error::{OpError, RegionError};
use crate::hints::Location;
use crate::layout::{Layout, COOKIE_OFFSET};
use crate::region::{Lookup, Region, ValueSink};
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
    /// [`crate::hints::HintsWriter::record`]) and the key's probe hash ([`crate::key_hash`]:
    /// what the curve's sample is screened by, so a reader need not hash the key again).
    #[inline]
    pub fn get_located<S: ValueSink + ?Sized>(
        &self,
        key: &[u8],
        value: &mut S,
    ) -> Result<(Lookup, Option<Location>, u64), OpError> {
        let hash = self.region.hash(key);
        self.region.prefetch_second(&hash);
        let (lookup, found) = self.region.get_hashed(key, &hash, value, None)?;
        Ok((lookup, found.as_ref().map(Location::of), hash.raw))
    }

    /// The key's probe hash ([`crate::key_hash`] under this region's seed).
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.region.hash(key).raw
    }

    /// Whether a writer is attached (or died attached): false once a server detached cleanly,
    /// after which nothing in the region changes any more.
    #[inline]
    pub fn writer_attached(&self) -> bool {
        self.region.header().clean.load(Ordering::Acquire) == 0
    }

    /// The region's geometry.
    pub fn layout(&self) -> &Layout {
        &self.region.layout
    }

    /// The locality cookie as it is in the region now (compare with what the server said).
    #[inline]
    pub fn cookie(&self) -> u64 {
        self.region.map.u64_at(COOKIE_OFFSET).load(Ordering::Acquire)
    }

    /// How many times a writer has attached: changes when the server restarts on the region.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.region.header().generation.load(Ordering::Acquire)
    }

    /// The server clock (Unix seconds) as last published.
    #[inline]
    pub fn clock(&self) -> u32 {
        self.region.header().clock.load(Ordering::Acquire)
    }

    /// The server curve's sampling threshold as last published, for the top 24 bits of the
    /// probe hash (0: report no reads).
    #[inline]
    pub fn curve_threshold(&self) -> u32 {
        self.region.header().probe_threshold.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lookup_hands_out_the_probe_hash_the_writer_and_key_hash_compute() {
        let w = crate::Writer::create_anonymous(&crate::Config::default(), true).unwrap();
        w.set(b"k", b"v", 0, 0).unwrap();
        let r = crate::Reader::open(w.path()).unwrap();
        let seed = r.layout().hash_seed;
        for key in [&b"k"[..], b"absent"] {
            let (_, _, hash) = r.get_located(key, &mut Vec::new()).unwrap();
            assert_eq!(hash, crate::key_hash(key, seed));
            assert_eq!(hash, r.hash(key));
            assert_eq!(hash, w.hash(key).raw());
        }
        assert_eq!(r.curve_threshold(), 0, "no curve published yet");
        w.publish_curve_threshold(12345);
        assert_eq!(r.curve_threshold(), 12345);
    }
}
