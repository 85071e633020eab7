//! A striped whole-object GET: a GET into a destination of at least the stripe threshold, on
//! memory bound to several NICs, learns the object's size with a HEAD and then reads it as a
//! striped RangeGet of the whole object (chunks on workers of each NIC, joined as any striped
//! RangeGet, [`super::Joins`]).
//!
//! The HEAD costs one round trip, small next to the ≥ 8 MiB the destination is sized for; an
//! object that turns out too small to split (below the threshold or one chunk, empty
//! included) is fetched by one ordinary GET, and one larger than the destination fails with
//! `TooLarge` as a GET would. Every chunk must then report the size the HEAD did: an object
//! replaced in between fails the GET with `Integrity` rather than mixing two versions.
//!
//! This module decides; `worker::striped_get` runs the HEAD and the ops that follow.

use std::sync::Arc;
use std::time::Instant;

use ring_api::{Cqe, ErrorClass, ErrorCode, ObjectName};

use super::StripeConfig;
use crate::inflight::{InFlight, OpKind, QueueRef};
use crate::memory::LeaseGuard;

/// Whether `op` is a whole-object GET whose destination is large enough to stripe (the
/// object's size is then learned first).
pub(crate) fn wants_get_split(op: &InFlight, cfg: &StripeConfig) -> bool {
    cfg.policy != super::Stripe::Off
        && op.kind == OpKind::Get
        && op.multipart.is_none()
        && op.buf_len() >= cfg.threshold
        && op.buf_len() > cfg.chunk.max(1)
}

/// The application's GET, as the ops that carry it out are made.
#[derive(Debug)]
struct Parent {
    queue: QueueRef,
    user_data: u64,
    object: Arc<ObjectName>,
    deadline: Option<Instant>,
    may_retry: bool,
    /// The GET's own stamps (timed queues): each step carries them, so the completing one
    /// reports the GET's submission and start.
    times: Option<crate::op_times::Stamps>,
}

impl Parent {
    fn op(&self, kind: OpKind, buf: Option<LeaseGuard>) -> InFlight {
        InFlight {
            buf,
            deadline: self.deadline,
            may_retry: self.may_retry,
            times: self.times.clone(),
            ..InFlight::fresh(self.queue, self.user_data, kind, Arc::clone(&self.object))
        }
    }
}

/// A whole-object GET waiting for its HEAD.
#[derive(Debug)]
pub(crate) struct PendingGet {
    parent: Parent,
    dst: LeaseGuard,
}

/// What the HEAD's answer makes of the GET.
#[derive(Debug)]
pub(crate) enum AfterHead {
    /// The GET fails with this (the HEAD's error, or the object does not fit).
    Fail(Cqe),
    /// Read the object with this one ordinary GET (too small to split).
    Whole(InFlight),
    /// Read `size` bytes with this RangeGet of the whole object, to be striped.
    Striped {
        /// The RangeGet over the object's bytes (its lease the destination's first `size`).
        op: InFlight,
        /// The object's size, which every chunk must report.
        size: u64,
    },
}

impl PendingGet {
    /// Takes over `op` (a GET [`wants_get_split`] accepted) and its destination `dst` (taken
    /// out of it); returns it and the HEAD to send.
    pub(crate) fn start(op: &InFlight, dst: LeaseGuard) -> (Self, InFlight) {
        let parent = Parent {
            queue: op.queue,
            user_data: op.user_data,
            object: Arc::clone(&op.object),
            deadline: op.deadline,
            may_retry: op.may_retry,
            times: op.times.clone(),
        };
        let head = parent.op(OpKind::Head, None);
        (Self { parent, dst }, head)
    }

    /// The queue the GET came from.
    pub(crate) fn queue(&self) -> QueueRef {
        self.parent.queue
    }

    /// The HEAD completed with `head` (its `aux` the object's size).
    pub(crate) fn after_head(self, head: Cqe, cfg: &StripeConfig) -> AfterHead {
        let Self { parent, dst } = self;
        let ud = parent.user_data;
        if !head.is_ok() {
            return AfterHead::Fail(Cqe::from_raw(ud, head.result(), head.flags(), 0, 0));
        }
        let size = head.aux();
        let cap = dst.len();
        if size > cap {
            return AfterHead::Fail(Cqe::error(ud, ErrorCode::TooLarge, ErrorClass::Local));
        }
        if size < cfg.threshold || size <= cfg.chunk.max(1) {
            return AfterHead::Whole(parent.op(OpKind::Get, Some(dst)));
        }
        // The object's bytes are the destination's first `size`; the rest is let go now.
        let dst = if size < cap {
            match dst.split(size) {
                Ok(parts) => parts.into_iter().next(),
                Err(dst) => Some(dst),
            }
        } else {
            Some(dst)
        };
        let Some(dst) = dst.filter(|d| d.len() == size) else {
            return AfterHead::Fail(Cqe::error(ud, ErrorCode::Busy, ErrorClass::Local));
        };
        AfterHead::Striped {
            op: parent.op(OpKind::RangeGet { offset: 0 }, Some(dst)),
            size,
        }
    }
}
