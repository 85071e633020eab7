//! Running striped PUTs ([`crate::stripe::StripedPut`]) on the worker that owns their queue:
//! starting one, placing the steps it asks for (control steps here, parts on workers of each
//! NIC), moving it on as its steps complete, and aborting the uploads of a queue that is gone.

use std::time::Instant;

use ring_api::Cqe;

use super::event_loop::Worker;
use super::handoff;
use crate::inflight::{InFlight, MultipartOp, QueueRef};
use crate::stripe::{JoinId, PutNext, PutPlace, StripedPut};

impl Worker {
    /// Turns a PUT large enough, on memory bound to several NICs, into a striped PUT (its
    /// CreateMultipartUpload starts here); hands any other operation back.
    pub(super) fn stripe_put(&mut self, op: InFlight) -> Option<InFlight> {
        let cfg = self.shared.stripe;
        let Some(part_size) = crate::stripe::wants_put_split(&op, &cfg) else {
            return Some(op);
        };
        let bound = op.buf.as_ref().and_then(|b| b.workers());
        let groups =
            crate::stripe::nic_groups(&cfg, bound, &self.shared.placement, &self.crew.eligible);
        if groups.is_empty() {
            return Some(op);
        }
        let first = self.rotor % groups.len();
        let (put, mut create) =
            StripedPut::start(op, groups.len(), first, part_size, &self.shared.uploads);
        let join = self.joins.open_put(put);
        create.stripe = Some(join);
        self.assign(create, self.index);
        None
    }

    /// A step of striped PUT `join` of this worker's queue `queue` completed with `cqe`.
    pub(super) fn put_step_landed(
        &mut self,
        queue: QueueRef,
        join: JoinId,
        cqe: Cqe,
        times: Option<ring_api::OpTimes>,
    ) {
        let uploads = std::sync::Arc::clone(&self.shared.uploads);
        let Some(put) = self.joins.put_mut(join) else {
            return;
        };
        match put.landed(cqe, Instant::now(), &uploads) {
            PutNext::Wait => {}
            PutNext::StopParts => self.stop_chunks(queue, join),
            PutNext::Run(steps) => self.run_put_steps(queue, join, steps),
            PutNext::Done(cqe) => {
                self.joins.close_put(join);
                self.stage(queue, cqe, times);
            }
        }
    }

    /// Places the steps of striped PUT `join`: control steps here, each part on the least
    /// loaded worker of its NIC group.
    fn run_put_steps(&mut self, queue: QueueRef, join: JoinId, steps: Vec<(InFlight, PutPlace)>) {
        // Each part goes to its NIC group: the groups of its source's binding, as the PUT
        // was started with.
        let groups = steps
            .iter()
            .find_map(|(op, _)| op.buf.as_ref())
            .map(|b| {
                crate::stripe::nic_groups(
                    &self.shared.stripe,
                    b.workers(),
                    &self.shared.placement,
                    &self.crew.eligible,
                )
            })
            .unwrap_or_default();
        if !groups.is_empty() {
            self.read_loads();
        }
        for (mut op, place) in steps {
            op.stripe = Some(join);
            let to = match place {
                PutPlace::Owner => self.index,
                PutPlace::Group(g) => match groups.get(g) {
                    Some(group) => {
                        handoff::least_loaded(&self.loads, group, self.index, &mut self.rotor)
                    }
                    None => self.index,
                },
            };
            debug_assert_eq!(op.queue, queue);
            self.assign(op, to);
        }
    }

    /// A Cancel found a control step of striped PUT `join` (they run on the queue's owner,
    /// here): the upload is aborted at its next step.
    pub(super) fn cancel_put(&mut self, join: JoinId) {
        if let Some(put) = self.joins.put_mut(join) {
            put.cancel();
        }
    }

    /// Forgets the striped operations of the queue with id `queue` (it is gone) and aborts
    /// the uploads its striped PUTs had open, so no parts stay on the server.
    pub(super) fn abort_orphaned_uploads(&mut self, queue: u64) {
        let uploads = std::sync::Arc::clone(&self.shared.uploads);
        for (q, object, upload, upload_id) in self.joins.forget_queue(queue) {
            let abort = StripedPut::orphan_abort(q, object, upload, upload_id, &uploads);
            self.assign(abort, self.index);
        }
    }
}

/// Whether `op` is a control step of a striped PUT (Create, Complete, Abort, the stored-object
/// HEAD): never cancelled, so the upload it opens is always known and aborted.
pub(super) fn is_put_control_step(op: &InFlight) -> bool {
    op.stripe.is_some() && !matches!(op.multipart, None | Some(MultipartOp::Part { .. }))
}
