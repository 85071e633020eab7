//! Queue pairs: the verbs state machine, posting, and error/flush handling.
//!
//! States and transitions mirror verbs: `Reset → Init` (access flags) `→ Rtr` (peer QPN,
//! receive PSN, and — soft only — the TCP path) `→ Rts` (our send PSN, timeouts). Any state can
//! go to `Err`; in `Err` every queued and outstanding work request completes with
//! [`WcStatus::WrFlushError`] (the one that caused the error with its own status) and the
//! socket is closed. An established QP is served by one of its device's I/O threads (`io.rs`;
//! its read side `rx.rs`, its write side `tx.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use s3_lite::rdma::RcToken;

use super::dial::DialReq;
use super::frame::PSN_MASK;
use super::io::Cmd;
use super::mr::{MemoryRegion, MrError};
use super::shared::{Posted, PostedRecv, QpShared, Shut, send_opcode};
use super::wr::Access;
use super::wr::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus};

/// Verbs QP states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Created, unusable.
    Reset,
    /// Access flags set; RECVs may be posted.
    Init,
    /// Ready to receive: the responder runs.
    Rtr,
    /// Ready to send: work requests may be posted.
    Rts,
    /// Error: everything flushed, the connection closed. Terminal for the soft fabric.
    Err,
}

/// Limits of one queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests queued or unacknowledged at once (`max_send_wr`).
    pub max_send_wr: u32,
    /// RECVs posted at once (`max_recv_wr`).
    pub max_recv_wr: u32,
    /// Largest payload per frame; longer messages span frames (≤ `frame::MAX_PAYLOAD`).
    pub max_frame: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_frame: 1 << 20,
        }
    }
}

impl QpCaps {
    /// `max_frame` clamped to 4 KiB ..= `frame::MAX_PAYLOAD`.
    #[must_use]
    pub fn frame_size(&self) -> u32 {
        self.max_frame.clamp(4096, super::frame::MAX_PAYLOAD)
    }
}

/// RDMA READs outstanding per direction (`max_rd_atomic` = `max_dest_rd_atomic`). A peer
/// exceeding it is refused with `RemoteInvalidRequest`, which bounds the responder's queue.
pub const MAX_RD_ATOMIC: u32 = 16;

/// How the TCP connection behind a QP is made (the soft stand-in for a path / address vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftPath {
    /// Dial the peer device's listener at this address (from RTR on; the device's I/O thread
    /// dials, `modify_to_rtr` does not wait for it).
    Connect(SocketAddr),
    /// Wait for the peer to dial this device's listener (`SoftDevice::listen`).
    Accept,
}

/// Attributes of `Init → Rtr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// The peer's QPN (`dest_qp_num`).
    pub dest_qpn: u32,
    /// The PSN the peer's first request carries (`rq_psn` = peer's `sq_psn`).
    pub rq_psn: u32,
    /// The peer's GID; all zero skips the check against the peer's CONNECT / CONNECT_ACK.
    pub dgid: [u8; 16],
    /// Connection path.
    pub path: SoftPath,
    /// How long a `Connect` dial and handshake may take.
    pub connect_timeout: Duration,
    /// How long the responder waits for a RECV before refusing a WRITE_WITH_IMM / SEND
    /// (receiver-not-ready; the role of `min_rnr_timer` × `rnr_retry`).
    pub rnr_wait: Duration,
}

impl RtrAttr {
    /// RTR attributes for the peer a token names.
    #[must_use]
    pub fn from_token(peer: &RcToken, rq_psn: u32, path: SoftPath) -> Self {
        Self {
            dest_qpn: peer.qpn,
            rq_psn,
            dgid: peer.gid,
            path,
            connect_timeout: Duration::from_secs(10),
            rnr_wait: Duration::from_secs(2),
        }
    }
}

/// Attributes of `Rtr → Rts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// Our first send PSN (`sq_psn`).
    pub sq_psn: u32,
    /// With work outstanding, no byte from the peer (or no send progress) for this long fails
    /// the QP with `RetryExceeded` (the role of `timeout` × `retry_cnt`). Should exceed the
    /// peer's `rnr_wait`.
    pub timeout: Duration,
}

impl RtsAttr {
    /// Defaults: 5 s timeout.
    #[must_use]
    pub fn new(sq_psn: u32) -> Self {
        Self {
            sq_psn,
            timeout: Duration::from_secs(5),
        }
    }
}

/// Why a state change failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QpError {
    /// Not a transition verbs allows from this state.
    #[error("queue pair: cannot go from {from:?} to {to:?}")]
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// QPN or PSN wider than 24 bits.
    #[error("queue pair: {0} wider than 24 bits")]
    OutOfRange(&'static str),
    /// Dialing or the pairing handshake failed.
    #[error("queue pair: connect failed: {0}")]
    Connect(String),
    /// The peer answered for a different QPN / GID than the attributes name.
    #[error("queue pair: peer identity mismatch ({0})")]
    PeerMismatch(&'static str),
    /// The peer device refused the CONNECT (no such QP, wrong state, already paired).
    #[error("queue pair: peer refused the connection")]
    Refused,
}

/// Why a post was refused (nothing was queued).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostError {
    /// Sends need `Rts`; receives need `Init` or later.
    #[error("post in state {0:?}")]
    InvalidState(QpState),
    /// `max_send_wr` / `max_recv_wr` reached.
    #[error("work queue full")]
    QueueFull,
}

/// Counts of a queue pair's acknowledgements, like a NIC's per-QP counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct QpCounters {
    /// ACK frames this QP sent (as a responder; several executed messages may share one).
    pub acks_sent: u64,
    /// Request frames flagged `ACK_LATER` it executed (their ACKs held back, to go with a
    /// later one: docs/soft-fabric.md).
    pub frames_acked_later: u64,
}

/// A reliable-connected queue pair of the soft fabric. Dropping it moves it to `Err`
/// (flushing its work requests), closes its connection and detaches it from its device's I/O
/// thread.
#[derive(Debug)]
pub struct QueuePair {
    pub(crate) shared: Arc<QpShared>,
    pub(crate) device: std::sync::Weak<super::device::DeviceInner>,
}

impl QueuePair {
    /// QP number (24 bits, unique per device).
    #[must_use]
    pub fn qpn(&self) -> u32 {
        self.shared.qpn
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> QpState {
        self.shared.lock().state
    }

    /// What this QP has counted so far.
    #[must_use]
    pub fn counters(&self) -> QpCounters {
        self.shared.lock().counters
    }

    /// `Reset → Init` with the remote access this QP allows (`qp_access_flags`).
    pub fn modify_to_init(&self, access: Access) -> Result<(), QpError> {
        let mut c = self.shared.lock();
        if c.state != QpState::Reset {
            return Err(QpError::InvalidTransition {
                from: c.state,
                to: QpState::Init,
            });
        }
        c.access = access;
        c.state = QpState::Init;
        Ok(())
    }

    /// `Init → Rtr`. With [`SoftPath::Connect`] this hands the dial of the peer's device (and
    /// the pairing with `dest_qpn`) to the device's I/O thread and returns at once, as verbs
    /// would: the QP may go to `Rts` and sends may be posted meanwhile (they wait in the send
    /// queue until the connection is up). A dial that fails or takes longer than
    /// `connect_timeout` moves the QP to `Err`, flushing every posted work request, and
    /// [`QueuePair::connect_error`] says why. With [`SoftPath::Accept`] the peer's dial may come
    /// before or after (its CONNECT must name this QP and come from `dest_qpn`).
    pub fn modify_to_rtr(&self, attr: &RtrAttr) -> Result<(), QpError> {
        if attr.dest_qpn > PSN_MASK {
            return Err(QpError::OutOfRange("dest_qpn"));
        }
        if attr.rq_psn > PSN_MASK {
            return Err(QpError::OutOfRange("rq_psn"));
        }
        let mut c = self.shared.lock();
        if c.state != QpState::Init {
            return Err(QpError::InvalidTransition {
                from: c.state,
                to: QpState::Rtr,
            });
        }
        match (attr.path, &c.stream) {
            // The peer dialled us already: two connections for one QP pair.
            (SoftPath::Connect(_), Some(_)) => return Err(QpError::Refused),
            (SoftPath::Connect(addr), None) => {
                let io = self.shared.io.as_ref().ok_or_else(|| {
                    QpError::Connect("the soft device's I/O threads did not start".into())
                })?;
                let i = *self
                    .shared
                    .thread
                    .get_or_init(|| io.pick_near(crate::sys::current_cpu()));
                let req = DialReq {
                    addr,
                    dest_qpn: attr.dest_qpn,
                    dgid: attr.dgid,
                    timeout: attr.connect_timeout,
                };
                // The loop takes the core's lock to end the dial, so it sees the QP in `Rtr`.
                if !io.send(i, Cmd::Dial(Arc::clone(&self.shared), req)) {
                    return Err(QpError::Connect(
                        "the soft device's I/O threads ended".into(),
                    ));
                }
                c.dialing = true;
            }
            (SoftPath::Accept, Some((_, src))) if *src != attr.dest_qpn => {
                return Err(QpError::PeerMismatch("qpn"));
            }
            (SoftPath::Accept, _) => {}
        }
        c.dest_qpn = Some(attr.dest_qpn);
        c.rq_psn = attr.rq_psn;
        c.rnr_wait = attr.rnr_wait;
        c.state = QpState::Rtr;
        self.shared
            .maybe_start(&mut c)
            .map_err(|e| QpError::Connect(e.to_string()))
    }

    /// Whether the QP's dial of its peer (RTR with [`SoftPath::Connect`]) is still under way.
    #[must_use]
    pub fn is_connecting(&self) -> bool {
        let c = self.shared.lock();
        c.dialing && c.state != QpState::Err
    }

    /// Why the QP's dial of its peer failed (the QP is in `Err` then): the error
    /// `modify_to_rtr` returned before dials ran on the I/O thread.
    #[must_use]
    pub fn connect_error(&self) -> Option<QpError> {
        self.shared.lock().dial_error.clone()
    }

    /// `Rtr → Rts`: sends may be posted.
    pub fn modify_to_rts(&self, attr: &RtsAttr) -> Result<(), QpError> {
        if attr.sq_psn > PSN_MASK {
            return Err(QpError::OutOfRange("sq_psn"));
        }
        let mut c = self.shared.lock();
        if c.state != QpState::Rtr {
            return Err(QpError::InvalidTransition {
                from: c.state,
                to: QpState::Rts,
            });
        }
        c.sq_psn = attr.sq_psn;
        c.timeout = attr.timeout;
        c.state = QpState::Rts;
        Ok(())
    }

    /// Any state `→ Err`: flushes everything, closes the connection and detaches the QP from
    /// its device's I/O thread, waiting (bounded) for the thread's acknowledgement: when this
    /// returns, the thread no longer touches the QP or its memory.
    pub fn modify_to_err(&self) {
        // Answers already queued (the ACK of a message whose completion the application has
        // seen) leave first, as they would have on a NIC.
        self.shared.drain_answers(ANSWER_DRAIN);
        let mut c = self.shared.lock();
        self.shared.fail(&mut c, None, Shut::Both);
        drop(c);
        self.shared.detach();
    }

    /// `Init → Rtr → Rts` towards the peer `token` names, in one call.
    pub fn connect(
        &self,
        peer: &RcToken,
        rq_psn: u32,
        sq_psn: u32,
        path: SoftPath,
    ) -> Result<(), QpError> {
        self.modify_to_rtr(&RtrAttr::from_token(peer, rq_psn, path))?;
        self.modify_to_rts(&RtsAttr::new(sq_psn))
    }

    /// This QP's RC token (transport RC, QPN, GID, port 1, LID 0), advertising
    /// `window = (region, offset, len)` when given (bounds-checked).
    pub fn local_token(
        &self,
        window: Option<(&MemoryRegion, u64, u64)>,
    ) -> Result<RcToken, MrError> {
        let mut t = self.shared.token();
        if let Some((mr, off, len)) = window {
            let end = off.checked_add(len).ok_or(MrError::Bounds)?;
            if end > mr.len() {
                return Err(MrError::Bounds);
            }
            t.rkey = mr.rkey();
            t.addr = mr.addr().checked_add(off).ok_or(MrError::Bounds)?;
            t.length = len;
        }
        Ok(t)
    }

    /// Posts a send work request. In `Err` it completes at once with `WrFlushError`; an SGE
    /// the domain does not grant completes with `LocalProtectionError` and fails the QP.
    /// A one-frame request of at most 1 MiB posted to an idle QP (nothing queued or being
    /// written) is written to the socket by the calling thread before this returns, as far as
    /// the socket takes it without blocking; everything else (and the rest) is written by the
    /// device's I/O thread. Either way the completion comes with the peer's ACK.
    pub fn post_send(&self, wr: &SendWr) -> Result<(), PostError> {
        let s = &self.shared;
        let mut c = s.lock();
        match c.state {
            QpState::Rts => {}
            QpState::Err => {
                s.send_cq
                    .push(s.wc(wr.wr_id, WcStatus::WrFlushError, send_opcode(wr)));
                return Ok(());
            }
            st => return Err(PostError::InvalidState(st)),
        }
        if c.sq.len() + c.outstanding.len() >= s.caps.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        let need = if matches!(wr.op, SendOp::Read(_)) {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        let mr =
            s.pd.by_lkey(wr.sge.lkey)
                .filter(|m| m.local(wr.sge.addr, u64::from(wr.sge.length), need).is_ok());
        let Some(mr) = mr else {
            s.send_cq
                .push(s.wc(wr.wr_id, WcStatus::LocalProtectionError, send_opcode(wr)));
            s.fail(&mut c, None, Shut::Both);
            return Ok(());
        };
        c.sq.push_back(Posted { wr: *wr, mr });
        // A small request on an idle QP is written by this thread at once (see
        // `tx::take_inline`); anything else is the I/O thread's.
        // The write side is only tried (never waited for, whatever the lock order): when the
        // I/O thread holds it, it is writing and this request is its.
        if let Some((sock, _)) = c.stream.clone()
            && super::tx::inline_ok(&c, s.caps.frame_size())
            && let Some(w) = s.wire_try()
            && let Some(job) = super::tx::take_inline(&mut c, s.caps.frame_size())
        {
            drop(c);
            super::tx::send_inline(s, &sock, w, job);
            return Ok(());
        }
        let started = c.started;
        drop(c);
        if started {
            s.kick();
        }
        Ok(())
    }

    /// Posts a receive (allowed from `Init` on, as in verbs).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), PostError> {
        let s = &self.shared;
        let mut c = s.lock();
        match c.state {
            QpState::Init | QpState::Rtr | QpState::Rts => {}
            QpState::Err => {
                s.recv_cq
                    .push(s.wc(wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv));
                return Ok(());
            }
            st => return Err(PostError::InvalidState(st)),
        }
        if c.rq.len() >= s.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        let mr = match wr.sge {
            None => None,
            Some(sge) => {
                let mr = s.pd.by_lkey(sge.lkey).filter(|m| {
                    m.local(sge.addr, u64::from(sge.length), Access::LOCAL_WRITE)
                        .is_ok()
                });
                if mr.is_none() {
                    s.recv_cq
                        .push(s.wc(wr.wr_id, WcStatus::LocalProtectionError, WcOpcode::Recv));
                    s.fail(&mut c, None, Shut::Both);
                    return Ok(());
                }
                mr
            }
        };
        c.rq.push_back(PostedRecv { wr: *wr, mr });
        // A frame waiting for a RECV (receiver not ready) resumes now.
        let waiting = c.rnr_waiting;
        drop(c);
        if waiting {
            s.kick();
        }
        Ok(())
    }
}

/// How long `modify_to_err` (and so a QP's drop) waits for answers already queued to leave
/// (see [`QpShared::drain_answers`]); only a QP with answers pending waits at all.
const ANSWER_DRAIN: std::time::Duration = std::time::Duration::from_millis(250);

impl Drop for QueuePair {
    fn drop(&mut self) {
        // Moves to `Err`, closes and detaches (see `modify_to_err`).
        self.modify_to_err();
        // Also ends a NAK drain in progress (the QP was already in `Err` then).
        if let Some((s, _)) = &self.shared.lock().stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Some(dev) = self.device.upgrade() {
            dev.forget(self.shared.qpn);
        }
    }
}
