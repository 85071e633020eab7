//! One application queue: a submission ring (app → worker) and a completion ring (worker → app).
//!
//! [`queue_pair`] returns the two halves. [`AppQueue`] produces SQEs and consumes CQEs;
//! [`WorkerQueue`] consumes SQEs and produces CQEs. Each half is `Send` (hand it to its thread)
//! but neither `Sync` nor `Clone`, and every view borrows its half mutably, so the type system
//! guarantees a single producer and a single consumer per ring (see `tests/compile_fail/`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cqe::Cqe;
use crate::error::{PushError, SetupError, TimestampsOff};
use crate::memory::{QueueLayout, RingMemory};
use crate::pending::PendingCompletions;
use crate::spsc::{Consumer, Producer, ring_with_stamps};
use crate::sqe::Sqe;
use crate::times::OpTimes;
use crate::wakeup::{CompletionWaiter, Doorbell, ParkWaiter};

/// Creates a queue: `sq_entries` submission and `cq_entries` completion slots (powers of two,
/// at most [`crate::MAX_ENTRIES`]).
///
/// `worker_bell` is rung when the application publishes SQEs (or frees CQ space) while the
/// worker is parked; pass `None` for a worker that never parks. The application side gets its
/// own std parker so [`AppQueue::wait_completions`] can block.
pub fn queue_pair(
    sq_entries: u32,
    cq_entries: u32,
    worker_bell: Option<Arc<dyn Doorbell>>,
) -> Result<(AppQueue, WorkerQueue), SetupError> {
    queue_pair_with_completion_bell(sq_entries, cq_entries, worker_bell, None)
}

/// [`queue_pair`] plus a `completion_bell` the worker rings when it publishes completions (or
/// goes away) while the application has armed it with [`AppQueue::arm_completion_bell`] —
/// typically an eventfd that an event loop (epoll, mio, tokio) watches.
///
/// The bell is rung at most once per publish (a publish is one batch of completions), and
/// never while the application has not armed it, so a busy application that reaps without
/// waiting costs the worker no system call. See [`AppQueue::arm_completion_bell`] for the
/// protocol.
pub fn queue_pair_with_completion_bell(
    sq_entries: u32,
    cq_entries: u32,
    worker_bell: Option<Arc<dyn Doorbell>>,
    completion_bell: Option<Arc<dyn Doorbell>>,
) -> Result<(AppQueue, WorkerQueue), SetupError> {
    build(sq_entries, cq_entries, worker_bell, completion_bell, None)
}

/// [`queue_pair_with_completion_bell`] with per-operation timestamps: every completion carries
/// an [`OpTimes`] record in a companion slot at the same ring index (so a record can never be
/// read with another completion than its own), read with [`AppQueue::completion_timed`].
///
/// `clock` must read `CLOCK_MONOTONIC` in nanoseconds (the engine passes its
/// `monotonic_ns`); the application side reads it once per publish of submissions to stamp
/// their "submitted" time. The worker side reads [`SubmissionReader::next_stamped`] and posts
/// with [`CompletionWriter::push_timed`].
pub fn queue_pair_timed(
    sq_entries: u32,
    cq_entries: u32,
    worker_bell: Option<Arc<dyn Doorbell>>,
    completion_bell: Option<Arc<dyn Doorbell>>,
    clock: fn() -> u64,
) -> Result<(AppQueue, WorkerQueue), SetupError> {
    build(
        sq_entries,
        cq_entries,
        worker_bell,
        completion_bell,
        Some(clock),
    )
}

fn build(
    sq_entries: u32,
    cq_entries: u32,
    worker_bell: Option<Arc<dyn Doorbell>>,
    completion_bell: Option<Arc<dyn Doorbell>>,
    clock: Option<fn() -> u64>,
) -> Result<(AppQueue, WorkerQueue), SetupError> {
    let waiter = ParkWaiter::new();
    let stamped = clock.is_some();
    let (mut sq_p, sq_c) = ring_with_stamps::<Sqe>(sq_entries, worker_bell.clone(), None, stamped)?;
    sq_p.stamp_clock = clock;
    let (mut cq_p, cq_c) =
        ring_with_stamps::<Cqe>(cq_entries, Some(waiter.doorbell()), worker_bell, stamped)?;
    cq_p.notify = completion_bell;
    Ok((
        AppQueue {
            sq: sq_p,
            cq: cq_c,
            waiter: Box::new(waiter),
        },
        WorkerQueue {
            sq: sq_c,
            cq: cq_p,
            pending: PendingCompletions::new(),
        },
    ))
}

/// The application's half of a queue whose rings live in `memory` (laid out by `layout`),
/// typically a mapping shared with a daemon process that holds the [`WorkerQueue`] half
/// ([`worker_queue_in`]).
///
/// `worker_bell` wakes the worker side when submissions are published (or completion space
/// freed) while it announced that it sleeps; `waiter` is how [`AppQueue::wait_completions`]
/// sleeps (it must wake when the worker side rings the bell it was given). On a timed layout,
/// `clock` stamps submissions as [`queue_pair_timed`]'s does.
///
/// Indices found in the memory are taken as they are (zeros in a fresh mapping).
pub fn app_queue_in(
    memory: Arc<dyn RingMemory>,
    layout: QueueLayout,
    worker_bell: Option<Arc<dyn Doorbell>>,
    waiter: Box<dyn CompletionWaiter>,
    clock: Option<fn() -> u64>,
) -> Result<AppQueue, SetupError> {
    let mut sq = Producer::attach(
        Arc::clone(&memory),
        0,
        layout.sq_entries,
        layout.timestamps,
        worker_bell.clone(),
    )?;
    sq.stamp_clock = clock.filter(|_| layout.timestamps);
    let cq = Consumer::attach(
        memory,
        layout.cq_base(),
        layout.cq_entries,
        layout.timestamps,
        worker_bell,
    )?;
    Ok(AppQueue { sq, cq, waiter })
}

/// The worker's half of a queue in `memory` (see [`app_queue_in`]). `app_bell` wakes the
/// application side: rung when completions are published while it sleeps in
/// [`AppQueue::wait_completions`] or has armed its completion bell, and when submission space
/// is freed while it waits for it.
///
/// The memory may be written by another process at any time: entries are validated as
/// always, and indices that cannot be right are reported by [`WorkerQueue::peer_corrupt`].
pub fn worker_queue_in(
    memory: Arc<dyn RingMemory>,
    layout: QueueLayout,
    app_bell: Option<Arc<dyn Doorbell>>,
) -> Result<WorkerQueue, SetupError> {
    let sq = Consumer::attach(
        Arc::clone(&memory),
        0,
        layout.sq_entries,
        layout.timestamps,
        app_bell.clone(),
    )?;
    let mut cq = Producer::attach(
        memory,
        layout.cq_base(),
        layout.cq_entries,
        layout.timestamps,
        app_bell.clone(),
    )?;
    cq.notify = app_bell;
    Ok(WorkerQueue {
        sq,
        cq,
        pending: PendingCompletions::new(),
    })
}

/// The application's half: pushes submissions, reaps completions.
pub struct AppQueue {
    sq: Producer<Sqe>,
    cq: Consumer<Cqe>,
    waiter: Box<dyn CompletionWaiter>,
}

impl std::fmt::Debug for AppQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppQueue")
            .field("sq_entries", &self.sq.capacity())
            .field("cq_entries", &self.cq.capacity())
            .finish_non_exhaustive()
    }
}

impl AppQueue {
    /// A batch-submission view; entries become visible to the worker on
    /// [`SubmissionQueue::sync`] or when the view is dropped.
    pub fn submission(&mut self) -> SubmissionQueue<'_> {
        SubmissionQueue { p: &mut self.sq }
    }

    /// A batch-reaping view; slots return to the worker on [`CompletionQueue::sync`] or drop.
    pub fn completion(&mut self) -> CompletionQueue<'_> {
        CompletionQueue { c: &mut self.cq }
    }

    /// A batch-reaping view that yields each completion with its [`OpTimes`]; slots return to
    /// the worker on [`TimedCompletionQueue::sync`] or drop. [`TimestampsOff`] when the queue
    /// was not created by [`queue_pair_timed`].
    ///
    /// The plain [`AppQueue::completion`] view works on a timed queue too: the timestamps of
    /// the completions it reads are discarded with their slots.
    pub fn completion_timed(&mut self) -> Result<TimedCompletionQueue<'_>, TimestampsOff> {
        if !self.cq.stamped() {
            return Err(TimestampsOff);
        }
        Ok(TimedCompletionQueue { c: &mut self.cq })
    }

    /// `true` when the queue carries per-operation timestamps ([`queue_pair_timed`]).
    #[must_use]
    pub fn timestamps(&self) -> bool {
        self.cq.stamped()
    }

    /// Both views at once.
    pub fn split(&mut self) -> (SubmissionQueue<'_>, CompletionQueue<'_>) {
        (
            SubmissionQueue { p: &mut self.sq },
            CompletionQueue { c: &mut self.cq },
        )
    }

    /// Blocks until at least `min` completions are ready or `timeout` passes (`None`: no
    /// limit). Returns the number ready, which may be below `min` on timeout or if the worker
    /// half was dropped: then it returns at once, also when the worker goes away while this
    /// call sleeps. Tell the two apart with [`AppQueue::worker_dropped`].
    pub fn wait_completions(&mut self, min: usize, timeout: Option<Duration>) -> usize {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let ready = self.cq.available();
            if ready >= min || self.worker_dropped() {
                return ready;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return ready,
                },
                None => None,
            };
            if self.cq.prepare_park(min) {
                // Re-checked after the announcement's fence: a worker dropped between the
                // check above and `prepare_park` rang no bell (it saw no park), but its
                // `closed` store is visible now (see the Dekker pair in `crate::wakeup`).
                if !self.worker_dropped() {
                    self.waiter.wait(left);
                }
                self.cq.finish_park();
            }
        }
    }

    /// Asks the worker to ring the completion bell (see [`queue_pair_with_completion_bell`])
    /// when it next publishes completions or goes away. Returns `false`, with the request
    /// withdrawn, when completions are already ready or the worker half is gone: reap (or
    /// stop) instead of waiting.
    ///
    /// The protocol that loses no wakeup, for a waiter on the bell's fd:
    ///
    /// 1. reap every ready completion;
    /// 2. `arm_completion_bell()`; on `false` go back to 1;
    /// 3. wait until the bell rings (the fd is readable);
    /// 4. drain the bell, [`AppQueue::disarm_completion_bell`], go back to 1.
    ///
    /// Arming and the worker's publish form the same SeqCst (Dekker) pair as the park protocol
    /// of [`crate::wakeup`]: either step 2 sees the new completions, or the worker sees the
    /// arm and rings. While armed, the worker rings once per batch it publishes; disarming in
    /// step 4 means it makes no system call while the application is busy reaping.
    pub fn arm_completion_bell(&mut self) -> bool {
        self.cq.arm()
    }

    /// Withdraws [`AppQueue::arm_completion_bell`] (harmless when not armed).
    pub fn disarm_completion_bell(&mut self) {
        self.cq.disarm();
    }

    /// Submission ring capacity.
    #[must_use]
    pub fn sq_capacity(&self) -> usize {
        self.sq.capacity()
    }

    /// Completion ring capacity.
    #[must_use]
    pub fn cq_capacity(&self) -> usize {
        self.cq.capacity()
    }

    /// `true` once the [`WorkerQueue`] has been dropped (or, for a queue in shared memory,
    /// its waiter reports the worker's process gone).
    #[must_use]
    pub fn worker_dropped(&self) -> bool {
        self.sq.peer_dropped() || self.cq.peer_dropped() || self.waiter.peer_gone()
    }
}

/// Batch-push view of the submission ring (io-uring `SubmissionQueue`).
///
/// Pushed entries are staged in slots the worker cannot see yet; [`SubmissionQueue::sync`] or
/// dropping the view publishes them with one Release store and rings the worker's doorbell if
/// it is parked.
#[must_use = "entries are published when the view is synced or dropped"]
pub struct SubmissionQueue<'a> {
    p: &'a mut Producer<Sqe>,
}

impl SubmissionQueue<'_> {
    /// Stages one entry; `Err` (nothing staged) if the ring is full
    /// ([`PushError::Full`]) or the worker half is gone ([`PushError::Closed`]).
    #[inline]
    pub fn push(&mut self, sqe: &Sqe) -> Result<(), PushError> {
        if self.p.peer_dropped() {
            return Err(PushError::Closed);
        }
        self.p.push(*sqe).map_err(|_| PushError::Full {
            needed: 1,
            available: 0,
        })
    }

    /// Stages all of `sqes` or none of them (errors as for [`SubmissionQueue::push`]).
    #[inline]
    pub fn push_multiple(&mut self, sqes: &[Sqe]) -> Result<(), PushError> {
        if self.p.peer_dropped() {
            return Err(PushError::Closed);
        }
        self.p.push_multiple(sqes)
    }

    /// Publishes staged entries (waking a parked worker); returns how many were published.
    #[inline]
    pub fn sync(&mut self) -> usize {
        self.p.publish()
    }

    /// Free slots right now.
    pub fn space(&mut self) -> usize {
        self.p.space()
    }

    /// Entries staged and not yet published.
    #[must_use]
    pub fn staged(&self) -> usize {
        self.p.unpublished()
    }

    /// Ring capacity.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.p.capacity()
    }
}

impl Drop for SubmissionQueue<'_> {
    fn drop(&mut self) {
        self.p.publish();
    }
}

/// Batch-reap view of the completion ring (io-uring `CompletionQueue`): an iterator over
/// ready completions; slots are handed back to the worker on [`CompletionQueue::sync`] or drop.
#[must_use = "completions are only reaped by iterating the view"]
pub struct CompletionQueue<'a> {
    c: &'a mut Consumer<Cqe>,
}

impl CompletionQueue<'_> {
    /// Completions ready to be read now.
    pub fn available(&mut self) -> usize {
        self.c.available()
    }

    /// Reads up to `out.len()` completions into `out`; returns how many.
    #[inline]
    pub fn fill(&mut self, out: &mut [Cqe]) -> usize {
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.c.pop() {
                Some(cqe) => *slot = cqe,
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Returns read slots to the worker now; returns how many.
    #[inline]
    pub fn sync(&mut self) -> usize {
        self.c.publish()
    }

    /// Ring capacity.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.c.capacity()
    }
}

impl Iterator for CompletionQueue<'_> {
    type Item = Cqe;

    /// Next ready completion; the ring is re-checked when the cached tail is exhausted, so a
    /// loop over the view ends only when the ring is observed empty.
    #[inline]
    fn next(&mut self) -> Option<Cqe> {
        self.c.pop()
    }
}

impl Drop for CompletionQueue<'_> {
    fn drop(&mut self) {
        self.c.publish();
    }
}

/// [`CompletionQueue`] of a timed queue ([`AppQueue::completion_timed`]): an iterator over
/// ready completions, each with the [`OpTimes`] the worker stored at the same ring index.
#[must_use = "completions are only reaped by iterating the view"]
pub struct TimedCompletionQueue<'a> {
    c: &'a mut Consumer<Cqe>,
}

impl TimedCompletionQueue<'_> {
    /// Completions ready to be read now.
    pub fn available(&mut self) -> usize {
        self.c.available()
    }

    /// Reads up to `out.len()` completions with their times into `out`; returns how many.
    #[inline]
    pub fn fill(&mut self, out: &mut [(Cqe, OpTimes)]) -> usize {
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.next() {
                Some(pair) => *slot = pair,
                None => break,
            }
            n += 1;
        }
        n
    }

    /// Returns read slots to the worker now; returns how many.
    #[inline]
    pub fn sync(&mut self) -> usize {
        self.c.publish()
    }
}

impl Iterator for TimedCompletionQueue<'_> {
    type Item = (Cqe, OpTimes);

    #[inline]
    fn next(&mut self) -> Option<(Cqe, OpTimes)> {
        self.c
            .pop_stamped()
            .map(|(cqe, words)| (cqe, OpTimes::from_words(words)))
    }
}

impl Drop for TimedCompletionQueue<'_> {
    fn drop(&mut self) {
        self.c.publish();
    }
}

/// The worker's half: takes submissions, posts completions, never drops one.
pub struct WorkerQueue {
    sq: Consumer<Sqe>,
    cq: Producer<Cqe>,
    pending: PendingCompletions,
}

impl std::fmt::Debug for WorkerQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerQueue")
            .field("sq_entries", &self.sq.capacity())
            .field("cq_entries", &self.cq.capacity())
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl WorkerQueue {
    /// Iterator over published submissions; consumed slots are returned to the application
    /// when the reader is synced or dropped. Entries are raw: call [`Sqe::validate`].
    pub fn submissions(&mut self) -> SubmissionReader<'_> {
        SubmissionReader { c: &mut self.sq }
    }

    /// Completion-posting view.
    pub fn completions(&mut self) -> CompletionWriter<'_> {
        CompletionWriter {
            p: &mut self.cq,
            pending: &mut self.pending,
        }
    }

    /// Both views at once.
    pub fn split(&mut self) -> (SubmissionReader<'_>, CompletionWriter<'_>) {
        (
            SubmissionReader { c: &mut self.sq },
            CompletionWriter {
                p: &mut self.cq,
                pending: &mut self.pending,
            },
        )
    }

    /// `true` while completions are waiting for CQ space: the engine should stop taking new
    /// submissions from this queue (back-pressure) until the application reaps.
    #[must_use]
    pub fn backpressured(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The completions waiting for CQ space.
    #[must_use]
    pub fn pending(&self) -> &PendingCompletions {
        &self.pending
    }

    /// First half of the park handshake (see [`crate::wakeup`]): announces that the worker is
    /// about to sleep. Returns `false`, with the announcement withdrawn, if there is already
    /// something to do: submissions to take, or (when back-pressured) CQ space to flush into.
    /// After a `true`, wait on the worker doorbell, then call [`WorkerQueue::finish_park`].
    pub fn prepare_park(&mut self) -> bool {
        if self.pending.is_empty() {
            self.sq.prepare_park(1)
        } else {
            self.cq.prepare_park()
        }
    }

    /// Second half of the park handshake; call after waking (harmless if not parked).
    pub fn finish_park(&mut self) {
        self.sq.finish_park();
        self.cq.finish_park();
    }

    /// `true` once the [`AppQueue`] has been dropped.
    #[must_use]
    pub fn app_dropped(&self) -> bool {
        self.sq.peer_dropped()
    }

    /// `true` once the application side published an index its ring cannot have (only a
    /// queue in memory shared with another process can see this): the rings then count as
    /// empty and full, and the owner should drop the queue.
    #[must_use]
    pub fn peer_corrupt(&self) -> bool {
        self.sq.corrupt() || self.cq.corrupt()
    }

    /// `true` when the queue carries per-operation timestamps ([`queue_pair_timed`]): read
    /// submissions with [`SubmissionReader::next_stamped`] and post with
    /// [`CompletionWriter::push_timed`].
    #[must_use]
    pub fn timestamps(&self) -> bool {
        self.cq.stamped()
    }
}

/// Iterator over submissions (worker side); publishes the consumed head on sync or drop.
#[must_use = "submissions are only taken by iterating the reader"]
pub struct SubmissionReader<'a> {
    c: &'a mut Consumer<Sqe>,
}

impl SubmissionReader<'_> {
    /// Submissions ready now.
    pub fn available(&mut self) -> usize {
        self.c.available()
    }

    /// Returns consumed slots to the application now.
    #[inline]
    pub fn sync(&mut self) -> usize {
        self.c.publish()
    }

    /// The next submission with the CLOCK_MONOTONIC nanoseconds at which the application
    /// published it (0 on a queue without timestamps).
    #[inline]
    pub fn next_stamped(&mut self) -> Option<(Sqe, u64)> {
        self.c
            .pop_stamped()
            .map(|(sqe, [submitted, ..])| (sqe, submitted))
    }
}

impl Iterator for SubmissionReader<'_> {
    type Item = Sqe;

    #[inline]
    fn next(&mut self) -> Option<Sqe> {
        self.c.pop()
    }
}

impl Drop for SubmissionReader<'_> {
    fn drop(&mut self) {
        self.c.publish();
    }
}

/// Completion-posting view (worker side). Publishes on [`CompletionWriter::sync`] or drop.
#[must_use = "completions are published when the writer is synced or dropped"]
pub struct CompletionWriter<'a> {
    p: &'a mut Producer<Cqe>,
    pending: &'a mut PendingCompletions,
}

impl CompletionWriter<'_> {
    /// Stages `cqe` if there is a free slot; when the ring is full the entry comes back in
    /// `Err` so the caller can keep it. Bypasses the pending list (may reorder).
    #[inline]
    pub fn try_push(&mut self, cqe: Cqe) -> Result<(), Cqe> {
        self.p.push(cqe)
    }

    /// Stages `cqe`, or keeps it in the pending list if the ring is full. Never drops and keeps
    /// completion order: while anything is pending, new completions queue behind it. On a
    /// timed queue its times read as all zero: use [`CompletionWriter::push_timed`] there.
    #[inline]
    pub fn push(&mut self, cqe: Cqe) {
        self.push_timed(cqe, OpTimes::default());
    }

    /// [`CompletionWriter::push`] with the operation's [`OpTimes`], stored at the completion's
    /// ring index (ignored on a queue without timestamps). The pending list keeps each
    /// completion with its times.
    #[inline]
    pub fn push_timed(&mut self, cqe: Cqe, times: OpTimes) {
        if !self.pending.is_empty() {
            self.pending.flush_into(self.p);
        }
        if self.pending.is_empty() {
            if let Err(back) = self.p.push_stamped(cqe, times.to_words()) {
                self.pending.push_back(back, times);
            }
        } else {
            self.pending.push_back(cqe, times);
        }
    }

    /// Moves as many pending completions as fit into the ring; returns how many moved.
    pub fn flush_pending(&mut self) -> usize {
        self.pending.flush_into(self.p)
    }

    /// Publishes staged completions, waking a parked application; returns how many.
    #[inline]
    pub fn sync(&mut self) -> usize {
        self.pending.flush_into(self.p);
        self.p.publish()
    }

    /// Free CQ slots right now.
    pub fn space(&mut self) -> usize {
        self.p.space()
    }

    /// Completions waiting for space.
    #[must_use]
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}

impl Drop for CompletionWriter<'_> {
    fn drop(&mut self) {
        self.sync();
    }
}

/// Views print only their type name: their state lives in the ring they borrow.
macro_rules! opaque_debug {
    ($($t:ident),*) => {$(
        impl std::fmt::Debug for $t<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).finish_non_exhaustive()
            }
        }
    )*};
}

opaque_debug!(
    SubmissionQueue,
    CompletionQueue,
    TimedCompletionQueue,
    SubmissionReader,
    CompletionWriter
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::Nop;

    #[test]
    fn round_trip_through_both_rings() {
        let (mut app, mut worker) = queue_pair(8, 8, None).unwrap();
        {
            let mut sq = app.submission();
            for i in 0..5 {
                sq.push(&Nop::new().user_data(i).build()).unwrap();
            }
        }
        let (reader, mut writer) = worker.split();
        for sqe in reader {
            writer.push(Cqe::from_raw(sqe.user_data(), 0, 0, 0, 0));
        }
        drop(writer);
        let got: Vec<u64> = app.completion().map(|c| c.user_data()).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn full_cq_keeps_completions_in_order_and_backpressures() {
        let (mut app, mut worker) = queue_pair(8, 2, None).unwrap();
        {
            let mut w = worker.completions();
            for i in 0..5 {
                w.push(Cqe::from_raw(i, 0, 0, 0, 0));
            }
            assert_eq!(w.pending_len(), 3);
            assert_eq!(
                w.try_push(Cqe::from_raw(99, 0, 0, 0, 0)),
                Err(Cqe::from_raw(99, 0, 0, 0, 0))
            );
        }
        assert!(worker.backpressured());
        let mut seen = Vec::new();
        while seen.len() < 5 {
            seen.extend(app.completion().map(|c| c.user_data()));
            worker.completions().flush_pending();
        }
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert!(!worker.backpressured());
    }

    fn clock() -> u64 {
        1_000
    }

    #[test]
    fn timed_queue_pairs_each_completion_with_its_times_through_overflow() {
        let (mut app, mut worker) = queue_pair_timed(4, 2, None, None, clock).unwrap();
        assert!(app.timestamps() && worker.timestamps());
        app.submission()
            .push(&Nop::new().user_data(7).build())
            .unwrap();
        let (sqe, submitted) = worker.submissions().next_stamped().unwrap();
        assert_eq!((sqe.user_data(), submitted), (7, 1_000));
        // Five completions into a CQ of two: three wait in the pending list with their times.
        let times = |i: u64| OpTimes::new(i, i + 1, i.is_multiple_of(2).then_some(i + 2), i + 3);
        {
            let mut w = worker.completions();
            for i in 0..5 {
                w.push_timed(Cqe::from_raw(i, 0, 0, 0, 0), times(i));
            }
        }
        let mut seen = Vec::new();
        while seen.len() < 5 {
            seen.extend(app.completion_timed().unwrap());
            worker.completions().flush_pending();
        }
        for (i, (cqe, t)) in (0..5).zip(seen) {
            assert_eq!((cqe.user_data(), t), (i, times(i)));
        }
    }

    #[test]
    fn untimed_queue_says_so() {
        let (mut app, worker) = queue_pair(4, 4, None).unwrap();
        assert!(!app.timestamps() && !worker.timestamps());
        assert!(matches!(app.completion_timed(), Err(TimestampsOff)));
    }

    #[test]
    fn halves_are_send() {
        fn assert_send<T: Send>() {}
        assert_send::<AppQueue>();
        assert_send::<WorkerQueue>();
    }

    #[test]
    fn push_after_worker_drop_is_closed() {
        let (mut app, worker) = queue_pair(4, 4, None).unwrap();
        drop(worker);
        assert!(app.worker_dropped());
        let sqe = Nop::new().build();
        assert_eq!(app.submission().push(&sqe), Err(PushError::Closed));
        assert_eq!(
            app.submission().push_multiple(&[sqe, sqe]),
            Err(PushError::Closed)
        );
        assert_eq!(app.wait_completions(1, None), 0);
    }

    #[test]
    fn worker_drop_wakes_a_parked_waiter() {
        let (mut app, worker) = queue_pair(4, 4, None).unwrap();
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(worker);
        });
        let t = Instant::now();
        // On old code this slept the whole timeout.
        assert_eq!(app.wait_completions(1, Some(Duration::from_secs(30))), 0);
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(app.worker_dropped());
        dropper.join().unwrap();
    }

    /// Counts rings.
    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicUsize);

    impl Doorbell for Counter {
        fn ring(&self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn post(worker: &mut WorkerQueue, uds: std::ops::Range<u64>) {
        let mut w = worker.completions();
        for ud in uds {
            w.push(Cqe::from_raw(ud, 0, 0, 0, 0));
        }
    }

    #[test]
    fn completion_bell_rings_once_per_publish_and_only_when_armed() {
        let bell = Arc::new(Counter::default());
        let (mut app, mut worker) =
            queue_pair_with_completion_bell(8, 8, None, Some(bell.clone())).unwrap();
        let rings = || bell.0.load(std::sync::atomic::Ordering::SeqCst);
        post(&mut worker, 0..3);
        assert_eq!(rings(), 0, "not armed: no ring");
        assert!(
            !app.arm_completion_bell(),
            "completions are ready: do not wait"
        );
        assert_eq!(app.completion().count(), 3);
        assert!(app.arm_completion_bell());
        post(&mut worker, 3..7);
        assert_eq!(rings(), 1, "one batch, one ring");
        post(&mut worker, 7..8);
        assert_eq!(rings(), 2, "still armed: the next batch rings again");
        app.disarm_completion_bell();
        assert_eq!(app.completion().count(), 5);
        post(&mut worker, 8..9);
        assert_eq!(rings(), 2, "disarmed: no ring");
        // A parked `wait_completions` and an armed bell are independent requests.
        assert_eq!(app.completion().count(), 1);
        assert!(app.arm_completion_bell());
        assert!(app.cq.prepare_park(1));
        app.cq.finish_park();
        post(&mut worker, 9..10);
        assert_eq!(rings(), 3, "finish_park left the bell armed");
    }

    #[test]
    fn worker_drop_rings_an_armed_completion_bell() {
        let bell = Arc::new(Counter::default());
        let (mut app, worker) =
            queue_pair_with_completion_bell(4, 4, None, Some(bell.clone())).unwrap();
        assert!(app.arm_completion_bell());
        drop(worker);
        assert_eq!(bell.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(
            !app.arm_completion_bell(),
            "worker gone: nothing to wait for"
        );
    }

    #[test]
    fn peer_drop_is_observable() {
        let (app, worker) = queue_pair(2, 2, None).unwrap();
        assert!(!worker.app_dropped());
        drop(app);
        assert!(worker.app_dropped());
    }

    /// Two independent attachments to one memory (as a daemon and its client map one memfd)
    /// form a working queue: entries, completions, the park handshake and the close flags
    /// all travel through the shared words.
    #[test]
    fn queue_in_shared_memory_works_across_attachments() {
        use crate::memory::HeapMemory;
        let layout = QueueLayout::new(8, 16, false).unwrap();
        let mem: Arc<dyn RingMemory> = Arc::new(HeapMemory::new(layout.words()));
        let waiter = ParkWaiter::new();
        let app_bell = waiter.doorbell();
        let mut app = app_queue_in(Arc::clone(&mem), layout, None, Box::new(waiter), None).unwrap();
        let mut worker = worker_queue_in(Arc::clone(&mem), layout, Some(app_bell)).unwrap();
        app.submission()
            .push(&Nop::new().user_data(5).build())
            .unwrap();
        let got: Vec<u64> = worker.submissions().map(|s| s.user_data()).collect();
        assert_eq!(got, vec![5]);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            worker
                .completions()
                .push(Cqe::success(5, 3, crate::DataPath::None));
            worker
        });
        assert_eq!(app.wait_completions(1, Some(Duration::from_secs(10))), 1);
        assert_eq!(app.completion().next().map(|c| c.user_data()), Some(5));
        let worker = t.join().unwrap();
        assert!(!worker.peer_corrupt());
        drop(worker);
        assert!(app.worker_dropped());
        // A memory too small for the layout is refused.
        let small: Arc<dyn RingMemory> = Arc::new(HeapMemory::new(layout.words() - 1));
        assert!(matches!(
            worker_queue_in(small, layout, None),
            Err(SetupError::Memory { .. })
        ));
    }
}
