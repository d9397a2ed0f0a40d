//! A provided-buffer ring: receive buffers the kernel picks from for multishot receives.
//!
//! The worker owns `count` buffers of `size` bytes and a ring of `count` entries naming them,
//! both shared with the kernel. A receive completion names the buffer it filled; the worker
//! copies the bytes out ([`BufRing::get`]), hands the buffer back ([`BufRing::recycle`]) and,
//! before it next enters the kernel, makes the returned buffers visible ([`BufRing::publish`]).

use io_uring::types::BufRingEntry;
use io_uring::IoUring;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

/// The group id the worker's receives select from (one group per ring).
pub const GROUP: u16 = 0;

/// Memory shared with the kernel, page-aligned, freed on drop.
struct Shared {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Shared {
    fn new(bytes: usize) -> io::Result<Shared> {
        let layout = Layout::from_size_align(bytes.max(1), 4096).map_err(io::Error::other)?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(Shared { ptr, layout })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered buffer ring and its buffers.
pub struct BufRing {
    entries: Shared,
    data: Shared,
    count: u16,
    size: usize,
    /// The next entry to fill; published to the kernel by [`BufRing::publish`].
    tail: u16,
}

impl BufRing {
    /// Registers `count` (a power of two) buffers of `size` bytes with `ring`, all free.
    /// The ring must be dropped (or the group unregistered) before this.
    pub fn register(ring: &IoUring, count: u16, size: usize) -> io::Result<BufRing> {
        if !count.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the buffer count must be a power of two",
            ));
        }
        let entries = Shared::new(usize::from(count) * std::mem::size_of::<BufRingEntry>())?;
        let data = Shared::new(usize::from(count) * size)?;
        let mut bufs = BufRing { entries, data, count, size, tail: 0 };
        // SAFETY: the entries stay allocated as long as `bufs`, which the caller keeps until
        // the ring is gone.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.entries.ptr.as_ptr() as u64,
                count,
                GROUP,
                0,
            )?
        };
        for bid in 0..count {
            bufs.recycle(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// How many buffers the ring has.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// The `len` bytes the kernel received into buffer `bid`.
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        let bid = usize::from(bid % self.count);
        // SAFETY: buffer `bid` lies inside `data`; the kernel filled it and, until it is
        // recycled (which takes `&mut self`, so not while this slice lives), writes no more to it.
        unsafe { std::slice::from_raw_parts(self.data.ptr.as_ptr().add(bid * self.size), len.min(self.size)) }
    }

    /// Gives buffer `bid` back to the kernel (visible from the next [`BufRing::publish`]).
    pub fn recycle(&mut self, bid: u16) {
        let bid = bid % self.count;
        let index = usize::from(self.tail & (self.count - 1));
        let addr = self.data.ptr.as_ptr() as u64 + u64::from(bid) * self.size as u64;
        // SAFETY: `index` < `count`, the entries allocated; the kernel reads only entries
        // between its head and the published tail, and this one is at the unpublished tail.
        let entry = unsafe { &mut *self.entries.ptr.as_ptr().cast::<BufRingEntry>().add(index) };
        entry.set_addr(addr);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Publishes the recycled buffers: the entries written before are visible to the kernel.
    pub fn publish(&self) {
        // SAFETY: the tail is a u16 inside the first entry, aligned and shared with the
        // kernel, which reads it atomically; the release store orders the entries before it.
        let tail = unsafe { &*BufRingEntry::tail(self.entries.ptr.as_ptr().cast()).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}
