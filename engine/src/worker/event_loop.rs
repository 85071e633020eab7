//! The worker's loop: drain rings, start operations, poll sockets, fire timers, post
//! completions, and sleep only when nothing moves.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use mio::{Events, Poll};
use ring_api::{Cqe, WorkerQueue};

use super::{Inbox, WAKER};
use crate::dispatch::{Dispatch, DispatchCtx, dispatch};
use crate::engine::Shared;
use crate::fabric::{Fabric, Finished};
use crate::inflight::{OpKey, Slab};
use crate::sys::monotonic_ns;
use crate::timers::{TimerKind, Timers};

/// Submissions taken from one queue per loop turn, so one busy queue cannot starve others
/// or delay completions indefinitely.
const TAKE_BUDGET: usize = 256;

/// One attached application queue.
#[derive(Debug)]
pub(super) struct QueueSlot {
    pub(super) wq: WorkerQueue,
    /// Completions produced this turn, published together at the end of the turn.
    pub(super) staged: Vec<Cqe>,
    /// Operations taken from this queue and not yet completed. Bounded by the CQ capacity,
    /// which bounds the overflow list a full CQ can accumulate.
    pub(super) outstanding: usize,
    /// Completion ring capacity.
    pub(super) cq_capacity: usize,
}

/// A worker's state (lives on the worker thread).
#[derive(Debug)]
pub(crate) struct Worker {
    pub(super) poll: Poll,
    pub(super) inbox: Arc<Inbox>,
    pub(super) shared: Arc<Shared>,
    pub(super) fabric: Box<dyn Fabric>,
    pub(super) queues: Vec<Option<QueueSlot>>,
    pub(super) ops: Slab,
    pub(super) ready: VecDeque<OpKey>,
    pub(super) timers: Timers,
    pub(super) done: Finished,
}

impl Worker {
    pub(super) fn new(
        poll: Poll,
        inbox: Arc<Inbox>,
        shared: Arc<Shared>,
        fabric: Box<dyn Fabric>,
    ) -> Self {
        Self {
            poll,
            inbox,
            shared,
            fabric,
            queues: Vec::new(),
            ops: Slab::default(),
            ready: VecDeque::new(),
            timers: Timers::default(),
            done: Vec::new(),
        }
    }

    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_progress = Instant::now();
        while !self.inbox.shutdown.load(Ordering::Acquire) {
            self.adopt();
            let now = Instant::now();
            let mut progress = self.take_submissions(now);
            progress |= self.fire_timers(now);
            progress |= self.start_ready(now);
            let ready_before = self.ready.len();
            progress |= self.settle_done(now);
            // Work this turn created for the next one (an immediate retry queued to start).
            // Anything else that can still move announces itself: submissions through the
            // park handshake, sockets through epoll, retries and deadlines through the timer.
            let more =
                self.ready.len() > ready_before || !self.done.is_empty() || self.stager_pending();
            self.publish();
            self.drop_closed_queues();
            if progress {
                last_progress = now;
            }
            let timeout = if more
                || (self.fabric.active() > 0
                    && now.duration_since(last_progress) < self.shared.spin)
            {
                Some(Duration::ZERO)
            } else {
                self.timers.next().map(|t| t.saturating_duration_since(now))
            };
            self.wait(&mut events, timeout);
        }
        self.abort_all();
    }

    /// Polls sockets; parks (announcing it to every queue) when `timeout` is not zero.
    fn wait(&mut self, events: &mut Events, timeout: Option<Duration>) {
        let park = timeout != Some(Duration::ZERO);
        let mut parked = park;
        if park {
            for q in self.queues.iter_mut().flatten() {
                if !q.wq.prepare_park() {
                    parked = false;
                    break;
                }
            }
        }
        let t = if parked {
            timeout
        } else {
            Some(Duration::ZERO)
        };
        if self.poll.poll(events, t).is_err() {
            events.clear();
        }
        if park {
            for q in self.queues.iter_mut().flatten() {
                q.wq.finish_park();
            }
        }
        let io = self.poll.registry();
        for ev in events.iter() {
            if ev.token() != WAKER {
                self.fabric
                    .on_ready(ev.token(), &mut self.ops, io, &mut self.done);
            }
        }
    }

    fn adopt(&mut self) {
        let new: Vec<(WorkerQueue, usize)> = std::mem::take(
            &mut *self
                .inbox
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (wq, cq_capacity) in new {
            let slot = Some(QueueSlot {
                wq,
                staged: Vec::new(),
                outstanding: 0,
                cq_capacity,
            });
            match self.queues.iter().position(Option::is_none) {
                Some(i) => self.queues[i] = slot,
                None => self.queues.push(slot),
            }
        }
    }

    /// Takes submissions from every queue that is not back-pressured.
    fn take_submissions(&mut self, now: Instant) -> bool {
        let mut took = false;
        let shared = Arc::clone(&self.shared);
        let ctx = DispatchCtx {
            registry: &shared.registry,
            objects: &shared.objects,
            default_deadline: shared.default_deadline,
            now,
            now_mono_ns: monotonic_ns(),
        };
        for qi in 0..self.queues.len() {
            let mut taken = Vec::new();
            if let Some(Some(q)) = self.queues.get_mut(qi) {
                if q.wq.backpressured() {
                    continue;
                }
                let room = q.cq_capacity.saturating_sub(q.outstanding).min(TAKE_BUDGET);
                taken.extend(q.wq.submissions().take(room));
            }
            for sqe in &taken {
                took = true;
                self.add_outstanding(qi);
                match dispatch(sqe, qi, &ctx) {
                    Dispatch::Complete(cqe) => self.post(qi, cqe),
                    Dispatch::Cancel { user_data, target } => self.cancel(qi, user_data, target),
                    Dispatch::Start(op) => {
                        let deadline = op.deadline;
                        let key = self.ops.insert(op);
                        if let Some(d) = deadline {
                            self.timers.push(d, key, TimerKind::Deadline);
                        }
                        self.ready.push_back(key);
                    }
                }
            }
        }
        took
    }

    fn add_outstanding(&mut self, qi: usize) {
        if let Some(Some(q)) = self.queues.get_mut(qi) {
            q.outstanding += 1;
        }
    }

    /// Stages a completion for queue `qi` (published at the end of the turn).
    pub(super) fn post(&mut self, qi: usize, cqe: Cqe) {
        if let Some(Some(q)) = self.queues.get_mut(qi) {
            q.outstanding = q.outstanding.saturating_sub(1);
            q.staged.push(cqe);
        }
    }

    /// Publishes the staged completions of every queue, and flushes completions that waited
    /// for CQ space. A queue with neither is skipped (no fence, no wakeup check).
    fn publish(&mut self) {
        for q in self.queues.iter_mut().flatten() {
            if q.staged.is_empty() && !q.wq.backpressured() {
                continue;
            }
            let mut w = q.wq.completions();
            for cqe in q.staged.drain(..) {
                w.push(cqe);
            }
            w.sync();
        }
    }

    /// Forgets queues whose application half is gone, aborting their operations.
    fn drop_closed_queues(&mut self) {
        for qi in 0..self.queues.len() {
            let closed = matches!(self.queues.get(qi), Some(Some(q)) if q.wq.app_dropped());
            if closed {
                for key in self.ops.keys_where(|o| o.queue == qi) {
                    self.abort_op(key);
                }
                if let Some(slot) = self.queues.get_mut(qi) {
                    *slot = None;
                }
            }
        }
    }

    /// Stops `key`'s transfer and forgets it without a completion (its queue is gone).
    fn abort_op(&mut self, key: OpKey) {
        if let Some(op) = self.ops.get(key) {
            self.fabric.abort(op, self.poll.registry());
        }
        self.ops.remove(key);
    }

    fn abort_all(&mut self) {
        for key in self.ops.keys_where(|_| true) {
            self.abort_op(key);
        }
    }
}
