//! The state a queue pair's handle, its device I/O thread and its device share, and the error
//! path.
//!
//! `Core` (behind one mutex) holds the queues: posted sends not yet on the wire, outstanding
//! requests waiting for their ACK / READ response, posted RECVs, and the responder's answers
//! for the write side. [`QpShared::fail`] is the single way into `Err`: it completes everything
//! (the culprit with its status, the rest `WrFlushError`) and shuts the socket.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use s3_lite::rdma::{RcToken, Transport};

use super::cq::CompletionQueue;
use super::frame::PSN_MASK;
use super::io::{Cmd, DETACH_LIMIT, IoPool};
use super::mr::{MrInner, ProtectionDomain};
use super::qp::{QpCaps, QpState};
use super::wr::Access;
use super::wr::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion};

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

/// Work for the write side on the responder's behalf, in PSN order.
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
    /// Both directions: the connection ends at once.
    Both,
    /// Write only (after a NAK): the read side drains what the peer still sends, then closes.
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
    /// The I/O thread is dialling the peer for this QP (`modify_to_rtr` with
    /// `SoftPath::Connect`): no other connection may be attached meanwhile.
    pub(crate) dialing: bool,
    /// Why the dial failed (the QP is in `Err` then).
    pub(crate) dial_error: Option<super::qp::QpError>,
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
    /// The ACK of executed [`ACK_LATER`](super::frame::ACK_LATER) frames not queued yet: the
    /// last such PSN and how many messages it covers ([`Core::defer_ack`]).
    pub(crate) deferred_ack: Option<(u32, u32)>,
    /// What this QP counted ([`super::qp::QueuePair::counters`]).
    pub(crate) counters: super::qp::QpCounters,
    /// An answer taken off `responses` is being written.
    pub(crate) answering: bool,
    /// A request's frames are being written (by the I/O thread, or inline by the posting
    /// thread, `tx::send_inline`): no other request may start, so frames of two messages
    /// never interleave and PSNs reach the wire in order.
    pub(crate) requesting: bool,
    pub(crate) reads_pending: u32,
    /// The read side waits for a RECV (a post kicks the I/O thread).
    pub(crate) rnr_waiting: bool,
    /// Threads in [`QpShared::drain_answers`] (the I/O thread signals only when some wait).
    pub(crate) drain_waiters: u32,
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

    /// Whether `psn` names a frame already acknowledged: one of the (at most 2^23, half the
    /// PSN space, as in InfiniBand) sequence numbers just before `first_unacked`.
    pub(crate) fn acked_already(&self, psn: u32) -> bool {
        let base = self.wire_psn(self.first_unacked);
        let behind = u64::from(base.wrapping_sub(psn) & PSN_MASK);
        behind != 0 && behind <= self.first_unacked.min(1 << 23)
    }

    /// Queues an ACK, merging with a trailing ACK (the queue stays bounded by the READs). It
    /// covers any deferred one (ACKs are cumulative).
    pub(crate) fn push_ack(&mut self, psn: u32) {
        self.deferred_ack = None;
        if let Some(Resp::Ack(p)) = self.responses.back_mut() {
            *p = psn;
        } else {
            self.responses.push_back(Resp::Ack(psn));
        }
    }

    /// Holds back the ACK of the executed [`ACK_LATER`](super::frame::ACK_LATER) frame `psn`
    /// (`last`: it ends a message), to go with a later one; queues it once it covers
    /// [`ACK_BATCH`] messages. `true`: queued now.
    pub(crate) fn defer_ack(&mut self, psn: u32, last: bool) -> bool {
        let messages = self.deferred_ack.map_or(0, |(_, n)| n) + u32::from(last);
        if messages >= ACK_BATCH {
            self.push_ack(psn);
            return true;
        }
        self.deferred_ack = Some((psn, messages));
        false
    }

    /// Queues the deferred ACK, if any. `true`: one was queued.
    pub(crate) fn flush_deferred_ack(&mut self) -> bool {
        match self.deferred_ack {
            Some((psn, _)) => {
                self.push_ack(psn);
                true
            }
            None => false,
        }
    }
}

/// Messages whose ACK a responder holds back at most ([`Core::defer_ack`]).
pub(crate) const ACK_BATCH: u32 = 8;
/// How long a responder holds back an ACK at most (its I/O thread's timer; `mio` waits in
/// whole milliseconds, rounded up).
pub(crate) const ACK_DELAY: Duration = Duration::from_millis(1);

/// State shared by a queue pair's handle, its I/O thread and its device.
#[derive(Debug)]
pub(crate) struct QpShared {
    pub(crate) qpn: u32,
    pub(crate) gid: [u8; 16],
    pub(crate) pd: ProtectionDomain,
    pub(crate) send_cq: Arc<CompletionQueue>,
    pub(crate) recv_cq: Arc<CompletionQueue>,
    pub(crate) caps: QpCaps,
    pub(crate) core: Mutex<Core>,
    /// Signalled when queued answers left (for [`QpShared::drain_answers`]).
    pub(crate) cv: Condvar,
    /// The socket's write side: whoever writes (the I/O thread, an inline post) holds it, so
    /// frames never interleave; a frame partly written waits here for the I/O thread.
    pub(crate) wire: Mutex<super::tx::Wire>,
    /// The device's I/O threads (`None`: they could not be started; the QP cannot connect).
    pub(crate) io: Option<Arc<IoPool>>,
    /// The I/O thread this QP is attached to, once started.
    pub(crate) thread: OnceLock<usize>,
    /// A kick is pending at the I/O thread (further kicks are not needed until it is served).
    pub(crate) kicked: AtomicBool,
}

impl QpShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The write side, if no one holds it now.
    pub(crate) fn wire_try(&self) -> Option<MutexGuard<'_, super::tx::Wire>> {
        match self.wire.try_lock() {
            Ok(w) => Some(w),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    pub(crate) fn wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: None,
            qp_num: self.qpn,
            vendor_err: 0,
        }
    }

    /// Asks the QP's I/O thread to serve it (something to send, a RECV for a waiting frame),
    /// unless a kick is already pending.
    pub(crate) fn kick(&self) {
        let (Some(io), Some(&i)) = (self.io.as_ref(), self.thread.get()) else {
            return;
        };
        if !self.kicked.swap(true, Ordering::AcqRel) && !io.send(i, Cmd::Kick(self.qpn)) {
            self.kicked.store(false, Ordering::Release);
        }
    }

    /// Stops the I/O thread serving this QP and waits (bounded) for its acknowledgement; after
    /// it, the thread holds nothing of the QP.
    pub(crate) fn detach(&self) {
        if let (Some(io), Some(&i)) = (self.io.as_ref(), self.thread.get()) {
            io.detach(i, self.qpn, DETACH_LIMIT);
        }
    }

    /// Wakes a teardown waiting for the answers to leave (called with the core locked).
    pub(crate) fn answers_moved(&self, c: &Core) {
        if c.drain_waiters > 0 {
            self.cv.notify_all();
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
            self.send_cq
                .push(self.wc(p.wr.wr_id, WcStatus::WrFlushError, send_opcode(&p.wr)));
        }
        for r in c.cur_recv.take().into_iter().chain(c.rq.drain(..)) {
            self.recv_cq
                .push(self.wc(r.wr.wr_id, WcStatus::WrFlushError, WcOpcode::Recv));
        }
        c.responses.clear();
        c.deferred_ack = None;
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

    /// Waits up to `limit` for the I/O thread to put the answers already queued (ACKs of
    /// executed requests, NAKs, READ responses) on the wire. An RDMA NIC acknowledges a message
    /// as it places it, before the responder's application even sees the completion; here the
    /// ACK waits in `responses` for the I/O thread, so an application that answers "done"
    /// and destroys the QP at once would otherwise drop it, and the requester would see
    /// `RetryExceeded` for a write that landed.
    pub(crate) fn drain_answers(&self, limit: Duration) {
        let end = Instant::now() + limit;
        let mut c = self.lock();
        // A held-back ACK leaves now: nothing later will carry it.
        c.flush_deferred_ack();
        if c.state == QpState::Err || !c.started || (c.responses.is_empty() && !c.answering) {
            return;
        }
        c.drain_waiters += 1;
        drop(c);
        self.kick();
        let mut c = self.lock();
        while c.state != QpState::Err && (!c.responses.is_empty() || c.answering) {
            let now = Instant::now();
            if now >= end {
                break;
            }
            c = self
                .cv
                .wait_timeout(c, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        c.drain_waiters -= 1;
    }

    /// Hands the connection to an I/O thread once one is attached and the QP is RTR or RTS.
    pub(crate) fn maybe_start(self: &Arc<Self>, c: &mut Core) -> std::io::Result<()> {
        if c.started || !matches!(c.state, QpState::Rtr | QpState::Rts) {
            return Ok(());
        }
        let Some((sock, _)) = c.stream.clone() else {
            return Ok(());
        };
        let io = self
            .io
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the soft device's I/O threads did not start"))?;
        sock.set_nonblocking(true)?;
        sock.set_nodelay(true)?;
        let i = *self.thread.get_or_init(|| io.pick());
        if !io.send(i, Cmd::Attach(Arc::clone(self), sock)) {
            return Err(std::io::Error::other("the soft device's I/O threads ended"));
        }
        c.started = true;
        Ok(())
    }

    /// The passive side of pairing: attach `sock`, dialled by QP `src_qpn`.
    pub(crate) fn attach(self: &Arc<Self>, sock: Arc<TcpStream>, src_qpn: u32) -> bool {
        let mut c = self.lock();
        let ok = matches!(c.state, QpState::Init | QpState::Rtr | QpState::Rts)
            && c.stream.is_none()
            && !c.dialing
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
