//! The data phases of hipobj-rc-v2 READY (see the parent module): GET pushes the object range
//! through the session's staging region to the client with RDMA WRITEs (the last one carrying
//! the cookie as immediate); PUT takes the client's WRITE_WITH_IMM out of staging into the
//! normal PUT pipeline.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use engine::rc::{RcMr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};
use s3_lite::checksum::Crc64Nvme;
use s3_lite::s3::ByteRange;
use s3_lite::sigv4::PayloadHash;

use super::{RcV2, Session, bad};
use crate::backend::{Backend, GetRequest, ObjectInfo, ObjectSink, PutMeta};
use crate::body::{BodySource, ReceiveOptions};
use crate::error::ApiError;

impl RcV2 {
    /// GET data phase: object range → staging → client, last piece with the cookie as IMM.
    pub(super) fn ready_get(
        &self,
        backend: &dyn Backend,
        s: &Session,
        remote: RemoteAddr,
    ) -> Result<(u64, u64, String), ApiError> {
        let last = s.offset + s.size - 1;
        let req = GetRequest {
            range: Some(ByteRange::Inclusive(s.offset, last)),
            if_match: None,
            head_only: false,
        };
        let staging = s.staging()?;
        let mut sink = Staging {
            mr: staging,
            pos: 0,
            crc: Crc64Nvme::new(),
            etag: String::new(),
        };
        backend.get_object(&s.bucket, &s.key, &req, &mut sink)?;
        let n = sink.pos;
        if n == 0 {
            return Err(ApiError::new(416, "InvalidRange", "Nothing to transfer."));
        }
        const PIECE: u64 = 1 << 20;
        let mut off = 0u64;
        let mut posted = 0u64;
        while off < n {
            let len = PIECE.min(n - off);
            let dst = RemoteAddr {
                addr: remote
                    .addr
                    .checked_add(off)
                    .ok_or_else(|| bad(format!("{} overflows", s3_lite::rdma::RDMA_MR_ADDR)))?,
                rkey: remote.rkey,
            };
            let op = if off + len == n {
                SendOp::WriteWithImm(dst, s.cookie)
            } else {
                SendOp::Write(dst)
            };
            let sge = Sge {
                addr: staging.addr() + off,
                length: len as u32,
                lkey: staging.lkey(),
            };
            s.qp.post_send(&SendWr::new(posted + 1, op, sge))
                .map_err(|e| ApiError::internal(format!("RDMA post: {e}")))?;
            posted += 1;
            off += len;
        }
        self.wait(s, posted, |_| true)?;
        Ok((n, sink.crc.finish(), sink.etag))
    }

    /// PUT data phase: the client's WRITE_WITH_IMM into staging, then the normal PUT path.
    pub(super) fn ready_put(
        &self,
        backend: &dyn Backend,
        s: &Session,
    ) -> Result<(u64, u64, String), ApiError> {
        let mut wc = None;
        self.wait(s, 1, |c| {
            wc = Some(*c);
            true
        })?;
        let c = wc.ok_or_else(|| ApiError::internal("no completion"))?;
        if c.opcode != WcOpcode::RecvRdmaWithImm
            || c.imm_data != Some(s.cookie)
            || u64::from(c.byte_len) != s.size
        {
            return Err(ApiError::new(
                500,
                "RdmaTransferFailed",
                "The client's write did not carry the session cookie and the full size.",
            ));
        }
        let mut bytes = vec![0u8; usize::try_from(s.size).map_err(ApiError::internal)?];
        s.staging()?
            .read(0, &mut bytes)
            .map_err(ApiError::internal)?;
        let mut src = Once(Some(bytes.as_slice()));
        let opts = ReceiveOptions {
            aws_chunked: false,
            decoded_len: Some(s.size),
            max_len: s.size,
        };
        let spooled = crate::body::receive(&mut src, backend.spool_dir(), opts)?;
        crate::body::verify(&spooled, &[], &PayloadHash::Unsigned)?;
        let crc = spooled.crc64nvme;
        let info: ObjectInfo = match &s.part {
            Some((upload_id, n)) => {
                backend.upload_part(&s.bucket, &s.key, upload_id, *n, spooled)?
            }
            None => backend.put_object(&s.bucket, &s.key, spooled, &PutMeta::default())?,
        };
        Ok((s.size, crc, info.etag))
    }

    /// Waits for `count` completions of the session, all successful; stops (within one 100 ms
    /// turn) when the owner cancels the session.
    fn wait(
        &self,
        s: &Session,
        count: u64,
        mut each: impl FnMut(&WorkCompletion) -> bool,
    ) -> Result<(), ApiError> {
        let end = Instant::now() + self.limits.transfer;
        let mut seen = 0u64;
        let mut wcs = [WorkCompletion::default(); 16];
        while seen < count {
            if s.cancelled.load(Ordering::Acquire) {
                s.qp.modify_to_err();
                return Err(ApiError::new(
                    409,
                    "RdmaSessionCancelled",
                    "The session was cancelled during its transfer.",
                ));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                s.qp.modify_to_err();
                return Err(ApiError::new(
                    408,
                    "RequestTimeout",
                    "The RDMA transfer did not complete in time.",
                ));
            }
            let k =
                s.cq.poll_wait(&mut wcs, left.min(Duration::from_millis(100)))
                    .map_err(ApiError::internal)?;
            for c in wcs.iter().take(k) {
                seen += 1;
                if c.status != WcStatus::Success || !each(c) {
                    s.qp.modify_to_err();
                    return Err(ApiError::new(
                        500,
                        "RdmaTransferFailed",
                        format!("RDMA transfer failed: {:?}", c.status),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The GET sink: the object's bytes into the session's staging region.
struct Staging<'a> {
    mr: &'a RcMr,
    pos: u64,
    crc: Crc64Nvme,
    etag: String,
}

impl ObjectSink for Staging<'_> {
    fn begin(&mut self, info: &ObjectInfo, _span: Option<(u64, u64)>) -> std::io::Result<()> {
        self.etag = info.etag.clone();
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.mr
            .write(self.pos, bytes)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        self.crc.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }
}

/// A body of one in-memory piece.
struct Once<'a>(Option<&'a [u8]>);

impl BodySource for Once<'_> {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        Ok(self.0.take())
    }
}
