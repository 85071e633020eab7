//! Worker threads: one per placement slot, each owning a `mio` poller, a fabric (its own HTTP
//! connections and RDMA QPs) and the queues attached to it.
//!
//! Thread model: a worker polls its submission rings, mailbox and sockets while it makes
//! progress and blocks in `epoll_wait` when it does not. Its `mio::Waker` (an eventfd
//! registered with the same epoll) is the doorbell of every ring attached to it, rung by
//! producers only when the worker announced it is about to sleep (the `need_wakeup` protocol
//! of [`ring_api::wakeup`]), and by other workers after they delivered it a batch of messages
//! ([`handoff`]). An idle engine therefore sleeps in the kernel with no timers armed.
//!
//! Operations of one queue run on every eligible worker: the queue's owner drains and
//! validates its entries and hands each operation to the least-loaded worker, which sends the
//! completion back for the owner to post ([`handoff`]).

mod event_loop;
pub(crate) mod handoff;
mod lost_complete;
mod outcome;
pub(crate) mod stager;
mod striped_get;
mod striped_put;

use std::sync::Arc;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use mio::{Poll, Token, Waker};
use ring_api::{Doorbell, WorkerQueue};

use crate::error::EngineError;
use crate::fabric::Fabric;
use crate::local::Shared;
use crate::placement::Slot;
use handoff::{Inbox, Peer};

/// Token of the worker's waker; connection tokens are slot indices below it.
pub(crate) const WAKER: Token = Token(usize::MAX);

/// Rings a worker's `mio::Waker`. Latches: an eventfd stays readable until the next poll.
#[derive(Debug)]
pub(crate) struct WakerBell(pub(crate) Arc<Waker>);

impl Doorbell for WakerBell {
    fn ring(&self) {
        // A failed eventfd write means the counter is saturated, i.e. already signalled.
        let _ = self.0.wake();
    }
}

/// A worker's poller and the handles others use to reach it, made before any worker thread
/// starts so that every worker can be given every other's [`Peer`].
#[derive(Debug)]
pub(crate) struct Prepared {
    poll: Poll,
    pub(crate) peer: Peer,
}

impl Prepared {
    pub(crate) fn new() -> Result<Self, EngineError> {
        let poll = Poll::new().map_err(EngineError::Poller)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(EngineError::Poller)?);
        Ok(Self {
            poll,
            peer: Peer {
                inbox: Arc::new(Inbox::default()),
                waker,
            },
        })
    }
}

/// Which workers run operations, shared by all workers of an engine.
#[derive(Debug)]
pub(crate) struct Crew {
    /// Every worker, by index.
    pub(crate) peers: Vec<Peer>,
    /// Indices of the workers operations may be handed to (those whose NIC's verbs device
    /// opened, when any did; otherwise all). A registration bound to NICs narrows this further
    /// to its NICs' workers (`nic_plan`, `handoff::least_loaded`).
    pub(crate) eligible: Vec<usize>,
}

/// The engine's handle on one worker thread.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) waker: Arc<Waker>,
    pub(crate) slot: Slot,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Starts worker `index` (pinned to `slot.core` if given) driving `fabric`.
    pub(crate) fn spawn(
        index: usize,
        slot: Slot,
        prepared: Prepared,
        crew: Arc<Crew>,
        shared: Arc<Shared>,
        fabric: Box<dyn Fabric>,
    ) -> Result<Self, EngineError> {
        let Prepared { poll, peer } = prepared;
        let thread_inbox = Arc::clone(&peer.inbox);
        let core = slot.core;
        let thread = std::thread::Builder::new()
            .name(format!("hipobj-worker-{index}"))
            .spawn(move || {
                if let Some(id) = core {
                    // Best effort: a VM or a cgroup may forbid the core; the worker still runs.
                    let ok = core_affinity::set_for_current(core_affinity::CoreId { id });
                    thread_inbox.pinned.store(ok, Ordering::Relaxed);
                }
                event_loop::Worker::new(index, poll, thread_inbox, crew, shared, fabric).run();
            })
            .map_err(EngineError::Spawn)?;
        Ok(Self {
            inbox: peer.inbox,
            waker: peer.waker,
            slot,
            thread: Some(thread),
        })
    }

    /// Hands a queue (with its completion-ring capacity and engine-wide id) to the worker.
    pub(crate) fn attach(&self, q: WorkerQueue, cq_capacity: usize, id: u64) {
        self.inbox
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((q, cq_capacity, id));
        let _ = self.waker.wake();
    }

    /// The doorbell producers ring to wake this worker.
    pub(crate) fn bell(&self) -> Arc<dyn Doorbell> {
        Arc::new(WakerBell(Arc::clone(&self.waker)))
    }

    /// Whether the worker runs pinned.
    pub(crate) fn pinned(&self) -> bool {
        self.inbox.pinned.load(Ordering::Relaxed)
    }

    /// Operations the worker has run so far.
    pub(crate) fn executed(&self) -> u64 {
        self.inbox.executed.load(Ordering::Relaxed)
    }

    /// Bytes the worker's successful operations have moved so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.inbox.bytes.load(Ordering::Relaxed)
    }

    /// Asks the worker to stop (in-flight operations are aborted) without waiting.
    pub(crate) fn signal_stop(&self) {
        self.inbox.shutdown.store(true, Ordering::Release);
        let _ = self.waker.wake();
    }

    /// Stops the worker and joins it.
    pub(crate) fn stop(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
