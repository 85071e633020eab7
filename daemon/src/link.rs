//! A client queue and the engine queue behind it: entries move from the client's submission
//! ring (shared memory) into the engine, completions from the engine back into the client's
//! completion ring.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::Arc;

use engine::Queue;
use engine::attach::{EventFd, SharedMemory};
use ring_api::{QueueLayout, RingMemory, WorkerQueue};

use crate::names::Names;

/// Entries taken from one client queue per turn, so that clients interleave.
const TURN: usize = 64;

/// One client queue.
pub(crate) struct Link {
    /// The client's rings (this side consumes submissions and produces completions).
    ring: WorkerQueue,
    /// The engine queue its operations run on.
    engine: Queue,
    /// Rung by the client when it publishes while this side announced that it sleeps.
    pub(crate) doorbell: Arc<EventFd>,
    /// user_data → operations in the engine with it (a client may reuse a tag).
    in_flight: HashMap<u64, u32>,
    /// user_data of CreateMultipart operations in the engine.
    creates: HashMap<u64, u32>,
    in_flight_total: u32,
    /// Taken off its capacity: entries beyond it wait in the client's ring.
    capacity: u32,
}

/// What a turn did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Turn {
    /// Entries or completions moved.
    pub(crate) moved: usize,
    /// Operations completed (for the client's counters) and their bytes.
    pub(crate) completed: u64,
    pub(crate) bytes: u64,
}

/// What the client gets to map: the ring memfd and the two eventfds.
pub(crate) struct Handout {
    pub(crate) mem: Arc<SharedMemory>,
    pub(crate) app_bell: Arc<EventFd>,
}

impl Link {
    /// A new link: rings in a fresh memfd, an engine queue of the client's depth.
    pub(crate) fn open(
        engine: &engine::Engine,
        layout: QueueLayout,
    ) -> Result<(Self, Handout), String> {
        let mem = Arc::new(
            SharedMemory::create("hipobj-queue", layout.bytes())
                .map_err(|e| format!("ring memory: {e}"))?,
        );
        let app_bell = Arc::new(EventFd::new().map_err(|e| format!("eventfd: {e}"))?);
        let doorbell = Arc::new(EventFd::new().map_err(|e| format!("eventfd: {e}"))?);
        let ring = ring_api::worker_queue_in(
            Arc::clone(&mem) as Arc<dyn RingMemory>,
            layout,
            Some(Arc::clone(&app_bell) as Arc<dyn ring_api::Doorbell>),
        )
        .map_err(|e| format!("rings: {e}"))?;
        let engine_q = engine
            .queue_with(engine::QueueOptions::new(layout.sq_entries))
            .map_err(|e| format!("engine queue: {e}"))?;
        let capacity = u32::try_from(engine_q.sq_capacity()).unwrap_or(u32::MAX);
        Ok((
            Self {
                ring,
                engine: engine_q,
                doorbell,
                in_flight: HashMap::new(),
                creates: HashMap::new(),
                in_flight_total: 0,
                capacity,
            },
            Handout { mem, app_bell },
        ))
    }

    /// Operations of this queue in the engine.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight_total
    }

    /// `true` when the client has published entries not yet taken.
    pub(crate) fn waiting(&mut self) -> bool {
        self.ring.submissions().available() > 0
    }

    /// The client dropped its queue (its half marked the rings closed).
    pub(crate) fn app_dropped(&self) -> bool {
        self.ring.app_dropped()
    }

    /// The client wrote indices its rings cannot have.
    pub(crate) fn corrupt(&self) -> bool {
        self.ring.peer_corrupt()
    }

    /// The engine queue's completion-readiness fd.
    pub(crate) fn engine_fd(&self) -> RawFd {
        self.engine.as_raw_fd()
    }

    pub(crate) fn doorbell_fd(&self) -> RawFd {
        self.doorbell.as_fd().as_raw_fd()
    }

    /// Moves completions back, then (within `allowance` more operations of this client)
    /// submissions forward.
    pub(crate) fn turn(&mut self, names: &mut Names, allowance: u32) -> Turn {
        let mut turn = Turn::default();
        // Completions first: they free room in the engine and in the client's allowance.
        {
            let mut out = self.ring.completions();
            for cqe in self.engine.completion() {
                let tag = cqe.user_data();
                let creates = take_one(&mut self.creates, tag);
                if take_one(&mut self.in_flight, tag) {
                    self.in_flight_total = self.in_flight_total.saturating_sub(1);
                }
                turn.completed += 1;
                if cqe.is_ok() {
                    turn.bytes += cqe.bytes();
                }
                out.push(names.completion(cqe, creates));
                turn.moved += 1;
            }
            out.flush_pending();
        }
        if self.ring.backpressured() {
            return turn;
        }
        let room = self
            .capacity
            .saturating_sub(self.in_flight_total)
            .min(allowance) as usize;
        let mut taken = 0;
        let mut rejected = Vec::new();
        {
            let mut subs = self.ring.submissions();
            while taken < room.min(TURN) {
                let Some(sqe) = subs.next() else { break };
                taken += 1;
                match names.translate(&sqe) {
                    Ok(t) => {
                        // Never full: the engine ring holds `capacity` entries and at most
                        // `capacity` operations of this queue are in the engine.
                        if self.engine.push(&t.sqe).is_err() {
                            rejected.push(engine::Cqe::error(
                                sqe.user_data(),
                                engine::ErrorCode::Busy,
                                engine::ErrorClass::Local,
                            ));
                            continue;
                        }
                        *self.in_flight.entry(sqe.user_data()).or_insert(0) += 1;
                        if t.creates_upload {
                            *self.creates.entry(sqe.user_data()).or_insert(0) += 1;
                        }
                        self.in_flight_total += 1;
                    }
                    Err(cqe) => rejected.push(cqe),
                }
            }
        }
        if !rejected.is_empty() {
            let mut out = self.ring.completions();
            for cqe in rejected {
                out.push(cqe);
            }
        }
        turn.moved += taken;
        turn
    }

    /// Announces that this side sleeps until the client publishes (unless `quota_bound`: the
    /// client's allowance is spent, so only engine completions can make progress) and arms
    /// the engine queue's completion fd. Returns `false` when there is work already.
    pub(crate) fn prepare_sleep(&mut self, quota_bound: bool) -> bool {
        let ring_idle = if quota_bound || self.in_flight_total >= self.capacity {
            true
        } else {
            self.ring.prepare_park()
        };
        if !ring_idle {
            return false;
        }
        if !self.engine.arm_completion_fd() {
            self.ring.finish_park();
            return false;
        }
        true
    }

    /// After waking: withdraws the announcement that this side sleeps.
    pub(crate) fn woke(&mut self) {
        self.ring.finish_park();
    }

    /// The engine queue's completion fd fired: drain and disarm it.
    pub(crate) fn clear_engine_fd(&mut self) {
        self.engine.clear_completion_fd();
    }

    /// The client rang: drain the doorbell.
    pub(crate) fn drain_doorbell(&mut self) {
        self.doorbell.drain();
    }
}

/// Decrements `tag`'s count; `true` when it was there.
fn take_one(map: &mut HashMap<u64, u32>, tag: u64) -> bool {
    match map.get_mut(&tag) {
        Some(n) if *n > 1 => {
            *n -= 1;
            true
        }
        Some(_) => {
            map.remove(&tag);
            true
        }
        None => false,
    }
}
