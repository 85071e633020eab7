//! [`OpTimes`]: when one operation passed each stage of its life, delivered next to its
//! completion on queues created with timestamps on.

use std::time::Duration;

/// When one operation was submitted, picked up, answered and completed: nanoseconds on
/// `CLOCK_MONOTONIC` (the clock of `std::time::Instant` on Linux and of the engine's
/// `monotonic_ns`; a C caller reads it with `clock_gettime(CLOCK_MONOTONIC)`).
///
/// `#[repr(C)]`, four `u64`s in this order (32 bytes): `submitted_ns`, `started_ns`,
/// `first_byte_ns` (0: not known), `completed_ns`. The stages, in the order they happen
/// (`submitted ≤ started ≤ first_byte ≤ completed`):
///
/// - **submitted**: the application published the entry to the submission ring (for a batch
///   view, when the view was synced or dropped; every entry of one publish shares it);
/// - **started**: the worker that owns the queue took the entry off the ring;
/// - **first byte**: the first byte of the server's answer arrived, for the attempt that
///   completed the operation ([`OpTimes::first_byte_ns`] says which paths know it);
/// - **completed**: the engine produced the completion (before the application could see it).
///
/// So `started - submitted` is *queue time* (the entry waited for the worker) and
/// `completed - started` is *service time* (connection, request, server, transfer); see
/// [`OpTimes::queue_time`] and [`OpTimes::service_time`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpTimes {
    submitted_ns: u64,
    started_ns: u64,
    first_byte_ns: u64,
    completed_ns: u64,
}

const _: () = assert!(size_of::<OpTimes>() == OpTimes::SIZE);

impl OpTimes {
    /// Size of the C layout in bytes.
    pub const SIZE: usize = 32;

    /// A record from its four readings (`first_byte_ns: None` is stored as 0).
    #[must_use]
    pub const fn new(
        submitted_ns: u64,
        started_ns: u64,
        first_byte_ns: Option<u64>,
        completed_ns: u64,
    ) -> Self {
        let first_byte_ns = match first_byte_ns {
            Some(t) => t,
            None => 0,
        };
        Self {
            submitted_ns,
            started_ns,
            first_byte_ns,
            completed_ns,
        }
    }

    /// When the application published the entry.
    #[must_use]
    pub const fn submitted_ns(&self) -> u64 {
        self.submitted_ns
    }

    /// When the queue's worker took the entry off the submission ring.
    #[must_use]
    pub const fn started_ns(&self) -> u64 {
        self.started_ns
    }

    /// When the first byte of the server's answer arrived (for the attempt that completed the
    /// operation: a retried operation reports its last attempt). `None` when the engine cannot
    /// know it: the operation never reached a server (rejected entries, cancels, deadlines
    /// that expired before an answer) or its answer does not come over the HTTP connection
    /// (the engine's docs list which paths record it).
    #[must_use]
    pub const fn first_byte_ns(&self) -> Option<u64> {
        if self.first_byte_ns == 0 {
            None
        } else {
            Some(self.first_byte_ns)
        }
    }

    /// When the engine produced the completion.
    #[must_use]
    pub const fn completed_ns(&self) -> u64 {
        self.completed_ns
    }

    /// Queue time: how long the entry waited in the submission ring for its worker
    /// (`started - submitted`).
    #[must_use]
    pub const fn queue_time(&self) -> Duration {
        Duration::from_nanos(self.started_ns.saturating_sub(self.submitted_ns))
    }

    /// Service time: from the worker taking the entry to its completion
    /// (`completed - started`): waiting for a connection, the request, the server and the
    /// transfer.
    #[must_use]
    pub const fn service_time(&self) -> Duration {
        Duration::from_nanos(self.completed_ns.saturating_sub(self.started_ns))
    }

    /// Time to first byte from the worker taking the entry (`first_byte - started`), when the
    /// first byte is known.
    #[must_use]
    pub const fn time_to_first_byte(&self) -> Option<Duration> {
        match self.first_byte_ns() {
            Some(t) => Some(Duration::from_nanos(t.saturating_sub(self.started_ns))),
            None => None,
        }
    }

    /// Total latency inside the engine (`completed - submitted`).
    #[must_use]
    pub const fn total(&self) -> Duration {
        Duration::from_nanos(self.completed_ns.saturating_sub(self.submitted_ns))
    }

    /// The four words in layout order.
    #[must_use]
    pub(crate) const fn to_words(self) -> [u64; 4] {
        [
            self.submitted_ns,
            self.started_ns,
            self.first_byte_ns,
            self.completed_ns,
        ]
    }

    /// From the four words in layout order.
    #[must_use]
    pub(crate) const fn from_words(w: [u64; 4]) -> Self {
        Self {
            submitted_ns: w[0],
            started_ns: w[1],
            first_byte_ns: w[2],
            completed_ns: w[3],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_missing_first_byte() {
        let t = OpTimes::new(100, 350, Some(1_350), 2_000);
        assert_eq!(t.queue_time(), Duration::from_nanos(250));
        assert_eq!(t.service_time(), Duration::from_nanos(1_650));
        assert_eq!(t.time_to_first_byte(), Some(Duration::from_nanos(1_000)));
        assert_eq!(t.total(), Duration::from_nanos(1_900));
        assert_eq!(OpTimes::from_words(t.to_words()), t);
        let none = OpTimes::new(1, 2, None, 3);
        assert_eq!(none.first_byte_ns(), None);
        assert_eq!(none.time_to_first_byte(), None);
    }
}
