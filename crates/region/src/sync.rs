//! Atomics used by the read-validate protocol, swapped for loom's under `--cfg loom` so that
//! the protocol in [`crate::seqlock`] is model-checked with the very code the store runs.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
