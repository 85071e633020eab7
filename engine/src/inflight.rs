//! The worker's table of operations in flight.
//!
//! A slab keyed by [`OpKey`] (index + generation, so a stale key held by a timer or a
//! connection can never name a newer operation). Each [`InFlight`] owns the lease on its
//! registered memory until it completes, so the memory cannot be freed, deregistered or
//! handed to a conflicting operation while the wire may still touch it.

use std::sync::Arc;
use std::time::Instant;

use ring_api::{ObjectName, UploadHandle};
use s3_lite::s3::CompletedPart;

use crate::memory::LeaseGuard;

/// What an operation does on the wire.
///
/// Multipart operations carry [`InFlight::multipart`] (their step and upload). An UploadPart
/// is a `Put` of its leased source: the RDMA dialects move it like a PUT and name the part
/// from [`InFlight::part_target`] (the `rc-persistent` request is the UploadPart request
/// itself; hipobj-rc-v2 puts `?uploadId=…&partNumber=N` in its target). The control steps
/// (create, complete, abort) travel as `Head`, the kind every dialect leaves to HTTP. The
/// HTTP fabric asks [`InFlight::head_only`] rather than comparing kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// Whole object into the leased destination (its length is the capacity).
    Get,
    /// `lease.len()` bytes at `offset` into the leased destination.
    RangeGet {
        /// First object byte.
        offset: u64,
    },
    /// Object size into the completion's `aux`.
    Head,
    /// The leased source as the whole object.
    Put,
}

/// A multipart step: what the request is and what its answer updates in the upload table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MultipartOp {
    /// `POST ?uploads`; the answer's upload id opens a handle (completion `aux`).
    Create,
    /// `PUT ?partNumber=part&uploadId=..` of the leased source; the answer's ETag is recorded.
    Part {
        /// The application's handle.
        upload: UploadHandle,
        /// 1..=10000.
        part: u32,
        /// S3 upload id of `upload`, read at dispatch.
        upload_id: Arc<str>,
    },
    /// `POST ?uploadId=..` with the part list; success forgets the handle.
    Complete {
        /// The application's handle.
        upload: UploadHandle,
        /// S3 upload id of `upload`, read at dispatch.
        upload_id: Arc<str>,
        /// Parts `1..=n` with their recorded ETags (snapshot taken at dispatch).
        parts: Arc<[CompletedPart]>,
        /// The object the parts we sent make (`None` if a part's source was not recorded):
        /// the completed object is checked against it.
        expect: Option<crate::multipart::ExpectedObject>,
    },
    /// `HEAD` of the object after a CompleteMultipart whose answer named no full-object
    /// checksum, or whose answer was lost or could not be read: the stored size (and
    /// CRC64NVME, where the server keeps one) must be `expect`.
    VerifyStored {
        /// What was sent.
        expect: crate::multipart::ExpectedObject,
        /// The Complete's answer was lost or unreadable: what it failed with, reported if the
        /// HEAD finds no object of ours (`None`: the Complete answer said it succeeded).
        lost: Option<LostAnswer>,
    },
    /// `DELETE ?uploadId=..`; success (or the server no longer knowing it) forgets the handle.
    Abort {
        /// The application's handle.
        upload: UploadHandle,
        /// S3 upload id of `upload`, read at dispatch.
        upload_id: Arc<str>,
    },
}

/// A CompleteMultipart that failed in a way that leaves open whether the server completed
/// it (its answer was lost, cut short or garbled; a repeat found the upload gone): the HEAD
/// after it decides ([`MultipartOp::VerifyStored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LostAnswer {
    /// The upload, forgotten once the HEAD finds it completed.
    pub(crate) upload: UploadHandle,
    /// The Complete's own failure.
    pub(crate) code: ring_api::ErrorCode,
    /// Its class.
    pub(crate) class: ring_api::ErrorClass,
}

/// Where an operation is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for a connection.
    Ready,
    /// Waiting out a retry backoff.
    Backoff,
    /// On the wire on connection `conn`.
    Active {
        /// Connection slot.
        conn: usize,
    },
}

/// The application queue an operation's completion goes to: the worker that owns its rings
/// (and drained the entry), the queue's slot on that worker, and the queue's engine-wide id
/// (a slot is reused after its queue is dropped; the id never is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QueueRef {
    /// Index of the owning worker.
    pub(crate) owner: usize,
    /// Slot of the queue on its owner.
    pub(crate) slot: usize,
    /// Engine-wide queue id.
    pub(crate) id: u64,
}

/// One operation taken off a submission ring and not yet completed.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The queue the completion goes to (possibly owned by another worker than the one
    /// executing the operation).
    pub(crate) queue: QueueRef,
    pub(crate) user_data: u64,
    pub(crate) kind: OpKind,
    pub(crate) object: Arc<ObjectName>,
    /// Lease on the destination (GET) or source (PUT); `None` for HEAD and empty PUTs.
    pub(crate) buf: Option<LeaseGuard>,
    pub(crate) deadline: Option<Instant>,
    /// Attempts started so far.
    pub(crate) attempts: u32,
    /// Whether failed attempts may be retried (caller's NO_RETRY and idempotency).
    pub(crate) may_retry: bool,
    pub(crate) retried: bool,
    /// Immediate retries after a stale keep-alive connection (bounded, see `Retry::Free`).
    pub(crate) free_retries: u8,
    /// Uncounted waits after refusals for load (bounded, see `Retry::Throttled`).
    pub(crate) throttled_waits: u8,
    pub(crate) phase: Phase,
    /// The multipart step, for CreateMultipart / UploadPart / Complete / Abort.
    pub(crate) multipart: Option<MultipartOp>,
    /// The upload table of the engine that dispatched a multipart step (`Some` exactly when
    /// `multipart` is): its handle names an upload there, and its answer is recorded there.
    pub(crate) uploads: Option<Arc<crate::multipart::UploadTable>>,
    /// The base64 CRC64NVME of a PUT's source, computed once on first use
    /// ([`InFlight::source_crc64`]): every attempt, RDMA or HTTP, sends the same value.
    pub(crate) source_crc: std::cell::OnceCell<String>,
    /// Set when a CompleteMultipart succeeded without naming a full-object checksum: the
    /// worker then turns the operation into [`MultipartOp::VerifyStored`].
    pub(crate) verify_stored: std::cell::Cell<Option<crate::multipart::ExpectedObject>>,
    /// A chunk of a striped operation: the join on the queue's owner that its completion
    /// goes to instead of the queue ([`crate::stripe`]).
    pub(crate) stripe: Option<crate::stripe::JoinId>,
    /// Clock readings, on a queue created with timestamps (`None`: no clock is read).
    pub(crate) times: Option<crate::op_times::Stamps>,
    /// Get/RangeGet: the caller asked for the CRC-64/NVME of the bytes received
    /// (`sqe_flags::CRC64`).
    pub(crate) want_crc64: bool,
    /// That CRC, when the fabric computed it as the bytes landed (the HTTP body reader); the
    /// worker computes it from host memory otherwise ([`InFlight::take_crc64`]).
    pub(crate) landed_crc64: std::cell::Cell<Option<u64>>,
}

impl InFlight {
    /// A fresh op of `kind` on `object` for `queue`'s entry `user_data`: no buffer, no
    /// deadline, never tried, retries allowed, ready to send, not a multipart step, no stripe,
    /// no times. Callers set what differs with struct-update syntax.
    pub(crate) fn fresh(
        queue: QueueRef,
        user_data: u64,
        kind: OpKind,
        object: Arc<ObjectName>,
    ) -> Self {
        Self {
            queue,
            user_data,
            kind,
            object,
            buf: None,
            deadline: None,
            attempts: 0,
            may_retry: true,
            retried: false,
            free_retries: 0,
            throttled_waits: 0,
            phase: Phase::Ready,
            multipart: None,
            uploads: None,
            source_crc: std::cell::OnceCell::new(),
            verify_stored: std::cell::Cell::new(None),
            stripe: None,
            times: None,
            want_crc64: false,
            landed_crc64: std::cell::Cell::new(None),
        }
    }

    /// Whether a success of this operation says if its bytes were proven
    /// ([`ring_api::cqe_flags::VERIFIED`]): the transfers (Get, RangeGet, Put, UploadPart)
    /// and CompleteMultipart (by its answer's full-object CRC64NVME or the HEAD after it).
    /// Not Head, CreateMultipart or Abort, whose `aux` is a size or a handle.
    pub(crate) fn reports_proof(&self) -> bool {
        match &self.multipart {
            Some(MultipartOp::Complete { .. } | MultipartOp::VerifyStored { .. }) => true,
            Some(_) => self.kind == OpKind::Put,
            None => self.kind != OpKind::Head,
        }
    }

    /// Whether the response to this request has no body whatever its headers say (HEAD).
    pub(crate) fn head_only(&self) -> bool {
        self.kind == OpKind::Head
            && matches!(
                self.multipart,
                None | Some(MultipartOp::VerifyStored { .. })
            )
    }

    /// The CRC-64/NVME of the first `bytes` bytes a successful Get/RangeGet delivered, for a
    /// caller that asked for it: the one the fabric computed as they landed, else computed
    /// here from host memory (the destination, or the operation's bounce range before its
    /// copy into VRAM) unless a server checksum already `verified` them (the RDMA paths with
    /// a landing digest: a second pass over the bytes would only cost). `None` when not asked
    /// for, when so verified, or when the bytes never were in host memory (written into VRAM
    /// by the NIC).
    pub(crate) fn take_crc64(&self, bytes: u64, verified: bool) -> Option<u64> {
        if !self.want_crc64 || !matches!(self.kind, OpKind::Get | OpKind::RangeGet { .. }) {
            return None;
        }
        if let Some(crc) = self.landed_crc64.take() {
            return Some(crc);
        }
        let lease = self.buf.as_ref()?;
        if verified || lease.landed_direct() {
            return None;
        }
        let held = lease.bytes_from(0);
        let n = usize::try_from(bytes).ok()?;
        // A host view shorter than what arrived means there is none (a device lease without
        // its bounce range): no value rather than a wrong one.
        let landed = held.get(..n)?;
        let mut c = s3_lite::checksum::Crc64Nvme::new();
        c.update(landed);
        Some(c.finish())
    }

    /// The base64 CRC64NVME of a PUT's (or UploadPart's) source bytes; `None` for other ops
    /// and empty PUTs. The source is read-only while the op holds its lease, so one
    /// computation serves every attempt.
    pub(crate) fn source_crc64(&self) -> Option<&str> {
        if self.kind != OpKind::Put {
            return None;
        }
        let lease = self.buf.as_ref()?;
        let crc = self.source_crc.get_or_init(|| {
            let mut c = s3_lite::checksum::Crc64Nvme::new();
            c.update(lease.bytes_from(0));
            s3_lite::checksum::encode_crc64nvme(c.finish())
        });
        Some(crc)
    }

    /// `(upload handle, part number)` of an UploadPart (where its ETag is recorded).
    pub(crate) fn part_handle(&self) -> Option<(ring_api::UploadHandle, u32)> {
        match &self.multipart {
            Some(MultipartOp::Part { upload, part, .. }) => Some((*upload, *part)),
            _ => None,
        }
    }

    /// `(upload id, part number)` of an UploadPart.
    pub(crate) fn part_target(&self) -> Option<(&str, u32)> {
        match &self.multipart {
            Some(MultipartOp::Part {
                upload_id, part, ..
            }) => Some((upload_id, *part)),
            _ => None,
        }
    }

    /// Records the first byte of this attempt's answer (on a timed queue; nothing otherwise).
    pub(crate) fn mark_first_byte(&self) {
        if let Some(t) = &self.times {
            t.mark_first_byte();
        }
    }

    /// Length of the registered range the operation transfers.
    pub(crate) fn buf_len(&self) -> u64 {
        self.buf.as_ref().map_or(0, LeaseGuard::len)
    }
}

/// Stable name of a slab entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OpKey {
    idx: u32,
    generation: u32,
}

#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    op: Option<InFlight>,
}

/// The in-flight table.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
}

impl Slab {
    pub(crate) fn insert(&mut self, op: InFlight) -> OpKey {
        self.live += 1;
        if let Some(idx) = self.free.pop()
            && let Some(slot) = self.slots.get_mut(idx as usize)
        {
            slot.op = Some(op);
            return OpKey {
                idx,
                generation: slot.generation,
            };
        }
        let idx = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Slot {
            generation: 0,
            op: Some(op),
        });
        OpKey { idx, generation: 0 }
    }

    fn slot(&self, key: OpKey) -> Option<&Slot> {
        self.slots
            .get(key.idx as usize)
            .filter(|s| s.generation == key.generation)
    }

    pub(crate) fn get(&self, key: OpKey) -> Option<&InFlight> {
        self.slot(key).and_then(|s| s.op.as_ref())
    }

    pub(crate) fn get_mut(&mut self, key: OpKey) -> Option<&mut InFlight> {
        self.slots
            .get_mut(key.idx as usize)
            .filter(|s| s.generation == key.generation)
            .and_then(|s| s.op.as_mut())
    }

    pub(crate) fn remove(&mut self, key: OpKey) -> Option<InFlight> {
        let slot = self
            .slots
            .get_mut(key.idx as usize)
            .filter(|s| s.generation == key.generation)?;
        let op = slot.op.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(key.idx);
        self.live -= 1;
        Some(op)
    }

    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Keys of live entries matching `pred` (used by Cancel and queue teardown, not the hot
    /// path).
    pub(crate) fn keys_where(&self, mut pred: impl FnMut(&InFlight) -> bool) -> Vec<OpKey> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let op = s.op.as_ref()?;
                pred(op).then(|| OpKey {
                    idx: u32::try_from(i).unwrap_or(u32::MAX),
                    generation: s.generation,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(user_data: u64) -> InFlight {
        let object = Arc::new(ObjectName {
            bucket: "b".into(),
            key: "k".into(),
        });
        InFlight::fresh(QueueRef::default(), user_data, OpKind::Head, object)
    }

    #[test]
    fn stale_keys_never_name_a_reused_slot() {
        let mut s = Slab::default();
        let a = s.insert(op(1));
        assert_eq!(s.remove(a).map(|o| o.user_data), Some(1));
        let b = s.insert(op(2));
        assert_ne!(a, b);
        assert!(s.get(a).is_none() && s.remove(a).is_none());
        assert_eq!(s.get(b).map(|o| o.user_data), Some(2));
        assert_eq!(s.len(), 1);
        assert_eq!(s.keys_where(|o| o.user_data == 2), vec![b]);
    }
}
