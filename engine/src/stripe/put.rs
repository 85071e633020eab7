//! A striped PUT: one large PUT on memory bound to several NICs, written as an engine-driven
//! multipart upload whose parts run on workers of different NICs.
//!
//! One S3 object cannot be written by several PUT requests, so the engine does what S3
//! transfer managers do: CreateMultipartUpload, one UploadPart per [`put_part_size`] bytes of
//! the source (each its own RDMA op on a worker of the next NIC, verified as any UploadPart
//! is: the part's CRC64NVME travels with it and is recorded for the Complete check), then
//! CompleteMultipartUpload, whose answer (or a HEAD of the stored object) is checked against
//! the parts sent. Any failure — a part, the Complete, a Cancel, the deadline — aborts the
//! upload (AbortMultipartUpload), so no part is left on the server, and the application's
//! operation completes once with the first error. Success completes it once with the total
//! byte count.
//!
//! The control steps (Create, Complete, Abort) run on the worker that owns the queue, carry
//! no deadline and are never cancelled (a Create stopped mid-flight could leave an upload no
//! one knows the id of); a Cancel or an expired deadline is honoured at the next step instead.
//!
//! This module is the state machine alone ([`StripedPut`]); `worker::striped_put` runs the
//! operations it asks for.

use std::sync::Arc;
use std::time::Instant;

use ring_api::{Cqe, ErrorClass, ErrorCode, ObjectName, UploadHandle, cqe_flags};
use s3_lite::s3::MAX_PARTS;

use super::{Stripe, StripeConfig};
use crate::inflight::{InFlight, MultipartOp, OpKind, QueueRef};
use crate::memory::LeaseGuard;
use crate::multipart::UploadTable;

/// S3's smallest part (every part but the last): 5 MiB.
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's largest part: 5 GiB.
const MAX_PART_SIZE: u64 = 5 << 30;

/// Bytes per part of a striped PUT of `len` bytes: the configured chunk, raised to S3's 5 MiB
/// minimum and to what keeps the upload within 10,000 parts; `None` when the PUT is not to be
/// striped (policy `Off`, below the threshold, one part, or beyond what 10,000 parts of 5 GiB
/// hold).
pub(crate) fn put_part_size(len: u64, cfg: &StripeConfig) -> Option<u64> {
    if cfg.policy == Stripe::Off || len < cfg.threshold {
        return None;
    }
    let part = cfg
        .chunk
        .max(MIN_PART_SIZE)
        .max(len.div_ceil(u64::from(MAX_PARTS)));
    (part < len && part <= MAX_PART_SIZE).then_some(part)
}

/// The part size `op` would be striped with: a plain PUT (not an UploadPart) large enough.
pub(crate) fn wants_put_split(op: &InFlight, cfg: &StripeConfig) -> Option<u64> {
    if op.kind != OpKind::Put || op.multipart.is_some() {
        return None;
    }
    put_part_size(op.buf_len(), cfg)
}

/// Where a step asked for by [`StripedPut`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the worker that owns the queue (control steps).
    Owner,
    /// On a worker of NIC group `i` (of the groups given to [`StripedPut::start`]).
    Group(usize),
}

/// What the worker is to do after a step of a striped PUT completed.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing yet: other parts are still running.
    Wait,
    /// A part failed first while others run: stop them (their completions still come).
    StopParts,
    /// Start these operations.
    Run(Vec<(InFlight, Place)>),
    /// The application's operation completes with this.
    Done(Cqe),
}

/// Where the upload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Creating,
    Uploading,
    Completing,
    Aborting,
}

/// One striped PUT in progress (kept by the worker that owns its queue).
#[derive(Debug)]
pub(crate) struct StripedPut {
    pub(crate) queue: QueueRef,
    user_data: u64,
    object: Arc<ObjectName>,
    deadline: Option<Instant>,
    may_retry: bool,
    groups: usize,
    /// First group to give a part to (rotates the load between PUTs).
    first_group: usize,
    part_size: u64,
    /// The source, until the upload exists and it is cut into parts.
    source: Option<LeaseGuard>,
    step: Step,
    /// A Cancel arrived: the upload is aborted at the next step.
    cancelled: bool,
    upload: Option<(UploadHandle, Arc<str>)>,
    parts: u32,
    parts_left: usize,
    bytes: u64,
    /// The success whose path and dialect are the operation's: the first part's, or one that
    /// went over HTTP.
    first: Option<Cqe>,
    /// Why the operation fails (the upload is being aborted).
    error: Option<Cqe>,
    retried: bool,
    /// The PUT's own stamps (timed queues): each step carries them, so the completing step
    /// (the Complete, or the Abort of a failed upload) reports the PUT's submission and start,
    /// and its answer is the first byte, as for a single PUT.
    times: Option<crate::op_times::Stamps>,
}

impl StripedPut {
    /// Takes over `op` (a PUT [`wants_put_split`] accepted with `part_size`), to be spread over
    /// `groups` NIC groups starting with `first_group`; returns the state and its first step,
    /// the CreateMultipartUpload.
    pub(crate) fn start(
        mut op: InFlight,
        groups: usize,
        first_group: usize,
        part_size: u64,
        uploads: &Arc<UploadTable>,
    ) -> (Self, InFlight) {
        let put = Self {
            queue: op.queue,
            user_data: op.user_data,
            object: Arc::clone(&op.object),
            deadline: op.deadline,
            may_retry: op.may_retry,
            groups: groups.max(1),
            first_group,
            part_size,
            source: op.buf.take(),
            step: Step::Creating,
            cancelled: false,
            upload: None,
            parts: 0,
            parts_left: 0,
            bytes: 0,
            first: None,
            error: None,
            retried: false,
            times: op.times.clone(),
        };
        let create = put.control(MultipartOp::Create, uploads);
        (put, create)
    }

    /// A control step (no payload, no deadline) of this upload.
    fn control(&self, step: MultipartOp, uploads: &Arc<UploadTable>) -> InFlight {
        self.op(OpKind::Head, step, None, None, uploads)
    }

    fn op(
        &self,
        kind: OpKind,
        step: MultipartOp,
        buf: Option<LeaseGuard>,
        deadline: Option<Instant>,
        uploads: &Arc<UploadTable>,
    ) -> InFlight {
        InFlight {
            buf,
            deadline,
            may_retry: self.may_retry,
            multipart: Some(step),
            uploads: Some(Arc::clone(uploads)),
            times: self.times.clone(),
            ..InFlight::fresh(self.queue, self.user_data, kind, Arc::clone(&self.object))
        }
    }

    /// A Cancel of the operation arrived: honoured at the next step (a running part is
    /// stopped by the worker; its failure aborts the upload).
    pub(crate) fn cancel(&mut self) {
        self.cancelled = true;
    }

    /// Whether the application's completion is still to come (its queue is gone: the
    /// upload to abort, if one is open).
    pub(crate) fn open_upload(&self) -> Option<(Arc<ObjectName>, UploadHandle, Arc<str>)> {
        match self.step {
            Step::Uploading | Step::Completing => self
                .upload
                .as_ref()
                .map(|(h, id)| (Arc::clone(&self.object), *h, Arc::clone(id))),
            Step::Creating | Step::Aborting => None,
        }
    }

    /// An AbortMultipartUpload of `upload` of `object`, outside any striped PUT (its queue is
    /// gone): no completion is wanted.
    pub(crate) fn orphan_abort(
        queue: QueueRef,
        object: Arc<ObjectName>,
        upload: UploadHandle,
        upload_id: Arc<str>,
        uploads: &Arc<UploadTable>,
    ) -> InFlight {
        InFlight {
            multipart: Some(MultipartOp::Abort { upload, upload_id }),
            uploads: Some(Arc::clone(uploads)),
            ..InFlight::fresh(queue, 0, OpKind::Head, object)
        }
    }

    /// Fails the operation with `error` after aborting the upload (or at once when none is
    /// open).
    fn abort(&mut self, error: Cqe, uploads: &Arc<UploadTable>) -> Next {
        self.error.get_or_insert(error);
        self.source = None;
        let Some((upload, upload_id)) = self.upload.clone() else {
            return Next::Done(self.failure());
        };
        self.step = Step::Aborting;
        Next::Run(vec![(
            self.control(MultipartOp::Abort { upload, upload_id }, uploads),
            Place::Owner,
        )])
    }

    fn failure(&self) -> Cqe {
        let e = self
            .error
            .unwrap_or_else(|| Cqe::error(0, ErrorCode::Io, ErrorClass::Local));
        let e = Cqe::from_raw(self.user_data, e.result(), e.flags(), 0, 0);
        if self.retried { e.with_retried() } else { e }
    }

    fn local_error(&self, code: ErrorCode, class: ErrorClass) -> Cqe {
        Cqe::error(self.user_data, code, class)
    }

    /// The step now running completed with `cqe` (at `now`): what the worker does next.
    pub(crate) fn landed(&mut self, cqe: Cqe, now: Instant, uploads: &Arc<UploadTable>) -> Next {
        self.retried |= cqe.retried();
        match self.step {
            Step::Creating => self.created(cqe, now, uploads),
            Step::Uploading => self.part_landed(cqe, uploads),
            Step::Completing => {
                if cqe.is_ok() {
                    return Next::Done(self.success(cqe.verified()));
                }
                self.abort(cqe, uploads)
            }
            Step::Aborting => Next::Done(self.failure()),
        }
    }

    fn created(&mut self, cqe: Cqe, now: Instant, uploads: &Arc<UploadTable>) -> Next {
        if !cqe.is_ok() {
            self.source = None;
            self.error = Some(cqe);
            return Next::Done(self.failure());
        }
        let Ok(handle) = u32::try_from(cqe.aux()).map(UploadHandle) else {
            return Next::Done(self.local_error(ErrorCode::Protocol, ErrorClass::Local));
        };
        let Ok(upload_id) = uploads.upload_id(handle, &self.object) else {
            return Next::Done(self.local_error(ErrorCode::BadHandle, ErrorClass::Local));
        };
        self.upload = Some((handle, Arc::clone(&upload_id)));
        if self.cancelled {
            return self.abort(
                self.local_error(ErrorCode::Cancelled, ErrorClass::Cancelled),
                uploads,
            );
        }
        if self.deadline.is_some_and(|d| d <= now) {
            return self.abort(
                self.local_error(ErrorCode::TimedOut, ErrorClass::Deadline),
                uploads,
            );
        }
        let Some(source) = self.source.take() else {
            return self.abort(self.local_error(ErrorCode::Io, ErrorClass::Local), uploads);
        };
        let pieces = match source.split(self.part_size) {
            Ok(p) if p.len() <= MAX_PARTS as usize => p,
            _ => {
                return self.abort(
                    self.local_error(ErrorCode::Busy, ErrorClass::Local),
                    uploads,
                );
            }
        };
        let mut run = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.into_iter().enumerate() {
            // At most MAX_PARTS pieces: the part number fits.
            let part = u32::try_from(i + 1).unwrap_or(MAX_PARTS);
            let step = MultipartOp::Part {
                upload: handle,
                part,
                upload_id: Arc::clone(&upload_id),
            };
            let op = self.op(OpKind::Put, step, Some(piece), self.deadline, uploads);
            run.push((op, Place::Group((self.first_group + i) % self.groups)));
        }
        self.parts = u32::try_from(run.len()).unwrap_or(MAX_PARTS);
        self.parts_left = run.len();
        self.step = Step::Uploading;
        Next::Run(run)
    }

    fn part_landed(&mut self, cqe: Cqe, uploads: &Arc<UploadTable>) -> Next {
        let failed_before = self.error.is_some();
        self.parts_left = self.parts_left.saturating_sub(1);
        if cqe.is_ok() {
            self.bytes = self.bytes.saturating_add(cqe.bytes());
            // The operation reports the first part that went over HTTP (a per-request
            // fallback) if any did, else the first part's path, as a striped read does.
            super::reporting(&mut self.first, cqe);
        } else {
            self.error.get_or_insert(cqe);
        }
        if self.parts_left > 0 {
            return if self.error.is_some() && !failed_before {
                Next::StopParts
            } else {
                Next::Wait
            };
        }
        if let Some(e) = self.error {
            return self.abort(e, uploads);
        }
        if self.cancelled {
            return self.abort(
                self.local_error(ErrorCode::Cancelled, ErrorClass::Cancelled),
                uploads,
            );
        }
        let Some((upload, _)) = self.upload else {
            return Next::Done(self.local_error(ErrorCode::Io, ErrorClass::Local));
        };
        match uploads.completion(upload, &self.object, self.parts) {
            Ok((upload_id, parts)) => {
                let step = MultipartOp::Complete {
                    upload,
                    upload_id,
                    parts: parts.into(),
                    expect: uploads.expected_object(upload, self.parts),
                };
                self.step = Step::Completing;
                Next::Run(vec![(self.control(step, uploads), Place::Owner)])
            }
            Err(e) => self.abort(self.local_error(e.code(), ErrorClass::Local), uploads),
        }
    }

    /// The operation's success: every part's bytes, the path and dialect of `first`;
    /// `verified` when the Complete proved the whole object (its full-object CRC64NVME).
    fn success(&self, verified: bool) -> Cqe {
        let flags = self.first.map_or(0, |f| f.flags()) & !cqe_flags::VERIFIED;
        let ok = Cqe::success(self.user_data, self.bytes, ring_api::DataPath::None);
        let c = Cqe::from_raw(self.user_data, ok.result(), flags, self.bytes, 0);
        let c = if verified { c.with_verified() } else { c };
        if self.retried { c.with_retried() } else { c }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Registry;
    use crate::memory::raw::RawMem;

    const MIB: u64 = 1 << 20;

    /// A 12 MiB PUT of a fresh registration (parts of 5 MiB: 5 + 5 + 2), its registry (which
    /// must outlive it) and an upload table.
    fn put(deadline: Option<Instant>) -> (Registry, Arc<UploadTable>, StripedPut, InFlight) {
        let reg = Registry::new();
        let (mem, _) = RawMem::alloc((12 * MIB) as usize, false).unwrap();
        let h = reg.insert(mem).unwrap();
        let lease = reg.get(h).unwrap().lease(0, 12 * MIB, false).unwrap();
        let object = Arc::new(ObjectName {
            bucket: "b".into(),
            key: "k".into(),
        });
        let op = InFlight {
            buf: Some(lease),
            deadline,
            ..InFlight::fresh(QueueRef::default(), 77, OpKind::Put, object)
        };
        let uploads = Arc::new(UploadTable::new());
        let (p, create) = StripedPut::start(op, 2, 1, 5 * MIB, &uploads);
        (reg, uploads, p, create)
    }

    /// The Create's success: the upload opened in `uploads` as the HTTP fabric opens it.
    fn created(uploads: &UploadTable, p: &StripedPut) -> Cqe {
        let h = uploads.open(Arc::clone(&p.object), "upload-1").unwrap();
        Cqe::success(77, 0, ring_api::DataPath::Http).with_aux(u64::from(h.0))
    }

    fn steps(n: Next) -> Vec<(InFlight, Place)> {
        match n {
            Next::Run(v) => v,
            other => panic!("{other:?}"),
        }
    }

    fn step_of(op: &InFlight) -> &MultipartOp {
        op.multipart.as_ref().unwrap()
    }

    #[test]
    fn create_parts_complete_one_success_with_the_total() {
        let (_reg, uploads, mut p, create) = put(None);
        assert!(matches!(create.multipart, Some(MultipartOp::Create)));
        assert!(create.buf.is_none() && create.deadline.is_none());
        let now = Instant::now();
        let parts = steps(p.landed(created(&uploads, &p), now, &uploads));
        let shape: Vec<(u32, u64, Place)> = parts
            .iter()
            .map(|(op, at)| match step_of(op) {
                MultipartOp::Part { part, .. } => (*part, op.buf_len(), *at),
                other => panic!("{other:?}"),
            })
            .collect();
        // Round robin over the two groups, starting with group 1.
        assert_eq!(
            shape,
            [
                (1, 5 * MIB, Place::Group(1)),
                (2, 5 * MIB, Place::Group(0)),
                (3, 2 * MIB, Place::Group(1)),
            ]
        );
        let ok = |n| Cqe::success(77, n, ring_api::DataPath::RdmaSoft);
        for (i, (op, _)) in parts.iter().enumerate() {
            let (h, n) = op.part_handle().unwrap();
            uploads.record_part(h, n, &format!("\"e{i}\"")).unwrap();
        }
        assert!(matches!(p.landed(ok(5 * MIB), now, &uploads), Next::Wait));
        assert!(matches!(p.landed(ok(2 * MIB), now, &uploads), Next::Wait));
        let complete = steps(p.landed(ok(5 * MIB), now, &uploads));
        assert_eq!(complete.len(), 1);
        match step_of(&complete[0].0) {
            MultipartOp::Complete { parts, .. } => assert_eq!(parts.len(), 3),
            other => panic!("{other:?}"),
        }
        assert_eq!(complete[0].1, Place::Owner);
        match p.landed(Cqe::success(77, 0, ring_api::DataPath::Http), now, &uploads) {
            Next::Done(c) => {
                assert!(c.is_ok());
                assert_eq!((c.user_data(), c.bytes()), (77, 12 * MIB));
                assert_eq!(c.path(), Some(ring_api::DataPath::RdmaSoft));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_failing_part_stops_the_others_and_aborts_the_upload() {
        let (_reg, uploads, mut p, _) = put(None);
        let now = Instant::now();
        let parts = steps(p.landed(created(&uploads, &p), now, &uploads));
        drop(parts);
        let refused = Cqe::error(77, ErrorCode::InvalidArgument, ErrorClass::Client);
        assert!(matches!(p.landed(refused, now, &uploads), Next::StopParts));
        let stopped = Cqe::error(77, ErrorCode::Cancelled, ErrorClass::Cancelled);
        assert!(matches!(p.landed(stopped, now, &uploads), Next::Wait));
        let ok = Cqe::success(77, MIB, ring_api::DataPath::Http);
        let abort = steps(p.landed(ok, now, &uploads));
        assert!(matches!(step_of(&abort[0].0), MultipartOp::Abort { .. }));
        // Whatever the Abort answers, the operation fails once with the part's error.
        let gone = Cqe::error(77, ErrorCode::NotFound, ErrorClass::Client);
        match p.landed(gone, now, &uploads) {
            Next::Done(c) => assert_eq!(c.error_code(), Some(ErrorCode::InvalidArgument)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cancel_or_deadline_during_create_aborts_once_the_upload_exists() {
        let (_reg, uploads, mut p, _) = put(None);
        p.cancel();
        let now = Instant::now();
        let abort = steps(p.landed(created(&uploads, &p), now, &uploads));
        assert!(matches!(step_of(&abort[0].0), MultipartOp::Abort { .. }));
        match p.landed(Cqe::success(77, 0, ring_api::DataPath::Http), now, &uploads) {
            Next::Done(c) => assert_eq!(c.error_code(), Some(ErrorCode::Cancelled)),
            other => panic!("{other:?}"),
        }

        let (_reg, uploads, mut p, _) = put(Some(now));
        let later = now + std::time::Duration::from_millis(1);
        let abort = steps(p.landed(created(&uploads, &p), later, &uploads));
        assert!(matches!(step_of(&abort[0].0), MultipartOp::Abort { .. }));
        match p.landed(
            Cqe::success(77, 0, ring_api::DataPath::Http),
            later,
            &uploads,
        ) {
            Next::Done(c) => assert_eq!(c.error_code(), Some(ErrorCode::TimedOut)),
            other => panic!("{other:?}"),
        }

        // A failed Create: nothing to abort, its error at once.
        let (_reg, uploads, mut p, _) = put(None);
        let denied = Cqe::error(77, ErrorCode::AccessDenied, ErrorClass::Client);
        match p.landed(denied, now, &uploads) {
            Next::Done(c) => assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied)),
            other => panic!("{other:?}"),
        }
    }

    fn cfg(policy: Stripe, threshold: u64, chunk: u64) -> StripeConfig {
        StripeConfig {
            policy,
            threshold,
            chunk,
        }
    }

    #[test]
    fn parts_follow_s3s_size_rules() {
        const MIB: u64 = 1 << 20;
        let d = StripeConfig::default();
        // The 4 MiB default chunk is raised to S3's 5 MiB minimum part.
        assert_eq!(put_part_size(64 * MIB, &d), Some(5 * MIB));
        assert_eq!(put_part_size(8 * MIB, &d), Some(5 * MIB));
        // Below the threshold, with striping off, or one part: a plain PUT.
        assert_eq!(put_part_size(8 * MIB - 1, &d), None);
        assert_eq!(put_part_size(64 * MIB, &cfg(Stripe::Off, 0, 0)), None);
        assert_eq!(
            put_part_size(16 * MIB, &cfg(Stripe::All, 0, 16 * MIB)),
            None
        );
        assert_eq!(
            put_part_size(16 * MIB, &cfg(Stripe::All, 0, 8 * MIB)),
            Some(8 * MIB)
        );
        // Never more than 10,000 parts: 100 GiB needs parts of at least 10.24 MiB.
        let big = 100 << 30;
        let p = put_part_size(big, &d).unwrap();
        assert!(big.div_ceil(p) <= 10_000 && p >= MIN_PART_SIZE, "{p}");
        // Beyond 10,000 parts of 5 GiB: not striped (S3 could not hold it anyway).
        assert_eq!(put_part_size(MAX_PART_SIZE * 10_001, &d), None);
    }
}
