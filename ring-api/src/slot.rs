//! Ring slot storage without `unsafe`.
//!
//! A slot is an array of `AtomicU64` words, cache-line aligned. The producer stores an entry's
//! words with `Relaxed` stores and then publishes the tail with `Release`; the consumer loads
//! the tail with `Acquire` and then reads the words with `Relaxed` loads. The Release/Acquire
//! pair on the index is what orders the payload, exactly as it would with `UnsafeCell` slots,
//! but no data race is even expressible: a protocol bug can only produce a wrong (stale)
//! entry, never undefined behaviour. On x86-64 and AArch64 a relaxed 8-byte atomic load or store
//! compiles to a plain `mov`/`ldr`/`str`, so this costs nothing measurable (see the `ring`
//! bench), which is why the crate needs no `unsafe` at all.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::cqe::Cqe;
use crate::sqe::Sqe;

/// An entry type that can live in a ring (implemented for [`Sqe`] and [`Cqe`] only).
pub(crate) trait Entry: Copy {
    /// Storage for one entry.
    type Slot: Default + Send + Sync;
    /// Stores `self` into `slot` (Relaxed; the caller publishes with Release).
    fn write(self, slot: &Self::Slot);
    /// Loads an entry from `slot` (Relaxed; the caller acquired the index first).
    fn read(slot: &Self::Slot) -> Self;
}

/// One 64-byte SQE slot: one cache line.
#[repr(C, align(64))]
#[derive(Default)]
pub(crate) struct SqeSlot([AtomicU64; 8]);

/// One 32-byte CQE slot: two per cache line.
#[repr(C, align(32))]
#[derive(Default)]
pub(crate) struct CqeSlot([AtomicU64; 4]);

/// One slot of a ring's timestamp companion (see `spsc::ring_with_stamps`): four words kept
/// at the same index as the entry they describe.
#[repr(C, align(32))]
#[derive(Default)]
pub(crate) struct StampSlot(pub(crate) [AtomicU64; 4]);

impl StampSlot {
    /// Stores the four words (Relaxed; published with the entry's index).
    #[inline(always)]
    pub(crate) fn write(&self, words: [u64; 4]) {
        for (cell, word) in self.0.iter().zip(words) {
            cell.store(word, Relaxed);
        }
    }

    /// Loads the four words (Relaxed; the caller acquired the index first).
    #[inline(always)]
    pub(crate) fn read(&self) -> [u64; 4] {
        self.0.each_ref().map(|c| c.load(Relaxed))
    }
}

const _: () = assert!(size_of::<SqeSlot>() == Sqe::SIZE);
const _: () = assert!(size_of::<CqeSlot>() == Cqe::SIZE);

impl Entry for Sqe {
    type Slot = SqeSlot;

    #[inline(always)]
    fn write(self, slot: &SqeSlot) {
        for (cell, word) in slot.0.iter().zip(self.to_words()) {
            cell.store(word, Relaxed);
        }
    }

    #[inline(always)]
    fn read(slot: &SqeSlot) -> Self {
        Self::from_words(slot.0.each_ref().map(|c| c.load(Relaxed)))
    }
}

impl Entry for Cqe {
    type Slot = CqeSlot;

    #[inline(always)]
    fn write(self, slot: &CqeSlot) {
        for (cell, word) in slot.0.iter().zip(self.to_words()) {
            cell.store(word, Relaxed);
        }
    }

    #[inline(always)]
    fn read(slot: &CqeSlot) -> Self {
        Self::from_words(slot.0.each_ref().map(|c| c.load(Relaxed)))
    }
}
