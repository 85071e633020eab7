//! Queue pairs: the verbs state machine, posting, and error/flush handling.
//!
//! States and transitions mirror verbs: `Reset → Init` (access flags) `→ Rtr` (peer QPN,
//! receive PSN, and — soft only — the TCP path) `→ Rts` (our send PSN, timeouts). Any state can
//! go to `Err`; in `Err` every queued and outstanding work request completes with
//! [`WcStatus::WrFlushError`] (the one that caused the error with its own status) and the
//! socket is closed. Two threads drive an established QP (see `sender.rs`, `receiver.rs`).

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use s3_lite::rdma::{RcToken, Transport};

use super::cq::CompletionQueue;
use super::frame::PSN_MASK;
use super::mr::{Access, MemoryRegion, MrError, MrInner, ProtectionDomain};
use super::wr::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};

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
    /// Dial the peer device's listener at this address during RTR.
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

/// A posted send with its local region resolved.
#[derive(Debug)]
pub(crate) struct Posted {
    pub(crate) wr: SendWr,
    pub(crate) mr: Arc<MrInner>,
}

/// A posted receive with its region resolved.
#[derive(Debug)]
pub(crate) struct PostedRecv {
    pub(crate) wr: RecvWr,
    pub(crate) mr: Option<Arc<MrInner>>,
}

/// The destination of an RDMA READ in flight.
#[derive(Debug)]
pub(crate) struct ReadDst {
    pub(crate) mr: Arc<MrInner>,
    pub(crate) addr: u64,
    pub(crate) len: u32,
    pub(crate) got: u32,
}

/// A send work request on the wire, waiting for its ACK / READ response.
#[derive(Debug)]
pub(crate) struct Outstanding {
    pub(crate) wr_id: u64,
    pub(crate) signaled: bool,
    pub(crate) opcode: WcOpcode,
    pub(crate) byte_len: u32,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) read: Option<ReadDst>,
    pub(crate) sent_at: Instant,
}

/// Work for the sender on the responder's behalf, in PSN order.
#[derive(Debug)]
pub(crate) enum Resp {
    /// Every request frame up to `psn` executed (coalesced).
    Ack(u32),
    /// Refuse frame `psn`, then close.
    Nak(u32, super::frame::NakCode),
    /// Answer an RDMA READ.
    Read {
        psn: u32,
        mr: Arc<MrInner>,
        rkey: u32,
        addr: u64,
        len: u32,
    },
}

/// How the socket is closed on failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shut {
    /// Both directions: threads stop at once.
    Both,
    /// Write only (after a NAK): the receiver drains what the peer still sends, then closes.
    Write,
}

#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) state: QpState,
    pub(crate) access: Access,
    pub(crate) dest_qpn: Option<u32>,
    pub(crate) rq_psn: u32,
    pub(crate) sq_psn: u32,
    pub(crate) timeout: Duration,
    pub(crate) rnr_wait: Duration,
    /// The attached connection and the QPN its CONNECT named.
    pub(crate) stream: Option<(Arc<TcpStream>, u32)>,
    pub(crate) started: bool,
    pub(crate) sq: VecDeque<Posted>,
    pub(crate) outstanding: VecDeque<Outstanding>,
    /// Sequence numbers count frames from 0; the wire PSN is `sq_psn + seq` mod 2^24.
    pub(crate) next_seq: u64,
    pub(crate) first_unacked: u64,
    pub(crate) reads_out: u32,
    pub(crate) rq: VecDeque<PostedRecv>,
    /// The RECV a multi-frame SEND / a WRITE_WITH_IMM is consuming.
    pub(crate) cur_recv: Option<PostedRecv>,
    pub(crate) responses: VecDeque<Resp>,
    pub(crate) reads_pending: u32,
}

impl Core {
    pub(crate) fn wire_psn(&self, seq: u64) -> u32 {
        // Truncation to 24 bits is the point.
        (u64::from(self.sq_psn).wrapping_add(seq) & u64::from(PSN_MASK)) as u32
    }

    /// The sequence number of `psn` at or after `first_unacked`, if it was sent.
    pub(crate) fn seq_of(&self, psn: u32) -> Option<u64> {
        let base = self.wire_psn(self.first_unacked);
        let d = u64::from(psn.wrapping_sub(base) & PSN_MASK);
        let seq = self.first_unacked.checked_add(d)?;
        (seq < self.next_seq).then_some(seq)
    }

    /// Queues an ACK, merging with a trailing ACK (the queue stays bounded by the READs).
    pub(crate) fn push_ack(&mut self, psn: u32) {
        if let Some(Resp::Ack(p)) = self.responses.back_mut() {
            *p = psn;
        } else {
            self.responses.push_back(Resp::Ack(psn));
        }
    }
}

/// State shared by a queue pair's handle, its threads and its device.
#[derive(Debug)]
pub(crate) struct QpShared {
    pub(crate) qpn: u32,
    pub(crate) gid: [u8; 16],
    pub(crate) pd: ProtectionDomain,
    pub(crate) send_cq: Arc<CompletionQueue>,
    pub(crate) recv_cq: Arc<CompletionQueue>,
    pub(crate) caps: QpCaps,
    pub(crate) core: Mutex<Core>,
    /// Signalled on every change the threads or a RNR wait may be waiting for.
    pub(crate) cv: Condvar,
    pub(crate) threads: Mutex<Vec<JoinHandle<()>>>,
}

impl QpShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: None,
            qp_num: self.qpn,
        }
    }

    /// Completes a receive.
    pub(crate) fn complete_recv(&self, wc: WorkCompletion) {
        self.recv_cq.push(wc);
    }

    /// Completes the front outstanding request successfully.
    pub(crate) fn complete_ok(&self, o: &Outstanding) {
        if o.signaled {
            let mut wc = self.wc(o.wr_id, WcStatus::Success, o.opcode);
            wc.byte_len = o.byte_len;
            self.send_cq.push(wc);
        }
    }

    /// Enters `Err`: the outstanding request with `culprit.0` as first sequence number gets
    /// `culprit.1`, everything else queued or outstanding is flushed, the socket is shut.
    pub(crate) fn fail(&self, c: &mut Core, culprit: Option<(u64, WcStatus)>, shut: Shut) {
        if c.state == QpState::Err {
            return;
        }
        c.state = QpState::Err;
        for o in c.outstanding.drain(..) {
            let status = match culprit {
                Some((seq, st)) if seq == o.first_seq => st,
                _ => WcStatus::WrFlushError,
            };
            self.send_cq.push(self.wc(o.wr_id, status, o.opcode));
        }
        for p in c.sq.drain(..) {
            self.send_cq.push(self.wc(p.wr.wr_id, WcStatus::WrFlushError, send_opcode(&p.wr)));
        }
        for r in c.cur_recv.take().into_iter().chain(c.rq.drain(..)) {
            self.recv_cq.push(self.wc(r.wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv));
        }
        c.responses.clear();
        if let Some((s, _)) = &c.stream {
            let how = match shut {
                Shut::Both => std::net::Shutdown::Both,
                Shut::Write => std::net::Shutdown::Write,
            };
            // The socket may already be closed by the peer; nothing left to do then.
            let _ = s.shutdown(how);
        }
        self.cv.notify_all();
    }

    /// Starts the two threads once a connection is attached and the QP is RTR or RTS.
    pub(crate) fn maybe_start(self: &Arc<Self>, c: &mut Core) -> std::io::Result<()> {
        if c.started || !matches!(c.state, QpState::Rtr | QpState::Rts) {
            return Ok(());
        }
        let Some((sock, _)) = c.stream.clone() else {
            return Ok(());
        };
        let tick = c.timeout.min(Duration::from_millis(100)).max(Duration::from_millis(1));
        sock.set_read_timeout(Some(tick))?;
        sock.set_write_timeout(Some(tick))?;
        sock.set_nodelay(true)?;
        c.started = true;
        let epsn = c.rq_psn;
        let (q1, s1) = (Arc::clone(self), Arc::clone(&sock));
        let rx = std::thread::Builder::new()
            .name(format!("soft-qp{:x}-rx", self.qpn))
            .spawn(move || super::receiver::run(&q1, &s1, epsn))?;
        let (q2, s2) = (Arc::clone(self), sock);
        let tx = std::thread::Builder::new()
            .name(format!("soft-qp{:x}-tx", self.qpn))
            .spawn(move || super::sender::run(&q2, &s2))?;
        let mut t = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        t.push(rx);
        t.push(tx);
        Ok(())
    }

    /// The passive side of pairing: attach `sock`, dialled by QP `src_qpn`.
    pub(crate) fn attach(self: &Arc<Self>, sock: Arc<TcpStream>, src_qpn: u32) -> bool {
        let mut c = self.lock();
        let ok = matches!(c.state, QpState::Init | QpState::Rtr)
            && c.stream.is_none()
            && c.dest_qpn.is_none_or(|d| d == src_qpn);
        if ok {
            c.stream = Some((sock, src_qpn));
            if self.maybe_start(&mut c).is_err() {
                self.fail(&mut c, None, Shut::Both);
            }
        }
        ok
    }

    pub(crate) fn token(&self) -> RcToken {
        RcToken {
            transport: Transport::Rc,
            qpn: self.qpn,
            gid: self.gid,
            rkey: 0,
            addr: 0,
            length: 0,
            port: 1,
            lid: 0,
        }
    }
}

pub(crate) fn send_opcode(wr: &SendWr) -> WcOpcode {
    match wr.op {
        SendOp::Write(_) | SendOp::WriteWithImm(..) => WcOpcode::RdmaWrite,
        SendOp::Read(_) => WcOpcode::RdmaRead,
        SendOp::Send | SendOp::SendWithImm(_) => WcOpcode::Send,
    }
}

/// A reliable-connected queue pair of the soft fabric. Dropping it moves it to `Err`
/// (flushing its work requests), closes its connection and joins its threads.
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

    /// `Reset → Init` with the remote access this QP allows (`qp_access_flags`).
    pub fn modify_to_init(&self, access: Access) -> Result<(), QpError> {
        let mut c = self.shared.lock();
        if c.state != QpState::Reset {
            return Err(QpError::InvalidTransition { from: c.state, to: QpState::Init });
        }
        c.access = access;
        c.state = QpState::Init;
        Ok(())
    }

    /// `Init → Rtr`. With [`SoftPath::Connect`] this dials the peer's device and pairs with
    /// `dest_qpn` before returning; with [`SoftPath::Accept`] the peer's dial may come before
    /// or after (its CONNECT must name this QP and come from `dest_qpn`).
    pub fn modify_to_rtr(&self, attr: &RtrAttr) -> Result<(), QpError> {
        if attr.dest_qpn > PSN_MASK {
            return Err(QpError::OutOfRange("dest_qpn"));
        }
        if attr.rq_psn > PSN_MASK {
            return Err(QpError::OutOfRange("rq_psn"));
        }
        let state = self.state();
        if state != QpState::Init {
            return Err(QpError::InvalidTransition { from: state, to: QpState::Rtr });
        }
        let dialled = match attr.path {
            SoftPath::Connect(addr) => Some(super::device::dial(&self.shared, addr, attr)?),
            SoftPath::Accept => None,
        };
        let mut c = self.shared.lock();
        if c.state != QpState::Init {
            return Err(QpError::InvalidTransition { from: c.state, to: QpState::Rtr });
        }
        match (&c.stream, dialled) {
            (Some(_), Some(_)) => return Err(QpError::Refused),
            (Some((_, src)), None) if *src != attr.dest_qpn => {
                return Err(QpError::PeerMismatch("qpn"));
            }
            (_, Some(sock)) => c.stream = Some((Arc::new(sock), attr.dest_qpn)),
            _ => {}
        }
        c.dest_qpn = Some(attr.dest_qpn);
        c.rq_psn = attr.rq_psn;
        c.rnr_wait = attr.rnr_wait;
        c.state = QpState::Rtr;
        self.shared
            .maybe_start(&mut c)
            .map_err(|e| QpError::Connect(e.to_string()))
    }

    /// `Rtr → Rts`: sends may be posted.
    pub fn modify_to_rts(&self, attr: &RtsAttr) -> Result<(), QpError> {
        if attr.sq_psn > PSN_MASK {
            return Err(QpError::OutOfRange("sq_psn"));
        }
        let mut c = self.shared.lock();
        if c.state != QpState::Rtr {
            return Err(QpError::InvalidTransition { from: c.state, to: QpState::Rts });
        }
        c.sq_psn = attr.sq_psn;
        c.timeout = attr.timeout;
        c.state = QpState::Rts;
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Any state `→ Err`: flushes everything and closes the connection.
    pub fn modify_to_err(&self) {
        let mut c = self.shared.lock();
        self.shared.fail(&mut c, None, Shut::Both);
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
    pub fn local_token(&self, window: Option<(&MemoryRegion, u64, u64)>) -> Result<RcToken, MrError> {
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
    pub fn post_send(&self, wr: &SendWr) -> Result<(), PostError> {
        let s = &self.shared;
        let mut c = s.lock();
        match c.state {
            QpState::Rts => {}
            QpState::Err => {
                s.send_cq.push(s.wc(wr.wr_id, WcStatus::WrFlushError, send_opcode(wr)));
                return Ok(());
            }
            st => return Err(PostError::InvalidState(st)),
        }
        if c.sq.len() + c.outstanding.len() >= s.caps.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        let need = if matches!(wr.op, SendOp::Read(_)) { Access::LOCAL_WRITE } else { Access::NONE };
        let mr = s.pd.by_lkey(wr.sge.lkey).filter(|m| {
            m.local(wr.sge.addr, u64::from(wr.sge.length), need).is_ok()
        });
        let Some(mr) = mr else {
            s.send_cq.push(s.wc(wr.wr_id, WcStatus::LocalProtectionError, send_opcode(wr)));
            s.fail(&mut c, None, Shut::Both);
            return Ok(());
        };
        c.sq.push_back(Posted { wr: *wr, mr });
        s.cv.notify_all();
        Ok(())
    }

    /// Posts a receive (allowed from `Init` on, as in verbs).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), PostError> {
        let s = &self.shared;
        let mut c = s.lock();
        match c.state {
            QpState::Init | QpState::Rtr | QpState::Rts => {}
            QpState::Err => {
                s.recv_cq.push(s.wc(wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv));
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
                    m.local(sge.addr, u64::from(sge.length), Access::LOCAL_WRITE).is_ok()
                });
                if mr.is_none() {
                    s.recv_cq.push(s.wc(wr.wr_id, WcStatus::LocalProtectionError, WcOpcode::Recv));
                    s.fail(&mut c, None, Shut::Both);
                    return Ok(());
                }
                mr
            }
        };
        c.rq.push_back(PostedRecv { wr: *wr, mr });
        s.cv.notify_all();
        Ok(())
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        self.modify_to_err();
        if let Some(dev) = self.device.upgrade() {
            dev.forget(self.shared.qpn);
        }
        let threads = std::mem::take(
            &mut *self.shared.threads.lock().unwrap_or_else(PoisonError::into_inner),
        );
        for t in threads {
            // A panicking fabric thread already failed the QP; nothing more to report.
            let _ = t.join();
        }
    }
}
