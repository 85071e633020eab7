//! The WRITEs of early-answered GETs, left to complete after their answers.
//!
//! A soft GET answered early (docs/protocol.md, "Early answer") needs nothing more from its
//! request thread: the client checks the bytes it receives. What is left is bookkeeping: the
//! staging buffers its WRITEs read from go back to the pool once their completions come, or
//! are retired with the connection failed when a completion fails or does not come in time.
//! Waiting for that on the request thread cost a sleep and a wake-up per GET (the
//! acknowledgement comes back through the fabric's I/O thread), so the transfer's groups are
//! parked here instead ([`Unsettled`]) and [`Unsettled::reap`] checks them without waiting,
//! from the pool, whenever it would otherwise register a new buffer or refuse one
//! (`Pool::take_below`). Only a pool that is spent even so waits, for the oldest parked
//! transfer ([`Unsettled::wait`]), before it refuses a transfer its first buffer: acknowledgements
//! that lag (a busy gateway) then cost that request a wait, as every early-answered GET paid
//! before, not a `503`. What is parked is bounded by the pool: every entry holds at least one
//! of its buffers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use engine::rc::{RcStaging, WcStatus};

use super::Conn;
use super::transfer::Group;

/// What an unsettled transfer's completions decided.
pub(crate) enum Reaped {
    /// Every group completed: these buffers are free again.
    Done(Vec<RcStaging>),
    /// A completion failed or did not come before the deadline: the connection is failed (its
    /// QP no longer touches the buffers); `retire` are the buffers of the groups that had not
    /// completed, `free` those of the groups that had.
    Failed {
        free: Vec<RcStaging>,
        retire: Vec<RcStaging>,
    },
    /// Still in flight (the groups that completed already gave back their buffers).
    Pending(Unsettled, Vec<RcStaging>),
}

/// The posted, not yet completed WRITE groups of one early-answered GET.
#[derive(Debug)]
pub(crate) struct Unsettled {
    conn: Arc<Conn>,
    /// Oldest first; each group's signaled WRITE covers it.
    groups: VecDeque<Group>,
    deadline: Instant,
}

impl Unsettled {
    pub(crate) fn new(conn: Arc<Conn>, groups: VecDeque<Group>, deadline: Instant) -> Self {
        Self {
            conn,
            groups,
            deadline,
        }
    }

    /// Checks the completions that came, without waiting (see the module docs).
    pub(crate) fn reap(self) -> Reaped {
        self.settle(|conn, id| conn.demux.try_take(id))
    }

    /// Waits for the completions, until the transfer's deadline at most: what a spent pool
    /// does before it refuses a buffer, as the request thread did before it answered early.
    pub(crate) fn wait(self) -> Reaped {
        let deadline = self.deadline;
        self.settle(|conn, id| conn.demux.wait(id, deadline))
    }

    /// Settles the groups in order with the status `status_of` gives each signaled WRITE
    /// (`None`: not complete yet, which fails the transfer once its deadline has passed).
    fn settle(mut self, status_of: impl Fn(&Conn, u64) -> Option<WcStatus>) -> Reaped {
        let mut free = Vec::new();
        while let Some(g) = self.groups.front() {
            let status = match g.signaled {
                Some(id) => status_of(&self.conn, id),
                // Never left open (`post_all` closes the last group): treat as failed.
                None => Some(WcStatus::WrFlushError),
            };
            match status {
                Some(WcStatus::Success) => {
                    if let Some(g) = self.groups.pop_front() {
                        free.extend(g.bufs);
                    }
                }
                Some(_) => {
                    let unsignaled: Vec<u64> = self
                        .groups
                        .iter()
                        .flat_map(|g| g.unsignaled.iter().copied())
                        .collect();
                    // Drops their failure completions, which nobody else waits for.
                    let _ = self.conn.demux.take_failure(&unsignaled);
                    return self.fail(free);
                }
                None if Instant::now() >= self.deadline => return self.fail(free),
                None => return Reaped::Pending(self, free),
            }
        }
        Reaped::Done(free)
    }

    fn fail(mut self, free: Vec<RcStaging>) -> Reaped {
        tracing::warn!(
            "the WRITEs of an early-answered RDMA GET failed or timed out after its answer; \
             the connection is failed"
        );
        self.conn.qp.modify_to_err();
        let retire = self.groups.drain(..).flat_map(|g| g.bufs).collect();
        Reaped::Failed { free, retire }
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if !self.groups.is_empty() {
            // Dropped with the pool while still in flight: the QP must stop reading the
            // buffers before they go.
            self.conn.qp.modify_to_err();
        }
    }
}
