//! Where a queue's rings live: [`RingMemory`], the heap default, and the word layout that lets
//! two processes share one queue.
//!
//! A ring is a run of `AtomicU64` words: a consumer cache line (head, park bits, closed), a
//! producer cache line (tail, park bit, closed), the entry slots, and — on a timed queue — the
//! timestamp companion slots. A queue is its submission ring followed by its completion ring.
//! [`QueueLayout`] computes those offsets; both sides of a shared queue compute them from the
//! same `(sq_entries, cq_entries, timestamps)`, so nothing about the layout is ever read from
//! the shared words themselves.

use std::sync::atomic::AtomicU64;

use crate::cqe::Cqe;
use crate::error::SetupError;
use crate::slot::{Entry, STAMP_WORDS};
use crate::spsc::MAX_ENTRIES;
use crate::sqe::Sqe;

/// Memory a queue's rings live in: an array of atomic words that stays valid (and keeps its
/// length) for as long as the object lives.
///
/// The crate's own queues use heap memory. A daemon and its clients implement it over a
/// shared mapping (a memfd both processes map), so the same [`AppQueue`](crate::AppQueue) and
/// [`WorkerQueue`](crate::WorkerQueue) code runs across a process boundary. Because every
/// access is an atomic load or store, whatever another process writes into the words can
/// produce wrong entries or indices — which the consumer detects and reports
/// ([`WorkerQueue::peer_corrupt`](crate::WorkerQueue::peer_corrupt)) — but never undefined
/// behaviour.
pub trait RingMemory: Send + Sync + 'static {
    /// The words. Must return the same slice (same length) on every call.
    fn words(&self) -> &[AtomicU64];
}

/// Words per cache line.
pub(crate) const LINE_WORDS: usize = 8;

/// Word offsets inside a ring's two control lines.
pub(crate) mod ctl {
    /// Consumer line: next index to consume (u32 in a u64).
    pub(crate) const HEAD: usize = 0;
    /// Consumer line: `PARKED` / `ARMED` bits.
    pub(crate) const CONSUMER_PARKED: usize = 1;
    /// Consumer line: non-zero once the consumer end is gone.
    pub(crate) const CONSUMER_CLOSED: usize = 2;
    /// Producer line: one past the last published index (u32 in a u64).
    pub(crate) const TAIL: usize = super::LINE_WORDS;
    /// Producer line: non-zero while the producer parks for space.
    pub(crate) const PRODUCER_PARKED: usize = super::LINE_WORDS + 1;
    /// Producer line: non-zero once the producer end is gone.
    pub(crate) const PRODUCER_CLOSED: usize = super::LINE_WORDS + 2;
    /// First word of the slots.
    pub(crate) const SLOTS: usize = 2 * super::LINE_WORDS;
}

/// Words one ring of `capacity` entries of `E` occupies (rounded up to whole cache lines).
pub(crate) fn ring_words<E: Entry>(capacity: u32, stamped: bool) -> usize {
    let cap = capacity as usize;
    let stamps = if stamped { cap * STAMP_WORDS } else { 0 };
    (ctl::SLOTS + cap * E::WORDS + stamps).next_multiple_of(LINE_WORDS)
}

/// The geometry of one queue (a submission and a completion ring) inside a [`RingMemory`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLayout {
    /// Submission ring capacity (a power of two).
    pub sq_entries: u32,
    /// Completion ring capacity (a power of two).
    pub cq_entries: u32,
    /// Whether both rings carry timestamp companions.
    pub timestamps: bool,
}

impl QueueLayout {
    /// Checks the capacities (powers of two, at most [`MAX_ENTRIES`]).
    pub fn new(sq_entries: u32, cq_entries: u32, timestamps: bool) -> Result<Self, SetupError> {
        for requested in [sq_entries, cq_entries] {
            if !requested.is_power_of_two() || requested > MAX_ENTRIES {
                return Err(SetupError::Capacity {
                    requested,
                    max: MAX_ENTRIES,
                });
            }
        }
        Ok(Self {
            sq_entries,
            cq_entries,
            timestamps,
        })
    }

    /// Word offset of the completion ring (the submission ring starts at 0).
    #[must_use]
    pub(crate) fn cq_base(&self) -> usize {
        ring_words::<Sqe>(self.sq_entries, self.timestamps)
    }

    /// Words the whole queue needs.
    #[must_use]
    pub fn words(&self) -> usize {
        self.cq_base() + ring_words::<Cqe>(self.cq_entries, self.timestamps)
    }

    /// Bytes the whole queue needs (what a shared mapping must hold at least).
    #[must_use]
    pub fn bytes(&self) -> usize {
        self.words() * 8
    }
}

/// Zeroed heap words, the first of them on a cache-line boundary: the memory of the crate's
/// own (single-process) queues.
pub(crate) struct HeapMemory {
    words: Box<[AtomicU64]>,
    /// Index of the first cache-line-aligned word.
    start: usize,
    len: usize,
}

impl HeapMemory {
    pub(crate) fn new(len: usize) -> Self {
        let words: Box<[AtomicU64]> = (0..len + LINE_WORDS - 1)
            .map(|_| AtomicU64::new(0))
            .collect();
        let addr = words.as_ptr() as usize;
        let start = (addr.next_multiple_of(64) - addr) / 8;
        Self { words, start, len }
    }
}

impl RingMemory for HeapMemory {
    fn words(&self) -> &[AtomicU64] {
        self.words
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_memory_is_line_aligned_and_zeroed() {
        for len in [1, 7, 16, 1000] {
            let m = HeapMemory::new(len);
            let w = m.words();
            assert_eq!(w.len(), len);
            assert_eq!(w.as_ptr() as usize % 64, 0);
            assert!(
                w.iter()
                    .all(|c| c.load(std::sync::atomic::Ordering::Relaxed) == 0)
            );
        }
    }

    #[test]
    fn layout_sizes() {
        let l = QueueLayout::new(4, 8, false).unwrap();
        assert_eq!(l.cq_base(), 16 + 4 * 8);
        assert_eq!(l.words(), 16 + 4 * 8 + 16 + 8 * 4);
        let t = QueueLayout::new(4, 8, true).unwrap();
        assert_eq!(t.words(), 16 + 4 * 12 + 16 + 8 * 8);
        assert!(QueueLayout::new(3, 8, false).is_err());
        assert!(QueueLayout::new(4, MAX_ENTRIES * 2, false).is_err());
    }
}
