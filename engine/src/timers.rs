//! Worker timers: deadlines, per-attempt timeouts and retry backoffs in one min-heap.
//!
//! Entries are never removed eagerly; each names the operation and the attempt it was set
//! for, and the worker ignores an entry whose operation has completed or moved on (lazy
//! deletion keeps completion O(1)).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use crate::inflight::OpKey;

/// What a timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TimerKind {
    /// The operation's deadline.
    Deadline,
    /// Attempt number `n` has run too long.
    Attempt(u32),
    /// The backoff before attempt number `n` is over.
    Backoff(u32),
}

/// Min-heap of `(when, key, kind)`.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, OpKey, TimerKind)>>,
}

impl Timers {
    pub(crate) fn push(&mut self, when: Instant, key: OpKey, kind: TimerKind) {
        self.heap.push(Reverse((when, key, kind)));
    }

    /// The earliest pending expiry.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Pops the next entry due at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(OpKey, TimerKind)> {
        match self.heap.peek() {
            Some(Reverse((t, _, _))) if *t <= now => {
                self.heap.pop().map(|Reverse((_, k, kind))| (k, kind))
            }
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Drops entries whose operation is gone (`live` says which are not), so lazily deleted
    /// entries of completed operations cannot accumulate for a whole deadline.
    pub(crate) fn compact(&mut self, mut live: impl FnMut(OpKey) -> bool) {
        let old = std::mem::take(&mut self.heap);
        self.heap = old
            .into_iter()
            .filter(|Reverse((_, k, _))| live(*k))
            .collect();
    }
}
