//! [`QueueOptions`]: what [`Engine::queue_with`](crate::Engine::queue_with) creates.

/// How to create a [`Queue`](crate::Queue): its depth and optional features.
///
/// ```no_run
/// # fn demo(engine: &engine::Engine) -> Result<(), engine::EngineError> {
/// use engine::QueueOptions;
/// // 64 submission slots, completions paired with per-operation timestamps.
/// let mut q = engine.queue_with(QueueOptions::new(64).timestamps(true))?;
/// assert!(q.timestamps());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct QueueOptions {
    pub(crate) depth: u32,
    pub(crate) timestamps: bool,
}

impl QueueOptions {
    /// `depth` submission slots and `2 * depth` completion slots (both rounded up to powers
    /// of two; 0 is refused when the queue is created). Timestamps off.
    pub const fn new(depth: u32) -> Self {
        Self {
            depth,
            timestamps: false,
        }
    }

    /// Per-operation timestamps (default off): every completion of the queue comes with an
    /// [`OpTimes`](crate::OpTimes) record (submitted, started, first byte, completed), read with
    /// [`Queue::completion_timed`](crate::Queue::completion_timed) or
    /// [`Queue::reap_timed`](crate::Queue::reap_timed) (and
    /// `AsyncQueue::submit_timed` with the `tokio` feature). They cost one clock read per
    /// publish of submissions, one per batch the worker takes, and two per operation (first
    /// byte, completion); a queue without them reads no clock.
    pub const fn timestamps(mut self, on: bool) -> Self {
        self.timestamps = on;
        self
    }
}
