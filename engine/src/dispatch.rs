//! Pure step from a raw submission entry to work: validate, resolve handles, take leases.
//!
//! Entries are untrusted. [`dispatch`] never panics: every entry becomes either an immediate
//! completion (Nop, or an error) or an [`InFlight`] ready for a fabric, or a cancellation.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ring_api::{
    BufSlice, Cqe, DataPath, Deadline, ErrorClass, ErrorCode, ObjectId, ObjectName, ObjectTable,
    Op, Sqe, UploadHandle,
};

use crate::inflight::{InFlight, MultipartOp, OpKind, Phase, QueueRef};
use crate::memory::{LeaseError, Registry};
use crate::multipart::UploadTable;

/// Engine state dispatch reads.
#[derive(Debug)]
pub(crate) struct DispatchCtx<'a> {
    pub(crate) registry: &'a Registry,
    pub(crate) objects: &'a ObjectTable,
    pub(crate) default_deadline: Option<Duration>,
    /// The engine's upload table (multipart handles resolve here; multipart ops carry it).
    pub(crate) uploads: &'a Arc<UploadTable>,
    /// `Instant::now()` and `CLOCK_MONOTONIC` ns read at the same moment, to convert
    /// absolute deadlines.
    pub(crate) now: Instant,
    pub(crate) now_mono_ns: u64,
}

/// What to do with one entry.
// `Start` carries the operation by value: it is moved once, into a slab or a worker's mailbox;
// boxing it would allocate once per operation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Dispatch {
    /// Complete at once with this entry.
    Complete(Cqe),
    /// Cancel the in-flight operation whose `user_data` is `target`, then complete the Cancel.
    Cancel {
        /// The Cancel entry's own tag.
        user_data: u64,
        /// Tag of the operation to stop.
        target: u64,
    },
    /// Start this operation.
    Start(InFlight),
}

fn local(user_data: u64, code: ErrorCode) -> Dispatch {
    Dispatch::Complete(Cqe::error(user_data, code, ErrorClass::Local))
}

/// A multipart entry before its handle is looked up.
#[derive(Debug, Clone, Copy)]
enum MultipartReq {
    Create,
    Part(UploadHandle, u32),
    Complete(UploadHandle, u32),
    Abort(UploadHandle),
}

/// Resolves a multipart entry against the upload table (unknown or finished handle,
/// other object, missing part: typed errors before anything goes on the wire).
fn multipart_op(
    table: &UploadTable,
    req: MultipartReq,
    name: &ObjectName,
) -> Result<MultipartOp, ErrorCode> {
    let op = match req {
        MultipartReq::Create => MultipartOp::Create,
        MultipartReq::Part(upload, part) => MultipartOp::Part {
            upload,
            part,
            upload_id: table.upload_id(upload, name).map_err(|e| e.code())?,
        },
        MultipartReq::Complete(upload, n) => {
            let (upload_id, parts) = table.completion(upload, name, n).map_err(|e| e.code())?;
            MultipartOp::Complete {
                upload,
                upload_id,
                parts: parts.into(),
                expect: table.expected_object(upload, n),
            }
        }
        MultipartReq::Abort(upload) => MultipartOp::Abort {
            upload,
            upload_id: table.upload_id(upload, name).map_err(|e| e.code())?,
        },
    };
    Ok(op)
}

/// Decodes `sqe` from queue `queue` (multipart entries resolve in `ctx.uploads`).
pub(crate) fn dispatch(sqe: &Sqe, queue: QueueRef, ctx: &DispatchCtx<'_>) -> Dispatch {
    let v = match sqe.validate() {
        Ok(v) => v,
        Err(e) => return Dispatch::Complete(e.to_cqe(sqe.user_data())),
    };
    let ud = v.user_data;
    let deadline = match v.deadline {
        Deadline::None => ctx.default_deadline.and_then(|d| ctx.now.checked_add(d)),
        Deadline::Relative(ns) => ctx.now.checked_add(Duration::from_nanos(ns)),
        Deadline::Absolute(ns) => ctx
            .now
            .checked_add(Duration::from_nanos(ns.saturating_sub(ctx.now_mono_ns))),
    };
    let mut mp = None;
    let (object, kind, slice, exclusive) = match v.op {
        Op::Nop => return Dispatch::Complete(Cqe::success(ud, 0, DataPath::None)),
        Op::Cancel { target } => {
            return Dispatch::Cancel {
                user_data: ud,
                target,
            };
        }
        Op::Get { object, dst } => (object, OpKind::Get, Some(dst), true),
        Op::RangeGet {
            object,
            offset,
            dst,
        } => (object, OpKind::RangeGet { offset }, Some(dst), true),
        Op::Head { object } => (object, OpKind::Head, None, false),
        Op::Put { object, src } => (object, OpKind::Put, Some(src).filter(|s| s.len > 0), false),
        // Multipart control steps travel with the kind `Head` (no payload) and their step; an
        // UploadPart is a `Put` of its source (the RDMA dialects name the part, see `OpKind`).
        Op::CreateMultipart { object } => {
            mp = Some(MultipartReq::Create);
            (object, OpKind::Head, None, false)
        }
        Op::UploadPart {
            object,
            upload,
            part,
            src,
        } => {
            mp = Some(MultipartReq::Part(upload, part.get()));
            (object, OpKind::Put, Some(src).filter(|s| s.len > 0), false)
        }
        Op::CompleteMultipart {
            object,
            upload,
            parts,
        } => {
            mp = Some(MultipartReq::Complete(upload, parts.get()));
            (object, OpKind::Head, None, false)
        }
        Op::AbortMultipart { object, upload } => {
            mp = Some(MultipartReq::Abort(upload));
            (object, OpKind::Head, None, false)
        }
        _ => return local(ud, ErrorCode::Unsupported),
    };
    let Some(name) = resolve(ctx.objects, object) else {
        return local(ud, ErrorCode::BadHandle);
    };
    let multipart = match mp.map(|r| multipart_op(ctx.uploads, r, &name)).transpose() {
        Ok(m) => m,
        Err(code) => return local(ud, code),
    };
    let buf = match slice {
        None => None,
        Some(BufSlice { buf, offset, len }) => {
            let Some(region) = ctx.registry.get(buf) else {
                return local(ud, ErrorCode::BadHandle);
            };
            match region.lease(offset, len, exclusive) {
                Ok(g) => Some(g),
                Err(LeaseError::Bounds) => return local(ud, ErrorCode::BadAddress),
                Err(LeaseError::Busy | LeaseError::Closing) => return local(ud, ErrorCode::Busy),
            }
        }
    };
    Dispatch::Start(InFlight {
        queue,
        user_data: ud,
        kind,
        object: name,
        buf,
        deadline,
        attempts: 0,
        // Every kind is safe to repeat, so only the entry's NO_RETRY stops retries: GET,
        // RangeGet and HEAD read; a PUT or UploadPart re-sends the same bytes (pinned by the
        // shared lease); Complete, Abort and the stored-object HEAD name a fixed upload id or
        // object; a repeated Create at worst leaves an unnamed upload open on the server
        // (what every retrying S3 client risks; lifecycle rules clean those up), and the
        // handle carries the upload id of the answer read. See docs/engine.md, "Retries".
        may_retry: !v.no_retry,
        retried: false,
        free_retries: 0,
        throttled_waits: 0,
        phase: Phase::Ready,
        uploads: multipart.as_ref().map(|_| Arc::clone(ctx.uploads)),
        multipart,
        source_crc: std::cell::OnceCell::new(),
        verify_stored: std::cell::Cell::new(None),
        stripe: None,
        times: None,
        want_crc64: v.crc64,
        landed_crc64: std::cell::Cell::new(None),
    })
}

fn resolve(objects: &ObjectTable, id: ObjectId) -> Option<Arc<ring_api::ObjectName>> {
    objects.resolve(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: QueueRef = QueueRef {
        owner: 0,
        slot: 0,
        id: 0,
    };
    use crate::memory::raw::RawMem;
    use ring_api::opcode::{Cancel, Head, Nop, Put, RangeGet};
    use ring_api::{BufHandle, BufSlice};

    fn setup() -> (Registry, ObjectTable, BufHandle, ObjectId) {
        let reg = Registry::new();
        let (mem, _) = RawMem::alloc(4096, false).unwrap();
        let h = reg.insert(mem).unwrap();
        let objects = ObjectTable::new();
        let o = objects.intern("b", "k").unwrap();
        (reg, objects, h, o)
    }

    fn ctx<'a>(
        reg: &'a Registry,
        objects: &'a ObjectTable,
        uploads: &'a Arc<UploadTable>,
    ) -> DispatchCtx<'a> {
        DispatchCtx {
            registry: reg,
            objects,
            default_deadline: None,
            uploads,
            now: Instant::now(),
            now_mono_ns: 1_000,
        }
    }

    fn error_of(d: Dispatch) -> (i32, Option<ErrorClass>) {
        match d {
            Dispatch::Complete(c) => (c.result(), c.error_class()),
            other => panic!("expected a completion, got {other:?}"),
        }
    }

    #[test]
    fn invalid_and_unresolvable_entries_complete_with_errors() {
        let (reg, objects, h, o) = setup();
        let uploads = Arc::default();
        let c = ctx(&reg, &objects, &uploads);
        let bytes = {
            let mut b = Nop::new().user_data(5).build().to_bytes();
            b[0] = 200;
            b
        };
        assert_eq!(
            error_of(dispatch(&Sqe::from_bytes(&bytes), Q, &c)),
            (-95, Some(ErrorClass::Invalid))
        );
        let oob = RangeGet::new(o, 0, BufSlice::new(h, 4000, 97)).build();
        assert_eq!(
            error_of(dispatch(&oob, Q, &c)),
            (-14, Some(ErrorClass::Local))
        );
        let bad_buf = RangeGet::new(o, 0, BufSlice::new(BufHandle(77), 0, 1)).build();
        assert_eq!(
            error_of(dispatch(&bad_buf, Q, &c)),
            (-9, Some(ErrorClass::Local))
        );
        let bad_obj = Head::new(ObjectId(9)).build();
        assert_eq!(
            error_of(dispatch(&bad_obj, Q, &c)),
            (-9, Some(ErrorClass::Local))
        );
        assert!(matches!(dispatch(&Nop::new().build(), Q, &c), Dispatch::Complete(c) if c.is_ok()));
        assert!(matches!(
            dispatch(&Cancel::new(3).user_data(4).build(), Q, &c),
            Dispatch::Cancel {
                user_data: 4,
                target: 3
            }
        ));
    }

    #[test]
    fn overlapping_writes_are_busy_and_leases_follow_the_op() {
        let (reg, objects, h, o) = setup();
        let uploads = Arc::default();
        let c = ctx(&reg, &objects, &uploads);
        let first = dispatch(
            &RangeGet::new(o, 0, BufSlice::new(h, 0, 100)).build(),
            Q,
            &c,
        );
        let Dispatch::Start(op) = first else {
            panic!("should start")
        };
        assert_eq!(op.buf_len(), 100);
        let clash = dispatch(&Put::new(o, BufSlice::new(h, 50, 10)).build(), Q, &c);
        assert_eq!(error_of(clash), (-16, Some(ErrorClass::Local)));
        drop(op);
        assert!(matches!(
            dispatch(&Put::new(o, BufSlice::new(h, 50, 10)).build(), Q, &c),
            Dispatch::Start(_)
        ));
    }

    #[test]
    fn multipart_entries_resolve_their_handles() {
        use ring_api::opcode::{AbortMultipart, CompleteMultipart, CreateMultipart, UploadPart};
        use ring_api::{PartNumber, UploadHandle};
        let (reg, objects, h, o) = setup();
        let uploads = Arc::default();
        let c = ctx(&reg, &objects, &uploads);
        let p = |n| PartNumber::new(n).unwrap();
        let Dispatch::Start(create) = dispatch(&CreateMultipart::new(o).build(), Q, &c) else {
            panic!("create should start")
        };
        assert_eq!(create.multipart, Some(MultipartOp::Create));
        assert!(
            create.may_retry,
            "a Create that met a transient failure is repeated (worst case: an orphan upload)"
        );
        let unknown = UploadPart::new(o, UploadHandle(5), p(1), BufSlice::new(h, 0, 10)).build();
        assert_eq!(
            error_of(dispatch(&unknown, Q, &c)),
            (-9, Some(ErrorClass::Local))
        );
        let name = objects.resolve(o).unwrap();
        let up = uploads.open(name, "id").unwrap();
        let Dispatch::Start(part) = dispatch(
            &UploadPart::new(o, up, p(2), BufSlice::new(h, 0, 10)).build(),
            Q,
            &c,
        ) else {
            panic!("part should start")
        };
        assert!(part.kind == OpKind::Put && part.may_retry && !part.head_only());
        assert_eq!(part.part_target().map(|(_, n)| n), Some(2));
        assert_eq!(part.buf_len(), 10);
        uploads.record_part(up, 2, "\"e\"").unwrap();
        // Part 1 was never uploaded.
        assert_eq!(
            error_of(dispatch(
                &CompleteMultipart::new(o, up, p(2)).build(),
                Q,
                &c
            )),
            (-22, Some(ErrorClass::Local))
        );
        let other = objects.intern("b", "other").unwrap();
        assert_eq!(
            error_of(dispatch(&AbortMultipart::new(other, up).build(), Q, &c)),
            (-22, Some(ErrorClass::Local))
        );
        assert!(matches!(
            dispatch(&AbortMultipart::new(o, up).build(), Q, &c),
            Dispatch::Start(InFlight {
                multipart: Some(MultipartOp::Abort { .. }),
                ..
            })
        ));
    }

    #[test]
    fn deadlines_resolve_against_both_clocks() {
        let (reg, objects, _, o) = setup();
        let uploads = Arc::default();
        let c = ctx(&reg, &objects, &uploads);
        let Dispatch::Start(rel) = dispatch(&Head::new(o).deadline_ns(5_000_000).build(), Q, &c)
        else {
            panic!()
        };
        assert_eq!(rel.deadline, Some(c.now + Duration::from_millis(5)));
        let Dispatch::Start(abs) =
            dispatch(&Head::new(o).deadline_at_ns(1_000 + 7_000).build(), Q, &c)
        else {
            panic!()
        };
        assert_eq!(abs.deadline, Some(c.now + Duration::from_micros(7)));
        let Dispatch::Start(past) = dispatch(&Head::new(o).deadline_at_ns(1).build(), Q, &c) else {
            panic!()
        };
        assert_eq!(
            past.deadline,
            Some(c.now),
            "a deadline in the past expires at once"
        );
    }
}
