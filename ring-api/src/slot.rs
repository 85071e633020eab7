//! Ring slot storage without `unsafe`.
//!
//! A ring lives in an array of `AtomicU64` words ([`crate::RingMemory`]): its own heap
//! allocation, or a mapping shared with another process. A slot is `WORDS` consecutive words.
//! The producer stores an entry's words with `Relaxed` stores and then publishes the tail with
//! `Release`; the consumer loads the tail with `Acquire` and then reads the words with
//! `Relaxed` loads. The Release/Acquire pair on the index is what orders the payload, exactly
//! as it would with `UnsafeCell` slots, but no data race is even expressible: a protocol bug —
//! or a hostile process writing the shared words — can only produce a wrong (stale) entry,
//! never undefined behaviour. On x86-64 and AArch64 a relaxed 8-byte atomic load or store
//! compiles to a plain `mov`/`ldr`/`str`, so this costs nothing measurable (see the `ring`
//! bench), which is why the crate needs no `unsafe` at all.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

use crate::cqe::Cqe;
use crate::sqe::Sqe;

/// An entry type that can live in a ring (implemented for [`Sqe`] and [`Cqe`] only).
pub(crate) trait Entry: Copy {
    /// Words of one slot.
    const WORDS: usize;
    /// Stores `self` into `slot` (Relaxed; the caller publishes with Release).
    fn write(self, slot: &[AtomicU64]);
    /// Loads an entry from `slot` (Relaxed; the caller acquired the index first).
    fn read(slot: &[AtomicU64]) -> Self;
}

/// Words of a timestamp companion slot (see `spsc::ring_with_stamps`): four words kept at the
/// same index as the entry they describe.
pub(crate) const STAMP_WORDS: usize = 4;

#[inline(always)]
fn store_words(slot: &[AtomicU64], words: impl IntoIterator<Item = u64>) {
    for (cell, word) in slot.iter().zip(words) {
        cell.store(word, Relaxed);
    }
}

#[inline(always)]
fn load_words<const N: usize>(slot: &[AtomicU64]) -> [u64; N] {
    let mut out = [0; N];
    for (word, cell) in out.iter_mut().zip(slot) {
        *word = cell.load(Relaxed);
    }
    out
}

/// Stores a companion slot's four words (Relaxed; published with the entry's index).
#[inline(always)]
pub(crate) fn write_stamp(slot: &[AtomicU64], words: [u64; STAMP_WORDS]) {
    store_words(slot, words);
}

/// Loads a companion slot's four words (Relaxed; the caller acquired the index first).
#[inline(always)]
pub(crate) fn read_stamp(slot: &[AtomicU64]) -> [u64; STAMP_WORDS] {
    load_words(slot)
}

const _: () = assert!(8 * 8 == Sqe::SIZE);
const _: () = assert!(4 * 8 == Cqe::SIZE);

impl Entry for Sqe {
    const WORDS: usize = 8;

    #[inline(always)]
    fn write(self, slot: &[AtomicU64]) {
        store_words(slot, self.to_words());
    }

    #[inline(always)]
    fn read(slot: &[AtomicU64]) -> Self {
        Self::from_words(load_words(slot))
    }
}

impl Entry for Cqe {
    const WORDS: usize = 4;

    #[inline(always)]
    fn write(self, slot: &[AtomicU64]) {
        store_words(slot, self.to_words());
    }

    #[inline(always)]
    fn read(slot: &[AtomicU64]) -> Self {
        Self::from_words(load_words(slot))
    }
}
