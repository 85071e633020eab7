//! Send work requests in verbs form: the translation from the soft fabric's `SendWr` to
//! `ibv_send_wr`, and [`PostBatch`], several requests behind one doorbell.
#![allow(unsafe_code)]

use std::ptr;

use super::error::PostError;
use super::qp::QueuePair;
use super::result;
use super::sys;
use crate::fabric::rc::wr::{SendOp, SendWr};

pub(crate) fn translate_send(
    wr: &SendWr,
    sge: &mut sys::ibv_sge,
) -> Result<sys::ibv_send_wr, PostError> {
    *sge = sys::ibv_sge {
        addr: wr.sge.addr,
        length: wr.sge.length,
        lkey: wr.sge.lkey,
    };
    let mut raw = sys::ibv_send_wr::zeroed();
    raw.wr_id = wr.wr_id;
    raw.sg_list = sge;
    raw.num_sge = i32::from(wr.sge.length > 0);
    raw.send_flags = if wr.signaled {
        sys::IBV_SEND_SIGNALED
    } else {
        0
    };
    let rdma = |raw: &mut sys::ibv_send_wr, addr: u64, rkey: u32| {
        raw.rdma.remote_addr = addr;
        raw.rdma.rkey = rkey;
    };
    match wr.op {
        SendOp::Write(r) => {
            raw.opcode = sys::IBV_WR_RDMA_WRITE;
            rdma(&mut raw, r.addr, r.rkey);
        }
        SendOp::WriteWithImm(r, imm) => {
            raw.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
            raw.imm_data = imm.to_be();
            rdma(&mut raw, r.addr, r.rkey);
        }
        SendOp::Read(r) => {
            raw.opcode = sys::IBV_WR_RDMA_READ;
            rdma(&mut raw, r.addr, r.rkey);
        }
        SendOp::Send => raw.opcode = sys::IBV_WR_SEND,
        SendOp::SendWithImm(imm) => {
            raw.opcode = sys::IBV_WR_SEND_WITH_IMM;
            raw.imm_data = imm.to_be();
        }
    }
    Ok(raw)
}

/// Send work requests posted together with one `ibv_post_send`. Nothing reaches the device
/// until [`PostBatch::post`]; dropping the batch discards it.
///
/// A batch borrows its queue pair mutably, so batches are built one after the other:
/// ```no_run
/// fn sequential(qp: &mut engine::verbs::QueuePair) -> Result<(), engine::verbs::PostError> {
///     qp.batch().post()?;
///     qp.batch().post()
/// }
/// ```
/// while two producers at once do not compile:
/// ```compile_fail,E0499
/// fn two_producers(qp: &mut engine::verbs::QueuePair) {
///     let a = qp.batch();
///     let b = qp.batch();
///     let _ = (a.post(), b.post());
/// }
/// ```
#[must_use = "a PostBatch posts nothing until .post(); dropping it discards the batch"]
#[derive(Debug)]
pub struct PostBatch<'qp> {
    qp: &'qp mut QueuePair,
    wrs: Vec<sys::ibv_send_wr>,
    sges: Vec<sys::ibv_sge>,
}

impl<'qp> PostBatch<'qp> {
    pub(crate) fn new(qp: &'qp mut QueuePair) -> Self {
        Self {
            qp,
            wrs: Vec::new(),
            sges: Vec::new(),
        }
    }

    /// Adds a work request (refused once the batch would exceed the send queue).
    pub fn push(&mut self, wr: &SendWr) -> Result<&mut Self, PostError> {
        if self.wrs.len() >= self.qp.max_send_wr() as usize {
            return Err(PostError::TooLong(self.wrs.len() + 1));
        }
        let mut sge = sys::ibv_sge::default();
        let raw = translate_send(wr, &mut sge)?;
        self.wrs.push(raw);
        self.sges.push(sge);
        Ok(self)
    }

    /// Work requests in the batch.
    #[must_use]
    pub fn len(&self) -> usize {
        self.wrs.len()
    }

    /// Whether the batch is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    /// Links the requests and rings the doorbell once. On failure, requests before the one
    /// reported in the error were posted (verbs `bad_wr` semantics).
    pub fn post(mut self) -> Result<(), PostError> {
        if self.wrs.is_empty() {
            return Ok(());
        }
        // The vectors are final: pointers into them stay valid for the call.
        let n = self.wrs.len();
        let sges = self.sges.as_mut_ptr();
        let wrs = self.wrs.as_mut_ptr();
        for i in 0..n {
            // SAFETY: `i < n` indexes both vectors; `next` of the last stays null.
            unsafe {
                let w = wrs.add(i);
                (*w).sg_list = sges.add(i);
                (*w).next = if i + 1 < n {
                    wrs.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        // SAFETY: live QP; the linked list and SGEs live in `self` until after the call.
        unsafe { result::post_send(self.qp.raw_qp(), wrs) }.map_err(|(errno, bad)| {
            let wr_id = if bad.is_null() {
                0
            } else {
                // SAFETY: `bad` points into `self.wrs` (provider contract).
                unsafe { (*bad).wr_id }
            };
            self.qp.post_error(errno, wr_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::rc::wr::{RemoteAddr, Sge};

    #[test]
    fn send_work_requests_translate_to_the_c_fields() {
        let sge = Sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        };
        let r = RemoteAddr {
            addr: 0x2000,
            rkey: 9,
        };
        let mut s = sys::ibv_sge::default();
        let w = translate_send(
            &SendWr::new(1, SendOp::WriteWithImm(r, 0xdead_beef), sge),
            &mut s,
        )
        .unwrap();
        assert_eq!(w.opcode, sys::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(
            w.imm_data,
            0xdead_beefu32.to_be(),
            "immediate goes out in network order"
        );
        assert_eq!((w.rdma.remote_addr, w.rdma.rkey), (0x2000, 9));
        assert_eq!((w.num_sge, w.send_flags), (1, sys::IBV_SEND_SIGNALED));
        assert_eq!((s.addr, s.length, s.lkey), (0x1000, 64, 7));
        let mut unsignaled = SendWr::new(2, SendOp::Read(r), sge);
        unsignaled.signaled = false;
        let w = translate_send(&unsignaled, &mut s).unwrap();
        assert_eq!((w.opcode, w.send_flags), (sys::IBV_WR_RDMA_READ, 0));
        let zero = Sge { length: 0, ..sge };
        let w = translate_send(&SendWr::new(3, SendOp::WriteWithImm(r, 1), zero), &mut s).unwrap();
        assert_eq!(w.num_sge, 0, "a zero-length WRITE_WITH_IMM carries no SGE");
    }
}
