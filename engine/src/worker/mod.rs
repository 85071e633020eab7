//! Worker threads: one per placement slot, each owning a `mio` poller, a fabric and the
//! queues attached to it.
//!
//! Thread model: a worker polls its submission rings and sockets while it makes progress and
//! blocks in `epoll_wait` when it does not. Its `mio::Waker` (an eventfd registered with the
//! same epoll) is the doorbell of every ring attached to it, rung by producers only when the
//! worker announced it is about to sleep (the `need_wakeup` protocol of
//! [`ring_api::wakeup`]). An idle engine therefore sleeps in the kernel with no timers armed.

mod event_loop;
mod outcome;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use mio::{Poll, Token, Waker};
use ring_api::{Doorbell, WorkerQueue};

use crate::engine::Shared;
use crate::error::EngineError;
use crate::fabric::Fabric;

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

/// What the engine shares with one worker.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    /// Queues waiting to be adopted by the worker.
    pub(crate) queues: Mutex<Vec<(WorkerQueue, usize)>>,
    pub(crate) shutdown: AtomicBool,
    /// Whether pinning to the planned core succeeded (diagnostics).
    pub(crate) pinned: AtomicBool,
}

/// The engine's handle on one worker thread.
#[derive(Debug)]
pub(crate) struct WorkerHandle {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) waker: Arc<Waker>,
    pub(crate) core: Option<usize>,
    thread: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Starts a worker (pinned to `core` if given) driving `fabric`.
    pub(crate) fn spawn(
        index: usize,
        core: Option<usize>,
        shared: Arc<Shared>,
        fabric: Box<dyn Fabric>,
    ) -> Result<Self, EngineError> {
        let poll = Poll::new().map_err(EngineError::Poller)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(EngineError::Poller)?);
        let inbox = Arc::new(Inbox::default());
        let thread_inbox = Arc::clone(&inbox);
        let thread = std::thread::Builder::new()
            .name(format!("hipobj-worker-{index}"))
            .spawn(move || {
                if let Some(id) = core {
                    // Best effort: a VM or a cgroup may forbid the core; the worker still runs.
                    let ok = core_affinity::set_for_current(core_affinity::CoreId { id });
                    thread_inbox.pinned.store(ok, Ordering::Relaxed);
                }
                event_loop::Worker::new(poll, thread_inbox, shared, fabric).run();
            })
            .map_err(EngineError::Spawn)?;
        Ok(Self {
            inbox,
            waker,
            core,
            thread: Some(thread),
        })
    }

    /// Hands a queue (with its completion-ring capacity) to the worker.
    pub(crate) fn attach(&self, q: WorkerQueue, cq_capacity: usize) {
        self.inbox
            .queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((q, cq_capacity));
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

    /// Stops the worker (in-flight operations are aborted) and joins it.
    pub(crate) fn stop(&mut self) {
        self.inbox.shutdown.store(true, Ordering::Release);
        let _ = self.waker.wake();
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
