//! RC queue pairs (`ibv_qp`): the state machine driven through the table in `qp_state.rs`,
//! the connection parameters of docs/verbs.md (RC parameters), and posting. Method names follow
//! the soft fabric's `QueuePair` (`modify_to_init`, `modify_to_rtr`, `modify_to_rts`,
//! `modify_to_err`, `connect`, `local_token`, `post_send`, `post_recv`); the work-request types
//! are the soft fabric's own (`SendWr`, `RecvWr`, `Sge`, `RemoteAddr`, `SendOp`).
#![allow(unsafe_code)]

use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, PoisonError};

use s3_lite::rdma::RcToken;

use super::cq::CompletionQueue;
use super::error::{Error, PostError};
use super::gid::GidEntry;
use super::mr::{Access, MemoryRegion, ProtectionDomain};
use super::port::{Mtu, PortInfo};
use super::post::{PostBatch, translate_send};
use super::qp_state::{self, AttrMask, AttrValues, QpState};
use super::result;
use super::sys;
use super::token::{self, QpAddress};
use super::vendor::VendorProfile;
use crate::fabric::rc::wr::{RecvWr, SendWr};

/// Queue sizes and the port (`ibv_qp_init_attr.cap`, one SGE per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// Port the QP uses (from 1).
    pub port: u8,
    /// The QP will post RDMA READs: it connects with the vendor row's `read_timeout`.
    pub posts_reads: bool,
}

impl Default for QpCaps {
    /// 128 / 128 on port 1 (hipObject's sizes; docs/verbs.md, RC parameters), no READs.
    fn default() -> Self {
        Self {
            max_send_wr: 128,
            max_recv_wr: 128,
            port: 1,
            posts_reads: false,
        }
    }
}

/// The ACK timeout exponent a QP connects with: the vendor row's `read_timeout` for a QP that
/// posts RDMA READs, its `timeout` otherwise (docs/verbs.md, RC parameters).
fn ack_timeout(v: &VendorProfile, posts_reads: bool) -> u8 {
    if posts_reads {
        v.read_timeout
    } else {
        v.timeout
    }
}

/// Attributes of `Init → Rtr` (peer address, PSN, path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// Peer QPN (`dest_qp_num`).
    pub dest_qpn: u32,
    /// PSN of the peer's first request (`rq_psn` = peer's `sq_psn`).
    pub rq_psn: u32,
    /// Peer GID (`ah_attr.grh.dgid`).
    pub dgid: [u8; 16],
    /// Peer LID (0 on RoCE).
    pub dlid: u16,
    /// Path MTU (from the port's active MTU).
    pub path_mtu: Mtu,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer` (12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// GRH hop limit (64).
    pub hop_limit: u8,
    /// GRH traffic class (0).
    pub traffic_class: u8,
}

impl RtrAttr {
    /// The RC parameters (docs/verbs.md) towards the peer `token` names, path MTU from `port`.
    pub fn from_token(peer: &RcToken, rq_psn: u32, port: &PortInfo) -> Result<Self, Error> {
        let (addr, _) = token::from_token(peer)?;
        Ok(Self {
            dest_qpn: addr.qpn,
            rq_psn,
            dgid: addr.gid,
            dlid: addr.lid,
            path_mtu: port.path_mtu(None),
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            hop_limit: 64,
            traffic_class: 0,
        })
    }
}

/// Attributes of `Rtr → Rts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// Our first PSN (`sq_psn`).
    pub sq_psn: u32,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
}

impl RtsAttr {
    /// The default RC parameters (docs/verbs.md): timeout 14, retry 7, RNR retry 7, one READ outstanding.
    #[must_use]
    pub fn new(sq_psn: u32) -> Self {
        Self {
            sq_psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

/// A reliable-connected queue pair. Dropping it destroys it (pending work is flushed by the
/// device); it keeps its domain and CQs alive.
#[derive(Debug)]
pub struct QueuePair {
    /// INVARIANT: live until `Drop`.
    qp: NonNull<sys::ibv_qp>,
    state: Mutex<QpState>,
    port: PortInfo,
    gid: GidEntry,
    caps: QpCaps,
    // Declared after `qp`: dropped after it is destroyed.
    pd: ProtectionDomain,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
}

// SAFETY: `ibv_post_send` / `ibv_post_recv` / `ibv_modify_qp` are thread-safe in providers;
// the cached state is behind a mutex.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// Creates an RC QP in `Reset` on `caps.port`, with the port's best GID as source.
    pub fn create(
        pd: &ProtectionDomain,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<Self, Error> {
        Self::create_toward(pd, send_cq, recv_cq, caps, None)
    }

    /// [`Self::create`] for pairing with a peer whose token names `peer_gid`: the source GID is
    /// one of the peer's family ([`super::gid::choose_for_peer`]); without one,
    /// [`Error::NoGidForPeer`].
    pub fn create_toward(
        pd: &ProtectionDomain,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
        peer_gid: Option<&[u8; 16]>,
    ) -> Result<Self, Error> {
        let ctx = pd.ctx();
        let port = ctx.query_port(caps.port)?;
        if !port.active {
            return Err(Error::PortDown {
                device: ctx.name().to_string(),
                port: caps.port,
                state: port.state,
            });
        }
        let gid = ctx.choose_gid_for(caps.port, peer_gid)?;
        let mut init = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: send_cq.raw().as_ptr(),
            recv_cq: recv_cq.raw().as_ptr(),
            srq: ptr::null_mut(),
            cap: sys::ibv_qp_cap {
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: 0,
        };
        // SAFETY: the PD and both CQs are live (held by the arguments, then by `Self`).
        let qp =
            unsafe { result::create_qp(ctx.api(), pd.raw(), &mut init) }.map_err(|source| {
                Error::CreateQp {
                    max_send_wr: caps.max_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    source,
                }
            })?;
        Ok(Self {
            qp,
            state: Mutex::new(QpState::Reset),
            port,
            gid,
            caps,
            pd: pd.clone(),
            send_cq: Arc::clone(send_cq),
            recv_cq: Arc::clone(recv_cq),
        })
    }

    fn raw(&self) -> &sys::ibv_qp {
        // SAFETY: live (INVARIANT); `qp_num` is fixed at creation.
        unsafe { self.qp.as_ref() }
    }

    /// QP number (24 bits).
    #[must_use]
    pub fn qpn(&self) -> u32 {
        self.raw().qp_num
    }

    /// State as of the last successful transition made through this handle.
    #[must_use]
    pub fn state(&self) -> QpState {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state the device reports (`ibv_query_qp`): differs from [`QueuePair::state`] once
    /// a completion error moved the QP to `Err`.
    pub fn query_state(&self) -> Option<QpState> {
        // SAFETY: live (INVARIANT).
        let raw = unsafe { result::query_qp_state(self.pd.ctx().api(), self.qp) }.ok()?;
        QpState::try_from(raw).ok()
    }

    /// The port this QP uses.
    #[must_use]
    pub fn port(&self) -> &PortInfo {
        &self.port
    }

    /// The source GID (index and bytes).
    #[must_use]
    pub fn gid(&self) -> &GidEntry {
        &self.gid
    }

    /// The domain.
    #[must_use]
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The send CQ.
    #[must_use]
    pub fn send_cq(&self) -> &Arc<CompletionQueue> {
        &self.send_cq
    }

    /// The receive CQ.
    #[must_use]
    pub fn recv_cq(&self) -> &Arc<CompletionQueue> {
        &self.recv_cq
    }

    fn modify(
        &self,
        to: QpState,
        attr: &mut sys::ibv_qp_attr,
        mask: i32,
        values: &AttrValues,
    ) -> Result<(), Error> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let from = *st;
        qp_state::check(from, to, AttrMask(mask))?;
        attr.qp_state = to.to_raw();
        // SAFETY: live (INVARIANT); `attr` is a valid struct for the mask's fields.
        match unsafe { result::modify_qp(self.pd.ctx().api(), self.qp, attr, mask) } {
            Ok(()) => {
                *st = to;
                Ok(())
            }
            Err(source) => {
                let actual = self.query_state();
                let detail = if source.raw_os_error() == Some(libc::EINVAL) {
                    qp_state::diagnose_einval(from, to, actual, AttrMask(mask), values)
                } else {
                    format!("{source}; QP state now {actual:?}")
                };
                if let Some(a) = actual {
                    *st = a;
                }
                Err(Error::ModifyQp {
                    qpn: self.qpn(),
                    from,
                    to,
                    detail,
                    source,
                })
            }
        }
    }

    fn values(&self) -> AttrValues {
        AttrValues {
            port_num: self.port.port,
            port_active_mtu: self.port.active_mtu,
            gid_tbl_len: self.port.gid_tbl_len,
            ethernet: self.port.ethernet,
            sgid_index: self.gid.index,
            ..AttrValues::default()
        }
    }

    /// `Reset → Init`: port, P_Key index 0, and the remote access this QP allows.
    pub fn modify_to_init(&self, access: Access) -> Result<(), Error> {
        let mut a = sys::ibv_qp_attr {
            pkey_index: 0,
            port_num: self.port.port,
            qp_access_flags: access.bits() as u32,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_PKEY_INDEX
            | sys::IBV_QP_PORT
            | sys::IBV_QP_ACCESS_FLAGS;
        self.modify(QpState::Init, &mut a, mask, &self.values())
    }

    /// `Init → Rtr` towards the peer `attr` names (GRH always: RoCE requires it).
    pub fn modify_to_rtr(&self, attr: &RtrAttr) -> Result<(), Error> {
        let mut a = sys::ibv_qp_attr {
            path_mtu: attr.path_mtu.to_raw(),
            dest_qp_num: attr.dest_qpn,
            rq_psn: attr.rq_psn,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            ah_attr: sys::ibv_ah_attr {
                grh: sys::ibv_global_route {
                    dgid: sys::ibv_gid { raw: attr.dgid },
                    flow_label: 0,
                    sgid_index: self.gid.index,
                    hop_limit: attr.hop_limit,
                    traffic_class: attr.traffic_class,
                },
                dlid: attr.dlid,
                sl: 0,
                src_path_bits: 0,
                static_rate: 0,
                is_global: 1,
                port_num: self.port.port,
            },
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        let v = AttrValues {
            path_mtu: attr.path_mtu.to_raw(),
            is_global: true,
            dest_qp_num: attr.dest_qpn,
            rq_psn: attr.rq_psn,
            min_rnr_timer: attr.min_rnr_timer,
            ..self.values()
        };
        self.modify(QpState::Rtr, &mut a, mask, &v)
    }

    /// `Rtr → Rts`: sends may be posted.
    pub fn modify_to_rts(&self, attr: &RtsAttr) -> Result<(), Error> {
        let mut a = sys::ibv_qp_attr {
            sq_psn: attr.sq_psn,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            max_rd_atomic: attr.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_STATE
            | sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        let v = AttrValues {
            sq_psn: attr.sq_psn,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            ..self.values()
        };
        self.modify(QpState::Rts, &mut a, mask, &v)
    }

    /// Any state `→ Err`: outstanding work completes with `WrFlushError`.
    pub fn modify_to_err(&self) -> Result<(), Error> {
        let mut a = sys::ibv_qp_attr::default();
        self.modify(QpState::Err, &mut a, sys::IBV_QP_STATE, &self.values())
    }

    /// `Init → Rtr → Rts` towards the peer `token` names, with the vendor row's timeouts
    /// (its `read_timeout` for a QP created with `posts_reads`).
    pub fn connect(&self, peer: &RcToken, rq_psn: u32, sq_psn: u32) -> Result<(), Error> {
        self.modify_to_rtr(&RtrAttr::from_token(peer, rq_psn, &self.port)?)?;
        let v = self.pd.ctx().vendor();
        self.modify_to_rts(&RtsAttr {
            timeout: ack_timeout(v, self.caps.posts_reads),
            retry_cnt: v.retry_cnt,
            rnr_retry: v.rnr_retry,
            ..RtsAttr::new(sq_psn)
        })
    }

    /// This QP's RC token (QPN, GID, port, LID), advertising `window = (region, offset, len)`
    /// when given (bounds-checked).
    pub fn local_token(&self, window: Option<(&MemoryRegion, u64, u64)>) -> Result<RcToken, Error> {
        let addr = QpAddress {
            qpn: self.qpn(),
            gid: self.gid.gid,
            port: self.port.port,
            lid: self.port.lid,
        };
        let w = match window {
            Some((mr, off, len)) => Some(mr.window(off, len)?),
            None => None,
        };
        Ok(token::to_token(&addr, w))
    }

    /// Posts one send work request (`ibv_post_send`).
    pub fn post_send(&self, wr: &SendWr) -> Result<(), PostError> {
        let mut sge = sys::ibv_sge::default();
        let mut raw = translate_send(wr, &mut sge)?;
        // SAFETY: live QP (INVARIANT); `raw` and `sge` outlive the call; memory named by the
        // SGE is checked by the device against the lkey's registration.
        unsafe { result::post_send(self.qp, &mut raw) }
            .map_err(|(errno, _)| self.post_error(errno, wr.wr_id))
    }

    /// Posts one receive (`ibv_post_recv`): `sge: None` for WRITE_WITH_IMM-only use.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), PostError> {
        let mut sge = wr.sge.map(|s| sys::ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        });
        let mut raw = sys::ibv_recv_wr::zeroed();
        raw.wr_id = wr.wr_id;
        if let Some(s) = sge.as_mut() {
            raw.sg_list = s;
            raw.num_sge = 1;
        }
        // SAFETY: as in `post_send`.
        unsafe { result::post_recv(self.qp, &mut raw) }
            .map_err(|(errno, _)| self.post_error(errno, wr.wr_id))
    }

    pub(crate) fn post_error(&self, errno: i32, wr_id: u64) -> PostError {
        if errno == libc::ENOMEM {
            PostError::QueueFull
        } else {
            PostError::Refused {
                errno,
                wr_id,
                state: self.state(),
            }
        }
    }

    /// A batch of send work requests posted with one doorbell. Borrowing `&mut self` keeps
    /// other producers off this QP while the batch is built.
    pub fn batch(&mut self) -> PostBatch<'_> {
        PostBatch::new(self)
    }

    pub(crate) fn raw_qp(&self) -> NonNull<sys::ibv_qp> {
        self.qp
    }

    pub(crate) fn max_send_wr(&self) -> u32 {
        self.caps.max_send_wr
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: live (INVARIANT), not used afterwards; the PD and CQs are still held.
        let _ = unsafe { result::destroy_qp(self.pd.ctx().api(), self.qp) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::vendor::{PROFILES, Vendor, profile};
    use super::*;

    #[test]
    fn a_qp_that_posts_reads_takes_the_read_timeout() {
        // rxe: WRITE-only QPs keep 1.07 s against emulated vCPU stalls; a READ that lost a
        // response packet waits the whole timeout, so READ QPs take 67 ms.
        let rxe = profile(Vendor::Rxe);
        assert_eq!(ack_timeout(rxe, false), 18);
        assert_eq!(ack_timeout(rxe, true), 14);
        for p in PROFILES.iter().filter(|p| p.vendor != Vendor::Rxe) {
            assert_eq!(ack_timeout(p, false), 14, "{:?}", p.vendor);
            assert_eq!(ack_timeout(p, true), 14, "{:?}", p.vendor);
        }
        assert!(!QpCaps::default().posts_reads);
    }
}
