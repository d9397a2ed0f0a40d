//! The one place that touches raw memory: mapping a region file and reading or writing its
//! bytes. Every other module addresses the region by offsets through [`Mapping`], whose
//! accessors check bounds, so a corrupt or hostile region can make a lookup fail but can never
//! make it read outside the mapping.
//!
//! Item bytes are copied with word-sized relaxed atomic loads and stores rather than plain
//! `memcpy`: readers copy bytes that a writer in another process may be changing (the copy is
//! then discarded by validation), and atomic accesses keep that race defined behaviour. On
//! x86-64 the reads are loads in inline assembly instead (8-byte `mov`, 16-byte `movdqu`,
//! `rep movsb`), outside the Rust memory model: x86 never tears a byte, so each is the
//! per-byte atomic read a seqlock reader needs (`Mapping::copy_vector` says why in full).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A shared mapping of a whole region file, writable or read-only. Public so that other
/// shared-memory parts of Shoal (the MapReduce job region) map their files with the same
/// bounds-checked, atomics-only accessors instead of a copy of them.
pub struct Mapping {
    base: *mut u8,
    len: usize,
    writable: bool,
    /// Kept open for the lifetime of the mapping (the writer's `flock` lives on it).
    file: File,
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
    pub fn map(file: File, len: usize, writable: bool) -> io::Result<Mapping> {
        if len == 0 || !len.is_multiple_of(8) {
            // Word-wise copies rely on the mapping being a whole number of words.
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "region size is not a multiple of 8"));
        }
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: we ask the kernel for a fresh mapping (null hint, no MAP_FIXED), so no
        // existing memory of this process is replaced; the result is checked below.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { base: base.cast(), len, writable, file })
    }

    /// Gives the memory behind `[off, off + len)` back to the system: the file gets a hole
    /// there (`fallocate` punching, size kept), so every mapping of it reads zeros until the
    /// range is written again. Works on tmpfs (`/dev/shm`), hugetlbfs and local file systems;
    /// a device (an ivshmem BAR) cannot, and keeps its memory.
    pub(crate) fn discard(&self, off: usize, len: usize) -> io::Result<()> {
        use nix::fcntl::{fallocate, FallocateFlags};
        self.check(off, len, 1);
        let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
        fallocate(&self.file, flags, off as i64, len as i64).map_err(io::Error::from)
    }

    /// The file mapped (to hand its descriptor to another process).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Bytes mapped.
    #[inline]
    pub fn size(&self) -> usize {
        self.len
    }

    /// Panics unless `[off, off + n)` lies inside the mapping and `off` is `align`-aligned.
    /// The panic is out of line: the hot path is a compare and a branch, without the stores
    /// of the message's arguments that an inline `assert!` placed before the compare (two a
    /// hints counter, #29's local multiget, third round).
    #[inline]
    fn check(&self, off: usize, n: usize, align: usize) {
        if !(off.is_multiple_of(align) && off.checked_add(n).is_some_and(|end| end <= self.len)) {
            out_of_bounds(off, n, self.len);
        }
    }

    /// The 64-bit atomic at `off` (8-aligned, in bounds).
    #[inline]
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8, 8);
        // SAFETY: in bounds and 8-aligned (checked; the base is page-aligned); the memory is
        // mapped for as long as `self` lives and AtomicU64 has no invalid bit patterns.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// The 32-bit atomic at `off` (4-aligned, in bounds).
    #[inline]
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4, 4);
        // SAFETY: as in `u64_at`, for 4 bytes at 4-byte alignment.
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    /// [`Mapping::u64_at`] and [`Mapping::u32_at`] for an offset its caller has proven
    /// aligned and in bounds: the lookup checks an item's place once, not at every load.
    ///
    /// # Safety
    /// `off` is 8-aligned and `off + 8 <= self.size()`.
    #[inline(always)]
    pub(crate) unsafe fn u64_unchecked(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the caller's promise is `word`'s.
        unsafe { self.word(off) }
    }

    /// See [`Mapping::u64_unchecked`].
    ///
    /// # Safety
    /// `off` is 4-aligned and `off + 4 <= self.size()`.
    #[inline(always)]
    pub(crate) unsafe fn u32_unchecked(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: in bounds and 4-aligned (the caller's promise; the base is page-aligned);
        // the memory is mapped for as long as `self` lives and AtomicU32 has no invalid bit
        // patterns.
        unsafe { &*self.base.add(off).cast::<AtomicU32>() }
    }

    /// [`Mapping::atomics_at`] for an offset its caller has proven aligned and in bounds.
    ///
    /// # Safety
    /// As for [`Mapping::atomics_at`], and `off` is aligned for `T` with
    /// `off + size_of::<T>() <= self.size()`.
    #[inline(always)]
    pub(crate) unsafe fn atomics_unchecked<T>(&self, off: usize) -> &T {
        debug_assert!(
            off.is_multiple_of(std::mem::align_of::<T>()) && off + std::mem::size_of::<T>() <= self.len
        );
        // SAFETY: the caller's promise, as in `atomics_at`.
        unsafe { &*self.base.add(off).cast::<T>() }
    }

    /// A reference to a `T` made only of atomics at `off`, e.g. the header or a table entry.
    ///
    /// # Safety
    /// `T` must be `repr(C)`, consist only of atomic integers and padding-free arrays of them
    /// (every bit pattern valid, interior mutability only), and have alignment ≤ 4096.
    #[inline]
    pub unsafe fn atomics_at<T>(&self, off: usize) -> &T {
        self.check(off, std::mem::size_of::<T>(), std::mem::align_of::<T>());
        // SAFETY: bounds and alignment checked above; the caller guarantees every bit pattern
        // is a valid `T` and that `T` only allows atomic access.
        unsafe { &*self.base.add(off).cast::<T>() }
    }

    /// Asks the CPU to start loading the cache line at `off`, so that a batch of lookups
    /// overlaps its memory misses. A hint: an offset outside the mapping is ignored.
    #[inline]
    pub(crate) fn prefetch(&self, off: usize) {
        if off < self.len {
            prefetch_line(self.base.wrapping_add(off));
        }
    }

    /// The aligned word at `off`.
    ///
    /// # Safety
    /// `off` is 8-aligned and `off + 8 <= self.len`.
    #[inline(always)]
    unsafe fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: the caller guarantees alignment and bounds; the mapping lives as long as
        // `self` and AtomicU64 has no invalid bit patterns.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// The 8 bytes at `off` (any alignment; `off + 8` in bounds), little-endian. Reads of item
    /// bytes, which start anywhere (a key 4 bytes past its 8-aligned item), go through here,
    /// so that they are word loads without a byte-wise copy into a buffer.
    ///
    /// On x86-64 one unaligned load in inline assembly, a sound seqlock read for the reason
    /// [`Mapping::copy_vector`]'s loads are: x86 never tears a byte, so it is a per-byte
    /// atomic read, ordered with the loads after it, not a Rust memory access that a racing
    /// writer could make undefined. It is not `pure`, so the compiler neither drops it nor
    /// hoists it out of a retry loop. It replaced two aligned atomic loads shifted together
    /// (about 8 instructions a word; #29's lookup round).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn bytes8(&self, off: usize) -> u64 {
        debug_assert!(off + 8 <= self.len);
        let word: u64;
        // SAFETY: `off + 8 <= len` (the caller's promise), so all 8 bytes at `base + off` are
        // mapped for as long as `self` lives; the load writes nothing (`readonly`) and needs
        // no alignment on x86-64.
        unsafe {
            std::arch::asm!(
                "mov {word}, qword ptr [{at}]",
                word = lateout(reg) word,
                at = in(reg) self.base.add(off),
                options(nostack, preserves_flags, readonly)
            );
        }
        word
    }

    /// [`Mapping::bytes8`] from aligned atomic words: the one that holds the 8 bytes at `off`,
    /// or the two, shifted together.
    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn bytes8(&self, off: usize) -> u64 {
        debug_assert!(off + 8 <= self.len);
        let skip = off & 7;
        let pos = off - skip;
        // SAFETY: `pos` is 8-aligned and `pos + 8 <= off + 8 <= len`.
        let low = unsafe { self.word(pos) }.load(Ordering::Relaxed);
        if skip == 0 {
            return low;
        }
        // `off` is not aligned, so `pos + 8 < off + 8 <= len`; both are multiples of 8
        // (`len` is, checked in `map`), hence `pos + 16 <= len`.
        // SAFETY: `pos + 8` is 8-aligned and in bounds, as just argued.
        let high = unsafe { self.word(pos + 8) }.load(Ordering::Relaxed);
        (low >> (8 * skip)) | (high << (64 - 8 * skip))
    }

    /// The `n < 8` bytes at `off`, little-endian in the low bytes of the result (the rest 0).
    #[inline(always)]
    fn bytes_short(&self, off: usize, n: usize) -> u64 {
        debug_assert!(n < 8 && off + n <= self.len);
        if n == 0 {
            return 0;
        }
        // Near the end of the mapping the 8 bytes at `off` may not all exist: start earlier.
        let (at, shift) = if off + 8 <= self.len { (off, 0) } else { (self.len - 8, off + 8 - self.len) };
        (self.bytes8(at) >> (8 * shift)) & (u64::MAX >> (64 - 8 * n))
    }

    /// Copies `dst.len()` bytes starting at `off` out of the region, eight at a time.
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) {
        self.check(off, dst.len(), 1);
        // SAFETY: the range is inside the mapping (just checked).
        unsafe { self.read_unchecked(off, dst) }
    }

    /// [`Mapping::read`] for a range its caller has proven to lie in the mapping.
    ///
    /// # Safety
    /// `off + dst.len() <= self.size()`.
    #[inline]
    pub(crate) unsafe fn read_unchecked(&self, off: usize, dst: &mut [u8]) {
        debug_assert!(off + dst.len() <= self.len);
        #[cfg(target_arch = "x86_64")]
        if dst.len() >= VECTOR_COPY_MIN {
            // SAFETY: the source range is in the mapping (the caller's promise) and the
            // destination is `dst`, which a shared borrow of the mapping cannot overlap.
            unsafe { self.copy_vector(off, dst.as_mut_ptr(), dst.len()) };
            return;
        }
        let mut chunks = dst.chunks_exact_mut(8);
        let mut at = off;
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.bytes8(at).to_le_bytes());
            at += 8;
        }
        let tail = chunks.into_remainder();
        let last = self.bytes_short(at, tail.len());
        for (i, byte) in tail.iter_mut().enumerate() {
            *byte = (last >> (8 * i)) as u8;
        }
    }

    /// Whether the `expected.len()` bytes at `off` are `expected` (a key comparison, without
    /// copying the stored key out first).
    #[inline]
    pub fn equals(&self, off: usize, expected: &[u8]) -> bool {
        self.check(off, expected.len(), 1);
        // SAFETY: `off..off + expected.len()` is inside the mapping (just checked).
        unsafe { self.equals_unchecked(off, expected) }
    }

    /// [`Mapping::equals`] for a range its caller has proven to lie in the mapping: eight
    /// bytes a step, and a key of eight bytes or more ends with the eight that end it (which
    /// may overlap the step before), so no byte is gathered one by one. A key of 8 to 16
    /// bytes is its first and last eight, without the loop.
    ///
    /// # Safety
    /// `off + expected.len() <= self.size()`.
    #[inline]
    pub(crate) unsafe fn equals_unchecked(&self, off: usize, expected: &[u8]) -> bool {
        debug_assert!(off + expected.len() <= self.len);
        let n = expected.len();
        let word = |i: usize| u64::from_le_bytes(expected[i..i + 8].try_into().expect("8 bytes"));
        if n < 8 {
            let wanted = expected.iter().rev().fold(0u64, |word, &byte| (word << 8) | u64::from(byte));
            return self.bytes_short(off, n) == wanted;
        }
        let last = (self.bytes8(off + n - 8) ^ word(n - 8)) | (self.bytes8(off) ^ word(0));
        if n <= 16 {
            // The commonest keys: two words, the second overlapping the first, no loop.
            return last == 0;
        }
        let mut i = 8;
        while i + 8 < n {
            if self.bytes8(off + i) != word(i) {
                return false;
            }
            i += 8;
        }
        last == 0
    }

    /// Appends the `len` bytes at `off` to `dst`, as [`Mapping::read`] would copy them (a
    /// racing writer may leave a mix of old and new bytes: the caller validates).
    #[inline]
    pub fn read_append(&self, off: usize, len: usize, dst: &mut Vec<u8>) {
        self.check(off, len, 1);
        // SAFETY: the range is inside the mapping (just checked).
        unsafe { self.read_append_unchecked(off, len, dst) }
    }

    /// [`Mapping::read_append`] for a range its caller has proven to lie in the mapping.
    /// Always inlined, the short values' word copy left out of line: a lookup that called
    /// this for its vector copy paid about 12 instructions a value for the call (#29 item 4).
    ///
    /// # Safety
    /// `off + len <= self.size()`.
    #[inline(always)]
    pub(crate) unsafe fn read_append_unchecked(&self, off: usize, len: usize, dst: &mut Vec<u8>) {
        debug_assert!(off + len <= self.len);
        #[cfg(target_arch = "x86_64")]
        if len >= VECTOR_COPY_MIN {
            dst.reserve(len);
            // SAFETY: the source range is in the mapping (the caller's promise); the
            // destination is `len` bytes of `dst`'s spare capacity (just reserved), which a
            // shared borrow of the mapping cannot overlap. After the copy all `len` bytes are
            // initialized, which makes `set_len` sound.
            unsafe {
                self.copy_vector(off, dst.spare_capacity_mut().as_mut_ptr().cast(), len);
                dst.set_len(dst.len() + len);
            }
            return;
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.read_append_words(off, len, dst) }
    }

    /// [`Mapping::read_append_unchecked`] a word at a time: values too short for the vector
    /// copy (all of them off x86-64).
    ///
    /// # Safety
    /// `off + len <= self.size()`.
    #[inline]
    unsafe fn read_append_words(&self, off: usize, len: usize, dst: &mut Vec<u8>) {
        if len == 0 {
            return;
        }
        let end = dst.len() + len;
        // Whole words only, the length set back after: no copy of a variable length. Each
        // aligned word that holds value bytes is loaded once; an unaligned value's words are
        // each made of the two that hold its bytes (every load being one of the next's). The
        // words go straight into the reserved spare capacity: one per aligned word from
        // `off - skip` to `last`, so at most `len + 14` bytes.
        dst.reserve(len + 16);
        let mut to = dst.spare_capacity_mut().as_mut_ptr().cast::<u8>();
        let mut put = |word: u64| {
            // SAFETY: `to` stays inside the `len + 16` bytes of spare capacity reserved above
            // (the words written cover at most `len + 14` bytes, as argued there); an
            // unaligned write of a `u64` has no other requirement.
            unsafe {
                to.cast::<u64>().write_unaligned(word.to_le());
                to = to.add(8);
            }
        };
        let skip = off & 7;
        let mut pos = off - skip;
        // The end of the last aligned word holding value bytes: within the mapping, whose
        // length is a multiple of 8 (checked in `map`).
        let last = (off + len).next_multiple_of(8);
        // SAFETY: `pos` is 8-aligned and `pos + 8 <= last <= len`.
        let mut low = unsafe { self.word(pos) }.load(Ordering::Relaxed);
        if skip == 0 {
            loop {
                put(low);
                pos += 8;
                if pos == last {
                    break;
                }
                // SAFETY: as above, `pos < last` and both are multiples of 8.
                low = unsafe { self.word(pos) }.load(Ordering::Relaxed);
            }
        } else {
            while pos + 8 < last {
                // SAFETY: `pos + 8` is 8-aligned and below `last`, so `pos + 16 <= last <= len`.
                let high = unsafe { self.word(pos + 8) }.load(Ordering::Relaxed);
                put((low >> (8 * skip)) | (high << (64 - 8 * skip)));
                (low, pos) = (high, pos + 8);
            }
            put(low >> (8 * skip));
        }
        // SAFETY: the words written above cover `dst.len()..end` (they hold the value's `len`
        // bytes, the last word cut back here), all within the reserved capacity.
        unsafe { dst.set_len(end) };
    }

    /// Copies `len` (at least [`VECTOR_COPY_MIN`]) bytes at `off` to `to` in vector-sized
    /// loads: `rep movsb` from [`STRING_COPY_MIN`] bytes on, 16-byte `movdqu` below it.
    ///
    /// Why this is a sound seqlock read: the copy is inline assembly, outside the Rust memory
    /// model, and x86 never tears a byte — an SSE load of 16 bytes, like each load of `rep
    /// movsb`, reads every byte atomically, if not all 16 at one instant. So the copy is
    /// the per-byte atomic copy a seqlock reader needs (what Rust's proposed `AtomicPerByte`
    /// names), unlike a plain `memcpy`, whose racing reads would be undefined; a torn mix of
    /// old and new bytes is thrown away by the caller's validation. `movdqu` loads are
    /// ordered with the loads after them (x86 does not reorder loads with loads), and the
    /// assembly is a compiler barrier, so the caller's validating loads come after the copy;
    /// fast-string loads may complete out of order, so `rep movsb` ends with `lfence`.
    ///
    /// # Safety
    /// `off + len <= self.size()`, `len >= VECTOR_COPY_MIN`, and `to` is valid for `len`
    /// bytes of writes and does not overlap the mapping.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn copy_vector(&self, off: usize, to: *mut u8, len: usize) {
        debug_assert!(len >= VECTOR_COPY_MIN && off + len <= self.len);
        // SAFETY: `off + len` is in bounds (the caller's promise), so `base + off` is too.
        let from = unsafe { self.base.add(off) };
        if len >= STRING_COPY_MIN {
            // SAFETY: both ranges are valid for `len` bytes and do not overlap (the caller's
            // promise); see above for the racing reads.
            unsafe {
                std::arch::asm!(
                    "rep movsb",
                    "lfence",
                    inout("rcx") len => _,
                    inout("rsi") from => _,
                    inout("rdi") to => _,
                    options(nostack, preserves_flags)
                );
            }
            return;
        }
        if len < 32 {
            // The first sixteen bytes and the last sixteen (which may overlap them).
            // SAFETY: as for `rep movsb`; both accesses are 16 bytes at 0 and `len - 16`, so
            // inside both ranges (`16 <= len < 32`).
            unsafe {
                std::arch::asm!(
                    "movdqu {a}, xmmword ptr [{from}]",
                    "movdqu {b}, xmmword ptr [{from} + {last}]",
                    "movdqu xmmword ptr [{to}], {a}",
                    "movdqu xmmword ptr [{to} + {last}], {b}",
                    from = in(reg) from,
                    to = in(reg) to,
                    last = in(reg) len - 16,
                    a = out(xmm_reg) _,
                    b = out(xmm_reg) _,
                    options(nostack, preserves_flags)
                );
            }
            return;
        }
        // Thirty-two bytes a step from the start, then the last thirty-two (which may overlap
        // the step before): half the loop's turns of a 16-byte step (a 100-byte value: 3
        // turns and the end, about 25 instructions instead of 32).
        // SAFETY: as for `rep movsb`; every access is 32 bytes at `i < len - 32` or at
        // `len - 32`, so inside both ranges (`len >= 32`).
        unsafe {
            std::arch::asm!(
                "2:",
                "movdqu {a}, xmmword ptr [{from} + {i}]",
                "movdqu {b}, xmmword ptr [{from} + {i} + 16]",
                "movdqu xmmword ptr [{to} + {i}], {a}",
                "movdqu xmmword ptr [{to} + {i} + 16], {b}",
                "add {i}, 32",
                "cmp {i}, {last}",
                "jb 2b",
                "movdqu {a}, xmmword ptr [{from} + {last}]",
                "movdqu {b}, xmmword ptr [{from} + {last} + 16]",
                "movdqu xmmword ptr [{to} + {last}], {a}",
                "movdqu xmmword ptr [{to} + {last} + 16], {b}",
                from = in(reg) from,
                to = in(reg) to,
                i = inout(reg) 0usize => _,
                last = in(reg) len - 32,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                options(nostack)
            );
        }
    }

    /// Copies `src` into the region at `off`. Only the writer calls this, and only on space it
    /// has reserved: no other writer touches those words, though readers may be copying them,
    /// so the partial first and last words are read, merged and stored whole.
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) {
        if src.is_empty() {
            return;
        }
        assert!(self.writable, "write through a read-only mapping");
        self.check(off, src.len(), 1);
        // Same bounds argument as in `read`.
        let merge = |pos: usize, from: usize, bytes: &[u8]| {
            // SAFETY: see `read`.
            let word = unsafe { self.word(pos) };
            let mut merged = word.load(Ordering::Relaxed).to_le_bytes();
            merged[from..from + bytes.len()].copy_from_slice(bytes);
            word.store(u64::from_le_bytes(merged), Ordering::Relaxed);
        };
        let skip = off & 7;
        let mut pos = off - skip;
        let head = (8 - skip).min(src.len());
        merge(pos, skip, &src[..head]);
        pos += 8;
        let mut chunks = src[head..].chunks_exact(8);
        for chunk in &mut chunks {
            let value = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            // SAFETY: see `read`.
            unsafe { self.word(pos) }.store(value, Ordering::Relaxed);
            pos += 8;
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            merge(pos, 0, tail);
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

/// Values at least this long are copied out of the region with `rep movsb`, which moves long
/// runs at memory speed; shorter ones eight bytes at a time, below its start-up cost.
#[cfg(target_arch = "x86_64")]
const STRING_COPY_MIN: usize = 256;
/// Values at least this long (and below [`STRING_COPY_MIN`]) are copied out of the region 16
/// bytes at a time, in SSE loads (every x86_64 CPU has SSE2); shorter ones eight at a time.
#[cfg(target_arch = "x86_64")]
const VECTOR_COPY_MIN: usize = 16;

/// [`Mapping::check`]'s failure.
#[cold]
#[inline(never)]
fn out_of_bounds(off: usize, n: usize, len: usize) -> ! {
    panic!("region access out of bounds: {off}+{n} of {len}")
}

/// Asks the CPU to start loading the cache line holding `address` into its caches. A hint
/// only: it changes nothing anyone can observe, whatever the address.
#[inline]
pub(crate) fn prefetch_line<T>(address: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` needs SSE, which every x86_64 CPU has; it never faults (not even on
    // an unmapped address) and reads nothing into the program's state.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(address.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn memfd(len: usize) -> File {
        // SAFETY: memfd_create with a valid C string; the descriptor is checked and owned once.
        let file = unsafe {
            let fd = libc::memfd_create(c"mapping-test".as_ptr(), 0);
            assert!(fd >= 0);
            File::from_raw_fd(fd)
        };
        file.set_len(len as u64).unwrap();
        file
    }

    #[test]
    fn byte_copies_at_every_alignment_and_length_touch_only_their_bytes() {
        const LEN: usize = 64;
        let map = Mapping::map(memfd(LEN), LEN, true).unwrap();
        for off in 0..LEN {
            for len in 0..=LEN - off {
                let background: Vec<u8> = (0..LEN as u8).collect();
                map.write(0, &background);
                let data: Vec<u8> = (0..len).map(|i| 0x80 | i as u8).collect();
                map.write(off, &data);
                let mut all = vec![0; LEN];
                map.read(0, &mut all);
                let mut expected = background.clone();
                expected[off..off + len].copy_from_slice(&data);
                assert_eq!(all, expected, "write at {off}+{len}");
                let mut back = vec![0; len];
                map.read(off, &mut back);
                assert_eq!(back, data, "read at {off}+{len}");
            }
        }
    }

    #[test]
    fn comparisons_at_every_alignment_and_length_see_every_byte() {
        const LEN: usize = 48;
        let map = Mapping::map(memfd(LEN), LEN, true).unwrap();
        let data: Vec<u8> = (0..LEN as u8).map(|i| i.wrapping_mul(37) | 1).collect();
        map.write(0, &data);
        for off in 0..=LEN {
            for len in 0..=LEN - off {
                let expected = &data[off..off + len];
                assert!(map.equals(off, expected), "{off}+{len}");
                for differing in 0..len {
                    let mut other = expected.to_vec();
                    other[differing] ^= 0x80;
                    assert!(!map.equals(off, &other), "{off}+{len}, byte {differing} differs");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_comparison_past_the_end_is_refused() {
        let map = Mapping::map(memfd(64), 64, false).unwrap();
        map.equals(60, b"12345");
    }

    #[test]
    fn appended_copies_match_word_copies_below_and_above_the_string_copy_length() {
        const LEN: usize = 4096;
        let map = Mapping::map(memfd(LEN), LEN, true).unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 251) as u8).collect();
        map.write(0, &data);
        for off in [0, 1, 7, 8, 13, 64, 1000] {
            for len in [0, 1, 9, 255, 256, 257, 1024, 3000] {
                let mut appended = b"head".to_vec();
                map.read_append(off, len, &mut appended);
                assert_eq!(&appended[..4], b"head", "{off}+{len}: what was there stays");
                assert_eq!(&appended[4..], &data[off..off + len], "{off}+{len}");
            }
        }
    }

    #[test]
    fn appended_copies_at_every_alignment_and_length_up_to_the_end() {
        const LEN: usize = 96;
        let map = Mapping::map(memfd(LEN), LEN, true).unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i * 37 + 11) as u8).collect();
        map.write(0, &data);
        for off in 0..=LEN {
            for len in 0..=LEN - off {
                let mut appended = b"head".to_vec();
                map.read_append(off, len, &mut appended);
                assert_eq!(&appended[..4], b"head", "{off}+{len}: what was there stays");
                assert_eq!(&appended[4..], &data[off..off + len], "{off}+{len}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn an_appended_copy_past_the_end_is_refused() {
        let map = Mapping::map(memfd(4096), 4096, false).unwrap();
        map.read_append(4000, 512, &mut Vec::new());
    }

    #[test]
    fn sizes_that_are_not_whole_words_are_refused() {
        assert!(Mapping::map(memfd(4100), 4100, false).is_err());
    }
}
