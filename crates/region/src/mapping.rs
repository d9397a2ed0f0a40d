//! The one place that touches raw memory: mapping a region file and reading or writing its
//! bytes. Every other module addresses the region by offsets through [`Mapping`], whose
//! accessors check bounds, so a corrupt or hostile region can make a lookup fail but can never
//! make it read outside the mapping.
//!
//! Item bytes are copied with word-sized relaxed atomic loads and stores rather than plain
//! `memcpy`: readers copy bytes that a writer in another process may be changing (the copy is
//! then discarded by validation), and atomic accesses keep that race defined behaviour.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A shared mapping of a whole region file, writable or read-only.
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
    writable: bool,
    /// Kept open for the lifetime of the mapping (the writer's `flock` lives on it).
    _file: File,
}

// SAFETY: the mapping is plain shared memory that outlives every reference handed out (it is
// unmapped only in `drop`, which needs `&mut self`). All access goes through atomics, so
// sharing it between threads is as safe as sharing the atomics themselves.
unsafe impl Send for Mapping {}
// SAFETY: see `Send`; no method gives out non-atomic mutable access.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file` with `MAP_SHARED`, `PROT_READ` and, if `writable`,
    /// `PROT_WRITE`. A read-only mapping must come from a file opened read-only for the
    /// guarantee that readers never write to mean anything.
    pub(crate) fn map(file: File, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: we ask the kernel for a fresh mapping (null hint, no MAP_FIXED), so no
        // existing memory of this process is replaced; the result is checked below.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { base: base.cast(), len, writable, _file: file })
    }

    /// Panics unless `[off, off + n)` lies inside the mapping and `off` is `align`-aligned.
    #[inline]
    fn check(&self, off: usize, n: usize, align: usize) {
        assert!(
            off.is_multiple_of(align) && off.checked_add(n).is_some_and(|end| end <= self.len),
            "region access out of bounds: {off}+{n} of {}",
            self.len
        );
    }

    /// The 64-bit atomic at `off` (8-aligned, in bounds).
    #[inline]
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and 8-aligned (checked; the base is page-aligned); the memory is
        // mapped for as long as `self` lives and AtomicU64 has no invalid bit patterns.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// The 32-bit atomic at `off` (4-aligned, in bounds).
    #[inline]
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: as in `u64_at`, for 4 bytes at 4-byte alignment.
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    /// A reference to a `T` made only of atomics at `off`, e.g. the header or a table entry.
    ///
    /// # Safety
    /// `T` must be `repr(C)`, consist only of atomic integers and padding-free arrays of them
    /// (every bit pattern valid, interior mutability only), and have alignment ≤ 4096.
    #[inline]
    pub(crate) unsafe fn atomics_at<T>(&self, off: usize) -> &T {
        self.check(off, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: bounds and alignment checked above; the caller guarantees every bit pattern
        // is a valid `T` and that `T` only allows atomic access.
        unsafe { &*self.base.add(off).cast::<T>() }
    }

    /// Copies `dst.len()` bytes starting at `off` out of the region.
    #[inline]
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) {
        if dst.is_empty() {
            return;
        }
        self.check(off, dst.len(), 1);
        let end = off + dst.len();
        let mut pos = off;
        let mut out = 0;
        while pos < end {
            let word_off = pos & !7;
            // SAFETY: `word_off` is 8-aligned and `word_off + 8 <= len` because the mapping's
            // length is a multiple of 8 (region sizes are rounded to pages) and
            // `word_off <= pos < end <= len`.
            let word = unsafe { &*self.base.add(word_off).cast::<AtomicU64>() }
                .load(Ordering::Relaxed)
                .to_le_bytes();
            let from = pos - word_off;
            let n = (8 - from).min(end - pos);
            dst[out..out + n].copy_from_slice(&word[from..from + n]);
            pos += n;
            out += n;
        }
    }

    /// Copies `src` into the region at `off`. Only the writer calls this, and only on space it
    /// has reserved: no other writer touches those words, though readers may be copying them.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        assert!(self.writable, "write through a read-only mapping");
        self.check(off, src.len(), 1);
        let end = off + src.len();
        let mut pos = off;
        let mut inp = 0;
        while pos < end {
            let word_off = pos & !7;
            // SAFETY: as in `read`.
            let word = unsafe { &*self.base.add(word_off).cast::<AtomicU64>() };
            let from = pos - word_off;
            let n = (8 - from).min(end - pos);
            let mut bytes = if n == 8 { [0; 8] } else { word.load(Ordering::Relaxed).to_le_bytes() };
            bytes[from..from + n].copy_from_slice(&src[inp..inp + n]);
            word.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
            pos += n;
            inp += n;
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` came from a successful mmap and no reference into the mapping
        // can outlive `self` (every accessor borrows `self`).
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}
