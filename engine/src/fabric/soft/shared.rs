//! The state a queue pair's handle, its two threads and its device share, and the error path.
//!
//! `Core` (behind one mutex) holds the queues: posted sends not yet on the wire, outstanding
//! requests waiting for their ACK / READ response, posted RECVs, and the responder's answers
//! for the sender. [`QpShared::fail`] is the single way into `Err`: it completes everything
//! (the culprit with its status, the rest `WrFlushError`) and shuts the socket.

use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use s3_lite::rdma::{RcToken, Transport};

use super::cq::CompletionQueue;
use super::frame::{Header, Opcode, PSN_MASK};
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
    /// The sender thread is writing an answer it took off `responses`.
    pub(crate) answering: bool,
    /// A request's frames are being written (by the sender thread, or inline by the posting
    /// thread, `sender::send_inline`): no other request may start, so frames of two messages
    /// never interleave and PSNs reach the wire in order.
    pub(crate) requesting: bool,
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
    /// The socket's write side: whoever writes a frame (the sender thread, an inline post, the
    /// receiver's immediate ACK) holds it for the whole frame, so frames never interleave.
    pub(crate) wire: Mutex<Wire>,
    /// `wire.ack_rest` is not empty (the sender thread wakes to finish it).
    pub(crate) ack_rest_pending: AtomicBool,
}

/// What the write side holds between frames.
#[derive(Debug, Default)]
pub(crate) struct Wire {
    /// The unsent end of an ACK the receiver wrote without blocking and the socket took only
    /// partly: whoever takes the wire next writes it before anything else.
    pub(crate) ack_rest: Vec<u8>,
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
            vendor_err: 0,
        }
    }

    /// Writes the ACK of `psn` now from the calling (receiver) thread, if the wire is free and
    /// the socket takes it without blocking; `false`: nothing was written, queue it for the
    /// sender. A partly taken ACK is finished by the next writer (the sender thread is woken).
    pub(crate) fn ack_now(&self, sock: &TcpStream, psn: u32) -> bool {
        let Ok(mut w) = self.wire.try_lock() else {
            return false;
        };
        if !w.ack_rest.is_empty() {
            return false;
        }
        let frame = Header::new(Opcode::Ack, psn).encode();
        match super::raw::send_now(sock, &frame) {
            Ok(n) if n >= frame.len() => true,
            Ok(n) if n > 0 => {
                w.ack_rest = frame.get(n..).unwrap_or_default().to_vec();
                self.ack_rest_pending.store(true, Ordering::Release);
                drop(w);
                // Under the core lock, so a sender about to wait cannot miss it.
                let _c = self.lock();
                self.cv.notify_all();
                true
            }
            // Full buffer, or a broken socket (the sender thread reports that).
            _ => false,
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

    /// Waits up to `limit` for the sender thread to put the answers already queued (ACKs of
    /// executed requests, NAKs, READ responses) on the wire. An RDMA NIC acknowledges a message
    /// as it places it, before the responder's application even sees the completion; here the
    /// ACK waits in `responses` for the sender thread, so an application that answers "done"
    /// and destroys the QP at once would otherwise drop it, and the requester would see
    /// `RetryExceeded` for a write that landed.
    pub(crate) fn drain_answers(&self, limit: Duration) {
        let end = Instant::now() + limit;
        let mut c = self.lock();
        while c.state != QpState::Err
            && c.started
            && (!c.responses.is_empty()
                || c.answering
                || self.ack_rest_pending.load(Ordering::Acquire))
        {
            let now = Instant::now();
            if now >= end {
                return;
            }
            c = self
                .cv
                .wait_timeout(c, end - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Starts the two threads once a connection is attached and the QP is RTR or RTS.
    pub(crate) fn maybe_start(self: &Arc<Self>, c: &mut Core) -> std::io::Result<()> {
        if c.started || !matches!(c.state, QpState::Rtr | QpState::Rts) {
            return Ok(());
        }
        let Some((sock, _)) = c.stream.clone() else {
            return Ok(());
        };
        let tick = c
            .timeout
            .min(Duration::from_millis(100))
            .max(Duration::from_millis(1));
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
        let ok = matches!(c.state, QpState::Init | QpState::Rtr | QpState::Rts)
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
