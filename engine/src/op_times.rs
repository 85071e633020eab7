//! Per-operation clock readings on queues created with timestamps
//! ([`crate::QueueOptions::timestamps`]).
//!
//! An operation taken from a timed queue carries [`Stamps`] in its [`crate::inflight::InFlight`]:
//! when the application published it and when the owner worker took it off the ring. The HTTP
//! connection marks the first byte of each attempt's answer ([`Stamps::mark_first_byte`]); a
//! new attempt forgets the previous one's ([`Stamps::new_attempt`]). The completion's
//! [`OpTimes`] are taken when the operation finishes ([`Stamps::complete`]). Operations of
//! queues without timestamps carry `None`, so they read no clock at all.

use std::cell::Cell;

use ring_api::OpTimes;

use crate::sys::monotonic_ns;

/// The readings of one operation before its completion.
#[derive(Debug, Clone)]
pub(crate) struct Stamps {
    /// The application published the entry (CLOCK_MONOTONIC ns).
    submitted: u64,
    /// The owner worker took it off the submission ring.
    started: u64,
    /// The first byte of the current attempt's answer arrived (0: not yet).
    first_byte: Cell<u64>,
}

impl Stamps {
    pub(crate) fn new(submitted: u64, started: u64) -> Self {
        Self {
            submitted,
            started,
            first_byte: Cell::new(0),
        }
    }

    /// Records now as the first byte of the answer, unless this attempt already has one.
    pub(crate) fn mark_first_byte(&self) {
        if self.first_byte.get() == 0 {
            self.first_byte.set(monotonic_ns());
        }
    }

    /// An attempt starts: the first byte reported is the answer to the attempt that completes
    /// the operation.
    pub(crate) fn new_attempt(&self) {
        self.first_byte.set(0);
    }

    /// The completion's times, completed now.
    pub(crate) fn complete(&self) -> OpTimes {
        let first = self.first_byte.get();
        OpTimes::new(
            self.submitted,
            self.started,
            (first != 0).then_some(first),
            monotonic_ns(),
        )
    }
}

/// Folds the times of a striped operation's chunk into those of the chunks before it: the
/// operation's submission and start (shared by every chunk), the earliest first byte and the
/// latest completion.
pub(crate) fn merge_chunk(acc: Option<OpTimes>, chunk: OpTimes) -> OpTimes {
    let Some(acc) = acc else {
        return chunk;
    };
    let first_byte = match (acc.first_byte_ns(), chunk.first_byte_ns()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    OpTimes::new(
        acc.submitted_ns().min(chunk.submitted_ns()),
        acc.started_ns().min(chunk.started_ns()),
        first_byte,
        acc.completed_ns().max(chunk.completed_ns()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_merge_to_earliest_first_byte_and_latest_completion() {
        let a = OpTimes::new(10, 20, Some(50), 90);
        let b = OpTimes::new(10, 20, Some(40), 80);
        let c = OpTimes::new(10, 20, None, 120);
        let m = merge_chunk(Some(merge_chunk(Some(merge_chunk(None, a)), b)), c);
        assert_eq!(m, OpTimes::new(10, 20, Some(40), 120));
    }

    #[test]
    fn a_new_attempt_forgets_the_first_byte() {
        let s = Stamps::new(1, 2);
        s.mark_first_byte();
        let first = s.complete().first_byte_ns().unwrap();
        s.mark_first_byte();
        assert_eq!(s.complete().first_byte_ns(), Some(first), "kept");
        s.new_attempt();
        assert_eq!(s.complete().first_byte_ns(), None);
        let t = s.complete();
        assert!(t.submitted_ns() <= t.started_ns() && t.started_ns() <= t.completed_ns());
    }
}
