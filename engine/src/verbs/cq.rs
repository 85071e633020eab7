//! Completion queues (`ibv_cq`) and work completions, shaped like the soft fabric's
//! (`poll(&mut [WorkCompletion])`, `WcStatus`, `WcOpcode`, `imm_data: Option<u32>` in host
//! order). Verbs adds the statuses the soft fabric never produces and the vendor error.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::Context;
use super::error::Error;
use super::result;
use super::sys;

/// Completion status (`enum ibv_wc_status`); the first ten carry the soft fabric's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    #[default]
    Success,
    /// `IBV_WC_LOC_LEN_ERR`.
    LocalLengthError,
    /// `IBV_WC_LOC_PROT_ERR`: lkey, bounds or access of the SGE.
    LocalProtectionError,
    /// `IBV_WC_WR_FLUSH_ERR`: the QP entered the error state first.
    WrFlushError,
    /// `IBV_WC_REM_ACCESS_ERR`: the peer refused rkey, bounds or access.
    RemoteAccessError,
    /// `IBV_WC_REM_INV_REQ_ERR`.
    RemoteInvalidRequest,
    /// `IBV_WC_REM_OP_ERR`.
    RemoteOperationError,
    /// `IBV_WC_RETRY_EXC_ERR`: no ACK within timeout × retry_cnt (peer QP not in RTR, path).
    RetryExceeded,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the peer had no RECV posted.
    RnrRetryExceeded,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadResponse,
    /// `IBV_WC_LOC_QP_OP_ERR`.
    LocalQpOperationError,
    /// `IBV_WC_LOC_ACCESS_ERR`.
    LocalAccessError,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemoteInvalidReadRequest,
    /// `IBV_WC_FATAL_ERR`.
    Fatal,
    /// `IBV_WC_GENERAL_ERR`.
    General,
    /// Any other value (MW, EEC, tag matching).
    Other(u32),
}

impl WcStatus {
    /// From the C value.
    #[must_use]
    pub const fn from_raw(v: u32) -> Self {
        match v {
            0 => Self::Success,
            1 => Self::LocalLengthError,
            2 => Self::LocalQpOperationError,
            4 => Self::LocalProtectionError,
            5 => Self::WrFlushError,
            7 => Self::BadResponse,
            8 => Self::LocalAccessError,
            9 => Self::RemoteInvalidRequest,
            10 => Self::RemoteAccessError,
            11 => Self::RemoteOperationError,
            12 => Self::RetryExceeded,
            13 => Self::RnrRetryExceeded,
            15 => Self::RemoteInvalidReadRequest,
            19 => Self::Fatal,
            21 => Self::General,
            other => Self::Other(other),
        }
    }
}

/// What a completion reports (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WcOpcode {
    /// `IBV_WC_RDMA_WRITE` (with or without immediate).
    #[default]
    RdmaWrite,
    /// `IBV_WC_RDMA_READ`.
    RdmaRead,
    /// `IBV_WC_SEND`.
    Send,
    /// `IBV_WC_RECV`: a RECV consumed by a SEND.
    Recv,
    /// `IBV_WC_RECV_RDMA_WITH_IMM`: a RECV consumed by a WRITE_WITH_IMM.
    RecvRdmaWithImm,
    /// Anything else (atomics, MW bind, TSO...).
    Other(u32),
}

impl WcOpcode {
    /// From the C value.
    #[must_use]
    pub const fn from_raw(v: u32) -> Self {
        match v {
            sys::IBV_WC_SEND => Self::Send,
            sys::IBV_WC_RDMA_WRITE => Self::RdmaWrite,
            sys::IBV_WC_RDMA_READ => Self::RdmaRead,
            sys::IBV_WC_RECV => Self::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => Self::RecvRdmaWithImm,
            other => Self::Other(other),
        }
    }
}

/// One completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Kind. Only meaningful on success for send-side completions (verbs leaves it undefined
    /// on error).
    pub opcode: WcOpcode,
    /// Bytes (receives: the message length).
    pub byte_len: u32,
    /// Immediate data in host order, when `IBV_WC_WITH_IMM` is set.
    pub imm_data: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// Vendor-specific error detail.
    pub vendor_err: u32,
}

impl WorkCompletion {
    /// From the C struct.
    #[must_use]
    pub fn from_raw(wc: &sys::ibv_wc) -> Self {
        Self {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            imm_data: (wc.wc_flags & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
        }
    }

    /// Whether the work request succeeded.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.status == WcStatus::Success
    }
}

/// A completion queue (`ibv_cq`), shared by `Arc` between the QPs that report to it.
#[derive(Debug)]
pub struct CompletionQueue {
    ctx: Arc<Context>,
    /// INVARIANT: live until `Drop`; QPs hold an `Arc<CompletionQueue>`, so none outlives it.
    cq: NonNull<sys::ibv_cq>,
    cqe: u32,
}

// SAFETY: `ibv_poll_cq` is thread-safe in libibverbs providers (they lock the CQ).
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    pub(crate) fn new(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Self>, Error> {
        let n = i32::try_from(cqe.max(1)).map_err(|_| Error::InvalidArgument("cqe"))?;
        // SAFETY: the context is open while `ctx` lives.
        let cq = unsafe { result::create_cq(ctx.api(), ctx.raw(), n) }
            .map_err(|source| Error::CreateCq { cqe, source })?;
        Ok(Arc::new(Self {
            ctx: Arc::clone(ctx),
            cq,
            cqe,
        }))
    }

    pub(crate) fn raw(&self) -> NonNull<sys::ibv_cq> {
        self.cq
    }

    /// Entries asked for at creation (the provider may round up).
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.cqe
    }

    /// Moves up to `out.len()` completions into `out`, oldest first; returns how many. Never
    /// blocks (`ibv_poll_cq`).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, Error> {
        const CHUNK: usize = 16;
        let mut raw = [sys::ibv_wc::default(); CHUNK];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(CHUNK);
            let Some(buf) = raw.get_mut(..want) else {
                break;
            };
            // SAFETY: the CQ is live (INVARIANT).
            let n = unsafe { result::poll_cq(self.cq, buf) }.map_err(Error::PollCq)?;
            for (dst, src) in out.iter_mut().skip(done).zip(raw.iter().take(n)) {
                *dst = WorkCompletion::from_raw(src);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// Polls until at least one completion arrives or `timeout` passes (busy-polls with a
    /// yield: the data path of an emulated or idle device; the engine's workers poll from
    /// their own loop instead).
    pub fn poll_wait(&self, out: &mut [WorkCompletion], timeout: Duration) -> Result<usize, Error> {
        let end = Instant::now() + timeout;
        loop {
            let n = self.poll(out)?;
            if n > 0 || Instant::now() >= end {
                return Ok(n);
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: no QP uses the CQ any more (they hold Arcs to it).
        let _ = unsafe { result::destroy_cq(self.ctx.api(), self.cq) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_decoding_byte_order_and_flags() {
        let mut wc = sys::ibv_wc {
            wr_id: 7,
            status: 0,
            opcode: sys::IBV_WC_RECV_RDMA_WITH_IMM,
            byte_len: 65536,
            imm_data: 0x1234_5678u32.to_be(),
            qp_num: 0x11,
            wc_flags: sys::IBV_WC_WITH_IMM,
            ..Default::default()
        };
        let c = WorkCompletion::from_raw(&wc);
        assert_eq!(c.imm_data, Some(0x1234_5678));
        assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
        assert!(c.is_ok());
        wc.wc_flags = 0;
        wc.status = 12;
        let c = WorkCompletion::from_raw(&wc);
        assert_eq!((c.imm_data, c.status), (None, WcStatus::RetryExceeded));
        assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushError);
        assert_eq!(WcStatus::from_raw(10), WcStatus::RemoteAccessError);
        assert_eq!(WcStatus::from_raw(22), WcStatus::Other(22));
        assert_eq!(WcOpcode::from_raw(2), WcOpcode::RdmaRead);
    }
}
