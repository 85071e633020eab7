//! Completion queues (`ibv_cq`); completions come out in the RC vocabulary
//! ([`crate::fabric::rc::wr`]: `WorkCompletion`, `WcStatus`, `WcOpcode`, `imm_data` in host
//! order), converted from the C values here.
#![allow(unsafe_code)]

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::context::Context;
use super::error::Error;
use super::result;
use super::sys;
use crate::fabric::rc::wr::{WcOpcode, WcStatus, WorkCompletion};

/// The neutral status of a C `enum ibv_wc_status` value.
#[must_use]
pub const fn status_from_raw(v: u32) -> WcStatus {
    match v {
        0 => WcStatus::Success,
        1 => WcStatus::LocalLengthError,
        2 => WcStatus::LocalQpOperationError,
        4 => WcStatus::LocalProtectionError,
        5 => WcStatus::WrFlushError,
        7 => WcStatus::BadResponse,
        8 => WcStatus::LocalAccessError,
        9 => WcStatus::RemoteInvalidRequest,
        10 => WcStatus::RemoteAccessError,
        11 => WcStatus::RemoteOperationError,
        12 => WcStatus::RetryExceeded,
        13 => WcStatus::RnrRetryExceeded,
        15 => WcStatus::RemoteInvalidReadRequest,
        19 => WcStatus::Fatal,
        21 => WcStatus::General,
        other => WcStatus::Other(other),
    }
}

/// The neutral opcode of a C `enum ibv_wc_opcode` value.
#[must_use]
pub const fn opcode_from_raw(v: u32) -> WcOpcode {
    match v {
        sys::IBV_WC_SEND => WcOpcode::Send,
        sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        sys::IBV_WC_RECV => WcOpcode::Recv,
        sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
        other => WcOpcode::Other(other),
    }
}

/// A completion from the C struct.
#[must_use]
pub fn completion_from_raw(wc: &sys::ibv_wc) -> WorkCompletion {
    WorkCompletion {
        wr_id: wc.wr_id,
        status: status_from_raw(wc.status),
        opcode: opcode_from_raw(wc.opcode),
        byte_len: wc.byte_len,
        imm_data: (wc.wc_flags & sys::IBV_WC_WITH_IMM != 0).then(|| u32::from_be(wc.imm_data)),
        qp_num: wc.qp_num,
        vendor_err: wc.vendor_err,
    }
}

/// A completion queue (`ibv_cq`), shared by `Arc` between the QPs that report to it.
///
/// Each has its own completion channel when the provider gives one: [`Self::event_fd`] turns
/// readable after [`Self::arm`] once a completion arrives, so a worker can wait for it in its
/// `mio` poll instead of polling on a timer ([`Self::take_events`] then clears the fd).
#[derive(Debug)]
pub struct CompletionQueue {
    ctx: Arc<Context>,
    /// INVARIANT: live until `Drop`; QPs hold an `Arc<CompletionQueue>`, so none outlives it.
    cq: NonNull<sys::ibv_cq>,
    /// INVARIANT: `None`, or the live channel `cq` reports to, destroyed after `cq`; its fd is
    /// non-blocking.
    channel: Option<NonNull<sys::ibv_comp_channel>>,
    cqe: u32,
}

// SAFETY: `ibv_poll_cq` is thread-safe in libibverbs providers (they lock the CQ), as are
// `ibv_req_notify_cq`, `ibv_get_cq_event` and `ibv_ack_cq_events` (the channel's fd and the
// CQ's event counters are the provider's and libibverbs' to lock).
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    pub(crate) fn new(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Self>, Error> {
        let n = i32::try_from(cqe.max(1)).map_err(|_| Error::InvalidArgument("cqe"))?;
        let channel = Self::open_channel(ctx);
        let raw_channel = channel.map_or(std::ptr::null_mut(), NonNull::as_ptr);
        // SAFETY: the context is open while `ctx` lives; `raw_channel` is null or a live
        // channel of it.
        let cq = match unsafe { result::create_cq(ctx.api(), ctx.raw(), n, raw_channel) } {
            Ok(cq) => cq,
            Err(source) => {
                if let Some(ch) = channel {
                    // SAFETY: no CQ reports to the channel (its CQ was not created).
                    let _ = unsafe { result::destroy_comp_channel(ctx.api(), ch) };
                }
                return Err(Error::CreateCq { cqe, source });
            }
        };
        Ok(Arc::new(Self {
            ctx: Arc::clone(ctx),
            cq,
            channel,
            cqe,
        }))
    }

    /// A completion channel with a non-blocking fd, or `None` (the CQ is then polled).
    fn open_channel(ctx: &Arc<Context>) -> Option<NonNull<sys::ibv_comp_channel>> {
        // SAFETY: the context is open while `ctx` lives.
        let ch = unsafe { result::create_comp_channel(ctx.api(), ctx.raw()) }.ok()?;
        // SAFETY: `ch` is the live channel just created; its `fd` is libibverbs' open fd.
        let fd = unsafe { (*ch.as_ptr()).fd };
        // SAFETY: fcntl on an fd this channel owns; only the O_NONBLOCK flag changes.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if ok {
            Some(ch)
        } else {
            // SAFETY: no CQ reports to it yet.
            let _ = unsafe { result::destroy_comp_channel(ctx.api(), ch) };
            None
        }
    }

    /// The completion channel's fd (readable once an armed CQ has a completion), if any.
    #[must_use]
    pub fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        // SAFETY: the channel is live while `self` is (INVARIANT).
        self.channel.map(|ch| unsafe { (*ch.as_ptr()).fd })
    }

    /// Asks for one event on the channel at the next completion (`ibv_req_notify_cq`). Poll
    /// once more after arming: a completion that arrived before it raises no event.
    pub fn arm(&self) -> Result<(), Error> {
        if self.channel.is_none() {
            return Err(Error::ArmCq(std::io::Error::other(
                "the CQ has no completion channel",
            )));
        }
        // SAFETY: the CQ is live (INVARIANT) and has a channel.
        unsafe { result::req_notify_cq(self.cq) }.map_err(Error::ArmCq)
    }

    /// Takes every event waiting on the channel and acknowledges it; returns how many.
    pub fn take_events(&self) -> u32 {
        let Some(ch) = self.channel else {
            return 0;
        };
        let mut n = 0u32;
        // SAFETY: the channel is live (INVARIANT); only this CQ reports to it, so every event
        // names `self.cq` and is acknowledged on it below.
        while let Ok(Some(_)) = unsafe { result::get_cq_event(self.ctx.api(), ch) } {
            n = n.saturating_add(1);
        }
        if n > 0 {
            // SAFETY: the CQ is live; `n` events were taken for it.
            unsafe { result::ack_cq_events(self.ctx.api(), self.cq, n) };
        }
        n
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
                *dst = completion_from_raw(src);
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
        // Events taken but not acknowledged would make the destroy wait forever: take and
        // acknowledge whatever is left first.
        self.take_events();
        // SAFETY: no QP uses the CQ any more (they hold Arcs to it).
        let _ = unsafe { result::destroy_cq(self.ctx.api(), self.cq) };
        if let Some(ch) = self.channel {
            // SAFETY: the channel's only CQ is destroyed above; nothing uses it any more.
            let _ = unsafe { result::destroy_comp_channel(self.ctx.api(), ch) };
        }
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
        let c = completion_from_raw(&wc);
        assert_eq!(c.imm_data, Some(0x1234_5678));
        assert_eq!(c.opcode, WcOpcode::RecvRdmaWithImm);
        assert!(c.is_ok());
        wc.wc_flags = 0;
        wc.status = 12;
        let c = completion_from_raw(&wc);
        assert_eq!((c.imm_data, c.status), (None, WcStatus::RetryExceeded));
        assert_eq!(status_from_raw(5), WcStatus::WrFlushError);
        assert_eq!(status_from_raw(10), WcStatus::RemoteAccessError);
        assert_eq!(status_from_raw(22), WcStatus::Other(22));
        assert_eq!(opcode_from_raw(2), WcOpcode::RdmaRead);
    }
}
