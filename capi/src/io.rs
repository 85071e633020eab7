//! The synchronous `hipObjGet` / `hipObjPut`: one entry on a pooled queue, wait, map the
//! completion; on an S3 client error, name the server's error code (see [`crate::diag`]).
//! Device memory needs nothing here: the engine stages it and posts a GET's completion only
//! after the bytes are in VRAM.

use ring_api::opcode::{Put, RangeGet};
use ring_api::{BufSlice, Cqe, ErrorClass};

use crate::diag;
use crate::error::{CResult, Fail, OpError, completion_error, describe_completion};
use crate::state::{Library, Object};
use crate::types::HipObjCompletion;

/// Which synchronous call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `hipObjGet`.
    Get,
    /// `hipObjPut`.
    Put,
}

/// Runs `hipObjGet(handle, buf, size, offset)` or `hipObjPut(...)` with plain values.
pub fn transfer(
    lib: &Library,
    dir: Dir,
    handle: u64,
    buf: usize,
    size: u64,
    offset: i64,
) -> CResult<u64> {
    crate::stats::clear_last_op();
    let obj = lib.object(handle)?;
    let offset = u64::try_from(offset).map_err(|_| {
        Fail::new(
            OpError::InvalidValue,
            format!("negative object offset {offset}"),
        )
    })?;
    let at = lib
        .regs
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .locate(buf, size)?;
    let slice = BufSlice::new(at.handle, at.offset, size);
    let sqe = match dir {
        Dir::Get => {
            if size == 0 {
                return Err(Fail::new(OpError::InvalidValue, "hipObjGet of 0 bytes"));
            }
            if offset.checked_add(size).is_none() {
                return Err(Fail::new(OpError::InvalidValue, "offset + size overflows"));
            }
            RangeGet::new(obj.id, offset, slice).build()
        }
        Dir::Put => {
            if offset != 0 {
                return Err(Fail::new(
                    OpError::OpNotSupported,
                    format!(
                        "hipObjPut at object offset {offset}: an S3 PUT writes the whole object; \
                         to write one in pieces, use a multipart upload in a batch queue \
                         (HIPOBJ_OP_CREATE_MULTIPART, UPLOAD_PART, COMPLETE_MULTIPART)"
                    ),
                ));
            }
            Put::new(obj.id, slice).build()
        }
    };
    let cqe = lib.run_one(&sqe)?;
    let seen = crate::batch::convert(&cqe);
    lib.stats.record(&seen);
    crate::stats::set_last_op(&seen);
    if cqe.is_ok() {
        if cqe.bytes() != size {
            return Err(Fail::new(
                OpError::IntegrityError,
                format!("moved {} bytes where {size} were asked", cqe.bytes()),
            ));
        }
        let verify = lib.settings.flags & crate::types::CONFIG_VERIFY != 0;
        crate::proof::judge(dir, &obj.bucket, &obj.key, cqe.verified(), verify)?;
        return Ok(cqe.bytes());
    }
    Err(failure(lib, dir, &obj, &cqe, &seen))
}

fn failure(lib: &Library, dir: Dir, obj: &Object, cqe: &Cqe, seen: &HipObjCompletion) -> Fail {
    let op = completion_error(cqe);
    let verb = match dir {
        Dir::Get => "GET",
        Dir::Put => "PUT",
    };
    let mut msg = format!(
        "{verb} s3://{}/{}: {}",
        obj.bucket,
        obj.key,
        describe_completion(cqe)
    );
    msg.push_str("; ");
    msg.push_str(&lib.stats.describe_path(
        seen,
        crate::state::requested_dialect_name(lib.settings.dialect),
    ));
    if let Some(problem) = lib.engine.tls_failure()
        && cqe.error_class() == Some(ErrorClass::Transport)
    {
        msg.push_str("; TLS: ");
        msg.push_str(&problem.to_string());
    }
    if cqe.error_class() == Some(ErrorClass::Client) {
        let probe = diag::probe(
            lib.engine.endpoint(),
            &lib.signer,
            lib.ca_bundle.as_deref(),
            &obj.bucket,
            &obj.key,
        );
        match probe {
            Ok(p) => {
                msg.push_str("; ");
                msg.push_str(&p.describe());
            }
            Err(e) => {
                msg.push_str("; the diagnostic probe failed: ");
                msg.push_str(&e);
            }
        }
    }
    Fail::new(op, msg)
}
