//! The receiver thread of a queue pair: the only reader of its socket.
//!
//! As responder it executes the peer's requests in PSN order: every WRITE / READ frame's rkey,
//! access flag and exact bounds are checked (in this QP's protection domain, under the region's
//! gate) before a byte is touched, and the payload is received straight into the granted range.
//! Any violation is answered with a NAK and the QP fails; the offending payload is drained
//! into a scratch buffer, never into registered memory. As requester it matches ACKs, NAKs and
//! READ responses against the outstanding work requests and completes them.

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::frame::{
    HEADER_LEN, Header, NakCode, Opcode, PSN_MASK, TRAILER_LEN, decode_header, frame_crc, trailer,
};
use super::mr::Granted;
use super::qp::{MAX_RD_ATOMIC, QpState};
use super::shared::{QpShared, Resp, Shut};
use super::wr::Access;
use super::wr::{WcOpcode, WcStatus};

/// How long a NAK-ing responder keeps draining before closing.
const DRAIN: Duration = Duration::from_secs(2);

/// Why receiving stopped.
enum Stop {
    /// QP already in `Err`.
    Closed,
    /// Socket error, EOF or stall: fail the oldest request with `RetryExceeded`.
    Wire,
    /// A request we refuse: NAK it.
    Nak(u32, NakCode),
    /// A response inconsistent with our requests: fail with this status.
    Bad(WcStatus),
}

/// A multi-frame message being received.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Msg {
    Write(u64),
    Send(u64),
}

struct Rx<'a> {
    qp: &'a Arc<QpShared>,
    sock: &'a TcpStream,
    progress: Instant,
    epsn: u32,
    msg: Option<Msg>,
    /// The frame being received: its checksum so far (started over its raw header).
    crc: s3_lite::checksum::Crc32c,
}

pub(crate) fn run(qp: &Arc<QpShared>, sock: &Arc<TcpStream>, epsn: u32) {
    let mut rx = Rx {
        qp,
        sock,
        progress: Instant::now(),
        epsn,
        msg: None,
        crc: s3_lite::checksum::Crc32c::new(),
    };
    let stop = loop {
        if let Err(s) = rx.one() {
            break s;
        }
    };
    let mut c = qp.lock();
    match stop {
        Stop::Closed => {}
        Stop::Wire => {
            let culprit = c
                .outstanding
                .front()
                .map(|o| (o.first_seq, WcStatus::RetryExceeded));
            qp.fail(&mut c, culprit, Shut::Both);
        }
        Stop::Bad(st) => {
            let culprit = c.outstanding.front().map(|o| (o.first_seq, st));
            qp.fail(&mut c, culprit, Shut::Both);
        }
        Stop::Nak(psn, code) => {
            if c.state != QpState::Err {
                c.responses.clear();
                c.responses.push_back(Resp::Nak(psn, code));
                qp.cv.notify_all();
            }
            drop(c);
            drain(sock);
            // Also ends the sender if the NAK could not be sent.
            let mut c = qp.lock();
            qp.fail(&mut c, None, Shut::Both);
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Reads and discards until EOF, an error or [`DRAIN`]: the peer learns of the NAK before it
/// sees the connection reset.
fn drain(sock: &TcpStream) {
    let end = Instant::now() + DRAIN;
    let mut scratch = [0u8; 16 * 1024];
    while Instant::now() < end {
        match (&*sock).read(&mut scratch) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return,
        }
    }
}

impl Rx<'_> {
    /// After a read timed out: stop if the QP failed, or if nothing arrived for the timeout
    /// while we are mid-frame or wait for an answer.
    fn stalled(&self, mid_frame: bool) -> Result<(), Stop> {
        let c = self.qp.lock();
        if c.state == QpState::Err {
            return Err(Stop::Closed);
        }
        let quiet = self.progress.elapsed() > c.timeout;
        let waiting = c
            .outstanding
            .front()
            .is_some_and(|o| o.sent_at.elapsed() > c.timeout);
        if quiet && (mid_frame || waiting) {
            Err(Stop::Wire)
        } else {
            Ok(())
        }
    }

    fn read_header(&mut self) -> Result<[u8; HEADER_LEN], Stop> {
        let mut b = [0u8; HEADER_LEN];
        self.read_exact(&mut b, false)?;
        Ok(b)
    }

    /// Reads the frame's trailer and compares it with the checksum of what was received
    /// (`refuse` when they differ: the frame changed on the way).
    fn check_trailer(&mut self, refuse: Stop) -> Result<(), Stop> {
        let mut t = [0u8; TRAILER_LEN];
        self.read_exact(&mut t, true)?;
        if t == trailer(&self.crc) {
            Ok(())
        } else {
            Err(refuse)
        }
    }

    /// Fills `b` from the socket (`mid_frame`: a stall counts as a dead peer at once).
    fn read_exact(&mut self, b: &mut [u8], mid_frame: bool) -> Result<(), Stop> {
        let mut got = 0;
        while got < b.len() {
            match (&*self.sock).read(b.get_mut(got..).unwrap_or(&mut [])) {
                Ok(0) => return Err(Stop::Wire),
                Ok(n) => {
                    got += n;
                    self.progress = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    self.stalled(mid_frame || got > 0)?;
                }
                Err(_) => return Err(Stop::Wire),
            }
        }
        Ok(())
    }

    /// Receives `len` payload bytes straight into the granted range and feeds them to the
    /// frame's checksum piece by piece, as each `recv` lands them (still in cache), rather
    /// than in a second pass over the whole frame.
    fn payload(&mut self, g: &Granted<'_>, len: u32) -> Result<(), Stop> {
        let len = len as usize;
        let mut got = 0usize;
        while got < len {
            match g.mem.recv_into(self.sock, g.off + got, len - got) {
                Ok(0) => return Err(Stop::Wire),
                Ok(n) => {
                    g.mem
                        .crc32c_into(&mut self.crc, g.off + got, n)
                        .map_err(|_| Stop::Wire)?;
                    got += n;
                    self.progress = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    self.stalled(true)?;
                }
                Err(_) => return Err(Stop::Wire),
            }
        }
        Ok(())
    }

    fn one(&mut self) -> Result<(), Stop> {
        let raw = self.read_header()?;
        let h = match decode_header(&raw) {
            Ok(h) => h,
            Err(_) => return Err(Stop::Nak(self.epsn, NakCode::InvalidRequest)),
        };
        self.crc = frame_crc(&raw);
        match h.opcode {
            Opcode::Write | Opcode::WriteImm => self.write(&h),
            Opcode::Send | Opcode::SendImm => self.send(&h),
            Opcode::ReadReq => self.read_req(&h),
            Opcode::Ack => self.ack(h.psn),
            Opcode::Nak => self.nak(&h),
            Opcode::ReadResp => self.read_resp(&h),
            _ => Err(Stop::Nak(self.epsn, NakCode::InvalidRequest)),
        }
    }

    /// PSN order and the QP's own access flags, for every request frame.
    fn admit(&self, h: &Header, need: Option<Access>) -> Result<(), Stop> {
        if h.psn != self.epsn {
            return Err(Stop::Nak(h.psn, NakCode::Sequence));
        }
        if let Some(need) = need
            && !self.qp.lock().access.contains(need)
        {
            return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
        }
        Ok(())
    }

    /// Message framing: FIRST opens, LAST closes, nothing interleaves.
    fn sequence(&mut self, h: &Header, send: bool) -> Result<u64, Stop> {
        let so_far = match (self.msg, h.first()) {
            (None, true) => 0,
            (Some(Msg::Write(n)), false) if !send => n,
            (Some(Msg::Send(n)), false) if send => n,
            _ => return Err(Stop::Nak(h.psn, NakCode::InvalidRequest)),
        };
        let total = so_far + u64::from(h.len);
        if total > u64::from(u32::MAX) {
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        Ok(total)
    }

    /// Executed: advance the expected PSN and acknowledge. With no answer queued or being
    /// sent, the ACK is written here at once without blocking ([`QpShared::ack_now`]: no
    /// hand-off to the sender thread, whose wake-up would cost a context switch per
    /// message); otherwise it is queued behind the answers (coalesced) for the sender.
    fn executed(&mut self, psn: u32) {
        self.epsn = (self.epsn + 1) & PSN_MASK;
        let mut c = self.qp.lock();
        if c.state != QpState::Err && c.responses.is_empty() && !c.answering {
            // Only this thread queues answers, so `responses` stays empty meanwhile.
            drop(c);
            if self.qp.ack_now(self.sock, psn) {
                return;
            }
            c = self.qp.lock();
        }
        c.push_ack(psn);
        self.qp.cv.notify_all();
    }

    /// Reserves the next RECV, waiting up to `rnr_wait` for one to be posted.
    fn take_recv(&self, psn: u32) -> Result<(), Stop> {
        let mut c = self.qp.lock();
        let end = Instant::now() + c.rnr_wait;
        while c.cur_recv.is_none() {
            if c.state == QpState::Err {
                return Err(Stop::Closed);
            }
            if let Some(r) = c.rq.pop_front() {
                c.cur_recv = Some(r);
                break;
            }
            let now = Instant::now();
            if now >= end {
                return Err(Stop::Nak(psn, NakCode::RnrTimeout));
            }
            c = self
                .qp
                .cv
                .wait_timeout(c, end - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        Ok(())
    }

    fn write(&mut self, h: &Header) -> Result<(), Stop> {
        self.admit(h, Some(Access::REMOTE_WRITE))?;
        let total = self.sequence(h, false)?;
        let refuse = Stop::Nak(h.psn, NakCode::RemoteAccess);
        let mr = self
            .qp
            .pd
            .by_rkey(h.rkey)
            .ok_or(Stop::Nak(h.psn, NakCode::RemoteAccess))?;
        if h.opcode == Opcode::WriteImm {
            // The grant is checked before waiting for a RECV (an access error is not an RNR
            // condition), and again after: the window may be re-keyed meanwhile.
            if mr
                .remote(h.rkey, h.addr, u64::from(h.len), Access::REMOTE_WRITE)
                .is_none()
            {
                return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
            }
            self.take_recv(h.psn)?;
        }
        let g = mr
            .remote(h.rkey, h.addr, u64::from(h.len), Access::REMOTE_WRITE)
            .ok_or(refuse)?;
        self.payload(&g, h.len)?;
        drop(g);
        self.check_trailer(Stop::Nak(h.psn, NakCode::Checksum))?;
        self.msg = (!h.last()).then_some(Msg::Write(total));
        // The ACK is queued before the completion is posted, as a NIC acknowledges a message
        // as it places it: an application that answers "done" on this completion and destroys
        // the QP then still lets the ACK leave (QpShared::drain_answers).
        self.executed(h.psn);
        if h.opcode == Opcode::WriteImm {
            let r = self.qp.lock().cur_recv.take();
            if let Some(r) = r {
                let mut wc = self
                    .qp
                    .wc(r.wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
                wc.byte_len = total as u32;
                wc.imm_data = Some(h.imm);
                self.qp.complete_recv(wc);
            }
        }
        Ok(())
    }

    fn send(&mut self, h: &Header) -> Result<(), Stop> {
        self.admit(h, None)?;
        let total = self.sequence(h, true)?;
        if h.first() {
            self.take_recv(h.psn)?;
        }
        let (sge, mr) = {
            let c = self.qp.lock();
            let r = c.cur_recv.as_ref().ok_or(Stop::Closed)?;
            (r.wr.sge, r.mr.clone())
        };
        let room = sge.map_or(0, |s| u64::from(s.length));
        if total > room {
            self.fail_recv(WcStatus::LocalLengthError);
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        if let (Some(sge), Some(mr)) = (sge, mr) {
            let at = sge.addr + (total - u64::from(h.len));
            let g = match mr.local(at, u64::from(h.len), Access::LOCAL_WRITE) {
                Ok(g) => g,
                Err(st) => {
                    self.fail_recv(st);
                    return Err(Stop::Nak(h.psn, NakCode::RemoteOperation));
                }
            };
            self.payload(&g, h.len)?;
        }
        if let Err(stop) = self.check_trailer(Stop::Nak(h.psn, NakCode::Checksum)) {
            self.fail_recv(WcStatus::RemoteOperationError);
            return Err(stop);
        }
        self.msg = (!h.last()).then_some(Msg::Send(total));
        // ACK first, then the completion (see `write`).
        self.executed(h.psn);
        if h.last() {
            let r = self.qp.lock().cur_recv.take();
            if let Some(r) = r {
                let mut wc = self.qp.wc(r.wr.wr_id, WcStatus::Success, WcOpcode::Recv);
                wc.byte_len = total as u32;
                wc.imm_data = (h.opcode == Opcode::SendImm).then_some(h.imm);
                self.qp.complete_recv(wc);
            }
        }
        Ok(())
    }

    /// Completes the reserved RECV with an error (it is not flushed then).
    fn fail_recv(&self, st: WcStatus) {
        let r = self.qp.lock().cur_recv.take();
        if let Some(r) = r {
            self.qp
                .complete_recv(self.qp.wc(r.wr.wr_id, st, WcOpcode::Recv));
        }
    }

    fn read_req(&mut self, h: &Header) -> Result<(), Stop> {
        self.admit(h, Some(Access::REMOTE_READ))?;
        if self.msg.is_some() {
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        let len = u32::try_from(h.aux).map_err(|_| Stop::Nak(h.psn, NakCode::InvalidRequest))?;
        let mr = self
            .qp
            .pd
            .by_rkey(h.rkey)
            .ok_or(Stop::Nak(h.psn, NakCode::RemoteAccess))?;
        if mr
            .remote(h.rkey, h.addr, u64::from(len), Access::REMOTE_READ)
            .is_none()
        {
            return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
        }
        let mut c = self.qp.lock();
        if c.reads_pending >= MAX_RD_ATOMIC {
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        c.reads_pending += 1;
        c.responses.push_back(Resp::Read {
            psn: h.psn,
            mr,
            rkey: h.rkey,
            addr: h.addr,
            len,
        });
        self.qp.cv.notify_all();
        drop(c);
        self.epsn = (self.epsn + 1) & PSN_MASK;
        Ok(())
    }

    /// ACK: complete every write/send ending at or before `psn`.
    fn ack(&mut self, psn: u32) -> Result<(), Stop> {
        let mut c = self.qp.lock();
        let through = c.seq_of(psn).ok_or(Stop::Bad(WcStatus::BadResponse))?;
        while let Some(o) = c.outstanding.front() {
            if o.last_seq > through {
                break;
            }
            if o.read.is_some() {
                // An ACK past a READ whose answer is incomplete: the peer skipped it.
                return Err(Stop::Bad(WcStatus::BadResponse));
            }
            if let Some(o) = c.outstanding.pop_front() {
                self.qp.complete_ok(&o);
            }
        }
        c.first_unacked = through + 1;
        // The ACK opens the PSN window, which only a sender with requests queued waits for
        // (a wake-up of an idle sender thread is a futex call and a context switch per op).
        if !c.sq.is_empty() {
            self.qp.cv.notify_all();
        }
        Ok(())
    }

    /// NAK: what came before succeeded, the named request failed, the rest is flushed.
    fn nak(&mut self, h: &Header) -> Result<(), Stop> {
        let code = NakCode::from_u64(h.aux).unwrap_or(NakCode::InvalidRequest);
        let status = match code {
            NakCode::RemoteAccess => WcStatus::RemoteAccessError,
            NakCode::RnrTimeout => WcStatus::RnrRetryExceeded,
            NakCode::RemoteOperation | NakCode::Checksum => WcStatus::RemoteOperationError,
            _ => WcStatus::RemoteInvalidRequest,
        };
        let mut c = self.qp.lock();
        let seq = c.seq_of(h.psn).ok_or(Stop::Bad(WcStatus::BadResponse))?;
        while c
            .outstanding
            .front()
            .is_some_and(|o| o.last_seq < seq && o.read.is_none())
        {
            if let Some(o) = c.outstanding.pop_front() {
                self.qp.complete_ok(&o);
            }
        }
        let culprit = c
            .outstanding
            .iter()
            .find(|o| o.first_seq <= seq && seq <= o.last_seq)
            .map(|o| (o.first_seq, status));
        self.qp.fail(&mut c, culprit, Shut::Both);
        Err(Stop::Closed)
    }

    /// READ response: payload into the oldest outstanding READ's destination.
    fn read_resp(&mut self, h: &Header) -> Result<(), Stop> {
        let bad = Stop::Bad(WcStatus::BadResponse);
        let (mr, at, done_after) = {
            let c = self.qp.lock();
            let o = c
                .outstanding
                .front()
                .ok_or(Stop::Bad(WcStatus::BadResponse))?;
            let r = o.read.as_ref().ok_or(Stop::Bad(WcStatus::BadResponse))?;
            let end = r
                .got
                .checked_add(h.len)
                .ok_or(Stop::Bad(WcStatus::BadResponse))?;
            if c.wire_psn(o.first_seq) != h.psn || h.first() != (r.got == 0) || end > r.len {
                return Err(bad);
            }
            if h.last() != (end == r.len) {
                return Err(bad);
            }
            (Arc::clone(&r.mr), r.addr + u64::from(r.got), end)
        };
        let g = mr
            .local(at, u64::from(h.len), Access::LOCAL_WRITE)
            .map_err(Stop::Bad)?;
        self.payload(&g, h.len)?;
        drop(g);
        // A READ response changed on the way: the READ (and the QP) fail, never a success.
        self.check_trailer(Stop::Bad(WcStatus::BadResponse))?;
        let mut c = self.qp.lock();
        if let Some(r) = c.outstanding.front_mut().and_then(|o| o.read.as_mut()) {
            r.got = done_after;
        }
        if h.last()
            && let Some(o) = c.outstanding.pop_front()
        {
            self.qp.complete_ok(&o);
            c.first_unacked = o.last_seq + 1;
            c.reads_out = c.reads_out.saturating_sub(1);
            // As for an ACK: only queued requests wait for the READ window.
            if !c.sq.is_empty() {
                self.qp.cv.notify_all();
            }
        }
        Ok(())
    }
}
