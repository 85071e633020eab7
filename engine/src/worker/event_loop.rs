//! The worker's loop: drain rings, start operations, poll sockets, fire timers, post
//! completions, and sleep only when nothing moves.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use mio::{Events, Poll};
use ring_api::{Cqe, OpTimes, WorkerQueue};

use super::handoff::{self, Inbox, Msg, Outbox};
use super::{Crew, WAKER};
use crate::dispatch::{Dispatch, DispatchCtx, dispatch};
use crate::fabric::{Fabric, Finished};
use crate::inflight::{InFlight, OpKey, QueueRef, Slab};
use crate::local::Shared;
use crate::op_times::Stamps;
use crate::stripe::Landed;
use crate::sys::monotonic_ns;
use crate::timers::{TimerKind, Timers};

/// Submissions taken from one queue per loop turn, so one busy queue cannot starve others
/// or delay completions indefinitely.
const TAKE_BUDGET: usize = 256;

/// Where the operations of one queue tagged with one `user_data` run (for Cancel).
#[derive(Debug, Clone, Copy)]
pub(super) struct Placed {
    /// The worker the last of them went to.
    pub(super) worker: usize,
    /// How many are in flight.
    pub(super) count: u32,
    /// Whether they run on more than one worker (a Cancel then asks each in turn).
    pub(super) spread: bool,
}

/// One attached application queue.
#[derive(Debug)]
pub(super) struct QueueSlot {
    pub(super) wq: WorkerQueue,
    /// Engine-wide id (slots are reused; ids are not).
    pub(super) id: u64,
    /// Operations in flight by tag, wherever they run: where a Cancel must go.
    pub(super) placed: HashMap<u64, Placed>,
    /// Completions produced this turn with their times (all zero on a queue without
    /// timestamps), published together at the end of the turn.
    pub(super) staged: Vec<(Cqe, OpTimes)>,
    /// The queue was created with per-operation timestamps.
    pub(super) timed: bool,
    /// Operations taken from this queue and not yet completed. Bounded by the CQ capacity,
    /// which bounds the overflow list a full CQ can accumulate.
    pub(super) outstanding: usize,
    /// Completion ring capacity.
    pub(super) cq_capacity: usize,
}

/// A worker's state (lives on the worker thread).
#[derive(Debug)]
pub(crate) struct Worker {
    /// This worker's index in the crew.
    pub(super) index: usize,
    pub(super) poll: Poll,
    pub(super) inbox: Arc<Inbox>,
    pub(super) crew: Arc<Crew>,
    /// Messages to other workers, delivered at the end of each turn.
    pub(super) outbox: Outbox,
    /// The mailbox's contents of this turn (a kept buffer).
    pub(super) mail: Vec<Msg>,
    /// Loads of the workers as this turn sees them (ops handed out this turn included).
    pub(super) loads: Vec<usize>,
    /// Rotates the tie-break between equally loaded workers.
    pub(super) rotor: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) fabric: Box<dyn Fabric>,
    pub(super) queues: Vec<Option<QueueSlot>>,
    pub(super) ops: Slab,
    pub(super) ready: VecDeque<OpKey>,
    /// Operations on device memory queued for a bounce range, oldest first, with their places
    /// in the engine's bounce queue.
    pub(super) waiting: VecDeque<(OpKey, crate::memory::bounce::Ticket)>,
    pub(super) timers: Timers,
    pub(super) done: Finished,
    /// Striped operations of this worker's queues waiting for their chunks (or parts).
    pub(super) joins: crate::stripe::Joins,
}

impl Worker {
    pub(super) fn new(
        index: usize,
        poll: Poll,
        inbox: Arc<Inbox>,
        crew: Arc<Crew>,
        shared: Arc<Shared>,
        mut fabric: Box<dyn Fabric>,
    ) -> Self {
        let workers = crew.peers.len();
        if let Some(me) = crew.peers.get(index) {
            fabric.bind_waker(Arc::clone(&me.waker));
        }
        Self {
            index,
            poll,
            inbox,
            outbox: Outbox::new(workers),
            crew,
            mail: Vec::new(),
            loads: vec![0; workers],
            rotor: index,
            shared,
            fabric,
            queues: Vec::new(),
            ops: Slab::default(),
            ready: VecDeque::new(),
            waiting: VecDeque::new(),
            timers: Timers::default(),
            done: Vec::new(),
            joins: crate::stripe::Joins::default(),
        }
    }

    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut last_progress = Instant::now();
        while !self.inbox.shutdown.load(Ordering::Acquire) {
            self.adopt();
            let now = Instant::now();
            let mut progress = self.take_mail();
            progress |= self.take_submissions(now);
            progress |= self.fire_timers(now);
            progress |= self
                .fabric
                .tick(now, &mut self.ops, self.poll.registry(), &mut self.done);
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
            self.outbox.flush(&self.crew.peers);
            if progress {
                last_progress = now;
            }
            let timeout = if more
                || (self.fabric.active() > 0
                    && now.duration_since(last_progress) < self.shared.spin)
            {
                Some(Duration::ZERO)
            } else {
                let next = match (self.timers.next(), self.fabric.next_timer()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                next.map(|t| t.saturating_duration_since(now))
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
        let new: Vec<(WorkerQueue, usize, u64)> = std::mem::take(
            &mut *self
                .inbox
                .queues
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (wq, cq_capacity, id) in new {
            let slot = Some(QueueSlot {
                timed: wq.timestamps(),
                wq,
                id,
                placed: HashMap::new(),
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

    /// Handles the messages other workers sent: operations to run, cancels, dropped queues and
    /// completions for this worker's queues.
    fn take_mail(&mut self) -> bool {
        let mut mail = std::mem::take(&mut self.mail);
        self.inbox.mail.take(&mut mail);
        let any = !mail.is_empty();
        for msg in mail.drain(..) {
            match msg {
                Msg::Run(op) => self.accept(op),
                Msg::Cancel {
                    queue,
                    user_data,
                    target,
                    hops,
                    stamps,
                } => self.cancel(queue, user_data, target, hops, stamps),
                Msg::CancelChunks { queue, join } => self.cancel_chunks(queue, join),
                Msg::QueueGone { id } => {
                    for key in self.ops.keys_where(|o| o.queue.id == id) {
                        self.abort_op(key);
                    }
                }
                Msg::Done {
                    queue,
                    cqe,
                    op,
                    chunk,
                    times,
                } => self.post_own(queue, cqe, op, chunk, times),
            }
        }
        self.mail = mail;
        any
    }

    /// Takes submissions from every queue that is not back-pressured, and starts each
    /// operation here or hands it to the least-loaded eligible worker.
    fn take_submissions(&mut self, now: Instant) -> bool {
        let mut took = false;
        let shared = Arc::clone(&self.shared);
        let ctx = DispatchCtx {
            registry: &shared.registry,
            objects: &shared.objects,
            default_deadline: shared.default_deadline,
            uploads: &shared.uploads,
            now,
            now_mono_ns: monotonic_ns(),
        };
        let mut loads_read = false;
        for qi in 0..self.queues.len() {
            let mut taken = Vec::new();
            let mut id = 0;
            // When the worker took this queue's entries (timed queues only: no clock read
            // otherwise).
            let mut started = None;
            if let Some(Some(q)) = self.queues.get_mut(qi) {
                if q.wq.backpressured() {
                    continue;
                }
                id = q.id;
                let room = q.cq_capacity.saturating_sub(q.outstanding).min(TAKE_BUDGET);
                let mut reader = q.wq.submissions();
                taken.extend(std::iter::from_fn(|| reader.next_stamped()).take(room));
                drop(reader);
                if q.timed && !taken.is_empty() {
                    started = Some(monotonic_ns());
                }
            }
            let queue = QueueRef {
                owner: self.index,
                slot: qi,
                id,
            };
            // A turn's entries go out in contiguous blocks, one per worker, so neighbouring
            // ranges (a model read front to back) land on one worker and its GPU stager can
            // merge their copies; a turn of a few entries still spreads one per worker.
            let run = taken.len().div_ceil(self.crew.eligible.len().max(1)).max(1);
            let mut block: Option<(usize, usize)> = None;
            for (sqe, submitted) in &taken {
                took = true;
                self.add_outstanding(qi);
                let stamps = started.map(|started| Stamps::new(*submitted, started));
                match dispatch(sqe, queue, &ctx) {
                    Dispatch::Complete(cqe) => {
                        let times = stamps.as_ref().map(Stamps::complete);
                        self.post(queue, cqe, times);
                    }
                    Dispatch::Cancel { user_data, target } => {
                        self.route_cancel(queue, user_data, target, stamps);
                    }
                    Dispatch::Start(mut op) => {
                        op.times = stamps;
                        if !loads_read {
                            self.read_loads();
                            loads_read = true;
                        }
                        // A RangeGet large enough on memory bound to several NICs: chunks
                        // on workers of each NIC (`stripe`); a PUT: a multipart upload whose
                        // parts run there (`stripe_put`).
                        let Some(op) = self
                            .stripe_put(op)
                            .and_then(|op| self.stripe_get(op))
                            .and_then(|op| self.stripe(op))
                        else {
                            continue;
                        };
                        // A registration bound to NICs runs on their workers only.
                        let among = op.buf.as_ref().and_then(|b| b.workers());
                        let to = match block {
                            Some((to, left)) if left > 0 && handoff::may_run(among, to) => {
                                block = Some((to, left - 1));
                                to
                            }
                            _ => {
                                let among = among.unwrap_or(&self.crew.eligible);
                                let to = handoff::least_loaded(
                                    &self.loads,
                                    among,
                                    self.index,
                                    &mut self.rotor,
                                );
                                block = Some((to, run - 1));
                                to
                            }
                        };
                        self.assign(op, to);
                    }
                }
            }
        }
        took
    }

    /// Splits `op` into chunks handed round robin to workers of different NICs, under one join
    /// (see [`crate::stripe`]); hands it back when it is not to be striped.
    fn stripe(&mut self, op: InFlight) -> Option<InFlight> {
        self.stripe_sized(op, None)
    }

    /// As [`Worker::stripe`], every chunk to report object size `size` when it is `Some` (a
    /// whole-object GET sized by its HEAD).
    pub(super) fn stripe_sized(&mut self, op: InFlight, size: Option<u64>) -> Option<InFlight> {
        let cfg = self.shared.stripe;
        if !crate::stripe::wants_split(&op, &cfg) {
            return Some(op);
        }
        let bound = op.buf.as_ref().and_then(|b| b.workers());
        let groups =
            crate::stripe::nic_groups(&cfg, bound, &self.shared.placement, &self.crew.eligible);
        if groups.is_empty() {
            return Some(op);
        }
        let (queue, user_data) = (op.queue, op.user_data);
        let chunks = match crate::stripe::split(op, &cfg) {
            crate::stripe::Split::Whole(op) => return Some(op),
            crate::stripe::Split::Chunks(chunks) => chunks,
        };
        let join = self
            .joins
            .open_sized(queue.id, user_data, chunks.len(), size);
        let first = self.rotor % groups.len();
        for (i, mut chunk) in chunks.into_iter().enumerate() {
            chunk.stripe = Some(join);
            let Some(group) = groups.get((first + i) % groups.len()) else {
                continue;
            };
            let to = handoff::least_loaded(&self.loads, group, self.index, &mut self.rotor);
            self.assign(chunk, to);
        }
        None
    }

    /// Snapshots every worker's load; workers not eligible count as full.
    pub(super) fn read_loads(&mut self) {
        self.loads.fill(usize::MAX);
        for &w in &self.crew.eligible {
            if let (Some(l), Some(p)) = (self.loads.get_mut(w), self.crew.peers.get(w)) {
                *l = p.inbox.load.load(Ordering::Relaxed);
            }
        }
    }

    /// Starts `op` (from one of this worker's queues) here or on worker `to`, remembering
    /// where it went under its tag.
    pub(super) fn assign(&mut self, op: InFlight, to: usize) {
        if let Some(l) = self.loads.get_mut(to) {
            *l = l.saturating_add(1);
        }
        if let Some(Some(q)) = self.queues.get_mut(op.queue.slot) {
            q.placed
                .entry(op.user_data)
                .and_modify(|p| {
                    p.spread |= p.worker != to;
                    p.worker = to;
                    p.count += 1;
                })
                .or_insert(Placed {
                    worker: to,
                    count: 1,
                    spread: false,
                });
        }
        if to == self.index {
            self.inbox.load.fetch_add(1, Ordering::Relaxed);
            self.accept(op);
        } else {
            self.outbox.push(to, Msg::Run(op));
        }
    }

    /// Takes `op` into this worker's table and readies it (its load is already counted).
    fn accept(&mut self, op: InFlight) {
        self.inbox.executed.fetch_add(1, Ordering::Relaxed);
        let deadline = op.deadline;
        let key = self.ops.insert(op);
        if let Some(d) = deadline {
            self.timers.push(d, key, TimerKind::Deadline);
        }
        self.ready.push_back(key);
    }

    /// Sends a Cancel of `target` where the operation tagged so runs.
    fn route_cancel(
        &mut self,
        queue: QueueRef,
        user_data: u64,
        target: u64,
        stamps: Option<Stamps>,
    ) {
        let placed = self
            .queues
            .get(queue.slot)
            .and_then(Option::as_ref)
            .and_then(|q| q.placed.get(&target).copied());
        let (first, hops) = match placed {
            // Not in flight: complete the Cancel here (not found).
            None => (self.index, 1),
            Some(p) if !p.spread => (p.worker, 1),
            // Several workers may hold one: ask each in turn, this one first.
            Some(_) => (self.index, self.crew.eligible.len().max(1)),
        };
        if first == self.index {
            self.cancel(queue, user_data, target, hops, stamps);
        } else {
            self.outbox.push(
                first,
                Msg::Cancel {
                    queue,
                    user_data,
                    target,
                    hops,
                    stamps,
                },
            );
        }
    }

    fn add_outstanding(&mut self, qi: usize) {
        if let Some(Some(q)) = self.queues.get_mut(qi) {
            q.outstanding += 1;
        }
    }

    /// Posts a completion to `queue` (with its times on a timed queue): staged here if this
    /// worker owns it, else sent to its owner.
    pub(super) fn post(&mut self, queue: QueueRef, cqe: Cqe, times: Option<OpTimes>) {
        self.route(queue, cqe, false, None, times);
    }

    /// Posts the completion of operation `op` that this worker ran (its load drops by one;
    /// the bytes of a success count for this worker). `op` is dropped first, releasing its
    /// lease before the completion becomes visible.
    pub(super) fn complete_op(&mut self, op: InFlight, cqe: Cqe) {
        let (queue, chunk) = (op.queue, op.stripe);
        if cqe.is_ok() && op.buf.is_some() {
            self.inbox.bytes.fetch_add(cqe.bytes(), Ordering::Relaxed);
        }
        let times = op.times.as_ref().map(Stamps::complete);
        drop(op);
        self.inbox.load.fetch_sub(1, Ordering::Relaxed);
        self.route(queue, cqe, true, chunk, times);
    }

    fn route(
        &mut self,
        queue: QueueRef,
        cqe: Cqe,
        op: bool,
        chunk: Option<crate::stripe::JoinId>,
        times: Option<OpTimes>,
    ) {
        if queue.owner == self.index {
            self.post_own(queue, cqe, op, chunk, times);
        } else {
            self.outbox.push(
                queue.owner,
                Msg::Done {
                    queue,
                    cqe,
                    op,
                    chunk,
                    times,
                },
            );
        }
    }

    /// Stages a completion for this worker's queue (published at the end of the turn);
    /// dropped if the queue is gone.
    fn post_own(
        &mut self,
        queue: QueueRef,
        cqe: Cqe,
        op: bool,
        chunk: Option<crate::stripe::JoinId>,
        times: Option<OpTimes>,
    ) {
        let Some(Some(q)) = self.queues.get_mut(queue.slot) else {
            return;
        };
        if q.id != queue.id {
            return;
        }
        if op
            && let std::collections::hash_map::Entry::Occupied(mut e) =
                q.placed.entry(cqe.user_data())
        {
            let p = e.get_mut();
            p.count = p.count.saturating_sub(1);
            if p.count == 0 {
                e.remove();
            }
        }
        // A step of a striped PUT: its upload moves on (`stripe_put`).
        if let Some(join) = chunk
            && self.joins.is_put(join)
        {
            self.put_step_landed(queue, join, cqe, times);
            return;
        }
        // The HEAD of a whole-object GET: the GET goes on, striped or not (`stripe_get`).
        if let Some(join) = chunk
            && self.joins.is_get(join)
        {
            self.get_head_landed(queue, join, cqe, times);
            return;
        }
        // A chunk completes nothing by itself: its striped operation completes, once, with
        // the last of its chunks.
        let mut times = times;
        let cqe = match chunk {
            None => cqe,
            Some(join) => {
                // The striped operation's times: its submission and start, the earliest
                // chunk's first byte, the last chunk's completion.
                if let Some(t) = times {
                    times = Some(self.joins.merge_times(join, t));
                }
                match self.joins.land(join, cqe) {
                    Landed::Waiting => return,
                    Landed::FirstFailure => {
                        // The parent fails with this chunk's error: stop the others.
                        self.stop_chunks(queue, join);
                        return;
                    }
                    Landed::Done(cqe) => cqe,
                }
            }
        };
        self.stage(queue, cqe, times);
    }

    /// Stages the completion of an operation of this worker's queue `queue` (with its times on
    /// a timed queue).
    pub(super) fn stage(&mut self, queue: QueueRef, cqe: Cqe, times: Option<OpTimes>) {
        if let Some(Some(q)) = self.queues.get_mut(queue.slot)
            && q.id == queue.id
        {
            q.outstanding = q.outstanding.saturating_sub(1);
            q.staged.push((cqe, times.unwrap_or_default()));
        }
    }

    /// Stops every chunk of striped operation `join`, here and on the other workers.
    pub(super) fn stop_chunks(&mut self, queue: QueueRef, join: crate::stripe::JoinId) {
        for w in self.crew.eligible.clone() {
            if w != self.index {
                self.outbox.push(w, Msg::CancelChunks { queue, join });
            }
        }
        self.cancel_chunks(queue, join);
    }

    /// Publishes the staged completions of every queue, and flushes completions that waited
    /// for CQ space. A queue with neither is skipped (no fence, no wakeup check).
    fn publish(&mut self) {
        for q in self.queues.iter_mut().flatten() {
            if q.staged.is_empty() && !q.wq.backpressured() {
                continue;
            }
            let mut w = q.wq.completions();
            for (cqe, times) in q.staged.drain(..) {
                w.push_timed(cqe, times);
            }
            w.sync();
        }
    }

    /// Forgets queues whose application half is gone, aborting their operations here and
    /// telling the workers that run the others to abort them too.
    fn drop_closed_queues(&mut self) {
        for qi in 0..self.queues.len() {
            let closed = matches!(self.queues.get(qi), Some(Some(q)) if q.wq.app_dropped());
            if !closed {
                continue;
            }
            let Some(Some(q)) = self.queues.get_mut(qi).map(Option::take) else {
                continue;
            };
            for key in self.ops.keys_where(|o| o.queue.id == q.id) {
                self.abort_op(key);
            }
            // After its operations are gone: the aborts run on.
            self.abort_orphaned_uploads(q.id);
            let mut told = Vec::new();
            for p in q.placed.values() {
                if p.worker != self.index && !told.contains(&p.worker) {
                    told.push(p.worker);
                }
            }
            if q.placed.values().any(|p| p.spread) {
                told.clone_from(&self.crew.eligible);
                told.retain(|&w| w != self.index);
            }
            for w in told {
                self.outbox.push(w, Msg::QueueGone { id: q.id });
            }
        }
    }

    /// Stops `key`'s transfer and forgets it without a completion (its queue is gone).
    fn abort_op(&mut self, key: OpKey) {
        self.forget_wait(key);
        if let Some(op) = self.ops.get(key) {
            self.fabric.abort(op, self.poll.registry());
        }
        if self.ops.remove(key).is_some() {
            self.inbox.load.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn abort_all(&mut self) {
        for key in self.ops.keys_where(|_| true) {
            self.abort_op(key);
        }
    }
}
