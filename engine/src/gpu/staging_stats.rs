//! What the engine's GPU staging has done: its counters ([`StagingStats`], read as
//! [`StagingCounters`] through [`crate::Engine::gpu_staging`]). The bounce pool's own counters
//! are added by the worker side (`worker/stager.rs`, `GpuStaging::counters`), which owns the
//! pool: the GPU runtimes know nothing of operations.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::GpuError;

/// Counters of the engine's GPU staging, summed over workers.
#[derive(Debug, Default)]
pub(crate) struct StagingStats {
    pub(crate) ranges_in: AtomicU64,
    pub(crate) copies_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) ranges_out: AtomicU64,
    pub(crate) copies_out: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) last_error: Mutex<Option<GpuError>>,
    pub(crate) wait_ns: AtomicU64,
    pub(crate) wait_max_ns: AtomicU64,
}

impl StagingStats {
    /// A GET's time from landing in bounce memory to its completion being posted.
    pub(crate) fn waited(&self, d: std::time::Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.wait_ns.fetch_add(ns, Ordering::Relaxed);
        self.wait_max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, e: GpuError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(e);
    }

    /// A snapshot of the staging counters (the bounce pool's fields are left at zero for the
    /// owner of the pool to fill in).
    pub(crate) fn snapshot(&self) -> StagingCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StagingCounters {
            ranges_to_device: g(&self.ranges_in),
            copies_to_device: g(&self.copies_in),
            bytes_to_device: g(&self.bytes_in),
            ranges_from_device: g(&self.ranges_out),
            copies_from_device: g(&self.copies_out),
            bytes_from_device: g(&self.bytes_out),
            errors: g(&self.errors),
            stage_wait_ns: g(&self.wait_ns),
            stage_wait_max_ns: g(&self.wait_max_ns),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            ..StagingCounters::default()
        }
    }
}

/// What the engine's GPU staging has done so far ([`crate::Engine::gpu_staging`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct StagingCounters {
    /// GET / RangeGet operations whose bytes were copied bounce → device.
    pub ranges_to_device: u64,
    /// Host → device copy launches for them (fewer than ranges when coalesced).
    pub copies_to_device: u64,
    /// Bytes copied host → device.
    pub bytes_to_device: u64,
    /// PUT operations whose bytes were copied device → bounce.
    pub ranges_from_device: u64,
    /// Device → host copy launches for them.
    pub copies_from_device: u64,
    /// Bytes copied device → host.
    pub bytes_from_device: u64,
    /// Copies or event queries that failed (their operations completed with `EIO`).
    pub errors: u64,
    /// Sum over staged GETs of the time from their bytes landing in bounce memory to their
    /// completion being posted (copy queueing, the copy, and the worker noticing its event):
    /// what the staging adds to a GET's latency. Divide by `ranges_to_device` for the mean.
    pub stage_wait_ns: u64,
    /// The longest such wait.
    pub stage_wait_max_ns: u64,
    /// The last such failure.
    pub last_error: Option<GpuError>,
    /// The most pinned memory the bounce pool may hold (`EngineBuilder::gpu_bounce_bytes`,
    /// rounded down to 4 KiB): also the longest operation it can serve.
    pub bounce_capacity: u64,
    /// Pinned host bytes the pool holds now: 0 until the first operation on device memory,
    /// then growing by segments as operations in flight need them, up to `bounce_capacity`
    /// (registering device memory allocates none).
    pub bounce_pinned_bytes: u64,
    /// Pinned segments the pool has allocated over its life.
    pub bounce_segments: u64,
    /// Bytes of the pool held by operations now (each range rounded up to 4 KiB).
    pub bounce_in_use_bytes: u64,
    /// The most bytes held at once.
    pub bounce_peak_bytes: u64,
    /// Bounce ranges handed out (one per device operation).
    pub bounce_acquired: u64,
    /// Operations that had to wait for pool memory (they queue in arrival order).
    pub bounce_waits: u64,
    /// Operations waiting for pool memory now.
    pub bounce_waiting: u64,
    /// Operations refused because they are longer than the whole pool (completed with
    /// `TooLarge`, class `Local`: split them, or raise `gpu_bounce_bytes`).
    pub bounce_too_large: u64,
}
