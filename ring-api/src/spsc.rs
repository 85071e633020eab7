//! The generic single-producer / single-consumer ring under both queues.
//!
//! Indices are free-running `u32`s (io_uring style): `tail - head` (wrapping) is the number of
//! published, unconsumed entries, and `index & mask` is the slot. Capacity is a power of two no
//! larger than [`MAX_ENTRIES`], so the difference never exceeds `2^31` and wrapping is exact.
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
use std::sync::atomic::{AtomicBool, AtomicU32, fence};

use crossbeam_utils::CachePadded;

use crate::error::{PushError, SetupError};
use crate::slot::{Entry, StampSlot};
use crate::wakeup::Doorbell;

/// Largest ring capacity (entries). 2^20 SQEs are 64 MiB.
pub const MAX_ENTRIES: u32 = 1 << 20;

/// Fields written only by the consumer.
#[derive(Default)]
struct ConsumerSide {
    /// Next index to consume, as published. Release by consumer, Acquire by producer.
    head: AtomicU32,
    /// Why the producer must ring after publishing, as bits: [`PARKED`] while the consumer
    /// thread is (about to be) parked waiting for entries, [`ARMED`] while it waits through the
    /// producer's notify bell (a readiness fd). Written by the consumer, read by the producer
    /// after its SeqCst fence.
    parked: AtomicU32,
    /// Set once when the consumer end is dropped, before it checks `producer.parked`.
    closed: AtomicBool,
}

/// [`ConsumerSide::parked`] bit: the consumer thread parks on the producer's bell.
const PARKED: u32 = 1;
/// [`ConsumerSide::parked`] bit: the consumer waits on the producer's notify bell.
const ARMED: u32 = 2;

/// Fields written only by the producer.
#[derive(Default)]
struct ProducerSide {
    /// One past the last published entry. Release by producer, Acquire by consumer.
    tail: AtomicU32,
    /// 1 while the producer is (about to be) parked waiting for space.
    parked: AtomicU32,
    /// Set once when the producer end is dropped, before it checks `consumer.parked`.
    closed: AtomicBool,
}

struct Shared<E: Entry> {
    consumer: CachePadded<ConsumerSide>,
    producer: CachePadded<ProducerSide>,
    /// INVARIANT: `slots.len() == mask + 1`, a power of two `<= MAX_ENTRIES`.
    mask: u32,
    slots: Box<[E::Slot]>,
    /// The timestamp companion: one [`StampSlot`] per entry slot, at the same index, written
    /// before the index is published and read after it is acquired, exactly like the entry.
    /// Empty when the ring carries no timestamps. Sharing the index means a timestamp can
    /// never be read with another entry than the one it was written with.
    stamps: Box<[StampSlot]>,
}

impl<E: Entry> Shared<E> {
    #[inline(always)]
    fn slot(&self, index: u32) -> &E::Slot {
        // INVARIANT (see `mask`): `index & mask < slots.len()`, so this never panics.
        #[allow(clippy::indexing_slicing)]
        &self.slots[(index & self.mask) as usize]
    }

    /// The companion slot of `index` (`None` when the ring carries no timestamps).
    #[inline(always)]
    fn stamp(&self, index: u32) -> Option<&StampSlot> {
        self.stamps.get((index & self.mask) as usize)
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

/// A ring (as `ring` in tests), with a timestamp companion when `stamped` (see [`Producer::push_stamped`],
/// [`Producer::stamp_clock`] and [`Consumer::pop_stamped`]).
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
    let slots = (0..capacity).map(|_| E::Slot::default()).collect();
    let stamp_slots = if stamped { capacity } else { 0 };
    let stamps = (0..stamp_slots).map(|_| StampSlot::default()).collect();
    let shared = Arc::new(Shared {
        consumer: CachePadded::default(),
        producer: CachePadded::default(),
        mask: capacity - 1,
        slots,
        stamps,
    });
    Ok((
        Producer {
            shared: Arc::clone(&shared),
            tail: 0,
            published: 0,
            cached_head: 0,
            bell: producer_bell,
            notify: None,
            stamp_clock: None,
            _not_sync: PhantomData,
        },
        Consumer {
            shared,
            head: 0,
            published: 0,
            cached_tail: 0,
            bell: consumer_bell,
            _not_sync: PhantomData,
        },
    ))
}

/// The producing end. `Send`, not `Sync`, not `Clone`: exactly one thread produces.
pub(crate) struct Producer<E: Entry> {
    shared: Arc<Shared<E>>,
    /// Local tail: entries below it are written; `published <= tail` (wrapping).
    tail: u32,
    /// Last tail stored to `shared.producer.tail`.
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
    _not_sync: PhantomData<Cell<()>>,
}

impl<E: Entry> Producer<E> {
    /// Rings the bells the consumer asked for in `parked` (read after a SeqCst fence).
    #[inline]
    fn ring_for(&self, parked: u32) {
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

    /// Free slots, refreshing the consumer's head.
    pub(crate) fn space(&mut self) -> usize {
        self.cached_head = self.shared.consumer.head.load(Acquire);
        (self.shared.capacity() - self.tail.wrapping_sub(self.cached_head)) as usize
    }

    /// Written but not yet published entries.
    pub(crate) fn unpublished(&self) -> usize {
        self.tail.wrapping_sub(self.published) as usize
    }

    /// `true` when the ring has a timestamp companion.
    pub(crate) fn stamped(&self) -> bool {
        !self.shared.stamps.is_empty()
    }

    /// `true` when the slot at `tail` is free (refreshing the consumer's head if needed).
    #[inline]
    fn has_room(&mut self) -> bool {
        if self.tail.wrapping_sub(self.cached_head) == self.shared.capacity() {
            // Acquire pairs with the consumer's Release of `head`: its reads of the slot we are
            // about to overwrite happened before.
            self.cached_head = self.shared.consumer.head.load(Acquire);
            if self.tail.wrapping_sub(self.cached_head) == self.shared.capacity() {
                return false;
            }
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
            s.write(stamp);
        }
        self.tail = self.tail.wrapping_add(1);
        Ok(())
    }

    /// All of `es` or nothing.
    #[inline]
    pub(crate) fn push_multiple(&mut self, es: &[E]) -> Result<(), PushError> {
        let cap = self.shared.capacity() as usize;
        let mut free = cap - self.tail.wrapping_sub(self.cached_head) as usize;
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
                    s.write([now, 0, 0, 0]);
                }
                i = i.wrapping_add(1);
            }
        }
        // Release pairs with the consumer's Acquire load of `tail`: our slot writes are visible
        // to it once it sees the new tail.
        self.shared.producer.tail.store(self.tail, Release);
        self.published = self.tail;
        if self.bell.is_some() || self.notify.is_some() {
            // SeqCst fence pairs with the fence in `Consumer::prepare_park` (and `arm`): either
            // we see its `parked` bit here, or it sees our tail store after setting it (never
            // neither).
            fence(SeqCst);
            self.ring_for(self.shared.consumer.parked.load(Relaxed));
        }
        n as usize
    }

    /// Announce that this producer is about to park until space is freed. Returns `false`
    /// (and undoes the announcement) if space is already available: do not park then.
    pub(crate) fn prepare_park(&mut self) -> bool {
        self.shared.producer.parked.store(1, Relaxed);
        // Pairs with the fence in `Consumer::publish`; see `crate::wakeup`.
        fence(SeqCst);
        if self.space() > 0 {
            self.finish_park();
            return false;
        }
        true
    }

    /// Withdraws the announcement of [`Producer::prepare_park`] after waking.
    pub(crate) fn finish_park(&mut self) {
        self.shared.producer.parked.store(0, Relaxed);
    }

    /// `true` when the consumer end has been dropped.
    #[inline]
    pub(crate) fn peer_dropped(&self) -> bool {
        self.shared.consumer.closed.load(Acquire)
    }
}

impl<E: Entry> Drop for Producer<E> {
    /// Marks the ring closed and wakes a consumer parked on it, so a waiter learns that no
    /// more entries will come instead of sleeping forever.
    fn drop(&mut self) {
        self.shared.producer.closed.store(true, Release);
        // Pairs with the fence in `Consumer::prepare_park` (same Dekker pair as `publish`):
        // either the consumer sees `closed` after announcing its park, or we see its `parked`.
        fence(SeqCst);
        self.ring_for(self.shared.consumer.parked.load(Relaxed));
    }
}

/// The consuming end. `Send`, not `Sync`, not `Clone`: exactly one thread consumes.
pub(crate) struct Consumer<E: Entry> {
    shared: Arc<Shared<E>>,
    /// Local head: entries below it were read; `published <= head` (wrapping).
    head: u32,
    /// Last head stored to `shared.consumer.head`.
    published: u32,
    /// Last tail observed; `head <= cached_tail`.
    cached_tail: u32,
    bell: Option<Arc<dyn Doorbell>>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<E: Entry> Consumer<E> {
    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity() as usize
    }

    /// Published entries not yet read, refreshing the producer's tail.
    pub(crate) fn available(&mut self) -> usize {
        // Acquire pairs with the producer's Release store of `tail`.
        self.cached_tail = self.shared.producer.tail.load(Acquire);
        self.cached_tail.wrapping_sub(self.head) as usize
    }

    /// `true` when the ring has a timestamp companion.
    pub(crate) fn stamped(&self) -> bool {
        !self.shared.stamps.is_empty()
    }

    /// `true` when the slot at `head` holds a published entry (refreshing the tail if needed).
    #[inline]
    fn has_entry(&mut self) -> bool {
        if self.head == self.cached_tail {
            // Acquire pairs with the producer's Release of `tail`: the slot writes are visible.
            self.cached_tail = self.shared.producer.tail.load(Acquire);
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
        let stamp = self.shared.stamp(self.head).map_or([0; 4], StampSlot::read);
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
        self.shared.consumer.head.store(self.head, Release);
        self.published = self.head;
        if let Some(bell) = &self.bell {
            // Pairs with the fence in `Producer::prepare_park`.
            fence(SeqCst);
            if self.shared.producer.parked.load(Relaxed) != 0 {
                bell.ring();
            }
        }
        n as usize
    }

    /// Announce that this consumer is about to park until at least `want` (min 1) entries are
    /// ready. Returns `false` (and undoes the announcement) if they already are: do not park.
    pub(crate) fn prepare_park(&mut self, want: usize) -> bool {
        self.shared.consumer.parked.fetch_or(PARKED, Relaxed);
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
        self.shared.consumer.parked.fetch_and(!PARKED, Relaxed);
    }

    /// Asks the producer to ring its notify bell on its next publish (or drop). Returns
    /// `false`, with the request withdrawn, when entries are already published or the
    /// producer is gone: read them instead of waiting. Same Dekker pair as
    /// [`Consumer::prepare_park`].
    pub(crate) fn arm(&mut self) -> bool {
        self.shared.consumer.parked.fetch_or(ARMED, Relaxed);
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
        self.shared.consumer.parked.fetch_and(!ARMED, Relaxed);
    }

    /// `true` when the producer end has been dropped.
    #[inline]
    pub(crate) fn peer_dropped(&self) -> bool {
        self.shared.producer.closed.load(Acquire)
    }
}

impl<E: Entry> Drop for Consumer<E> {
    /// Marks the ring closed and wakes a producer parked waiting for space.
    fn drop(&mut self) {
        self.shared.consumer.closed.store(true, Release);
        // Pairs with the fence in `Producer::prepare_park`.
        fence(SeqCst);
        if self.shared.producer.parked.load(Relaxed) != 0
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
        p.shared.producer.tail.store(start, Relaxed);
        p.shared.consumer.head.store(start, Relaxed);
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
}
