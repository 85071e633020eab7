//! The worker's GPU stager: completions of operations on device registrations.
//!
//! A device registration ([`crate::Engine::register_device`]) is a device range with no host
//! memory; each operation on it holds a range of the engine's pinned bounce pool
//! (`memory::bounce`) from when it starts. The fabrics move bytes into and out of that range
//! exactly as for host memory; this module moves them between the range and VRAM, on the
//! worker thread, without ever blocking it:
//!
//! - **GET / RangeGet**: when the fabric reports an operation done, the worker hands it here
//!   ([`Stager::land`]) instead of completing it. At the end of the turn [`Stager::flush`] sorts
//!   everything that landed by (device, registration, offset), merges ranges contiguous on both
//!   sides into copies of at most the coalescing limit ([`crate::gpu::coalesce::plan`]), queues the
//!   host → device copies on the stager's own stream and records one event after them.
//!   While two such batches are in flight, newly landed GETs wait for the next one, so a busy
//!   copy engine makes batches larger instead of launches more numerous.
//!   [`Stager::poll`] queries the events (`cuEventQuery`, non-blocking) and gives back the
//!   operations whose copies have finished; only then does the worker post their completions
//!   (CQE with the caller's `user_data`) and release their leases.
//! - **PUT**: before the fabric starts an operation whose source is a device registration, the
//!   worker hands it here ([`Stager::stage_out`]); the device → host copies are queued (merged
//!   likewise) on a second stream at the end of the turn, and the operation goes back to the
//!   ready queue once their event has completed. A retried PUT is not copied again (it keeps
//!   its bounce range until it ends).
//!
//! The stager lives in a thread local of the worker thread (one per worker, created on first
//! use); on thread exit it waits for its streams before it drops the operations it holds, so no
//! copy outlives the memory it touches.
//!
//! `#[allow(unsafe_code)]`: the asynchronous copies are `unsafe fn`s of the runtime; their
//! contract is kept by holding each operation (hence its lease on the registration and its
//! bounce range) until the event recorded after its copy has completed.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use ring_api::{Cqe, ErrorClass, ErrorCode};

use crate::gpu::coalesce::{CopyRange, plan};
use crate::gpu::{DevicePtr, GpuError, GpuEvent, GpuRuntime, GpuStream};
use crate::inflight::{InFlight, OpKey};
use crate::memory::{DeviceSpan, LeaseGuard};

use crate::gpu::StagingCounters;
pub(crate) use crate::gpu::staging_stats::StagingStats;
use crate::memory::bounce::BouncePool;

/// GPU staging configuration shared by the engine's workers.
#[derive(Debug)]
pub(crate) struct GpuStaging {
    pub(crate) rt: Arc<dyn GpuRuntime>,
    /// The pinned memory every device operation is staged through.
    pub(crate) pool: Arc<BouncePool>,
    /// Largest merged copy in bytes; 0 = one copy per operation.
    pub(crate) coalesce_limit: u64,
    /// Longest in-turn wait for small copies (`Stager::poll_briefly`); zero = none.
    pub(crate) poll_spin: std::time::Duration,
    pub(crate) stats: StagingStats,
}

impl GpuStaging {
    /// The staging counters with the bounce pool's.
    pub(crate) fn counters(&self) -> StagingCounters {
        let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let p = &self.pool.stats;
        StagingCounters {
            bounce_capacity: self.pool.capacity(),
            bounce_pinned_bytes: g(&p.pinned),
            bounce_in_use_bytes: g(&p.in_use),
            bounce_peak_bytes: g(&p.peak),
            bounce_acquired: g(&p.acquired),
            bounce_waits: g(&p.waits),
            bounce_waiting: self.pool.waiting() as u64,
            bounce_too_large: g(&p.too_large),
            bounce_segments: g(&p.segments),
            ..self.stats.snapshot()
        }
    }
}

/// Takes the leading run of `items` that share the first item's device `ordinal` (the items
/// are sorted by device first): one run is one batch of copies on that device's stream.
fn take_device_run<T>(items: &mut Vec<T>, ordinal: impl Fn(&T) -> u32) -> (u32, Vec<T>) {
    let first = items.first().map_or(0, &ordinal);
    let n = items
        .iter()
        .position(|i| ordinal(i) != first)
        .unwrap_or(items.len());
    let rest = items.split_off(n);
    (first, std::mem::replace(items, rest))
}

/// Host → device batches in flight at once. While both are busy, landed GETs wait and join
/// the next batch: the copy engine stays fed (one batch runs while the next is queued) and
/// everything that lands meanwhile is merged into as few copies as the layout allows.
const MAX_GET_BATCHES: usize = 2;

/// Host → device bytes in flight up to which the worker waits for them in the same turn
/// ([`Stager::poll_briefly`]): at ≥ 17 GB/s (64 KiB copies on the H200) 2 MiB take ≤ 120 µs,
/// less than a loaded worker turn, so spinning on the event posts the completions one turn
/// earlier for less worker time than the turn they would otherwise wait.
const SPIN_BYTES: u64 = 2 << 20;

/// Host → device bytes after which the stager records an event between the copies of one
/// batch, so an operation completes when *its* copy has finished, not when the last copy of
/// its batch has: a batch of eight 16 MiB ranges otherwise holds the first range's completion
/// for seven more copies (≈ 2 ms at 55 GB/s). Small copies share an event (an event record is
/// a driver call of a few µs, as long as a 64 KiB copy), so 64 KiB ranges pay ≈ one record
/// per MiB.
pub(crate) const EVENT_BYTES: u64 = 1 << 20;

/// Operations whose copies were queued together on one stream.
///
/// `events` are recorded in stream order between the copies, each with the number of the
/// batch's copies queued before it; `items` are in copy order, each with the number of copies
/// that must have finished before it may be released. A completed event therefore releases a
/// prefix of `items` (the stream runs its copies in order, so earlier events complete first).
#[derive(Debug)]
struct Batch<T> {
    ordinal: u32,
    events: VecDeque<(GpuEvent, usize)>,
    items: VecDeque<(usize, T)>,
    /// Bytes the batch copies.
    bytes: u64,
}

impl<T> Batch<T> {
    /// Pops the items whose copies are covered by an event that completed; spare events go to
    /// `spare`. `Ok(true)` when the batch is finished.
    fn advance(
        &mut self,
        spare: &mut Vec<(u32, GpuEvent)>,
        out: &mut impl FnMut(T),
    ) -> Result<bool, GpuError> {
        while let Some((event, _)) = self.events.front() {
            if !event.is_complete()? {
                return Ok(false);
            }
            if let Some((event, upto)) = self.events.pop_front() {
                spare.push((self.ordinal, event));
                while self.items.front().is_some_and(|(need, _)| *need <= upto) {
                    if let Some((_, item)) = self.items.pop_front() {
                        out(item);
                    }
                }
            }
        }
        // Every event completed: anything left (none by construction) is done too.
        for (_, item) in self.items.drain(..) {
            out(item);
        }
        Ok(true)
    }
}

/// For items whose spans are `spans` (sorted, in the order `plan` saw them), the number of
/// `copies` that must have finished before each item's bytes are all on the other side.
fn copies_needed(spans: &[DeviceSpan], copies: &[CopyRange]) -> Vec<usize> {
    let mut c = 0usize;
    spans
        .iter()
        .map(|s| {
            if s.len == 0 {
                return c;
            }
            let (at, src) = (s.dev.addr, s.host.as_ptr() as u64);
            let inside = |k: &CopyRange| {
                (k.dst..k.dst.saturating_add(k.len)).contains(&at)
                    && (k.src..k.src.saturating_add(k.len)).contains(&src)
            };
            while copies.get(c).is_some_and(|k| !inside(k)) {
                c += 1;
            }
            // A span not found (impossible: the plan covers every span) waits for all.
            if c >= copies.len() {
                return copies.len();
            }
            c + 1
        })
        .collect()
}

/// A PUT waiting for its device → host copy: its key and a shared lease of its own (holding
/// the operation's bounce range too, so the range outlives the copy even if the operation is
/// cancelled meanwhile).
#[derive(Debug)]
struct Outgoing {
    key: OpKey,
    span: DeviceSpan,
    _lease: LeaseGuard,
}

/// One worker's staging state.
#[derive(Debug)]
pub(crate) struct Stager {
    rt: Arc<dyn GpuRuntime>,
    coalesce_limit: u64,
    poll_spin: std::time::Duration,
    /// Streams per device ordinal: (ordinal, host → device, device → host).
    streams: Vec<(u32, GpuStream, GpuStream)>,
    spare_events: Vec<(u32, GpuEvent)>,
    landed: Vec<(DeviceSpan, InFlight, Cqe, std::time::Instant)>,
    gets: VecDeque<Batch<(InFlight, Cqe, std::time::Instant)>>,
    leaving: Vec<Outgoing>,
    puts: VecDeque<Batch<Outgoing>>,
    /// PUTs whose device → host copy could not be queued (the worker fails them).
    failed_out: Vec<OpKey>,
}

/// What [`Stager::poll`] found finished.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    /// GETs whose bytes are on the device (or whose copy failed: `EIO`), with their CQEs.
    pub(crate) done: Vec<(InFlight, Cqe)>,
    /// PUTs whose bytes are now in bounce memory: ready to start.
    pub(crate) staged_out: Vec<OpKey>,
    /// PUTs whose device → host copy failed: complete them with `EIO`.
    pub(crate) failed_out: Vec<OpKey>,
}

impl Finished {
    /// Whether anything finished.
    pub(crate) fn is_empty(&self) -> bool {
        self.done.is_empty() && self.staged_out.is_empty() && self.failed_out.is_empty()
    }
}

thread_local! {
    static STAGER: RefCell<Option<Stager>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's stager, creating it from `cfg` on first use.
pub(crate) fn with<R>(cfg: &GpuStaging, f: impl FnOnce(&mut Stager) -> R) -> R {
    STAGER.with(|cell| {
        let mut slot = cell.borrow_mut();
        let s = slot.get_or_insert_with(|| Stager::new(cfg));
        f(s)
    })
}

/// Runs `f` on this thread's stager if one exists (no device operation ever seen: `None`).
pub(crate) fn with_existing<R>(f: impl FnOnce(&mut Stager) -> R) -> Option<R> {
    STAGER.with(|cell| cell.borrow_mut().as_mut().map(f))
}

fn io_error(cqe_user_data: u64) -> Cqe {
    Cqe::error(cqe_user_data, ErrorCode::Io, ErrorClass::Local)
}

impl Stager {
    fn new(cfg: &GpuStaging) -> Self {
        Self {
            rt: Arc::clone(&cfg.rt),
            coalesce_limit: cfg.coalesce_limit,
            poll_spin: cfg.poll_spin,
            streams: Vec::new(),
            spare_events: Vec::new(),
            landed: Vec::new(),
            gets: VecDeque::new(),
            leaving: Vec::new(),
            puts: VecDeque::new(),
            failed_out: Vec::new(),
        }
    }

    /// Whether copies are queued or in flight (the worker must keep polling).
    pub(crate) fn pending(&self) -> bool {
        !(self.landed.is_empty()
            && self.gets.is_empty()
            && self.leaving.is_empty()
            && self.puts.is_empty()
            && self.failed_out.is_empty())
    }

    /// A GET whose bytes are in bounce memory (`span`, already cut to the bytes received)
    /// and whose completion is `cqe`, to be posted after the copy to the device.
    pub(crate) fn land(&mut self, span: DeviceSpan, op: InFlight, cqe: Cqe) {
        self.landed.push((span, op, cqe, std::time::Instant::now()));
    }

    /// A PUT (`key`) whose source must be copied device → bounce before it starts; `lease`
    /// is a shared lease on the same range, held until the copy has finished.
    pub(crate) fn stage_out(&mut self, key: OpKey, span: DeviceSpan, lease: LeaseGuard) {
        self.leaving.push(Outgoing {
            key,
            span,
            _lease: lease,
        });
    }

    fn streams(&mut self, ordinal: u32) -> Result<&(u32, GpuStream, GpuStream), GpuError> {
        let i = match self.streams.iter().position(|s| s.0 == ordinal) {
            Some(i) => i,
            None => {
                let h2d = GpuStream::new(&self.rt, ordinal)?;
                let d2h = GpuStream::new(&self.rt, ordinal)?;
                self.streams.push((ordinal, h2d, d2h));
                self.streams.len() - 1
            }
        };
        self.streams
            .get(i)
            .ok_or_else(|| GpuError::InvalidArgument("stager stream table".into()))
    }

    fn event(&mut self, ordinal: u32) -> Result<GpuEvent, GpuError> {
        match self.spare_events.iter().position(|e| e.0 == ordinal) {
            Some(i) => Ok(self.spare_events.swap_remove(i).1),
            None => GpuEvent::new(&self.rt, ordinal, false),
        }
    }

    /// Merged copies for spans sorted by (ordinal, handle, offset), one ordinal.
    fn plan(&self, spans: &[DeviceSpan]) -> Vec<CopyRange> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < spans.len() {
            let handle = spans.get(start).map_or(0, |s| s.handle);
            let end = spans
                .iter()
                .skip(start)
                .position(|s| s.handle != handle)
                .map_or(spans.len(), |n| start + n);
            let group: Vec<CopyRange> = spans
                .get(start..end)
                .unwrap_or_default()
                .iter()
                .map(|s| CopyRange {
                    src: s.host.as_ptr() as u64,
                    dst: s.dev.addr,
                    len: s.len,
                })
                .collect();
            if self.coalesce_limit == 0 {
                out.extend(group.into_iter().filter(|c| c.len > 0));
            } else {
                out.extend(plan(&group, self.coalesce_limit));
            }
            start = end;
        }
        out
    }

    /// Queues the copies of everything landed or leaving this turn. Operations whose copies
    /// could not be queued are returned in `failed` with an `EIO` completion.
    pub(crate) fn flush(&mut self, stats: &StagingStats, failed: &mut Vec<(InFlight, Cqe)>) {
        if !self.landed.is_empty() && self.gets.len() < MAX_GET_BATCHES {
            let mut landed = std::mem::take(&mut self.landed);
            landed.sort_by_key(|(s, ..)| (s.dev.ordinal, s.handle, s.off));
            while !landed.is_empty() {
                let (ordinal, group) = take_device_run(&mut landed, |l| l.0.dev.ordinal);
                let spans: Vec<DeviceSpan> = group.iter().map(|g| g.0).collect();
                let copies = self.plan(&spans);
                let bytes: u64 = copies.iter().map(|c| c.len).sum();
                let needs = copies_needed(&spans, &copies);
                match self.queue(ordinal, &copies, true) {
                    Ok(events) => {
                        stats
                            .ranges_in
                            .fetch_add(group.len() as u64, Ordering::Relaxed);
                        stats
                            .copies_in
                            .fetch_add(copies.len() as u64, Ordering::Relaxed);
                        stats.bytes_in.fetch_add(bytes, Ordering::Relaxed);
                        self.gets.push_back(Batch {
                            ordinal,
                            events,
                            items: needs
                                .into_iter()
                                .zip(group)
                                .map(|(need, (_, op, cqe, t))| (need, (op, cqe, t)))
                                .collect(),
                            bytes,
                        });
                    }
                    Err(e) => {
                        stats.error(e);
                        failed.extend(
                            group
                                .into_iter()
                                .map(|(_, op, cqe, _)| (op, io_error(cqe.user_data()))),
                        );
                    }
                }
            }
        }
        if !self.leaving.is_empty() {
            let mut leaving = std::mem::take(&mut self.leaving);
            leaving.sort_by_key(|o| (o.span.dev.ordinal, o.span.handle, o.span.off));
            while !leaving.is_empty() {
                let (ordinal, group) = take_device_run(&mut leaving, |l| l.span.dev.ordinal);
                // Each PUT has a bounce range of its own, so two PUTs of the same device bytes
                // are two copies (into two ranges); the plan merges only ranges contiguous on
                // both sides.
                let spans: Vec<DeviceSpan> = group.iter().map(|g| g.span).collect();
                let copies = self.plan(&spans);
                let bytes: u64 = copies.iter().map(|c| c.len).sum();
                let all = copies.len();
                match self.queue(ordinal, &copies, false) {
                    Ok(events) => {
                        stats
                            .ranges_out
                            .fetch_add(group.len() as u64, Ordering::Relaxed);
                        stats
                            .copies_out
                            .fetch_add(copies.len() as u64, Ordering::Relaxed);
                        stats.bytes_out.fetch_add(bytes, Ordering::Relaxed);
                        // Each PUT waits for the whole batch (one event after its last copy).
                        self.puts.push_back(Batch {
                            ordinal,
                            events,
                            items: group.into_iter().map(|o| (all, o)).collect(),
                            bytes,
                        });
                    }
                    Err(e) => {
                        stats.error(e);
                        // Nothing was read by a fabric yet; the worker fails these keys.
                        self.failed_out.extend(group.into_iter().map(|o| o.key));
                    }
                }
            }
        }
    }

    /// Queues `copies` on the ordinal's stream for the direction and records events: host →
    /// device, after every [`EVENT_BYTES`] and after the last copy; device → host, after the
    /// last copy only. Each event comes with the number of copies queued before it.
    fn queue(
        &mut self,
        ordinal: u32,
        copies: &[CopyRange],
        to_device: bool,
    ) -> Result<VecDeque<(GpuEvent, usize)>, GpuError> {
        // Events first (creating one may fail; then nothing has been queued yet).
        let mut marks = Vec::new();
        let mut since = 0u64;
        for (i, c) in copies.iter().enumerate() {
            since = since.saturating_add(c.len);
            let last = i + 1 == copies.len();
            if last || (to_device && since >= EVENT_BYTES) {
                marks.push(i + 1);
                since = 0;
            }
        }
        if marks.is_empty() {
            marks.push(0);
        }
        let mut events = VecDeque::with_capacity(marks.len());
        for &m in &marks {
            match self.event(ordinal) {
                Ok(e) => events.push_back((e, m)),
                Err(e) => {
                    self.spare_events
                        .extend(events.into_iter().map(|(ev, _)| (ordinal, ev)));
                    return Err(e);
                }
            }
        }
        let rt = Arc::clone(&self.rt);
        let (_, h2d, d2h) = match self.streams(ordinal) {
            Ok(s) => s,
            Err(e) => {
                self.spare_events
                    .extend(events.into_iter().map(|(ev, _)| (ordinal, ev)));
                return Err(e);
            }
        };
        let stream = if to_device { h2d } else { d2h };
        let result = (|| {
            let mut next = events.iter().peekable();
            while let Some((ev, 0)) = next.peek() {
                stream.record(ev)?;
                next.next();
            }
            for (i, c) in copies.iter().enumerate() {
                let len = usize::try_from(c.len)
                    .map_err(|_| GpuError::InvalidArgument("copy length".into()))?;
                let dev = DevicePtr {
                    addr: c.dst,
                    ordinal,
                };
                let host = c.src as usize as *mut u8;
                if to_device {
                    // SAFETY: `host..+len` lies in the bounce ranges of operations (each owning
                    // its range, holding an exclusive lease over its device bytes) that the
                    // stager keeps until the event recorded below has completed; merged copies
                    // join only ranges contiguous on both sides. `dev..+len` lies in the
                    // device range of the registration (checked at registration and by the
                    // lease bounds), and merged copies never cross a registration.
                    unsafe { rt.memcpy_h2d_async(dev, host, len, stream.raw())? };
                } else {
                    // SAFETY: as above with the roles swapped; the stager holds a shared lease
                    // on the device bytes (keeping every writer away) and, through it, the
                    // operation's bounce range, until the event.
                    unsafe { rt.memcpy_d2h_async(host, dev, len, stream.raw())? };
                }
                if let Some((ev, _)) = next.next_if(|(_, m)| *m == i + 1) {
                    stream.record(ev)?;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(events),
            Err(e) => {
                // Copies queued before the failure may still run: wait for them before the
                // caller drops the operations (best effort; a broken context fails here too).
                let _ = stream.synchronize();
                Err(e)
            }
        }
    }

    /// Collects what has finished: operations whose copies are covered by a completed event
    /// (non-blocking queries, in stream order).
    pub(crate) fn poll(&mut self, stats: &StagingStats, out: &mut Finished) {
        out.failed_out.append(&mut self.failed_out);
        let mut i = 0;
        while i < self.gets.len() {
            let Some(b) = self.gets.get_mut(i) else { break };
            let now = std::time::Instant::now();
            let state = b.advance(&mut self.spare_events, &mut |(op, cqe, t)| {
                stats.waited(now.saturating_duration_since(t));
                out.done.push((op, cqe));
            });
            match state {
                Ok(false) => i += 1,
                Ok(true) => {
                    self.gets.remove(i);
                }
                Err(e) => {
                    stats.error(e);
                    if let Some(b) = self.gets.remove(i) {
                        self.sync_ordinal(b.ordinal);
                        out.done.extend(
                            b.items
                                .into_iter()
                                .map(|(_, (op, cqe, _))| (op, io_error(cqe.user_data()))),
                        );
                    }
                }
            }
        }
        let mut i = 0;
        while i < self.puts.len() {
            let Some(b) = self.puts.get_mut(i) else { break };
            let state = b.advance(&mut self.spare_events, &mut |o: Outgoing| {
                out.staged_out.push(o.key);
            });
            match state {
                Ok(false) => i += 1,
                Ok(true) => {
                    self.puts.remove(i);
                }
                Err(e) => {
                    stats.error(e);
                    if let Some(b) = self.puts.remove(i) {
                        self.sync_ordinal(b.ordinal);
                        out.failed_out
                            .extend(b.items.into_iter().map(|(_, o)| o.key));
                    }
                }
            }
        }
    }

    /// [`Stager::poll`], then, while only a few small host → device copies are in flight
    /// (≤ [`SPIN_BYTES`]), keeps querying their events for at most the configured spin
    /// ([`crate::gpu::DEFAULT_POLL_SPIN`]), so their
    /// completions go out with this turn instead of the next one. Never a blocking sync: a
    /// copy that takes longer is simply found done on a later turn.
    pub(crate) fn poll_briefly(&mut self, stats: &StagingStats, out: &mut Finished) {
        self.poll(stats, out);
        let small = |s: &Self| {
            !s.gets.is_empty() && s.gets.iter().map(|b| b.bytes).sum::<u64>() <= SPIN_BYTES
        };
        if self.poll_spin.is_zero() || !small(self) {
            return;
        }
        let start = std::time::Instant::now();
        while small(self) && start.elapsed() < self.poll_spin {
            std::hint::spin_loop();
            self.poll(stats, out);
        }
    }

    /// Best-effort wait for both streams of `ordinal` (after a failed event query, before the
    /// memory of the operations involved is released).
    fn sync_ordinal(&self, ordinal: u32) {
        for (o, h2d, d2h) in &self.streams {
            if *o == ordinal {
                let _ = h2d.synchronize();
                let _ = d2h.synchronize();
            }
        }
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        // Every queued copy must finish before the operations (and their leases on the bounce
        // memory and registrations) are dropped with the fields below.
        for (_, h2d, d2h) in &self.streams {
            let _ = h2d.synchronize();
            let _ = d2h.synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::NonNull;

    fn span(handle: u32, off: u64, len: u64) -> DeviceSpan {
        DeviceSpan {
            handle,
            off,
            len,
            host: NonNull::new((0x1000 + off) as usize as *mut u8).unwrap(),
            dev: DevicePtr {
                addr: 0x9000_0000 + off,
                ordinal: 0,
            },
        }
    }

    fn copy(span: &DeviceSpan, len: u64) -> CopyRange {
        CopyRange {
            src: span.host.as_ptr() as u64,
            dst: span.dev.addr,
            len,
        }
    }

    #[test]
    fn each_range_waits_only_for_the_copy_that_carries_it() {
        // Four adjacent 16 MiB ranges with an 8 MiB limit: four copies, one per range.
        let m = 16u64 << 20;
        let spans: Vec<_> = (0..4).map(|i| span(1, i * m, m)).collect();
        let copies: Vec<_> = spans.iter().map(|s| copy(s, m)).collect();
        assert_eq!(copies_needed(&spans, &copies), vec![1, 2, 3, 4]);
        // Three 64 KiB ranges merged into one copy, then a fourth apart: 1, 1, 1, 2.
        let k = 64u64 << 10;
        let spans = vec![
            span(1, 0, k),
            span(1, k, k),
            span(1, 2 * k, k),
            span(1, 10 * k, k),
        ];
        let copies = vec![copy(&spans[0], 3 * k), copy(&spans[3], k)];
        assert_eq!(copies_needed(&spans, &copies), vec![1, 1, 1, 2]);
        // An empty range waits for nothing beyond the copies before it.
        let spans = vec![span(1, 0, 0), span(1, 0, k)];
        assert_eq!(copies_needed(&spans, &[copy(&spans[1], k)]), vec![0, 1]);
        // A range the plan does not cover (never produced) waits for every copy.
        let spans = vec![span(1, 0, k), span(2, 50 * k, k)];
        assert_eq!(copies_needed(&spans, &[copy(&spans[0], k)]), vec![1, 1]);
    }
}
