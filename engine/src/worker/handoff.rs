//! Moving operations and completions between workers.
//!
//! The worker that owns a queue's rings drains its submissions and hands each started
//! operation to the least-loaded worker eligible for it ([`Msg::Run`]); that worker runs it on
//! its own connections and QPs and sends the completion back ([`Msg::Done`]), which the owner
//! posts to the completion ring. Cancels follow the operation ([`Msg::Cancel`]), and a dropped
//! queue tells the workers running its operations to abort them ([`Msg::QueueGone`]).
//!
//! Each worker has one [`Mailbox`]: a short-mutex MPSC vector. A sender collects a turn's
//! messages per destination in its [`Outbox`] and delivers each batch with one lock and one
//! wake of the destination's `mio::Waker`, so one eventfd write covers many operations. The
//! vectors are swapped, not reallocated: steady state allocates nothing per operation.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mio::Waker;
use ring_api::{Cqe, WorkerQueue};

use crate::inflight::{InFlight, QueueRef};

/// A message from one worker to another.
// `Run` carries the operation by value: it is moved once, into the other worker's mailbox;
// boxing it would allocate once per handed-off operation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Msg {
    /// Run this operation here (its completion goes back to `op.queue.owner`).
    Run(InFlight),
    /// Cancel the operation of `queue` tagged `target`, then complete the Cancel entry
    /// `user_data`. When it is not here and `hops > 1`, pass it on to the next eligible
    /// worker with `hops - 1` (operations with one tag spread over several workers).
    Cancel {
        /// The queue of both entries.
        queue: QueueRef,
        /// The Cancel entry's own tag.
        user_data: u64,
        /// Tag of the operation to stop.
        target: u64,
        /// Workers still to ask, this one included.
        hops: usize,
        /// The Cancel entry's own readings (timed queues), for its completion's times.
        stamps: Option<crate::op_times::Stamps>,
    },
    /// Stop the chunks of striped operation `join` of `queue` that run here: each completes
    /// `ECANCELED` into its join (a Cancel of the operation, or another chunk failed).
    CancelChunks {
        /// The queue of the striped operation.
        queue: QueueRef,
        /// Its join on the queue's owner.
        join: crate::stripe::JoinId,
    },
    /// The queue with this id is gone: abort its operations without completions.
    QueueGone {
        /// Engine-wide queue id.
        id: u64,
    },
    /// A completion for a queue this worker owns.
    Done {
        /// Where to post it.
        queue: QueueRef,
        /// The entry.
        cqe: Cqe,
        /// Whether it ends an operation handed out by the owner (not a Cancel's own entry).
        op: bool,
        /// The op is a chunk of a striped operation: its join, which the owner completes
        /// once every chunk has ([`crate::stripe`]).
        chunk: Option<crate::stripe::JoinId>,
        /// Its times, on a queue created with timestamps.
        times: Option<ring_api::OpTimes>,
    },
}

/// A worker's incoming messages.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    msgs: Mutex<Vec<Msg>>,
}

impl Mailbox {
    /// Appends `batch` (leaving it empty, its capacity kept).
    fn deliver(&self, batch: &mut Vec<Msg>) {
        self.msgs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(batch);
    }

    /// Moves every waiting message into `into` (empty on entry) by swapping vectors.
    pub(crate) fn take(&self, into: &mut Vec<Msg>) {
        let mut g = self.msgs.lock().unwrap_or_else(PoisonError::into_inner);
        if !g.is_empty() {
            std::mem::swap(&mut *g, into);
        }
    }
}

/// What the engine and the other workers share with one worker.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    /// Queues waiting to be adopted by the worker: (rings, completion capacity, queue id).
    pub(crate) queues: Mutex<Vec<(WorkerQueue, usize, u64)>>,
    pub(crate) shutdown: AtomicBool,
    /// Whether pinning to the planned core succeeded (diagnostics).
    pub(crate) pinned: AtomicBool,
    /// Messages from other workers.
    pub(crate) mail: Mailbox,
    /// Operations handed to this worker and not yet completed (its own included): what
    /// owners compare to pick the least-loaded worker.
    pub(crate) load: AtomicUsize,
    /// Operations this worker has run (started from its own queues or handed to it).
    pub(crate) executed: AtomicU64,
    /// Bytes moved by the operations it completed successfully (GET/RangeGet bytes landed,
    /// PUT/UploadPart bytes sent; the chunks of a striped operation each count here).
    pub(crate) bytes: AtomicU64,
}

/// One worker as the others see it.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) waker: Arc<Waker>,
}

/// A worker's outgoing messages of one turn, per destination.
#[derive(Debug, Default)]
pub(crate) struct Outbox {
    batches: Vec<Vec<Msg>>,
    /// Operations ([`Msg::Run`]) in each batch, added to the destination's load on delivery.
    runs: Vec<usize>,
}

impl Outbox {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            batches: (0..workers).map(|_| Vec::new()).collect(),
            runs: vec![0; workers],
        }
    }

    /// Queues `msg` for worker `to` (delivered by [`Outbox::flush`]).
    pub(crate) fn push(&mut self, to: usize, msg: Msg) {
        if matches!(msg, Msg::Run(_))
            && let Some(r) = self.runs.get_mut(to)
        {
            *r += 1;
        }
        if let Some(b) = self.batches.get_mut(to) {
            b.push(msg);
        }
    }

    /// Delivers every batch: one lock and one wake per destination. Returns whether anything
    /// was sent.
    pub(crate) fn flush(&mut self, peers: &[Peer]) -> bool {
        let mut sent = false;
        for ((batch, runs), peer) in self.batches.iter_mut().zip(&mut self.runs).zip(peers) {
            if batch.is_empty() {
                continue;
            }
            if *runs > 0 {
                peer.inbox.load.fetch_add(*runs, Ordering::Relaxed);
                *runs = 0;
            }
            peer.inbox.mail.deliver(batch);
            // A failed eventfd write means the counter is saturated, i.e. already signalled.
            let _ = peer.waker.wake();
            sent = true;
        }
        sent
    }
}

/// Whether an operation whose registration is bound to workers `among` (`None`: unbound) may
/// run on worker `w`.
pub(crate) fn may_run(among: Option<&[usize]>, w: usize) -> bool {
    among.is_none_or(|a| a.contains(&w))
}

/// The least-loaded worker of `among` by `loads`: worker `me` on a tie when it is one of them
/// (no hand-off), else the ties rotate with `rotor`. `among` is the engine's eligible workers,
/// or the workers of a registration's NICs (a subset of them).
pub(crate) fn least_loaded(
    loads: &[usize],
    among: &[usize],
    me: usize,
    rotor: &mut usize,
) -> usize {
    let n = among.len();
    let Some(&first) = among.first() else {
        return me;
    };
    let (mut best, mut best_load) = if among.contains(&me) {
        (me, loads.get(me).copied().unwrap_or(usize::MAX))
    } else {
        (first, usize::MAX)
    };
    *rotor = rotor.wrapping_add(1);
    for k in 0..n {
        let Some(&w) = among.get((*rotor + k) % n) else {
            continue;
        };
        let l = loads.get(w).copied().unwrap_or(usize::MAX);
        if l < best_load {
            best = w;
            best_load = l;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_loaded_stays_inside_the_registrations_workers() {
        let loads = [5, 0, 0, 3, 1, 9];
        let mut rotor = 0;
        // Unbound: the idle workers 1 and 2 (rotating), never the busy ones.
        let all = [0, 1, 2, 3, 4, 5];
        for _ in 0..4 {
            let w = least_loaded(&loads, &all, 0, &mut rotor);
            assert!(w == 1 || w == 2, "{w}");
        }
        // Bound to the workers of one NIC (3, 4, 5): the least loaded of them, even though
        // workers 1 and 2 are idle.
        for me in 0..6 {
            assert_eq!(least_loaded(&loads, &[3, 4, 5], me, &mut rotor), 4);
        }
        // The owner keeps a tie only when it is one of the registration's workers.
        assert_eq!(least_loaded(&[1, 1, 1], &[1, 2], 1, &mut rotor), 1);
        let w = least_loaded(&[1, 1, 1], &[1, 2], 0, &mut rotor);
        assert!(w == 1 || w == 2);
        // Every candidate saturated (not eligible): still one of them.
        assert_eq!(least_loaded(&[0, usize::MAX], &[1], 0, &mut rotor), 1);
        assert!(may_run(None, 7));
        assert!(may_run(Some(&[3, 4]), 4));
        assert!(!may_run(Some(&[3, 4]), 1));
    }

    #[test]
    fn batches_reach_their_worker_in_order_with_one_wake() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let peers = vec![
            Peer {
                inbox: Arc::default(),
                waker: Arc::clone(&waker),
            },
            Peer {
                inbox: Arc::default(),
                waker,
            },
        ];
        let mut out = Outbox::new(2);
        assert!(!out.flush(&peers), "nothing to send");
        for id in 0..5 {
            out.push(1, Msg::QueueGone { id });
        }
        assert!(out.flush(&peers));
        let mut got = Vec::new();
        peers[0].inbox.mail.take(&mut got);
        assert!(got.is_empty(), "worker 0 got another's mail");
        peers[1].inbox.mail.take(&mut got);
        let ids: Vec<u64> = got
            .iter()
            .map(|m| match m {
                Msg::QueueGone { id } => *id,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(peers[1].inbox.load.load(Ordering::Relaxed), 0);
    }
}
