//! The generic single-producer / single-consumer ring under both queues.
//!
//! Indices are free-running `u32`s (io_uring style): `tail - head` (wrapping) is the number of
//! published, unconsumed entries, and `index & mask` is the slot. Capacity is a power of two no
//! larger than [`MAX_ENTRIES`], so the difference never exceeds `2^31` and wrapping is exact.
//!
//! The ring's words live in a [`RingMemory`] (layout in `crate::memory`): the heap for the
//! crate's own queues, a mapping shared with another process for a daemon's. Indices are
//! stored as `u32` values in `u64` words. The mask is each side's own (never read from the
//! shared words), so a peer that scribbles over the indices can make this side see a wrong
//! count, which it detects ([`Consumer::corrupt`], [`Producer::corrupt`]) and treats as empty
//! or full, but never an out-of-range slot.
//!
//! # Ordering pairs
//!
//! | store (side)                       | load (other side)                  | orders                      |
//! |------------------------------------|------------------------------------|-----------------------------|
//! | `tail` Release (producer publish)  | `tail` Acquire (consumer refresh)  | slot writes → slot reads    |
//! | `head` Release (consumer publish)  | `head` Acquire (producer refresh)  | slot reads → slot overwrite |
//! | `consumer_parked` + fence(SeqCst)  | fence(SeqCst) + `consumer_parked`  | Dekker pair, see [`crate::wakeup`] |
//! | `producer_parked` + fence(SeqCst)  | fence(SeqCst) + `producer_parked`  | same, for "space freed"     |
//!
//! Each side caches the other side's index and reloads it only when the cached value says
//! "full" (producer) or "empty" (consumer), so in the steady state each side touches the
//! other's cache line once per batch, not once per entry.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU64, fence};

use crate::error::{PushError, SetupError};
use crate::memory::{HeapMemory, RingMemory, ctl, ring_words};
use crate::slot::{Entry, STAMP_WORDS, read_stamp, write_stamp};
use crate::wakeup::Doorbell;

/// Largest ring capacity (entries). 2^20 SQEs are 64 MiB.
pub const MAX_ENTRIES: u32 = 1 << 20;

/// Consumer-line `parked` bit: the consumer thread parks on the producer's bell.
const PARKED: u64 = 1;
/// Consumer-line `parked` bit: the consumer waits on the producer's notify bell.
const ARMED: u64 = 2;

/// Stands in for a word the memory does not have (only reachable if a [`RingMemory`] breaks
/// its contract and shrinks): accesses then go nowhere instead of panicking.
static NOWHERE: AtomicU64 = AtomicU64::new(0);

/// One ring's place in its memory.
struct Shared<E: Entry> {
    mem: Arc<dyn RingMemory>,
    /// First word of this ring in `mem`.
    base: usize,
    /// INVARIANT: `mask + 1` is a power of two `<= MAX_ENTRIES`, and `mem` holds
    /// `ring_words::<E>(mask + 1, stamped)` words from `base` (checked at construction).
    mask: u32,
    /// Whether a timestamp companion follows the slots: one four-word slot per entry slot, at
    /// the same index, written before the index is published and read after it is acquired,
    /// exactly like the entry. Sharing the index means a timestamp can never be read with
    /// another entry than the one it was written with.
    stamped: bool,
    _entry: PhantomData<fn() -> E>,
}

impl<E: Entry> Shared<E> {
    fn new(
        mem: Arc<dyn RingMemory>,
        base: usize,
        capacity: u32,
        stamped: bool,
    ) -> Result<Self, SetupError> {
        if !capacity.is_power_of_two() || capacity > MAX_ENTRIES {
            return Err(SetupError::Capacity {
                requested: capacity,
                max: MAX_ENTRIES,
            });
        }
        let need = base.saturating_add(ring_words::<E>(capacity, stamped));
        if mem.words().len() < need {
            return Err(SetupError::Memory {
                needed: need * 8,
                got: mem.words().len() * 8,
            });
        }
        Ok(Self {
            mem,
            base,
            mask: capacity - 1,
            stamped,
            _entry: PhantomData,
        })
    }

    #[inline(always)]
    fn word(&self, at: usize) -> &AtomicU64 {
        self.mem.words().get(self.base + at).unwrap_or(&NOWHERE)
    }

    #[inline(always)]
    fn load_index(&self, at: usize, order: std::sync::atomic::Ordering) -> u32 {
        // Truncation is the encoding: indices are u32 values stored in u64 words.
        self.word(at).load(order) as u32
    }

    #[inline(always)]
    fn slot(&self, index: u32) -> &[AtomicU64] {
        let at = self.base + ctl::SLOTS + (index & self.mask) as usize * E::WORDS;
        self.mem.words().get(at..at + E::WORDS).unwrap_or(&[])
    }

    /// The companion slot of `index` (`None` when the ring carries no timestamps).
    #[inline(always)]
    fn stamp(&self, index: u32) -> Option<&[AtomicU64]> {
        if !self.stamped {
            return None;
        }
        let at = self.base
            + ctl::SLOTS
            + self.capacity() as usize * E::WORDS
            + (index & self.mask) as usize * STAMP_WORDS;
        self.mem.words().get(at..at + STAMP_WORDS)
    }

    #[inline(always)]
    fn capacity(&self) -> u32 {
        self.mask + 1
    }
}

/// Creates a ring of `capacity` entries. `producer_bell` wakes the consumer when entries are
/// published while it is parked; `consumer_bell` wakes the producer when space is freed while it
/// is parked. Either may be `None` when that side never parks.
#[cfg(test)]
pub(crate) fn ring<E: Entry>(
    capacity: u32,
    producer_bell: Option<Arc<dyn Doorbell>>,
    consumer_bell: Option<Arc<dyn Doorbell>>,
) -> Result<(Producer<E>, Consumer<E>), SetupError> {
    ring_with_stamps(capacity, producer_bell, consumer_bell, false)
}

/// A ring (as `ring` in tests) in its own heap memory, with a timestamp companion when
/// `stamped` (see [`Producer::push_stamped`], [`Producer::stamp_clock`] and
/// [`Consumer::pop_stamped`]).
pub(crate) fn ring_with_stamps<E: Entry>(
    capacity: u32,
    producer_bell: Option<Arc<dyn Doorbell>>,
    consumer_bell: Option<Arc<dyn Doorbell>>,
    stamped: bool,
) -> Result<(Producer<E>, Consumer<E>), SetupError> {
    if !capacity.is_power_of_two() || capacity > MAX_ENTRIES {
        return Err(SetupError::Capacity {
            requested: capacity,
            max: MAX_ENTRIES,
        });
    }
    let mem: Arc<dyn RingMemory> = Arc::new(HeapMemory::new(ring_words::<E>(capacity, stamped)));
    Ok((
        Producer::attach(Arc::clone(&mem), 0, capacity, stamped, producer_bell)?,
        Consumer::attach(mem, 0, capacity, stamped, consumer_bell)?,
    ))
}

/// The producing end. `Send`, not `Sync`, not `Clone`: exactly one thread produces.
pub(crate) struct Producer<E: Entry> {
    shared: Shared<E>,
    /// Local tail: entries below it are written; `published <= tail` (wrapping).
    tail: u32,
    /// Last tail stored to the shared `tail` word.
    published: u32,
    /// Last head observed; `tail - cached_head <= capacity`.
    cached_head: u32,
    bell: Option<Arc<dyn Doorbell>>,
    /// Rung instead of (or besides) `bell` when the consumer armed [`ARMED`]: a readiness fd
    /// an event loop watches.
    pub(crate) notify: Option<Arc<dyn Doorbell>>,
    /// On a stamped ring: read once per [`Producer::publish`] and stored as word 0 of the
    /// companion slot of every entry that publish makes visible (the submission ring's
    /// "submitted" time). `None`: publishing reads no clock.
    pub(crate) stamp_clock: Option<fn() -> u64>,
    /// Set once the consumer published a head this ring cannot have (a peer process wrote
    /// garbage): the ring then counts as full.
    corrupt: bool,
    _not_sync: PhantomData<Cell<()>>,
}

impl<E: Entry> Producer<E> {
    /// The producing end of the ring at word `base` of `mem`, starting from the indices found
    /// there (zeros in fresh memory).
    pub(crate) fn attach(
        mem: Arc<dyn RingMemory>,
        base: usize,
        capacity: u32,
        stamped: bool,
        bell: Option<Arc<dyn Doorbell>>,
    ) -> Result<Self, SetupError> {
        let shared = Shared::new(mem, base, capacity, stamped)?;
        let tail = shared.load_index(ctl::TAIL, Acquire);
        let head = shared.load_index(ctl::HEAD, Acquire);
        Ok(Self {
            shared,
            tail,
            published: tail,
            cached_head: head,
            bell,
            notify: None,
            stamp_clock: None,
            corrupt: tail.wrapping_sub(head) > capacity,
            _not_sync: PhantomData,
        })
    }

    /// Rings the bells the consumer asked for in `parked` (read after a SeqCst fence).
    #[inline]
    fn ring_for(&self, parked: u64) {
        if parked & PARKED != 0
            && let Some(bell) = &self.bell
        {
            bell.ring();
        }
        if parked & ARMED != 0
            && let Some(bell) = &self.notify
        {
            bell.ring();
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// Free slots given `cached_head`; a head that would mean more than a full ring marks the
    /// ring corrupt and counts as full.
    #[inline]
    fn free(&mut self) -> usize {
        let used = self.tail.wrapping_sub(self.cached_head);
        match self.shared.capacity().checked_sub(used) {
            Some(free) if !self.corrupt => free as usize,
            _ => {
                self.corrupt = true;
                0
            }
        }
    }

    /// Free slots, refreshing the consumer's head.
    pub(crate) fn space(&mut self) -> usize {
        self.cached_head = self.shared.load_index(ctl::HEAD, Acquire);
        self.free()
    }

    /// Written but not yet published entries.
    pub(crate) fn unpublished(&self) -> usize {
        self.tail.wrapping_sub(self.published) as usize
    }

    /// `true` when the ring has a timestamp companion.
    pub(crate) fn stamped(&self) -> bool {
        self.shared.stamped
    }

    /// `true` once the consumer's published head was impossible (see the module docs).
    pub(crate) fn corrupt(&self) -> bool {
        self.corrupt
    }

    /// `true` when the slot at `tail` is free (refreshing the consumer's head if needed).
    #[inline]
    fn has_room(&mut self) -> bool {
        if self.free() == 0 {
            // Acquire pairs with the consumer's Release of `head`: its reads of the slot we are
            // about to overwrite happened before.
            return self.space() > 0;
        }
        true
    }

    #[inline]
    pub(crate) fn push(&mut self, e: E) -> Result<(), E> {
        if !self.has_room() {
            return Err(e);
        }
        e.write(self.shared.slot(self.tail));
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// [`Producer::push`], storing `stamp` in the entry's companion slot (ignored when the
    /// ring has none).
    #[inline]
    pub(crate) fn push_stamped(&mut self, e: E, stamp: [u64; 4]) -> Result<(), E> {
        if !self.has_room() {
            return Err(e);
        }
        e.write(self.shared.slot(self.tail));
        if let Some(s) = self.shared.stamp(self.tail) {
            write_stamp(s, stamp);
        }
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// All of `es` or nothing.
    #[inline]
    pub(crate) fn push_multiple(&mut self, es: &[E]) -> Result<(), PushError> {
        let mut free = self.free();
        if free < es.len() {
            free = self.space();
            if free < es.len() {
                return Err(PushError::Full {
                    needed: es.len(),
                    available: free,
                });
            }
        }
        for e in es {
            e.write(self.shared.slot(self.tail));
            self.tail = self.tail.wrapping_add(1);
        }
        Ok(())
    }

    /// Makes written entries visible and wakes a parked consumer. Returns how many were
    /// published.
    #[inline]
    pub(crate) fn publish(&mut self) -> usize {
        let n = self.tail.wrapping_sub(self.published);
        if n == 0 {
            return 0;
        }
        if let Some(clock) = self.stamp_clock {
            let now = clock();
            let mut i = self.published;
            while i != self.tail {
                if let Some(s) = self.shared.stamp(i) {
                    write_stamp(s, [now, 0, 0, 0]);
                }
                i = i.wrapping_add(1);
            }
        }
        // Release pairs with the consumer's Acquire load of `tail`: our slot writes are visible
        // to it once it sees the new tail.
        self.shared
            .word(ctl::TAIL)
            .store(u64::from(self.tail), Release);
        self.published = self.tail;
        if self.bell.is_some() || self.notify.is_some() {
            // SeqCst fence pairs with the fence in `Consumer::prepare_park` (and `arm`): either
            // we see its `parked` bit here, or it sees our tail store after setting it (never
            // neither).
            fence(SeqCst);
            self.ring_for(self.shared.word(ctl::CONSUMER_PARKED).load(Relaxed));
        }
        n as usize
    }

    /// Announce that this producer is about to park until space is freed. Returns `false`
    /// (and undoes the announcement) if space is already available: do not park.
    pub(crate) fn prepare_park(&mut self) -> bool {
        self.shared.word(ctl::PRODUCER_PARKED).store(1, Relaxed);
        // Pairs with the fence in `Consumer::publish`; see `crate::wakeup`.
        fence(SeqCst);
        if self.space() > 0 || self.corrupt {
            self.finish_park();
            return false;
        }
        true
    }

    /// Withdraws the announcement of [`Producer::prepare_park`] after waking.
    pub(crate) fn finish_park(&mut self) {
        self.shared.word(ctl::PRODUCER_PARKED).store(0, Relaxed);
    }

    /// `true` when the consumer end has been dropped.
    #[inline]
    pub(crate) fn peer_dropped(&self) -> bool {
        self.shared.word(ctl::CONSUMER_CLOSED).load(Acquire) != 0
    }
}

impl<E: Entry> Drop for Producer<E> {
    /// Marks the ring closed and wakes a consumer parked on it, so a waiter learns that no
    /// more entries will come instead of sleeping forever.
    fn drop(&mut self) {
        self.shared.word(ctl::PRODUCER_CLOSED).store(1, Release);
        // Pairs with the fence in `Consumer::prepare_park` (same Dekker pair as `publish`):
        // either the consumer sees `closed` after announcing its park, or we see its `parked`.
        fence(SeqCst);
        self.ring_for(self.shared.word(ctl::CONSUMER_PARKED).load(Relaxed));
    }
}

/// The consuming end. `Send`, not `Sync`, not `Clone`: exactly one thread consumes.
pub(crate) struct Consumer<E: Entry> {
    shared: Shared<E>,
    /// Local head: entries below it were read; `published <= head` (wrapping).
    head: u32,
    /// Last head stored to the shared `head` word.
    published: u32,
    /// Last tail observed; `head <= cached_tail`.
    cached_tail: u32,
    bell: Option<Arc<dyn Doorbell>>,
    /// Set once the producer published a tail this ring cannot have (a peer process wrote
    /// garbage): the ring then counts as empty.
    corrupt: bool,
    _not_sync: PhantomData<Cell<()>>,
}

impl<E: Entry> Consumer<E> {
    /// The consuming end of the ring at word `base` of `mem`, starting from the indices found
    /// there (zeros in fresh memory).
    pub(crate) fn attach(
        mem: Arc<dyn RingMemory>,
        base: usize,
        capacity: u32,
        stamped: bool,
        bell: Option<Arc<dyn Doorbell>>,
    ) -> Result<Self, SetupError> {
        let shared = Shared::new(mem, base, capacity, stamped)?;
        let head = shared.load_index(ctl::HEAD, Acquire);
        Ok(Self {
            shared,
            head,
            published: head,
            cached_tail: head,
            bell,
            corrupt: false,
            _not_sync: PhantomData,
        })
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// Loads the producer's tail; a tail more than a full ring ahead marks the ring corrupt,
    /// which then stays empty.
    #[inline]
    fn refresh_tail(&mut self) {
        // Acquire pairs with the producer's Release store of `tail`.
        let tail = self.shared.load_index(ctl::TAIL, Acquire);
        if tail.wrapping_sub(self.head) > self.shared.capacity() || self.corrupt {
            self.corrupt = true;
            self.cached_tail = self.head;
        } else {
            self.cached_tail = tail;
        }
    }

    /// Published entries not yet read, refreshing the producer's tail.
    pub(crate) fn available(&mut self) -> usize {
        self.refresh_tail();
        self.cached_tail.wrapping_sub(self.head) as usize
    }

    /// `true` when the ring has a timestamp companion.
    pub(crate) fn stamped(&self) -> bool {
        self.shared.stamped
    }

    /// `true` once the producer's published tail was impossible (see the module docs).
    pub(crate) fn corrupt(&self) -> bool {
        self.corrupt
    }

    /// `true` when the slot at `head` holds a published entry (refreshing the tail if needed).
    #[inline]
    fn has_entry(&mut self) -> bool {
        if self.head == self.cached_tail {
            self.refresh_tail();
            if self.head == self.cached_tail {
                return false;
            }
        }
        true
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<E> {
        if !self.has_entry() {
            return None;
        }
        let e = E::read(self.shared.slot(self.head));
        self.head = self.head.wrapping_add(1);
        Some(e)
    }

    /// [`Consumer::pop`] with the entry's companion words (zeros when the ring has none).
    #[inline]
    pub(crate) fn pop_stamped(&mut self) -> Option<(E, [u64; 4])> {
        if !self.has_entry() {
            return None;
        }
        let e = E::read(self.shared.slot(self.head));
        let stamp = self.shared.stamp(self.head).map_or([0; 4], read_stamp);
        self.head = self.head.wrapping_add(1);
        Some((e, stamp))
    }

    /// Returns read slots to the producer and wakes it if it parked for space.
    #[inline]
    pub(crate) fn publish(&mut self) -> usize {
        let n = self.head.wrapping_sub(self.published);
        if n == 0 {
            return 0;
        }
        // Release pairs with the producer's Acquire of `head`: our slot reads happen before it
        // overwrites them.
        self.shared
            .word(ctl::HEAD)
            .store(u64::from(self.head), Release);
        self.published = self.head;
        if let Some(bell) = &self.bell {
            // Pairs with the fence in `Producer::prepare_park`.
            fence(SeqCst);
            if self.shared.word(ctl::PRODUCER_PARKED).load(Relaxed) != 0 {
                bell.ring();
            }
        }
        n as usize
    }

    /// Announce that this consumer is about to park until at least `want` (min 1) entries are
    /// ready. Returns `false` (and undoes the announcement) if they already are: do not park.
    pub(crate) fn prepare_park(&mut self, want: usize) -> bool {
        self.shared
            .word(ctl::CONSUMER_PARKED)
            .fetch_or(PARKED, Relaxed);
        // Pairs with the fence in `Producer::publish`; see `crate::wakeup`.
        fence(SeqCst);
        if self.available() >= want.max(1) {
            self.finish_park();
            return false;
        }
        true
    }

    /// Withdraws the announcement of [`Consumer::prepare_park`] after waking.
    pub(crate) fn finish_park(&mut self) {
        self.shared
            .word(ctl::CONSUMER_PARKED)
            .fetch_and(!PARKED, Relaxed);
    }

    /// Asks the producer to ring its notify bell on its next publish (or drop). Returns
    /// `false`, with the request withdrawn, when entries are already published or the
    /// producer is gone: read them instead of waiting. Same Dekker pair as
    /// [`Consumer::prepare_park`].
    pub(crate) fn arm(&mut self) -> bool {
        self.shared
            .word(ctl::CONSUMER_PARKED)
            .fetch_or(ARMED, Relaxed);
        // Pairs with the fence in `Producer::publish` and `Producer::drop`.
        fence(SeqCst);
        if self.available() > 0 || self.peer_dropped() {
            self.disarm();
            return false;
        }
        true
    }

    /// Withdraws [`Consumer::arm`].
    pub(crate) fn disarm(&mut self) {
        self.shared
            .word(ctl::CONSUMER_PARKED)
            .fetch_and(!ARMED, Relaxed);
    }

    /// `true` when the producer end has been dropped.
    #[inline]
    pub(crate) fn peer_dropped(&self) -> bool {
        self.shared.word(ctl::PRODUCER_CLOSED).load(Acquire) != 0
    }
}

impl<E: Entry> Drop for Consumer<E> {
    /// Marks the ring closed and wakes a producer parked waiting for space.
    fn drop(&mut self) {
        self.shared.word(ctl::CONSUMER_CLOSED).store(1, Release);
        // Pairs with the fence in `Producer::prepare_park`.
        fence(SeqCst);
        if self.shared.word(ctl::PRODUCER_PARKED).load(Relaxed) != 0
            && let Some(bell) = &self.bell
        {
            bell.ring();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cqe;

    fn c(n: u64) -> Cqe {
        Cqe::from_raw(n, 0, 0, 0, 0)
    }

    #[test]
    fn capacity_must_be_power_of_two() {
        assert!(ring::<Cqe>(0, None, None).is_err());
        assert!(ring::<Cqe>(3, None, None).is_err());
        assert!(ring::<Cqe>(MAX_ENTRIES * 2, None, None).is_err());
        assert!(ring::<Cqe>(1, None, None).is_ok());
    }

    #[test]
    fn entries_invisible_until_published_and_space_returns_after_consumer_publish() {
        let (mut p, mut q) = ring::<Cqe>(2, None, None).unwrap();
        p.push(c(1)).unwrap();
        assert_eq!(q.pop(), None, "not yet published");
        p.push(c(2)).unwrap();
        assert_eq!(p.push(c(3)), Err(c(3)), "full");
        assert_eq!(p.publish(), 2);
        assert_eq!(q.pop(), Some(c(1)));
        assert_eq!(p.push(c(3)), Err(c(3)), "read but head not yet published");
        assert_eq!(q.publish(), 1);
        p.push(c(3)).unwrap();
        p.publish();
        assert_eq!(q.pop(), Some(c(2)));
        assert_eq!(q.pop(), Some(c(3)));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn stamps_travel_with_their_entry_and_clock_stamps_on_publish() {
        let (mut p, mut q) = ring_with_stamps::<Cqe>(2, None, None, true).unwrap();
        assert!(p.stamped() && q.stamped());
        for round in 0..5u64 {
            p.push_stamped(c(round), [round, round + 1, 0, round + 3])
                .unwrap();
            p.publish();
            assert_eq!(
                q.pop_stamped(),
                Some((c(round), [round, round + 1, 0, round + 3]))
            );
            q.publish();
        }
        // A plain ring reads zeros and stores nothing.
        let (mut p, mut q) = ring::<Cqe>(2, None, None).unwrap();
        assert!(!p.stamped());
        p.push_stamped(c(1), [9; 4]).unwrap();
        p.publish();
        assert_eq!(q.pop_stamped(), Some((c(1), [0; 4])));
        // A clock stamps word 0 of every entry of one publish, once.
        fn clock() -> u64 {
            77
        }
        let (mut p, mut q) = ring_with_stamps::<Cqe>(4, None, None, true).unwrap();
        p.stamp_clock = Some(clock);
        p.push(c(1)).unwrap();
        p.push(c(2)).unwrap();
        p.publish();
        assert_eq!(q.pop_stamped(), Some((c(1), [77, 0, 0, 0])));
        assert_eq!(q.pop_stamped(), Some((c(2), [77, 0, 0, 0])));
    }

    #[test]
    fn indices_wrap_around_u32() {
        let (mut p, mut q) = ring::<Cqe>(4, None, None).unwrap();
        // Start near the wrap point to exercise wrapping arithmetic.
        let start = u32::MAX - 5;
        p.tail = start;
        p.published = start;
        p.cached_head = start;
        p.shared.word(ctl::TAIL).store(u64::from(start), Relaxed);
        p.shared.word(ctl::HEAD).store(u64::from(start), Relaxed);
        q.head = start;
        q.published = start;
        q.cached_tail = start;
        for i in 0..40u64 {
            p.push(c(i)).unwrap();
            p.publish();
            assert_eq!(q.pop(), Some(c(i)));
            q.publish();
        }
        assert!(p.tail < 100, "wrapped");
    }

    /// A peer that writes impossible indices into shared words makes this side see an empty
    /// (consumer) or full (producer) ring and report it, never read or write a wrong slot.
    #[test]
    fn impossible_indices_mark_the_ring_corrupt() {
        let (mut p, mut q) = ring::<Cqe>(4, None, None).unwrap();
        p.push(c(1)).unwrap();
        p.publish();
        // The "producer" jumps its tail far ahead.
        q.shared.word(ctl::TAIL).store(1000, Relaxed);
        assert_eq!(q.available(), 0);
        assert_eq!(q.pop(), None);
        assert!(q.corrupt());
        // The "consumer" publishes a head ahead of the tail.
        let (mut p, q) = ring::<Cqe>(4, None, None).unwrap();
        q.shared.word(ctl::HEAD).store(100, Relaxed);
        assert_eq!(p.space(), 0);
        assert_eq!(p.push(c(1)), Err(c(1)));
        assert!(p.corrupt());
        assert!(matches!(
            p.push_multiple(&[c(2)]),
            Err(PushError::Full { .. })
        ));
    }
}
