//! Running whole-object GETs that may be striped ([`crate::stripe::PendingGet`]) on the worker
//! that owns their queue: the HEAD that sizes the object, then one ordinary GET or a striped
//! RangeGet of the whole object.

use ring_api::Cqe;

use super::event_loop::Worker;
use super::handoff;
use crate::inflight::{InFlight, QueueRef};
use crate::stripe::{AfterHead, JoinId, PendingGet};

impl Worker {
    /// Holds a whole-object GET large enough, on memory bound to several NICs, until a HEAD
    /// (started here) names the object's size; hands any other operation back.
    pub(super) fn stripe_get(&mut self, mut op: InFlight) -> Option<InFlight> {
        let cfg = self.shared.stripe;
        if !crate::stripe::wants_get_split(&op, &cfg) {
            return Some(op);
        }
        let bound = op.buf.as_ref().and_then(|b| b.workers());
        let groups =
            crate::stripe::nic_groups(&cfg, bound, &self.shared.placement, &self.crew.eligible);
        if groups.is_empty() {
            return Some(op);
        }
        let Some(dst) = op.buf.take() else {
            return Some(op);
        };
        let (pending, mut head) = PendingGet::start(&op, dst);
        let join = self.joins.open_get(pending);
        head.stripe = Some(join);
        self.assign(head, self.index);
        None
    }

    /// The HEAD of GET `join` of this worker's queue `queue` completed with `cqe`.
    pub(super) fn get_head_landed(
        &mut self,
        queue: QueueRef,
        join: JoinId,
        cqe: Cqe,
        times: Option<ring_api::OpTimes>,
    ) {
        let Some(pending) = self.joins.take_get(join) else {
            return;
        };
        match pending.after_head(cqe, &self.shared.stripe) {
            AfterHead::Fail(cqe) => self.stage(queue, cqe, times),
            AfterHead::Whole(op) => {
                self.read_loads();
                let among = op
                    .buf
                    .as_ref()
                    .and_then(|b| b.workers())
                    .map_or_else(|| self.crew.eligible.clone(), <[usize]>::to_vec);
                let to = handoff::least_loaded(&self.loads, &among, self.index, &mut self.rotor);
                self.assign(op, to);
            }
            AfterHead::Striped { op, size } => {
                self.read_loads();
                // Split (the size is at least the threshold and more than one chunk); were it
                // handed back, it runs whole.
                if let Some(op) = self.stripe_sized(op, Some(size)) {
                    let to = self.index;
                    self.assign(op, to);
                }
            }
        }
    }
}
