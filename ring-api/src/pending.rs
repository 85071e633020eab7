//! Completions that did not fit in a full completion ring.
//!
//! A full CQ must back-pressure only its own queue and must never lose a completion. The
//! worker keeps overflow here, in order, and stops taking submissions from that queue while the
//! list is non-empty ([`crate::WorkerQueue::backpressured`]). The list is therefore bounded by
//! the number of operations that were in flight on that queue when its CQ filled, which the
//! engine already bounds; no hostile application can grow it further by not reaping.

use std::collections::VecDeque;

use crate::cqe::Cqe;
use crate::spsc::Producer;
use crate::times::OpTimes;

/// FIFO of completions waiting for CQ space.
#[derive(Debug, Default)]
pub struct PendingCompletions {
    /// Each completion with its timestamps (all zero on queues without them).
    list: VecDeque<(Cqe, OpTimes)>,
    /// Largest length reached, for diagnostics.
    high_water: usize,
}

impl PendingCompletions {
    /// An empty list.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of waiting completions.
    #[must_use]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// `true` when nothing waits.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Largest number of completions that ever waited at once.
    #[must_use]
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// The waiting completions, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Cqe> {
        self.list.iter().map(|(cqe, _)| cqe)
    }

    pub(crate) fn push_back(&mut self, cqe: Cqe, times: OpTimes) {
        self.list.push_back((cqe, times));
        self.high_water = self.high_water.max(self.list.len());
    }

    /// Moves as many as fit into `p` (staged, not published); returns how many moved.
    pub(crate) fn flush_into(&mut self, p: &mut Producer<Cqe>) -> usize {
        let mut moved = 0;
        while let Some((cqe, times)) = self.list.pop_front() {
            if let Err(back) = p.push_stamped(cqe, times.to_words()) {
                self.list.push_front((back, times));
                break;
            }
            moved += 1;
        }
        moved
    }
}
