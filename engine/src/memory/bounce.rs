//! The bounce pool: bounded pinned host memory that operations on device registrations are
//! staged through.
//!
//! A device registration ([`crate::Engine::register_device`]) owns no host memory. An
//! operation on one takes a [`BounceRange`] of exactly its length from the engine's one
//! [`BouncePool`] when it starts (the worker calls [`BouncePool::acquire`]) and keeps it until
//! it ends — retries included, and for a GET until the copy into VRAM has finished (the stager
//! holds the operation until then). The fabrics write a GET's bytes into the range and read a
//! PUT's bytes from it; the stager copies between the range and VRAM.
//!
//! The pool's memory is pinned by the GPU runtime (`cuMemHostAlloc`) in segments: the first on
//! the first device operation (an engine that never moves device bytes pins nothing), more as
//! operations in flight need them, up to the pool's capacity. Each segment is carved by a
//! first-fit [`RangeAllocator`] that never hands out overlapping ranges.
//!
//! When the pool is at capacity and cannot satisfy a request, the operation waits: the pool keeps one FIFO of
//! tickets over every worker, and only the oldest ticket may take memory, so operations get
//! their ranges in order of arrival (a large one is not overtaken forever by small ones).
//! Releasing memory (or dropping the oldest ticket) wakes the worker holding the new oldest
//! ticket through its `mio::Waker`; the worker then retries ([`BouncePool::retry`]). No
//! thread ever blocks on the pool except for the lock held during a few list operations (and,
//! once, the pinned allocation).

use std::collections::{BTreeMap, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mio::Waker;

use super::raw::RawMem;
use crate::gpu::{GpuError, GpuRuntime};

/// Granularity (and alignment) of bounce ranges: one host page, so every range starts on a
/// page boundary (what DMA engines and `ibv_reg_mr` like best).
pub(crate) const GRANULE: u64 = 4096;

/// Hands out non-overlapping, [`GRANULE`]-aligned ranges of `0..capacity` (first fit; freed
/// neighbours merge).
#[derive(Debug)]
pub(crate) struct RangeAllocator {
    capacity: u64,
    /// Free extents: start → length. INVARIANT: disjoint, non-adjacent (merged), inside
    /// `0..capacity`, granule-aligned.
    free: BTreeMap<u64, u64>,
    used: u64,
}

impl RangeAllocator {
    /// An allocator over `capacity` bytes (rounded down to [`GRANULE`]).
    pub(crate) fn new(capacity: u64) -> Self {
        let capacity = capacity - capacity % GRANULE;
        let mut free = BTreeMap::new();
        if capacity > 0 {
            free.insert(0, capacity);
        }
        Self {
            capacity,
            free,
            used: 0,
        }
    }

    /// Bytes managed.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes handed out (rounded to granules).
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// The bytes a request of `len` occupies (at least one granule).
    pub(crate) fn rounded(len: u64) -> Option<u64> {
        len.max(1).checked_next_multiple_of(GRANULE)
    }

    /// `(offset, occupied bytes)` of a free range of at least `len` bytes, or `None` when no
    /// free extent is large enough.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let need = Self::rounded(len)?;
        let (&start, &have) = self.free.iter().find(|&(_, &l)| l >= need)?;
        self.free.remove(&start);
        if have > need {
            self.free.insert(start + need, have - need);
        }
        self.used += need;
        Some((start, need))
    }

    /// Returns `(offset, occupied)` from [`RangeAllocator::alloc`]. A range that is not
    /// wholly allocated (a double free, a foreign range) is ignored and `false` returned.
    pub(crate) fn free(&mut self, off: u64, len: u64) -> bool {
        let Some(end) = off.checked_add(len) else {
            return false;
        };
        if len == 0 || end > self.capacity {
            return false;
        }
        // Must not overlap a free extent.
        let before = self.free.range(..end).next_back().map(|(&s, &l)| (s, l));
        if before.is_some_and(|(s, l)| s + l > off) {
            return false;
        }
        let mut start = off;
        let mut size = len;
        if let Some((s, l)) = before
            && s + l == off
        {
            self.free.remove(&s);
            start = s;
            size += l;
        }
        if let Some(l) = self.free.remove(&end) {
            size += l;
        }
        self.free.insert(start, size);
        self.used -= len;
        true
    }
}

/// What [`BouncePool::acquire`] gives.
#[derive(Debug)]
pub(crate) enum Acquire {
    /// The range, taken now.
    Got(BounceRange),
    /// Queued: retry with the ticket when the worker is woken (dropping it leaves the queue).
    Wait(Ticket),
    /// Longer than the whole pool: it can never be served.
    TooLarge,
    /// The pool's pinned memory could not be allocated.
    Failed(GpuError),
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    waker: Arc<Waker>,
}

/// One pinned allocation of the pool, carved by its own allocator.
#[derive(Debug)]
struct Segment {
    /// Unique over the pool's life (ranges name their segment by it).
    id: u64,
    mem: Arc<RawMem>,
    alloc: RangeAllocator,
}

#[derive(Debug)]
struct PoolState {
    /// INVARIANT: the sum of the segments' capacities is `pinned` and never exceeds the
    /// pool's capacity.
    segments: Vec<Segment>,
    pinned: u64,
    next_segment: u64,
    waiters: VecDeque<Waiter>,
    next_ticket: u64,
}

impl PoolState {
    fn used(&self) -> u64 {
        self.segments.iter().map(|s| s.alloc.used()).sum()
    }
}

/// Counters of the pool (read through [`crate::Engine::gpu_staging`]).
#[derive(Debug, Default)]
pub(crate) struct PoolStats {
    /// Pinned bytes allocated now (0 until the first device operation; grows by segments).
    pub(crate) pinned: AtomicU64,
    pub(crate) in_use: AtomicU64,
    pub(crate) peak: AtomicU64,
    pub(crate) acquired: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) too_large: AtomicU64,
    /// Pinned segments allocated over the pool's life.
    pub(crate) segments: AtomicU64,
}

/// The engine's pinned bounce memory (see the module docs).
///
/// It grows on demand: the first device operation pins one segment of `segment` bytes, and
/// an operation that finds no room pins another (of at least its own length) until the pool
/// holds `capacity` bytes; only then do operations wait. So an engine that moves a few ranges
/// pins little, and one that keeps hundreds of 8 MiB range-gets in flight gets the bounce
/// memory they need instead of running 32 at a time.
#[derive(Debug)]
pub(crate) struct BouncePool {
    rt: Arc<dyn GpuRuntime>,
    capacity: u64,
    segment: u64,
    state: Mutex<PoolState>,
    pub(crate) stats: PoolStats,
}

impl BouncePool {
    /// A pool that pins up to `capacity` bytes (rounded down to [`GRANULE`]) from `rt`, in
    /// segments of `segment` bytes (at least one granule, at most `capacity`; a longer
    /// operation gets a segment of its own length). Nothing is allocated until the first
    /// [`BouncePool::acquire`].
    pub(crate) fn new(rt: Arc<dyn GpuRuntime>, capacity: u64, segment: u64) -> Arc<Self> {
        let capacity = capacity - capacity % GRANULE;
        let segment = RangeAllocator::rounded(segment)
            .unwrap_or(GRANULE)
            .min(capacity);
        Arc::new(Self {
            rt,
            capacity,
            segment,
            state: Mutex::new(PoolState {
                segments: Vec::new(),
                pinned: 0,
                next_segment: 0,
                waiters: VecDeque::new(),
                next_ticket: 0,
            }),
            stats: PoolStats::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most bytes the pool may pin (the longest operation it can serve).
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Operations queued for memory right now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiters.len()
    }

    /// A range of `len` bytes for a new operation: taken now when nobody waits and it fits
    /// (pinning another segment if needed and allowed), else a ticket at the back of the
    /// queue; `waker` is rung when the ticket reaches the front and memory is released.
    pub(crate) fn acquire(self: &Arc<Self>, len: u64, waker: &Arc<Waker>) -> Acquire {
        let mut st = self.lock();
        let fits_ever = RangeAllocator::rounded(len).is_some_and(|n| n <= self.capacity);
        if !fits_ever {
            self.stats.too_large.fetch_add(1, Ordering::Relaxed);
            return Acquire::TooLarge;
        }
        if st.waiters.is_empty() {
            match self.take(&mut st, len) {
                Ok(Some(r)) => return Acquire::Got(r),
                Ok(None) => {}
                Err(e) => return Acquire::Failed(e),
            }
        }
        st.next_ticket += 1;
        let id = st.next_ticket;
        st.waiters.push_back(Waiter {
            ticket: id,
            waker: Arc::clone(waker),
        });
        self.stats.waits.fetch_add(1, Ordering::Relaxed);
        Acquire::Wait(Ticket {
            pool: Arc::clone(self),
            id,
            live: true,
        })
    }

    /// Retries a queued request: succeeds only for the oldest ticket, when `len` bytes are
    /// free. On success the ticket is spent and the next one's worker is woken (there may be
    /// room for it too).
    pub(crate) fn retry(self: &Arc<Self>, ticket: &mut Ticket, len: u64) -> Option<BounceRange> {
        let mut st = self.lock();
        if !ticket.live || st.waiters.front().map(|w| w.ticket) != Some(ticket.id) {
            return None;
        }
        // A failed pinned allocation while others hold ranges: wait for theirs instead.
        let r = self.take(&mut st, len).ok().flatten()?;
        st.waiters.pop_front();
        ticket.live = false;
        if let Some(next) = st.waiters.front() {
            let _ = next.waker.wake();
        }
        Some(r)
    }

    /// A range from the first segment with room; else from a new segment while the pool may
    /// grow; else, when the request cannot fit beside the segments pinned, after unpinning
    /// the idle ones (a long request after many short ones). `Ok(None)`: wait for releases.
    /// `Err` only when the pinned allocation failed and no segment exists to wait on.
    fn take(
        self: &Arc<Self>,
        st: &mut PoolState,
        len: u64,
    ) -> Result<Option<BounceRange>, GpuError> {
        let Some(need) = RangeAllocator::rounded(len) else {
            return Ok(None);
        };
        for seg in &mut st.segments {
            if let Some((off, occupied)) = seg.alloc.alloc(len) {
                let (id, mem) = (seg.id, Arc::clone(&seg.mem));
                return Ok(Some(self.hand_out(st, id, mem, off, len, occupied)));
            }
        }
        if need > self.capacity - st.pinned && st.segments.iter().any(|s| s.alloc.used() == 0) {
            st.segments.retain(|s| s.alloc.used() > 0);
            st.pinned = st.segments.iter().map(|s| s.alloc.capacity()).sum();
            self.stats.pinned.store(st.pinned, Ordering::Relaxed);
        }
        if need > self.capacity - st.pinned {
            return Ok(None);
        }
        let size = need.max(self.segment).min(self.capacity - st.pinned);
        let mem = match usize::try_from(size)
            .map_err(|_| GpuError::InvalidArgument("bounce segment size".into()))
            .and_then(|n| RawMem::alloc_gpu_pinned(&self.rt, n))
        {
            Ok(m) => Arc::new(m),
            Err(_) if !st.segments.is_empty() => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut alloc = RangeAllocator::new(size);
        let Some((off, occupied)) = alloc.alloc(len) else {
            return Ok(None);
        };
        st.next_segment += 1;
        let id = st.next_segment;
        st.segments.push(Segment {
            id,
            mem: Arc::clone(&mem),
            alloc,
        });
        st.pinned += size;
        self.stats.pinned.store(st.pinned, Ordering::Relaxed);
        self.stats.segments.fetch_add(1, Ordering::Relaxed);
        Ok(Some(self.hand_out(st, id, mem, off, len, occupied)))
    }

    fn hand_out(
        self: &Arc<Self>,
        st: &PoolState,
        segment: u64,
        mem: Arc<RawMem>,
        off: u64,
        len: u64,
        occupied: u64,
    ) -> BounceRange {
        let used = st.used();
        self.stats.in_use.store(used, Ordering::Relaxed);
        self.stats.peak.fetch_max(used, Ordering::Relaxed);
        self.stats.acquired.fetch_add(1, Ordering::Relaxed);
        BounceRange {
            pool: Arc::clone(self),
            mem,
            segment,
            off,
            len,
            occupied,
        }
    }

    fn release(&self, segment: u64, off: u64, occupied: u64) {
        let mut st = self.lock();
        if let Some(seg) = st.segments.iter_mut().find(|s| s.id == segment) {
            seg.alloc.free(off, occupied);
        }
        self.stats.in_use.store(st.used(), Ordering::Relaxed);
        if let Some(front) = st.waiters.front() {
            let _ = front.waker.wake();
        }
    }

    fn forget(&self, id: u64) {
        let mut st = self.lock();
        let was_front = st.waiters.front().map(|w| w.ticket) == Some(id);
        st.waiters.retain(|w| w.ticket != id);
        if was_front && let Some(front) = st.waiters.front() {
            let _ = front.waker.wake();
        }
    }
}

/// A place in the pool's queue; dropping it leaves the queue (a cancelled or expired
/// operation), waking the next waiter if it was the oldest.
#[derive(Debug)]
pub(crate) struct Ticket {
    pool: Arc<BouncePool>,
    id: u64,
    /// Whether the ticket is still queued (false once [`BouncePool::retry`] served it).
    live: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.live {
            self.pool.forget(self.id);
        }
    }
}

/// `len` bytes of the pool owned by one operation; returned to the pool on drop.
#[derive(Debug)]
pub(crate) struct BounceRange {
    pool: Arc<BouncePool>,
    /// The segment's memory, kept alive by the range itself.
    mem: Arc<RawMem>,
    segment: u64,
    /// INVARIANT: `off..off+occupied` was handed out by the segment's allocator and is owned
    /// by this value alone; `len <= occupied`.
    off: u64,
    len: u64,
    occupied: u64,
}

impl BounceRange {
    fn mem(&self) -> Option<&RawMem> {
        Some(&self.mem)
    }
    /// The bytes the operation may use.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Runs `f` on `len` bytes at `at` as a mutable slice; `None` when they would leave the
    /// range. The caller is the one operation owning the range (module INVARIANT of `raw`: the
    /// owner of a bounce range holds an exclusive right to it, like an exclusive lease).
    pub(crate) fn fill_with<R>(
        &self,
        at: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        let fits = at.checked_add(len as u64).is_some_and(|e| e <= self.len);
        let abs = self
            .off
            .checked_add(at)
            .and_then(|a| usize::try_from(a).ok())?;
        if !fits {
            return None;
        }
        self.mem()?.fill_with(abs, len, f)
    }

    /// The range's bytes from `at` to its end (empty when `at` is past it).
    pub(crate) fn bytes_from(&self, at: u64) -> &[u8] {
        let Some(rest) = self.len.checked_sub(at) else {
            return &[];
        };
        let (Some(mem), Some(abs), Ok(n)) = (
            self.mem(),
            self.off
                .checked_add(at)
                .and_then(|a| usize::try_from(a).ok()),
            usize::try_from(rest),
        ) else {
            return &[];
        };
        mem.slice(abs, n).unwrap_or_default()
    }

    /// Address and length of the range (for a fabric's per-operation registration and the
    /// stager's copies; the range must outlive both).
    pub(crate) fn raw_range(&self) -> Option<(NonNull<u8>, usize)> {
        let off = usize::try_from(self.off).ok()?;
        let len = usize::try_from(self.len).ok()?;
        Some((self.mem()?.addr_of(off, len)?, len))
    }
}

impl Drop for BounceRange {
    fn drop(&mut self) {
        self.pool.release(self.segment, self.off, self.occupied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
        a.0 < b.0 + b.1 && b.0 < a.0 + a.1
    }

    #[test]
    fn first_fit_rounds_to_granules_and_merges_freed_neighbours() {
        let mut a = RangeAllocator::new(10 * GRANULE + 5);
        assert_eq!(a.capacity(), 10 * GRANULE);
        let x = a.alloc(1).unwrap();
        assert_eq!(x, (0, GRANULE));
        let y = a.alloc(3 * GRANULE).unwrap();
        assert_eq!(y, (GRANULE, 3 * GRANULE));
        let z = a.alloc(GRANULE + 1).unwrap();
        assert_eq!(z, (4 * GRANULE, 2 * GRANULE));
        assert!(a.alloc(5 * GRANULE).is_none(), "only 4 granules are left");
        assert!(a.free(y.0, y.1));
        assert!(!a.free(y.0, y.1), "double free refused");
        assert!(!a.free(9 * GRANULE, 2 * GRANULE), "past the end refused");
        // The hole left by `y` is used first.
        assert_eq!(a.alloc(2 * GRANULE).unwrap(), (GRANULE, 2 * GRANULE));
        assert!(a.free(GRANULE, 2 * GRANULE));
        assert!(a.free(x.0, x.1));
        assert!(a.free(z.0, z.1));
        assert_eq!(a.used(), 0);
        // Everything merged back into one extent.
        assert_eq!(a.alloc(10 * GRANULE).unwrap(), (0, 10 * GRANULE));
        assert!(a.alloc(0).is_none());
    }

    /// Random allocations and frees (a fixed-seed xorshift, so failures reproduce): no two
    /// live ranges ever overlap, all lie inside the pool, the used count matches, and after
    /// freeing everything the whole pool is one extent again.
    #[test]
    fn random_alloc_free_never_overlaps() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..20 {
            let cap = (64 + round * 7) * GRANULE;
            let mut a = RangeAllocator::new(cap);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for _ in 0..5_000 {
                if rnd() % 3 != 0 || live.is_empty() {
                    let len = 1 + rnd() % (8 * GRANULE);
                    if let Some(r) = a.alloc(len) {
                        assert!(r.1 >= len && r.0 % GRANULE == 0 && r.0 + r.1 <= cap);
                        for &l in &live {
                            assert!(!overlaps(r, l), "{r:?} overlaps {l:?}");
                        }
                        live.push(r);
                    } else {
                        // Refused only when no free extent is that large.
                        let need = RangeAllocator::rounded(len).unwrap();
                        assert!(a.free.values().all(|&l| l < need));
                    }
                } else {
                    let i = (rnd() % live.len() as u64) as usize;
                    let r = live.swap_remove(i);
                    assert!(a.free(r.0, r.1));
                }
                assert_eq!(a.used(), live.iter().map(|r| r.1).sum::<u64>());
                let free: u64 = a.free.values().sum();
                assert_eq!(free + a.used(), cap);
            }
            for r in live.drain(..) {
                assert!(a.free(r.0, r.1));
            }
            assert_eq!(a.alloc(cap), Some((0, cap)));
        }
    }
}
