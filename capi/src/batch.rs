//! The batch extension: `hipObjQueue*` over one engine ring pair.
//!
//! An entry the library can reject without the engine (unknown handle, unregistered buffer,
//! unsupported kind) still gets a completion, generated locally and reaped before the ring's,
//! so every accepted entry completes exactly once. Submission stops early — `submitted < n`,
//! not an error — when the submission ring is full or too many local completions wait to be
//! reaped; the caller reaps and submits the rest.

use std::collections::VecDeque;
use std::time::Duration;

use engine::Queue;
use ring_api::opcode::{
    AbortMultipart, CompleteMultipart, CreateMultipart, Get, Put, RangeGet, UploadPart,
};
use ring_api::{BufSlice, Cqe, DataPath, ErrorClass, PartNumber, Sqe, UploadHandle, cqe_flags};

use crate::error::{Fail, OpError, completion_error};
use crate::state::Library;
use crate::types::{
    COMPLETION_DIALECT_SHIFT, COMPLETION_HTTP, COMPLETION_PATH_SHIFT, COMPLETION_RDMA,
    COMPLETION_RETRIED, COMPLETION_VERIFIED, HipObjCompletion, OP_ABORT_MULTIPART,
    OP_COMPLETE_MULTIPART, OP_CREATE_MULTIPART, OP_GET, OP_PUT, OP_RANGE_GET, OP_UPLOAD_PART,
    OPF_ALL, OPF_NO_RETRY, PATH_HTTP, PATH_NONE, PATH_RDMA_SOFT, PATH_RDMA_VERBS,
};

/// A `hipObjOp_t` as read from C memory (plain values; the pointers are not dereferenced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpRequest {
    /// `HIPOBJ_OP_*`.
    pub kind: u32,
    /// `HIPOBJ_OPF_*`.
    pub flags: u32,
    /// Object handle id.
    pub handle: u64,
    /// Buffer address.
    pub buf: usize,
    /// Byte count.
    pub size: u64,
    /// Object offset.
    pub offset: u64,
    /// Caller tag.
    pub user_data: u64,
    /// Relative deadline (ns), 0 = default.
    pub deadline_ns: u64,
    /// Upload id (UPLOAD_PART).
    pub upload_id: u64,
    /// Part number (UPLOAD_PART).
    pub part_number: u32,
    /// Must be 0.
    pub reserved: u32,
}

/// One batch queue.
#[derive(Debug)]
pub struct Batch {
    q: Queue,
    local: VecDeque<HipObjCompletion>,
    local_cap: usize,
}

impl Batch {
    /// Wraps an engine queue.
    pub fn new(q: Queue) -> Self {
        let local_cap = q.cq_capacity().max(1);
        Batch {
            q,
            local: VecDeque::new(),
            local_cap,
        }
    }

    /// Submits a prefix of `ops`; returns how many were accepted.
    pub fn submit(&mut self, lib: &Library, ops: &[OpRequest]) -> usize {
        let mut sq = self.q.submission();
        let mut n = 0;
        for op in ops {
            match entry(lib, op) {
                Ok(sqe) => {
                    if sq.push(&sqe).is_err() {
                        break;
                    }
                }
                Err(fail) => {
                    if self.local.len() >= self.local_cap {
                        break;
                    }
                    self.local.push_back(local_completion(op.user_data, &fail));
                }
            }
            n += 1;
        }
        n
    }

    /// Reaps up to `max` completions, waiting up to `timeout` (`None`: forever) for the first
    /// when none is ready.
    pub fn reap(&mut self, max: usize, timeout: Option<Duration>) -> Vec<HipObjCompletion> {
        let mut out = Vec::with_capacity(max.min(self.local_cap.saturating_mul(2)));
        self.drain(max, &mut out);
        if out.is_empty() && max > 0 && timeout != Some(Duration::ZERO) {
            self.q.wait(1, timeout);
            self.drain(max, &mut out);
        }
        out
    }

    fn drain(&mut self, max: usize, out: &mut Vec<HipObjCompletion>) {
        while out.len() < max {
            match self.local.pop_front() {
                Some(c) => out.push(c),
                None => break,
            }
        }
        let mut cq = self.q.completion();
        while out.len() < max {
            match cq.next() {
                Some(c) => out.push(convert(&c)),
                None => break,
            }
        }
    }
}

/// Builds the submission entry for `op`, or the failure its local completion reports.
pub fn entry(lib: &Library, op: &OpRequest) -> Result<Sqe, Fail> {
    if op.reserved != 0 {
        return Err(Fail::new(
            OpError::InvalidValue,
            "hipObjOp_t.reserved must be 0",
        ));
    }
    if op.flags & !OPF_ALL != 0 {
        return Err(Fail::new(
            OpError::InvalidValue,
            format!("unknown hipObjOp_t.flags bits {:#x}", op.flags & !OPF_ALL),
        ));
    }
    let obj = lib.object(op.handle)?;
    let slice = |size: u64| -> Result<BufSlice, Fail> {
        let at = lib
            .regs
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .locate(op.buf, size)?;
        Ok(BufSlice::new(at.handle, at.offset, size))
    };
    let nonzero = |what: &str| -> Result<(), Fail> {
        if op.size == 0 {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("{what} of 0 bytes"),
            ));
        }
        Ok(())
    };
    let whole = |what: &str| -> Result<(), Fail> {
        if op.offset != 0 {
            return Err(Fail::new(
                OpError::OpNotSupported,
                format!(
                    "{what} at object offset {}: S3 {what} covers the whole object (use \
                     RANGE_GET for reads, and a multipart upload to write an object in parts)",
                    op.offset
                ),
            ));
        }
        Ok(())
    };
    let (deadline, no_retry) = (op.deadline_ns, op.flags & OPF_NO_RETRY != 0);
    macro_rules! finish {
        ($b:expr) => {{
            let b = $b.user_data(op.user_data).deadline_ns(deadline);
            Ok(if no_retry { b.no_retry() } else { b }.build())
        }};
    }
    match op.kind {
        OP_GET => {
            whole("GET")?;
            nonzero("GET into a buffer")?;
            finish!(Get::new(obj.id, slice(op.size)?))
        }
        OP_RANGE_GET => {
            nonzero("RANGE_GET")?;
            if op.offset.checked_add(op.size).is_none() {
                return Err(Fail::new(OpError::InvalidValue, "offset + size overflows"));
            }
            finish!(RangeGet::new(obj.id, op.offset, slice(op.size)?))
        }
        OP_PUT => {
            whole("PUT")?;
            finish!(Put::new(obj.id, slice(op.size)?))
        }
        OP_CREATE_MULTIPART => finish!(CreateMultipart::new(obj.id)),
        OP_UPLOAD_PART => {
            if op.offset != 0 {
                return Err(Fail::new(
                    OpError::InvalidValue,
                    format!(
                        "UPLOAD_PART at object offset {}: a part's place in the object is its \
                         partNumber; offset must be 0",
                        op.offset
                    ),
                ));
            }
            let part = part_number(op.part_number, "UPLOAD_PART: partNumber")?;
            finish!(UploadPart::new(obj.id, upload(op)?, part, slice(op.size)?))
        }
        OP_COMPLETE_MULTIPART => {
            let parts = part_number(op.part_number, "COMPLETE_MULTIPART: partNumber (the parts)")?;
            finish!(CompleteMultipart::new(obj.id, upload(op)?, parts))
        }
        OP_ABORT_MULTIPART => finish!(AbortMultipart::new(obj.id, upload(op)?)),
        k => Err(Fail::new(
            OpError::InvalidValue,
            format!("unknown hipObjOp_t.kind {k}"),
        )),
    }
}

/// The multipart upload an entry names (`uploadId`, from a CREATE_MULTIPART completion).
fn upload(op: &OpRequest) -> Result<UploadHandle, Fail> {
    u32::try_from(op.upload_id).map(UploadHandle).map_err(|_| {
        Fail::new(
            OpError::InvalidValue,
            format!(
                "uploadId {} is no upload id (ids come from a CREATE_MULTIPART completion's aux)",
                op.upload_id
            ),
        )
    })
}

/// A part number (or count) in `1..=10000`.
fn part_number(n: u32, what: &str) -> Result<PartNumber, Fail> {
    PartNumber::new(n).ok_or_else(|| {
        Fail::new(
            OpError::InvalidValue,
            format!("{what} {n} is outside 1..=10000"),
        )
    })
}

/// The completion of an entry rejected before reaching the engine.
pub fn local_completion(user_data: u64, fail: &Fail) -> HipObjCompletion {
    let (errnum, class) = match fail.op {
        OpError::BufNotRegistered => (libc_errno::EFAULT, ErrorClass::Local),
        OpError::SizeTooLarge => (libc_errno::EFBIG, ErrorClass::Local),
        OpError::OpNotSupported => (libc_errno::EOPNOTSUPP, ErrorClass::Invalid),
        _ => (libc_errno::EINVAL, ErrorClass::Invalid),
    };
    HipObjCompletion {
        user_data,
        bytes: 0,
        op_error: fail.op as i32,
        errnum,
        error_class: class as u32,
        flags: 0,
        aux: 0,
    }
}

/// Linux errno values used in local completions (the engine's `ErrorCode`s are the same
/// numbers).
mod libc_errno {
    pub const EFAULT: i32 = 14;
    pub const EINVAL: i32 = 22;
    pub const EFBIG: i32 = 27;
    pub const EOPNOTSUPP: i32 = 95;
}

/// An engine completion in C form.
pub fn convert(c: &Cqe) -> HipObjCompletion {
    let mut flags = 0;
    if c.retried() {
        flags |= COMPLETION_RETRIED;
    }
    if c.is_ok() && c.verified() {
        flags |= COMPLETION_VERIFIED;
    }
    let path = match c.path() {
        Some(DataPath::Http) => {
            flags |= COMPLETION_HTTP;
            PATH_HTTP
        }
        Some(DataPath::RdmaSoft) => {
            flags |= COMPLETION_RDMA;
            PATH_RDMA_SOFT
        }
        Some(DataPath::RdmaVerbs) => {
            flags |= COMPLETION_RDMA;
            PATH_RDMA_VERBS
        }
        _ => PATH_NONE,
    };
    flags |= path << COMPLETION_PATH_SHIFT;
    if let Some(d) = c.dialect() {
        flags |= (d as u32) << COMPLETION_DIALECT_SHIFT;
    }
    HipObjCompletion {
        user_data: c.user_data(),
        bytes: c.bytes(),
        op_error: completion_error(c) as i32,
        errnum: if c.is_ok() {
            0
        } else {
            c.result().checked_neg().unwrap_or(i32::MAX)
        },
        error_class: (c.flags() & cqe_flags::CLASS_MASK) >> cqe_flags::CLASS_SHIFT,
        flags,
        aux: c.aux(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring_api::ErrorCode;

    #[test]
    fn engine_completions_convert() {
        let ok = Cqe::success(7, 4096, DataPath::Http)
            .with_retried()
            .with_aux(10_000);
        assert_eq!(
            convert(&ok),
            HipObjCompletion {
                user_data: 7,
                bytes: 4096,
                op_error: 0,
                errnum: 0,
                error_class: 0,
                flags: COMPLETION_RETRIED | COMPLETION_HTTP | (PATH_HTTP << COMPLETION_PATH_SHIFT),
                aux: 10_000,
            }
        );
        let v2 = Cqe::success(8, 64, DataPath::RdmaVerbs).with_dialect(ring_api::WireDialect::RcV2);
        assert_eq!(
            convert(&v2).flags,
            COMPLETION_RDMA
                | (PATH_RDMA_VERBS << COMPLETION_PATH_SHIFT)
                | (3 << COMPLETION_DIALECT_SHIFT)
        );
        let proven = Cqe::success(8, 64, DataPath::Http).with_verified();
        assert_eq!(
            convert(&proven).flags,
            COMPLETION_VERIFIED | COMPLETION_HTTP | (PATH_HTTP << COMPLETION_PATH_SHIFT)
        );
        let e = convert(&Cqe::error(9, ErrorCode::AccessDenied, ErrorClass::Client));
        assert_eq!(
            (e.user_data, e.op_error, e.errnum, e.error_class),
            (9, OpError::S3Error as i32, 13, ErrorClass::Client as u32)
        );
    }

    #[test]
    fn local_completions_carry_errno_and_class() {
        let c = local_completion(3, &Fail::new(OpError::OpNotSupported, "x"));
        assert_eq!((c.user_data, c.errnum, c.op_error), (3, 95, 14));
        let c = local_completion(4, &Fail::new(OpError::BufNotRegistered, "x"));
        assert_eq!((c.errnum, c.error_class), (14, ErrorClass::Local as u32));
    }
}
