//! Completion queues: where work requests report.
//!
//! [`CompletionQueue::poll`] never blocks (verbs `ibv_poll_cq`). To sleep until something
//! completes, either call [`CompletionQueue::wait`] (a condvar) or hand the queue a
//! `mio::Waker` with [`CompletionQueue::set_waker`]: an engine worker then learns about
//! completions in the same `epoll_wait` as its sockets (the role of a verbs completion
//! channel). The queue holds only completions of work requests posted locally, so its length
//! is bounded by what the owner posts, not by anything a peer sends.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::wr::WorkCompletion;

#[derive(Debug, Default)]
struct Inner {
    q: VecDeque<WorkCompletion>,
    waker: Option<Arc<mio::Waker>>,
    /// Threads in [`CompletionQueue::wait`] (a notify with none is a wasted futex call).
    waiters: usize,
}

/// A completion queue shared by any number of queue pairs.
#[derive(Debug, Default)]
pub struct CompletionQueue {
    inner: Mutex<Inner>,
    cv: Condvar,
}

impl CompletionQueue {
    /// An empty queue.
    #[must_use]
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves up to `out.len()` completions into `out`, oldest first; returns how many.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut g = self.lock();
        let mut n = 0;
        for slot in out.iter_mut() {
            let Some(wc) = g.q.pop_front() else { break };
            *slot = wc;
            n += 1;
        }
        n
    }

    /// Completions waiting.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().q.len()
    }

    /// Whether none are waiting.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Blocks until at least one completion is waiting or `timeout` passes; returns whether
    /// one is waiting.
    pub fn wait(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let mut g = self.lock();
        while g.q.is_empty() {
            let now = Instant::now();
            if now >= end {
                return false;
            }
            g.waiters += 1;
            g = self
                .cv
                .wait_timeout(g, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            g.waiters -= 1;
        }
        true
    }

    /// Wakes `waker` whenever a completion is added (`None` removes it).
    pub fn set_waker(&self, waker: Option<Arc<mio::Waker>>) {
        self.lock().waker = waker;
    }

    /// Rings the waker without a completion: the QP's state changed (its dial ended), which
    /// the owner of the CQ checks when it wakes.
    pub(crate) fn ring(&self) {
        let waker = self.lock().waker.clone();
        if let Some(w) = waker {
            // A failed wake only delays the worker until its next poll.
            let _ = w.wake();
        }
    }

    pub(crate) fn push(&self, wc: WorkCompletion) {
        let (waker, waiting) = {
            let mut g = self.lock();
            g.q.push_back(wc);
            (g.waker.clone(), g.waiters > 0)
        };
        if waiting {
            self.cv.notify_all();
        }
        if let Some(w) = waker {
            // A failed wake only delays the worker until its next poll.
            let _ = w.wake();
        }
    }
}
