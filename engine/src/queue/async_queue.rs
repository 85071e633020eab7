//! [`AsyncQueue`] (feature `tokio`): a [`Queue`] awaited from tokio tasks.
//!
//! Many tasks share one queue without a thread or channel per operation: [`AsyncQueue::submit`]
//! pushes an entry and returns an [`OpFuture`] keyed by the entry's `user_data`. Whichever
//! future is polled reaps *every* ready completion into a small table (the demultiplexer)
//! and wakes the futures they belong to; the last one to find nothing waits on the queue's
//! completion-readiness fd through tokio's `AsyncFd`, following the arm protocol documented
//! on [`Queue`]. When that future finishes or is dropped it hands the fd over by waking another
//! waiting future, so the queue is watched while anyone waits.
//!
//! On a queue created with timestamps ([`crate::QueueOptions::timestamps`]) every reaped
//! completion keeps its [`OpTimes`]; [`AsyncQueue::submit_timed`] and
//! [`AsyncQueue::next_completion_timed`] hand them out with the result.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use ring_api::{Cqe, OpError, OpTimes, PushError, Sqe, TimestampsOff};
use tokio::io::unix::AsyncFd;

use super::Queue;
use super::eventfd::{ReadyFd, register_with_tokio};

/// Why an [`OpFuture`] did not produce the operation's byte count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AsyncError {
    /// The operation completed with an error (its completion, decoded).
    #[error(transparent)]
    Op(#[from] OpError),
    /// The [`Engine`](crate::Engine) was dropped before the operation completed (or before it
    /// could be pushed): it never will.
    #[error("the engine shut down before the operation completed")]
    Shutdown,
    /// An operation with this `user_data` is already in flight through
    /// [`AsyncQueue::submit`]; completions are matched by `user_data`, so tags must be unique.
    #[error("user_data {0} is already in flight on this queue")]
    DuplicateUserData(u64),
    /// Tokio's reactor reported an error while waiting on the completion fd (its runtime is
    /// shutting down); the operation may still complete, but this queue can no longer wait.
    #[error("tokio reactor error while waiting for completions: {0}")]
    Reactor(io::ErrorKind),
}

/// A [`Queue`] for tokio: cheap to clone, `Send + Sync`, shared by any number of tasks.
///
/// ```no_run
/// # async fn demo(engine: &engine::Engine, q: engine::Queue, obj: engine::ObjectId,
/// #     buf: engine::BufHandle) -> Result<(), Box<dyn std::error::Error>> {
/// use engine::opcode::RangeGet;
/// use engine::{AsyncError, AsyncQueue, BufSlice};
///
/// let q = AsyncQueue::new(q)?; // inside a tokio runtime with IO enabled
/// let a = q.submit(RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).user_data(1).build());
/// let b = q.submit(RangeGet::new(obj, 4096, BufSlice::new(buf, 4096, 4096)).user_data(2).build());
/// let (a, b) = tokio::join!(a, b);
/// match a {
///     Ok(bytes) => println!("{bytes} bytes: {:?}", &engine.read(buf, 0, bytes)?[..8]),
///     Err(AsyncError::Op(e)) => println!("op failed: {e}"),
///     Err(AsyncError::Shutdown) => println!("engine gone"),
///     Err(e) => return Err(e.into()),
/// }
/// # let _ = b; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncQueue {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    /// The queue's completion-readiness eventfd registered with tokio's reactor.
    fd: AsyncFd<ReadyFd>,
    /// The queue was created with per-operation timestamps.
    timestamps: bool,
}

#[derive(Debug)]
struct State {
    queue: Queue,
    /// Operations pushed through `submit`, by `user_data`.
    ops: HashMap<u64, OpSlot>,
    /// Completions no `submit` claims (entries pushed with [`AsyncQueue::push`]), with their
    /// times on a timed queue.
    untracked: VecDeque<(Cqe, Option<OpTimes>)>,
    /// Every future waiting now, by token.
    waiting: HashMap<u64, Waker>,
    /// Tokens woken by any reaped completion (next-completion waiters, pushes waiting for
    /// submission space).
    general: HashSet<u64>,
    /// The token whose waker tokio's `AsyncFd` holds (the last to register).
    fd_owner: Option<u64>,
    next_token: u64,
    /// The engine is gone and everything it posted has been reaped.
    closed: bool,
    /// The reactor failed; nobody can wait any more.
    failed: Option<io::ErrorKind>,
}

#[derive(Debug)]
struct OpSlot {
    /// The future's token (whom to wake).
    token: u64,
    /// The completion, with its times on a timed queue.
    done: Option<(Cqe, Option<OpTimes>)>,
    /// The future was dropped: discard the completion when it comes.
    abandoned: bool,
}

impl State {
    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Reaps every ready completion into the table and wakes whom they concern.
    fn reap(&mut self) {
        // Closed is read first: everything the worker posted before going away is visible to
        // the reap that follows (its tail store precedes its `closed` store).
        let closed = self.queue.is_closed();
        let mut any = false;
        let mut to = Deliver {
            ops: &mut self.ops,
            waiting: &self.waiting,
            untracked: &mut self.untracked,
        };
        if let Ok(view) = self.queue.completion_timed() {
            for (cqe, times) in view {
                any = true;
                to.deliver(cqe, Some(times));
            }
        } else {
            for cqe in self.queue.completion() {
                any = true;
                to.deliver(cqe, None);
            }
        }
        if any {
            for t in &self.general {
                if let Some(w) = self.waiting.get(t) {
                    w.wake_by_ref();
                }
            }
        }
        if closed && !self.closed {
            self.closed = true;
            self.ops.retain(|_, s| !s.abandoned);
            self.wake_all();
        }
    }

    fn wake_all(&self) {
        for w in self.waiting.values() {
            w.wake_by_ref();
        }
    }

    /// `token` stops waiting (done or dropped). If tokio's fd held its waker, or nobody's
    /// (the waiter woken to take it over finished instead of registering), another waiter
    /// is woken to take the fd over; with no waiter left the fd is disarmed.
    fn leave(&mut self, token: u64) {
        self.waiting.remove(&token);
        self.general.remove(&token);
        if self.fd_owner == Some(token) {
            self.fd_owner = None;
        }
        if self.fd_owner.is_none()
            && let Some(w) = self.waiting.values().next()
        {
            w.wake_by_ref();
        }
        if self.waiting.is_empty() {
            self.queue.clear_completion_fd();
        }
    }
}

/// Where [`State::reap`] puts each completion (the fields of `State` it touches).
struct Deliver<'a> {
    ops: &'a mut HashMap<u64, OpSlot>,
    waiting: &'a HashMap<u64, Waker>,
    untracked: &'a mut VecDeque<(Cqe, Option<OpTimes>)>,
}

impl Deliver<'_> {
    fn deliver(&mut self, cqe: Cqe, times: Option<OpTimes>) {
        match self.ops.get_mut(&cqe.user_data()) {
            Some(slot) if slot.abandoned => {
                self.ops.remove(&cqe.user_data());
            }
            Some(slot) => {
                slot.done = Some((cqe, times));
                if let Some(w) = self.waiting.get(&slot.token) {
                    w.wake_by_ref();
                }
            }
            None => self.untracked.push_back((cqe, times)),
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The loop every future runs: reap, let `check` decide, else arm the fd and wait on it.
    /// `check` must return `Some` once `state.closed` or `state.failed` is set.
    fn poll_until<T>(
        &self,
        cx: &mut Context<'_>,
        token: u64,
        mut check: impl FnMut(&mut State) -> Option<T>,
    ) -> Poll<T> {
        let mut st = self.lock();
        loop {
            st.reap();
            if let Some(out) = check(&mut st) {
                st.leave(token);
                return Poll::Ready(out);
            }
            if !st.queue.arm_completion_fd() {
                continue; // completions or the shutdown arrived meanwhile
            }
            match self.fd.poll_read_ready(cx) {
                Poll::Pending => {
                    st.fd_owner = Some(token);
                    st.waiting.insert(token, cx.waker().clone());
                    return Poll::Pending;
                }
                Poll::Ready(Ok(mut guard)) => {
                    st.queue.clear_completion_fd();
                    guard.clear_ready();
                }
                Poll::Ready(Err(e)) => {
                    st.queue.clear_completion_fd();
                    st.failed = Some(e.kind());
                    st.wake_all();
                }
            }
        }
    }
}

impl AsyncQueue {
    /// Takes over `queue`, registering its completion-readiness fd with the current tokio
    /// runtime's reactor.
    ///
    /// Errors when called outside a tokio runtime or when the registration fails. Like
    /// tokio's own `AsyncFd::new`, it panics in a runtime built without IO
    /// (`Builder::enable_io`).
    pub fn new(queue: Queue) -> io::Result<Self> {
        let fd = register_with_tokio(queue.ready_fd())?;
        Ok(Self {
            inner: Arc::new(Inner {
                timestamps: queue.timestamps(),
                state: Mutex::new(State {
                    queue,
                    ops: HashMap::new(),
                    untracked: VecDeque::new(),
                    waiting: HashMap::new(),
                    general: HashSet::new(),
                    fd_owner: None,
                    next_token: 0,
                    closed: false,
                    failed: None,
                }),
                fd,
            }),
        })
    }

    /// Pushes `sqe` now (or, when the submission ring is full, as soon as it has room) and
    /// returns a future of its result: `Ok(bytes moved)` or why not ([`AsyncError`]).
    ///
    /// Completions are matched by `user_data`, which must be unique among this queue's
    /// operations in flight (else [`AsyncError::DuplicateUserData`]). Dropping the future
    /// does not cancel the operation (push a `Cancel` entry for that); its completion is
    /// discarded when it arrives.
    pub fn submit(&self, sqe: Sqe) -> OpFuture {
        let mut st = self.inner.lock();
        let token = st.token();
        let mut fut = OpFuture {
            inner: Arc::clone(&self.inner),
            token,
            user_data: sqe.user_data(),
            stage: Stage::Unpushed(sqe),
            times: None,
        };
        fut.try_push(&mut st);
        drop(st);
        fut
    }

    /// [`AsyncQueue::submit`] on a queue created with timestamps: the future resolves to the
    /// result and the operation's [`OpTimes`] (`None` only when no completion came: the
    /// engine shut down or the reactor failed). [`TimestampsOff`] when the queue was created
    /// without timestamps (nothing is pushed then).
    pub fn submit_timed(&self, sqe: Sqe) -> Result<TimedOpFuture, TimestampsOff> {
        if !self.inner.timestamps {
            return Err(TimestampsOff);
        }
        Ok(TimedOpFuture {
            op: self.submit(sqe),
        })
    }

    /// `true` when the queue was created with per-operation timestamps.
    #[must_use]
    pub fn timestamps(&self) -> bool {
        self.inner.timestamps
    }

    /// Pushes `sqe` without tracking it: its completion is delivered by
    /// [`AsyncQueue::next_completion`]. Its `user_data` must not be one in flight through
    /// [`AsyncQueue::submit`] (that future would take the completion).
    pub fn push(&self, sqe: &Sqe) -> Result<(), PushError> {
        self.inner.lock().queue.push(sqe)
    }

    /// The next completion of an entry pushed with [`AsyncQueue::push`], in completion order;
    /// `None` once the engine has shut down and every such completion has been returned.
    pub fn next_completion(&self) -> NextCompletion {
        let token = self.inner.lock().token();
        NextCompletion {
            inner: Arc::clone(&self.inner),
            token,
        }
    }

    /// [`AsyncQueue::next_completion`] with the completion's [`OpTimes`];
    /// [`TimestampsOff`] when the queue was created without timestamps.
    pub fn next_completion_timed(&self) -> Result<NextTimedCompletion, TimestampsOff> {
        if !self.inner.timestamps {
            return Err(TimestampsOff);
        }
        Ok(NextTimedCompletion {
            next: self.next_completion(),
        })
    }

    /// `true` once the engine behind the queue has shut down.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.inner.lock().queue.is_closed()
    }

    /// How many times the queue's completion fd has been written (see
    /// [`Queue::completion_fd_writes`]).
    #[must_use]
    pub fn completion_fd_writes(&self) -> u64 {
        self.inner.lock().queue.completion_fd_writes()
    }
}

#[derive(Debug)]
enum Stage {
    /// Not yet in the submission ring (it was full).
    Unpushed(Sqe),
    /// In flight: its slot in `State::ops` holds the completion when it comes.
    Pushed,
    /// Resolved; polling again returns the same result.
    Done(Result<u64, AsyncError>),
}

/// The result of one operation pushed by [`AsyncQueue::submit`].
#[derive(Debug)]
#[must_use = "the operation runs anyway; the future only reports its result"]
pub struct OpFuture {
    inner: Arc<Inner>,
    token: u64,
    user_data: u64,
    stage: Stage,
    /// The completion's times (timed queues), once it came.
    times: Option<OpTimes>,
}

impl OpFuture {
    /// The `user_data` of the entry.
    #[must_use]
    pub fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Pushes an unpushed entry; returns the result when that already decides it.
    fn try_push(&mut self, st: &mut State) -> Option<Result<u64, AsyncError>> {
        let Stage::Unpushed(sqe) = &self.stage else {
            return None;
        };
        let out = if st.ops.contains_key(&self.user_data) {
            Err(AsyncError::DuplicateUserData(self.user_data))
        } else {
            match st.queue.push(sqe) {
                Ok(()) => {
                    st.ops.insert(
                        self.user_data,
                        OpSlot {
                            token: self.token,
                            done: None,
                            abandoned: false,
                        },
                    );
                    st.general.remove(&self.token);
                    self.stage = Stage::Pushed;
                    return None;
                }
                Err(PushError::Full { .. }) => {
                    // Wait for any completion: the worker frees submission slots as it takes them.
                    st.general.insert(self.token);
                    return None;
                }
                Err(_) => Err(AsyncError::Shutdown),
            }
        };
        self.stage = Stage::Done(out);
        Some(out)
    }

    /// Decides the future once its entry is pushed (or unpushable).
    fn check(&mut self, st: &mut State) -> Option<Result<u64, AsyncError>> {
        if let Stage::Done(out) = self.stage {
            return Some(out);
        }
        if let Some(kind) = st.failed {
            if matches!(self.stage, Stage::Pushed) {
                st.ops.remove(&self.user_data);
            }
            return Some(Err(AsyncError::Reactor(kind)));
        }
        if let Some(out) = self.try_push(st) {
            return Some(out);
        }
        if matches!(self.stage, Stage::Unpushed(_)) {
            return st.closed.then_some(Err(AsyncError::Shutdown));
        }
        let done = st.ops.get(&self.user_data).and_then(|s| s.done);
        let out = match done {
            Some((cqe, times)) => {
                self.times = times;
                cqe.into_result().map_err(AsyncError::Op)
            }
            None if st.closed => Err(AsyncError::Shutdown),
            None => return None,
        };
        st.ops.remove(&self.user_data);
        Some(out)
    }
}

impl Future for OpFuture {
    type Output = Result<u64, AsyncError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Stage::Done(out) = this.stage {
            return Poll::Ready(out);
        }
        let inner = Arc::clone(&this.inner);
        let out = inner.poll_until(cx, this.token, |st| this.check(st));
        if let Poll::Ready(out) = out {
            this.stage = Stage::Done(out);
        }
        out
    }
}

impl Drop for OpFuture {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        if matches!(self.stage, Stage::Pushed) {
            // Keep the tag reserved until its completion comes, then discard that.
            let closed = st.closed;
            match st.ops.get_mut(&self.user_data) {
                Some(slot) if slot.done.is_none() && !closed => slot.abandoned = true,
                _ => {
                    st.ops.remove(&self.user_data);
                }
            }
        }
        st.leave(self.token);
    }
}

/// The future of [`AsyncQueue::next_completion`].
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct NextCompletion {
    inner: Arc<Inner>,
    token: u64,
}

impl NextCompletion {
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<(Cqe, Option<OpTimes>)>> {
        let token = self.token;
        self.inner.poll_until(cx, token, |st| {
            if let Some(done) = st.untracked.pop_front() {
                return Some(Some(done));
            }
            if st.closed || st.failed.is_some() {
                return Some(None);
            }
            st.general.insert(token);
            None
        })
    }
}

impl Future for NextCompletion {
    type Output = Option<Cqe>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.poll_next(cx).map(|done| done.map(|(cqe, _)| cqe))
    }
}

/// The future of [`AsyncQueue::submit_timed`]: the operation's result and its [`OpTimes`].
#[derive(Debug)]
#[must_use = "the operation runs anyway; the future only reports its result"]
pub struct TimedOpFuture {
    op: OpFuture,
}

impl TimedOpFuture {
    /// The `user_data` of the entry.
    #[must_use]
    pub fn user_data(&self) -> u64 {
        self.op.user_data
    }
}

impl Future for TimedOpFuture {
    type Output = (Result<u64, AsyncError>, Option<OpTimes>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let op = &mut self.get_mut().op;
        Pin::new(&mut *op).poll(cx).map(|out| (out, op.times))
    }
}

/// The future of [`AsyncQueue::next_completion_timed`]: the next untracked completion with its
/// [`OpTimes`]; `None` once the engine has shut down and every such completion was returned.
#[derive(Debug)]
#[must_use = "futures do nothing unless polled"]
pub struct NextTimedCompletion {
    next: NextCompletion,
}

impl Future for NextTimedCompletion {
    type Output = Option<(Cqe, OpTimes)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.next
            .poll_next(cx)
            .map(|done| done.map(|(cqe, times)| (cqe, times.unwrap_or_default())))
    }
}

impl Drop for NextCompletion {
    fn drop(&mut self) {
        self.inner.lock().leave(self.token);
    }
}
