//! The sleep/wakeup protocol and the [`Doorbell`] trait.
//!
//! A worker polls its submission rings while work is in flight and parks when idle, so an idle
//! engine burns no CPU; an application may likewise park until completions arrive. Parking must
//! never lose a wakeup, and the fast path (no one parked) must not make a system call. The
//! protocol is io_uring's `IORING_SQ_NEED_WAKEUP` handshake for SQPOLL threads:
//!
//! ```text
//! sleeper (consumer)                         waker (producer)
//! ------------------                         ----------------
//! parked.store(1, Relaxed)          (A)      tail.store(t, Release)            (C)
//! fence(SeqCst)                              fence(SeqCst)
//! if tail.load(Acquire) != head {   (B)      if parked.load(Relaxed) == 1 {    (D)
//!     parked.store(0); keep polling              doorbell.ring()
//! } else {                                   }
//!     wait on doorbell; parked.store(0)
//! }
//! ```
//!
//! Why no wakeup is lost: the two SeqCst fences are totally ordered. If the sleeper's fence comes
//! first, (A) is visible to (D), so the waker rings. If the waker's fence comes first, (C) is
//! visible to (B), so the sleeper does not park. Both may happen (a spurious ring), which is
//! harmless because doorbells keep a token: a `ring` before the `wait` makes the `wait` return
//! at once. This is the store-buffering (Dekker) pattern; with only Acquire/Release both loads
//! could miss both stores, which is exactly the lost-wakeup bug. io_uring documents the same
//! pairing between `io_uring_enter`'s `smp_mb()` and the SQPOLL thread's
//! (`io_uring/sqpoll.c`, liburing `sq_ring_needs_enter`).
//!
//! The same handshake runs in the other direction for a producer waiting for space (a worker
//! whose completion ring is full parks until the application reaps).
//!
//! A worker serving many queues calls `prepare_park` on each; if any returns `false` it
//! withdraws the others (`finish_park`) and keeps polling, otherwise it waits once on its single
//! doorbell, which every queue's producer rings.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::sync::{Parker, Unparker};

/// Wakes a parked party. The engine plugs in eventfd, futex or thread unpark.
///
/// `ring` must not block, must be callable from any thread, and must latch: a `ring` that
/// arrives before the sleeper waits makes its next wait return immediately.
pub trait Doorbell: Send + Sync + 'static {
    /// Wakes the party waiting on this doorbell (spurious rings are allowed).
    fn ring(&self);
}

/// `std::thread::Thread::unpark` latches a token, which is exactly the required contract.
impl Doorbell for std::thread::Thread {
    fn ring(&self) {
        self.unpark();
    }
}

/// The waiting side of a std-parker doorbell: create one per sleeping thread, hand
/// [`ParkWaiter::doorbell`] to every ring producer that should wake it.
///
/// `Send` but not `Sync`: only its owner waits on it.
#[derive(Debug, Default)]
pub struct ParkWaiter {
    parker: Parker,
}

/// The ringing side of a [`ParkWaiter`]; cheap to clone.
#[derive(Clone, Debug)]
pub struct ParkDoorbell {
    unparker: Unparker,
}

impl Doorbell for ParkDoorbell {
    fn ring(&self) {
        self.unparker.unpark();
    }
}

impl ParkWaiter {
    /// A new waiter with no token.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A doorbell that wakes this waiter.
    #[must_use]
    pub fn doorbell(&self) -> Arc<dyn Doorbell> {
        Arc::new(ParkDoorbell {
            unparker: self.parker.unparker().clone(),
        })
    }

    /// Blocks until rung (or a token is pending) or `timeout` passes. May return spuriously;
    /// callers re-check their rings.
    pub fn wait(&self, timeout: Option<Duration>) {
        match timeout {
            Some(t) => self.parker.park_timeout(t),
            None => self.parker.park(),
        }
    }
}

/// How an [`AppQueue`](crate::AppQueue) sleeps in
/// [`wait_completions`](crate::AppQueue::wait_completions): a thread parker for in-process
/// queues ([`ParkWaiter`]), an eventfd (polled with the daemon's socket) for a queue shared
/// with another process.
pub trait CompletionWaiter: Send + 'static {
    /// Blocks until the worker side rang this waiter's bell (a token latched before the call
    /// counts) or `timeout` passes. May return spuriously.
    fn wait(&self, timeout: Option<Duration>);

    /// `true` once the worker side is known to be gone for good (its process died) even
    /// though it could not mark its rings closed.
    fn peer_gone(&self) -> bool {
        false
    }
}

impl CompletionWaiter for ParkWaiter {
    fn wait(&self, timeout: Option<Duration>) {
        ParkWaiter::wait(self, timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn ring_before_wait_latches() {
        let w = ParkWaiter::new();
        w.doorbell().ring();
        let t = Instant::now();
        w.wait(Some(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn ring_from_other_thread_wakes() {
        let w = ParkWaiter::new();
        let bell = w.doorbell();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            bell.ring();
        });
        let t = Instant::now();
        w.wait(Some(Duration::from_secs(10)));
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
    }
}
