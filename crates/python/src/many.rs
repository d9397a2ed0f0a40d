//! Multigets (`get_many`, `gets_many`, `get_many_flagged`): a dict keyed by the caller's own key
//! objects. Keys whose server is read through shared memory are read first, under the
//! interpreter lock, each value copied once, straight from the region into the `bytes` object
//! the dict keeps; the others (and all of them while another thread holds the client) go the
//! way of every call, without the interpreter lock:
//!
//! ```text
//!   keys ──► Pool::get_many_local (GIL held) ──► region ──copy──► bytes ──► dict
//!        └─► the rest: detach ──► Pool::get_many_each ──► Hits ──attach──► bytes ──► dict
//! ```
//!
//! A lookup may copy a value that a writer is changing; it validates the copy after, and
//! retries. Each copy builds a new `bytes` ([`BytesGather`]'s pending one); only a copy
//! validated and judged a hit is kept, so a torn value never reaches Python.

use crate::{key_bytes, raise, Client};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use shoal_client::{Gather, ItemInfo, Pool, ValueSink};
use std::borrow::Cow;
use std::sync::TryLockError;

/// Local reads' values, each a `bytes` built straight from the region.
struct BytesGather<'py> {
    py: Python<'py>,
    /// The last copy, not judged yet: a hit keeps it, anything else drops it.
    pending: Option<Bound<'py, PyBytes>>,
    /// (key index, value, flags, CAS) of each hit.
    found: Vec<(usize, Bound<'py, PyBytes>, u32, u64)>,
    /// A `bytes` that could not be allocated.
    error: Option<PyErr>,
    /// What `append_to` hands out: unused, as `fill` takes every copy.
    spare: Vec<u8>,
}

impl ValueSink for BytesGather<'_> {
    fn append_to(&mut self, _item: &ItemInfo) -> &mut Vec<u8> {
        self.spare.clear();
        &mut self.spare
    }

    fn fill(&mut self, item: &ItemInfo, copy: &mut dyn FnMut(&mut [u8])) -> bool {
        self.pending = None;
        match PyBytes::new_with(self.py, item.value_len, |buf| {
            copy(buf);
            Ok(())
        }) {
            Ok(value) => self.pending = Some(value),
            Err(e) => _ = self.error.get_or_insert(e),
        }
        true
    }
}

impl Gather for BytesGather<'_> {
    fn hit(&mut self, index: usize, flags: u32, cas: u64) {
        // No pending value: its `bytes` could not be allocated (`error` says so).
        if let Some(value) = self.pending.take() {
            self.found.push((index, value, flags, cas));
        }
    }

    fn discard(&mut self) {
        self.pending = None;
    }
}

/// The local part of a multiget into `gather`; the indexes left for the network path.
fn local_part(pool: &mut Option<Pool>, keys: &[&[u8]], gather: &mut BytesGather<'_>) -> PyResult<Vec<usize>> {
    match pool {
        Some(pool) => pool.get_many_local(keys, gather).map_err(raise),
        None => Ok((0..keys.len()).collect()), // closed: the network path says so
    }
}

impl Client {
    /// A multiget's hits as a dict keyed by the caller's own key objects, each value made
    /// into what the dict holds by `entry(value, flags, cas)`.
    pub(crate) fn many<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<Bound<'py, PyAny>>,
        entry: impl Fn(Bound<'py, PyBytes>, u32, u64) -> PyResult<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let raw: Vec<Cow<'_, [u8]>> = keys.iter().map(key_bytes).collect::<PyResult<_>>()?;
        let refs: Vec<&[u8]> = raw.iter().map(|k| &**k).collect();
        let mut gather = BytesGather { py, pending: None, found: Vec::new(), error: None, spare: Vec::new() };
        // Waiting for the client with the interpreter lock held could deadlock against a
        // thread that holds the client and waits for the interpreter lock: when the client is
        // busy, every key goes the detached way.
        let rest = match self.inner.try_lock() {
            Ok(mut pool) => local_part(&mut pool, &refs, &mut gather)?,
            Err(TryLockError::Poisoned(pool)) => local_part(&mut pool.into_inner(), &refs, &mut gather)?,
            Err(TryLockError::WouldBlock) => (0..keys.len()).collect(),
        };
        if let Some(e) = gather.error {
            return Err(e);
        }
        let dict = PyDict::new(py);
        for (i, value, flags, cas) in gather.found {
            dict.set_item(&keys[i], entry(value, flags, cas)?)?;
        }
        if rest.is_empty() {
            return Ok(dict);
        }
        let mut hits = std::mem::take(&mut *self.hits.lock().unwrap_or_else(|p| p.into_inner()));
        hits.clear();
        self.call(py, |c| {
            let asked: Vec<&[u8]> = rest.iter().map(|&i| refs[i]).collect();
            c.get_many_each(&asked, |j, item| hits.push(rest[j], item))
        })?;
        for (i, item) in hits.iter() {
            dict.set_item(&keys[i], entry(PyBytes::new(py, item.value), item.flags, item.cas)?)?;
        }
        if hits.worth_keeping() {
            *self.hits.lock().unwrap_or_else(|p| p.into_inner()) = hits;
        }
        Ok(dict)
    }
}
