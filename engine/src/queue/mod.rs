//! [`Queue`]: an application thread's rings, and how an event loop waits for completions
//! (the completion-readiness fd; with the `tokio` feature, [`AsyncQueue`]).

#[cfg(feature = "tokio")]
mod async_queue;
mod eventfd;
mod options;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use ring_api::{
    AppQueue, CompletionQueue, Cqe, OpTimes, PushError, Sqe, SubmissionQueue, TimedCompletionQueue,
    TimestampsOff,
};

#[cfg(feature = "tokio")]
pub use async_queue::{
    AsyncError, AsyncQueue, NextCompletion, NextTimedCompletion, OpFuture, TimedOpFuture,
};
pub use eventfd::EventFd;
pub use options::QueueOptions;

/// An application thread's ring pair: push submissions, reap completions.
///
/// `Send` but not `Sync` and not `Clone`: one producer and one consumer per ring, enforced by
/// the type system. Dropping it aborts the queue's operations in flight.
///
/// # Waiting from an event loop
///
/// Besides the blocking [`Queue::wait`], a queue is a file descriptor ([`AsFd`], [`AsRawFd`]):
/// an eventfd that becomes readable when completions are posted while the application has
/// *armed* it, so it plugs into epoll, mio (`SourceFd`) or tokio (`AsyncFd`). The worker
/// writes it at most once per turn (one batch of completions) and only while armed: an
/// application that is busy reaping costs the worker no system call. No wakeup is lost if
/// the waiter follows this order:
///
/// 1. reap every ready completion ([`Queue::completion`]); stop if [`Queue::is_closed`];
/// 2. [`Queue::arm_completion_fd`]; if it returns `false`, completions (or the shutdown)
///    arrived meanwhile: go back to 1;
/// 3. wait until the fd is readable (level- or edge-triggered);
/// 4. [`Queue::clear_completion_fd`] (drains the eventfd, disarms), go back to 1.
///
/// Step 2 and the worker's publish are a SeqCst (Dekker) pair: either step 2 sees the new
/// completions, or the worker sees the arm and writes the fd. Dropping the
/// [`Engine`](crate::Engine) writes an armed fd too, so a waiter learns of the shutdown.
///
/// ```no_run
/// # fn demo(q: &mut engine::Queue) -> std::io::Result<()> {
/// use std::os::fd::AsRawFd;
/// let mut pfd = libc::pollfd { fd: q.as_raw_fd(), events: libc::POLLIN, revents: 0 };
/// loop {
///     for cqe in q.completion() {
///         println!("{} -> {:?}", cqe.user_data(), cqe.into_result());
///     }
///     if q.is_closed() {
///         break;
///     }
///     if !q.arm_completion_fd() {
///         continue;
///     }
///     // Any reactor works; poll(2) keeps the example short.
///     // SAFETY: one valid pollfd, exclusively borrowed for the call.
///     unsafe { libc::poll(&mut pfd, 1, -1) };
///     q.clear_completion_fd();
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Queue {
    // Field order matters: `app` (the rings) is dropped before `_wake` rings the owner, so the
    // worker that wakes sees the queue gone.
    app: AppQueue,
    /// The completion-readiness fd; the owner worker holds the other reference (as the CQ's
    /// completion bell).
    ready_fd: Arc<EventFd>,
    _wake: WakeOnDrop,
}

/// Wakes the queue's owner (a worker, or the daemon of an attached engine) when dropped.
struct WakeOnDrop(Arc<dyn ring_api::Doorbell>);

impl std::fmt::Debug for WakeOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WakeOnDrop")
    }
}

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        // The owner notices the dropped rings on its next turn; wake it so that turn happens
        // now even if it sleeps.
        self.0.ring();
    }
}

impl Queue {
    pub(crate) fn new(
        app: AppQueue,
        ready_fd: Arc<EventFd>,
        owner: Arc<dyn ring_api::Doorbell>,
    ) -> Self {
        Self {
            app,
            ready_fd,
            _wake: WakeOnDrop(owner),
        }
    }

    /// Pushes one entry and publishes it at once (rings the worker only if it sleeps).
    ///
    /// Fails with [`PushError::Full`] when the submission ring is full (reap, then retry) and
    /// with [`PushError::Closed`] once the [`Engine`](crate::Engine) has been dropped.
    pub fn push(&mut self, sqe: &Sqe) -> Result<(), PushError> {
        self.app.submission().push(sqe)
    }

    /// Pushes all of `sqes` or none, publishing them with one release store.
    pub fn push_multiple(&mut self, sqes: &[Sqe]) -> Result<(), PushError> {
        self.app.submission().push_multiple(sqes)
    }

    /// A batch view: entries pushed through it are published on `sync()` or drop.
    pub fn submission(&mut self) -> SubmissionQueue<'_> {
        self.app.submission()
    }

    /// A batch view over ready completions (an iterator).
    pub fn completion(&mut self) -> CompletionQueue<'_> {
        self.app.completion()
    }

    /// Copies up to `out.len()` ready completions into `out`; returns how many.
    pub fn reap(&mut self, out: &mut [Cqe]) -> usize {
        self.app.completion().fill(out)
    }

    /// `true` when the queue was created with per-operation timestamps
    /// ([`QueueOptions::timestamps`]).
    #[must_use]
    pub fn timestamps(&self) -> bool {
        self.app.timestamps()
    }

    /// A batch view over ready completions, each with its [`OpTimes`] (an iterator of
    /// `(Cqe, OpTimes)`); [`TimestampsOff`] when the queue was created without timestamps.
    ///
    /// The times are stored at the completion's own ring index, so a record is never read
    /// with another operation's completion. [`Queue::completion`] and [`Queue::reap`] still
    /// work on a timed queue; they discard the times of what they reap. See
    /// "Per-operation timestamps" in `docs/embedding.md` for reading queue time vs wire time.
    pub fn completion_timed(&mut self) -> Result<TimedCompletionQueue<'_>, TimestampsOff> {
        self.app.completion_timed()
    }

    /// Copies up to `out.len()` ready completions with their [`OpTimes`] into `out`; returns
    /// how many ([`TimestampsOff`] when the queue was created without timestamps). Pairs
    /// with [`Queue::wait`] as [`Queue::reap`] does.
    pub fn reap_timed(&mut self, out: &mut [(Cqe, OpTimes)]) -> Result<usize, TimestampsOff> {
        Ok(self.app.completion_timed()?.fill(out))
    }

    /// Blocks until `min` completions are ready or `timeout` passes; returns how many are
    /// ready.
    ///
    /// Once the [`Engine`](crate::Engine) is dropped (also while this call sleeps) it returns
    /// at once with what is ready; operations that were in flight never complete. A reaping
    /// loop should stop when `wait` returns fewer than `min` and [`Queue::is_closed`] is
    /// `true`.
    pub fn wait(&mut self, min: usize, timeout: Option<Duration>) -> usize {
        self.app.wait_completions(min, timeout)
    }

    /// Arms the completion-readiness fd (see "Waiting from an event loop" above): the owner
    /// worker writes it when it next posts completions to this queue, or shuts down.
    ///
    /// Returns `false`, leaving it disarmed, when completions are already ready or the engine
    /// is gone: reap (or stop) instead of waiting. Returns `true` when the caller may wait for
    /// the fd to become readable.
    pub fn arm_completion_fd(&mut self) -> bool {
        self.app.arm_completion_bell()
    }

    /// After the fd became readable: drains the eventfd and disarms it, so the worker stops
    /// writing it while the caller reaps. Harmless when it is not readable or not armed.
    pub fn clear_completion_fd(&mut self) {
        self.ready_fd.drain();
        self.app.disarm_completion_bell();
    }

    /// How many times the completion-readiness fd has been written (diagnostics: at most one
    /// write per worker turn while armed, none while not).
    #[must_use]
    pub fn completion_fd_writes(&self) -> u64 {
        self.ready_fd.signals()
    }

    /// `true` once the engine behind this queue has shut down (the [`Engine`](crate::Engine)
    /// was dropped): pushes fail with [`PushError::Closed`], completions already posted can
    /// still be reaped, and nothing else will complete.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.app.worker_dropped()
    }

    /// Submission ring capacity.
    #[must_use]
    pub fn sq_capacity(&self) -> usize {
        self.app.sq_capacity()
    }

    /// Completion ring capacity.
    #[must_use]
    pub fn cq_capacity(&self) -> usize {
        self.app.cq_capacity()
    }

    /// The eventfd shared with the worker (for [`AsyncQueue`]'s reactor registration).
    #[cfg(feature = "tokio")]
    pub(crate) fn ready_fd(&self) -> Arc<EventFd> {
        Arc::clone(&self.ready_fd)
    }
}

/// The completion-readiness eventfd (see "Waiting from an event loop" on [`Queue`]).
impl AsFd for Queue {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ready_fd.as_fd()
    }
}

/// The completion-readiness eventfd (see "Waiting from an event loop" on [`Queue`]).
impl AsRawFd for Queue {
    fn as_raw_fd(&self) -> RawFd {
        self.ready_fd.as_raw_fd()
    }
}
