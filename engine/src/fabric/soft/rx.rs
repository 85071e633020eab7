//! The read side of a queue pair, as resumable steps on its device I/O thread: the only reader
//! of its socket.
//!
//! A frame is received in parts as the socket has bytes — header, payload, checksum trailer —
//! and the state between parts is kept here ([`Rx`]), so the thread never waits on one peer.
//! As responder it executes the peer's requests in PSN order: every WRITE / READ frame's rkey,
//! access flag and exact bounds are checked (in this QP's protection domain, under the region's
//! gate) before a byte is touched, and the payload is received straight into the granted range,
//! the grant taken again for every chunk the socket delivers (a re-key or deregistration stops
//! the bytes at the next chunk). Any violation is answered with a NAK and the QP fails; the
//! rest of what the peer sends is drained and discarded, never written to registered memory.
//! A WRITE_WITH_IMM or SEND that finds no RECV posted waits for one (receiver not ready) for
//! the QP's `rnr_wait`, as a timer of the loop; reading pauses meanwhile. As requester it
//! matches ACKs, NAKs and READ responses against the outstanding work requests.

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::frame::{
    HEADER_LEN, Header, NakCode, Opcode, PSN_MASK, TRAILER_LEN, decode_header, frame_crc, trailer,
};
use super::landing::FrameDigest;
use super::mr::MrInner;
use super::qp::{MAX_RD_ATOMIC, QpState};
use super::shared::{ACK_DELAY, Core, QpShared, Resp};
use super::wr::Access;
use super::wr::{WcOpcode, WcStatus};

/// How long a NAK-ing responder keeps draining before closing.
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

/// Why receiving stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Write(u64),
    Send(u64),
}

/// Where a frame's payload lands (re-granted per chunk).
#[derive(Debug)]
enum Dst {
    /// A WRITE into the responder's window.
    Remote {
        mr: Arc<MrInner>,
        rkey: u32,
        addr: u64,
    },
    /// A SEND into the reserved RECV's buffer.
    Recv { mr: Arc<MrInner>, addr: u64 },
    /// A READ response into the outstanding READ's destination (`end`: its `got` after).
    ReadResp {
        mr: Arc<MrInner>,
        addr: u64,
        end: u32,
    },
    /// No bytes (a zero-length SEND into a RECV without a buffer).
    Nothing,
}

/// Where the receive side is.
#[derive(Debug)]
enum Step {
    Header {
        buf: [u8; HEADER_LEN],
        got: usize,
    },
    Payload {
        h: Header,
        dst: Dst,
        got: u32,
        total: u64,
    },
    /// The trailer, read together with what follows of the next frame's header.
    Trailer {
        h: Header,
        buf: [u8; TRAILER_LEN + HEADER_LEN],
        got: usize,
        total: u64,
        end: u32,
    },
    /// An [`UNCHECKED`](super::frame::UNCHECKED) WRITE frame's payload is in: it executes
    /// without a trailer.
    Received {
        h: Header,
        total: u64,
    },
    /// A WRITE_WITH_IMM / first SEND frame header waits for a RECV until `until`.
    WaitRecv {
        h: Header,
        total: u64,
        until: Instant,
    },
    /// After a NAK: discard what the peer still sends until EOF or `until`.
    Drain {
        until: Instant,
    },
}

/// How a read pass ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The socket has nothing more now.
    Blocked,
    /// The byte budget is spent; more may be waiting.
    Budget,
    /// Waiting for a RECV (reading paused).
    Waiting,
    /// The drain after a NAK is over: close.
    Drained,
}

/// The read side's resumable state (owned by the I/O thread).
#[derive(Debug)]
pub(crate) struct Rx {
    epsn: u32,
    msg: Option<Msg>,
    /// The frame being received: its checksum so far (started over its raw header).
    crc: s3_lite::checksum::Crc32c,
    /// The frame being received, a WRITE into a region that tracks its landing: the payload's
    /// digest so far (joins the region's once the frame passes its checksum).
    digest: Option<FrameDigest>,
    step: Step,
    /// The last byte received (a stall is measured from it).
    pub(crate) progress: Instant,
    /// The write side has work since the last look: answers were queued, or an ACK / READ
    /// response opened the window for queued requests (the I/O thread then writes).
    pub(crate) tx_hint: bool,
    /// An ACK is held back ([`Core::defer_ack`](super::shared::Core::defer_ack)) and must be
    /// queued by then.
    pub(crate) ack_due: Option<Instant>,
}

impl Rx {
    pub(crate) fn new(epsn: u32) -> Self {
        Self {
            epsn,
            msg: None,
            crc: s3_lite::checksum::Crc32c::new(),
            digest: None,
            step: Step::Header {
                buf: [0; HEADER_LEN],
                got: 0,
            },
            progress: Instant::now(),
            tx_hint: false,
            ack_due: None,
        }
    }

    /// Whether a frame is partly received (a stall then counts as a dead peer at once).
    pub(crate) fn mid_frame(&self) -> bool {
        match &self.step {
            Step::Header { got, .. } => *got > 0,
            Step::Payload { .. } | Step::Trailer { .. } | Step::Received { .. } => true,
            Step::WaitRecv { .. } | Step::Drain { .. } => false,
        }
    }

    /// Whether a RECV is awaited (RNR wait).
    pub(crate) fn waiting_recv(&self) -> bool {
        matches!(self.step, Step::WaitRecv { .. })
    }

    /// Whether the QP refused a request and only drains now.
    pub(crate) fn draining(&self) -> bool {
        matches!(self.step, Step::Drain { .. })
    }

    /// The next deadline of this side's own timers (RNR wait, drain).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match &self.step {
            Step::WaitRecv { until, .. } | Step::Drain { until } => Some(*until),
            _ => None,
        }
    }

    /// Starts draining after a refused request (the NAK is queued by the caller).
    pub(crate) fn start_drain(&mut self) {
        self.step = Step::Drain {
            until: Instant::now() + DRAIN,
        };
    }

    /// A RECV may have been posted, or the RNR wait may be over: resumes a waiting frame.
    pub(crate) fn retry_recv(&mut self, qp: &QpShared, now: Instant) -> Result<(), Stop> {
        let Step::WaitRecv { h, total, until } = self.step else {
            return Ok(());
        };
        if take_recv(qp)? {
            self.step = self.after_recv(qp, &h, total)?;
        } else if now >= until {
            qp.lock().rnr_waiting = false;
            return Err(Stop::Nak(h.psn, NakCode::RnrTimeout));
        }
        Ok(())
    }

    /// Reads and executes frames until the socket is empty, `budget` bytes were read, a RECV
    /// is awaited, or a stop.
    pub(crate) fn pass(
        &mut self,
        qp: &QpShared,
        sock: &TcpStream,
        budget: usize,
    ) -> Result<Pass, Stop> {
        let mut read = 0usize;
        // A header or trailer read returned less than asked: the socket is empty (a later
        // arrival is a new readiness event), so the pass ends without a call that would only
        // say so. (Payload reads retry at once: in a stream more has usually arrived.)
        let mut drained = false;
        loop {
            if drained {
                return Ok(Pass::Blocked);
            }
            // Something for the send side (an ACK, a READ answer) leaves at once: the pass
            // ends so the turn writes it, and reading resumes right after. Held behind the
            // rest of the pass (up to the budget of other frames), ACKs held the peer's
            // sender back: measured on 16 cores, 8 QPs with two range-gets each, 1 MiB and
            // 16 MiB reads ran at a half and a quarter of the rate with one ACK per pass.
            if self.tx_hint || read >= budget {
                return Ok(Pass::Budget);
            }
            match &mut self.step {
                Step::WaitRecv { .. } => return Ok(Pass::Waiting),
                Step::Drain { until } => {
                    let until = *until;
                    return drain(sock, until);
                }
                Step::Header { buf, got } => {
                    if *got < HEADER_LEN {
                        drained = match fill_counted(sock, buf, got, &mut read, &mut self.progress)?
                        {
                            Some(short) => short,
                            None => return Ok(Pass::Blocked),
                        };
                        if *got < HEADER_LEN {
                            return Ok(Pass::Blocked);
                        }
                    }
                    let raw = *buf;
                    self.step = self.on_header(qp, &raw)?;
                }
                Step::Payload { h, dst, got, total } => {
                    let rest = h.len - *got;
                    let at = u64::from(*got);
                    let n = {
                        let g = match dst {
                            Dst::Remote { mr, rkey, addr } => mr
                                .remote(
                                    *rkey,
                                    addr.wrapping_add(at),
                                    u64::from(rest),
                                    Access::REMOTE_WRITE,
                                )
                                .ok_or(Stop::Nak(h.psn, NakCode::RemoteAccess))?,
                            Dst::Recv { mr, addr } => match mr.local(
                                addr.wrapping_add(at),
                                u64::from(rest),
                                Access::LOCAL_WRITE,
                            ) {
                                Ok(g) => g,
                                Err(st) => {
                                    fail_recv(qp, st);
                                    return Err(Stop::Nak(h.psn, NakCode::RemoteOperation));
                                }
                            },
                            Dst::ReadResp { mr, addr, .. } => mr
                                .local(addr.wrapping_add(at), u64::from(rest), Access::LOCAL_WRITE)
                                .map_err(Stop::Bad)?,
                            Dst::Nothing => return Err(Stop::Nak(h.psn, NakCode::InvalidRequest)),
                        };
                        match g.mem.recv_into(sock, g.off, rest as usize) {
                            Ok(0) => return Err(Stop::Wire),
                            Ok(n) => {
                                // Fed to the checksums as it lands (still in cache).
                                let landing = self.digest.as_mut().map(FrameDigest::crc);
                                let crc = h.has_trailer().then_some(&mut self.crc);
                                g.mem
                                    .checksum_into(crc, landing, g.off, n)
                                    .map_err(|_| Stop::Wire)?;
                                n
                            }
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                return Ok(Pass::Blocked);
                            }
                            Err(_) => return Err(Stop::Wire),
                        }
                    };
                    read += n;
                    self.progress = Instant::now();
                    *got += n as u32;
                    if *got == h.len {
                        let next = Self::after_payload(h, dst, *total);
                        self.step = next;
                    }
                }
                Step::Received { h, total } => {
                    // No trailer to check (the receiver checks these bytes end to end).
                    let (h, total) = (*h, *total);
                    self.execute(qp, &h, total, 0, header_step())?;
                }
                Step::Trailer {
                    h,
                    buf,
                    got,
                    total,
                    end,
                } => {
                    // The trailer and, if there, the next frame's header in one read: a short
                    // read tells the socket is empty without another call.
                    drained = match fill_counted(sock, buf, got, &mut read, &mut self.progress)? {
                        Some(short) => short,
                        None => return Ok(Pass::Blocked),
                    };
                    if *got < TRAILER_LEN {
                        if drained {
                            return Ok(Pass::Blocked);
                        }
                        continue;
                    }
                    let (h, total, end) = (*h, *total, *end);
                    if buf.get(..TRAILER_LEN) != Some(&trailer(&self.crc)[..]) {
                        return Err(self.corrupt(qp, &h));
                    }
                    // Verified.
                    let mut next = [0; HEADER_LEN];
                    let ahead = buf.get(TRAILER_LEN..*got).unwrap_or(&[]);
                    if let Some(d) = next.get_mut(..ahead.len()) {
                        d.copy_from_slice(ahead);
                    }
                    let next = Step::Header {
                        buf: next,
                        got: ahead.len(),
                    };
                    self.execute(qp, &h, total, end, next)?;
                }
            }
        }
    }

    /// The frame's trailer disagrees with what arrived: the frame changed on the way.
    fn corrupt(&self, qp: &QpShared, h: &Header) -> Stop {
        match h.opcode {
            Opcode::Send | Opcode::SendImm => {
                fail_recv(qp, WcStatus::RemoteOperationError);
                Stop::Nak(h.psn, NakCode::Checksum)
            }
            // A READ response changed on the way: the READ (and the QP) fail, never a success.
            Opcode::ReadResp => Stop::Bad(WcStatus::BadResponse),
            _ => Stop::Nak(h.psn, NakCode::Checksum),
        }
    }

    /// A header arrived: decide what its frame is and where its payload goes.
    fn on_header(&mut self, qp: &QpShared, raw: &[u8; HEADER_LEN]) -> Result<Step, Stop> {
        let h = match decode_header(raw) {
            Ok(h) => h,
            Err(_) => return Err(Stop::Nak(self.epsn, NakCode::InvalidRequest)),
        };
        self.crc = frame_crc(raw);
        self.digest = None;
        match h.opcode {
            Opcode::Write | Opcode::WriteImm => self.write(qp, &h),
            Opcode::Send | Opcode::SendImm => self.send(qp, &h),
            Opcode::ReadReq => {
                self.read_req(qp, &h)?;
                self.tx_hint = true;
                Ok(header_step())
            }
            Opcode::Ack => {
                self.tx_hint |= ack(qp, h.psn)?;
                Ok(header_step())
            }
            Opcode::Nak => Err(nak(qp, &h)),
            Opcode::ReadResp => read_resp_start(qp, &h),
            _ => Err(Stop::Nak(self.epsn, NakCode::InvalidRequest)),
        }
    }

    /// The payload step for `h`, or straight past it when it carries no bytes.
    fn payload(h: &Header, dst: Dst, total: u64) -> Step {
        if h.len == 0 {
            Self::after_payload(h, &dst, total)
        } else {
            Step::Payload {
                h: *h,
                dst,
                got: 0,
                total,
            }
        }
    }

    /// PSN order and the QP's own access flags, for every request frame.
    fn admit(&self, qp: &QpShared, h: &Header, need: Option<Access>) -> Result<(), Stop> {
        if h.psn != self.epsn {
            return Err(Stop::Nak(h.psn, NakCode::Sequence));
        }
        if let Some(need) = need
            && !qp.lock().access.contains(need)
        {
            return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
        }
        Ok(())
    }

    /// Message framing: FIRST opens, LAST closes, nothing interleaves.
    fn sequence(&self, h: &Header, send: bool) -> Result<u64, Stop> {
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

    fn write(&mut self, qp: &QpShared, h: &Header) -> Result<Step, Stop> {
        self.admit(qp, h, Some(Access::REMOTE_WRITE))?;
        let total = self.sequence(h, false)?;
        // The grant is checked before waiting for a RECV (an access error is not an RNR
        // condition), and again for every chunk of payload.
        write_target(qp, h)?;
        if h.opcode == Opcode::WriteImm && !take_recv(qp)? {
            return Ok(self.wait_recv(qp, h, total));
        }
        self.after_recv(qp, h, total)
    }

    fn send(&mut self, qp: &QpShared, h: &Header) -> Result<Step, Stop> {
        self.admit(qp, h, None)?;
        let total = self.sequence(h, true)?;
        if h.first() && !take_recv(qp)? {
            return Ok(self.wait_recv(qp, h, total));
        }
        self.after_recv(qp, h, total)
    }

    /// Pauses `h` until a RECV is posted or the RNR wait ends.
    fn wait_recv(&self, qp: &QpShared, h: &Header, total: u64) -> Step {
        let mut c = qp.lock();
        c.rnr_waiting = true;
        Step::WaitRecv {
            h: *h,
            total,
            until: Instant::now() + c.rnr_wait,
        }
    }

    /// The payload step of a WRITE / SEND frame whose RECV (if it needs one) is reserved.
    fn after_recv(&mut self, qp: &QpShared, h: &Header, total: u64) -> Result<Step, Stop> {
        if matches!(h.opcode, Opcode::Write | Opcode::WriteImm) {
            // Checked again: the window may have been re-keyed while waiting for the RECV.
            let mr = write_target(qp, h)?;
            // Without a trailer only into a region whose landing digest is checked end to end.
            if h.unchecked() && mr.landing().is_none() {
                return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
            }
            self.digest = mr
                .landing()
                .and_then(|l| mr.offset_of(h.addr).and_then(|off| l.begin(off)));
            let dst = Dst::Remote {
                mr,
                rkey: h.rkey,
                addr: h.addr,
            };
            return Ok(Self::payload(h, dst, total));
        }
        let (sge, mr) = {
            let c = qp.lock();
            let r = c.cur_recv.as_ref().ok_or(Stop::Closed)?;
            (r.wr.sge, r.mr.clone())
        };
        let room = sge.map_or(0, |s| u64::from(s.length));
        if total > room {
            fail_recv(qp, WcStatus::LocalLengthError);
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        let dst = match (sge, mr) {
            (Some(sge), Some(mr)) => {
                // A RECV's buffer is written by a SEND, not by a WRITE in order.
                mr.break_landing();
                let at = sge.addr + (total - u64::from(h.len));
                if let Err(st) = mr.local(at, u64::from(h.len), Access::LOCAL_WRITE) {
                    fail_recv(qp, st);
                    return Err(Stop::Nak(h.psn, NakCode::RemoteOperation));
                }
                Dst::Recv { mr, addr: at }
            }
            _ => Dst::Nothing,
        };
        Ok(Self::payload(h, dst, total))
    }

    /// What follows `h`'s payload: its trailer, or (an [`UNCHECKED`](super::frame::UNCHECKED)
    /// WRITE) its execution.
    fn after_payload(h: &Header, dst: &Dst, total: u64) -> Step {
        if !h.has_trailer() {
            return Step::Received { h: *h, total };
        }
        let end = match dst {
            Dst::ReadResp { end, .. } => *end,
            _ => 0,
        };
        Step::Trailer {
            h: *h,
            buf: [0; TRAILER_LEN + HEADER_LEN],
            got: 0,
            total,
            end,
        }
    }

    /// A frame with payload passed its checksum, or needs none: its payload joins the region's
    /// landing digest before the frame executes (and is acknowledged), and receiving goes on
    /// at `next`.
    fn execute(
        &mut self,
        qp: &QpShared,
        h: &Header,
        total: u64,
        end: u32,
        next: Step,
    ) -> Result<(), Stop> {
        if let Some(d) = self.digest.take() {
            d.join();
        }
        self.step = next;
        self.complete(qp, h, total, end)
    }

    /// A frame with payload passed its checksum: execute it.
    fn complete(&mut self, qp: &QpShared, h: &Header, total: u64, end: u32) -> Result<(), Stop> {
        match h.opcode {
            Opcode::Write | Opcode::WriteImm => {
                self.msg = (!h.last()).then_some(Msg::Write(total));
                // The ACK is queued before the completion is posted, as a NIC acknowledges a
                // message as it places it: an application that answers "done" on this
                // completion and destroys the QP then still lets the ACK leave
                // (QpShared::drain_answers).
                self.executed(qp, h);
                if h.opcode == Opcode::WriteImm {
                    let r = qp.lock().cur_recv.take();
                    if let Some(r) = r {
                        let mut wc =
                            qp.wc(r.wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
                        wc.byte_len = total as u32;
                        wc.imm_data = Some(h.imm);
                        qp.complete_recv(wc);
                    }
                }
                Ok(())
            }
            Opcode::Send | Opcode::SendImm => {
                self.msg = (!h.last()).then_some(Msg::Send(total));
                // ACK first, then the completion (see above).
                self.executed(qp, h);
                if h.last() {
                    let r = qp.lock().cur_recv.take();
                    if let Some(r) = r {
                        let mut wc = qp.wc(r.wr.wr_id, WcStatus::Success, WcOpcode::Recv);
                        wc.byte_len = total as u32;
                        wc.imm_data = (h.opcode == Opcode::SendImm).then_some(h.imm);
                        qp.complete_recv(wc);
                    }
                }
                Ok(())
            }
            Opcode::ReadResp => {
                self.tx_hint |= read_resp_done(qp, h, end);
                Ok(())
            }
            _ => Err(Stop::Bad(WcStatus::BadResponse)),
        }
    }

    /// Executed: advance the expected PSN and queue the (coalesced) ACK; the I/O thread writes
    /// it after this read pass. An [`ACK_LATER`](super::frame::ACK_LATER) frame's ACK is held
    /// back instead, until a later ACK carries it, it covers `ACK_BATCH` messages, or
    /// [`ACK_DELAY`] passed (the I/O thread's timer, [`Rx::ack_due`]); reading goes on.
    fn executed(&mut self, qp: &QpShared, h: &Header) {
        self.epsn = (self.epsn + 1) & PSN_MASK;
        let mut c = qp.lock();
        if c.state == QpState::Err {
            return;
        }
        let queued = if h.ack_later() {
            c.counters.frames_acked_later += 1;
            c.defer_ack(h.psn, h.last())
        } else {
            c.push_ack(h.psn);
            true
        };
        if queued {
            self.ack_due = None;
            self.tx_hint = true;
        } else {
            self.ack_due
                .get_or_insert_with(|| Instant::now() + ACK_DELAY);
        }
    }

    /// Queues a held-back ACK whose time is up (`now` past [`Rx::ack_due`]). `true`: queued.
    pub(crate) fn ack_timer(&mut self, qp: &QpShared, now: Instant) -> bool {
        if self.ack_due.is_none_or(|d| now < d) {
            return false;
        }
        self.ack_due = None;
        qp.lock().flush_deferred_ack()
    }

    fn read_req(&mut self, qp: &QpShared, h: &Header) -> Result<(), Stop> {
        self.admit(qp, h, Some(Access::REMOTE_READ))?;
        if self.msg.is_some() {
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        let len = u32::try_from(h.aux).map_err(|_| Stop::Nak(h.psn, NakCode::InvalidRequest))?;
        let mr = qp
            .pd
            .by_rkey(h.rkey)
            .ok_or(Stop::Nak(h.psn, NakCode::RemoteAccess))?;
        if mr
            .remote(h.rkey, h.addr, u64::from(len), Access::REMOTE_READ)
            .is_none()
        {
            return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
        }
        let mut c = qp.lock();
        if c.reads_pending >= MAX_RD_ATOMIC {
            return Err(Stop::Nak(h.psn, NakCode::InvalidRequest));
        }
        c.reads_pending += 1;
        // A held-back ACK goes before the READ's answer: the requester completes its requests
        // in order, so a READ response behind an unacknowledged WRITE would be a protocol
        // error there, and the held ACK sent after it would name an acknowledged PSN.
        c.flush_deferred_ack();
        c.responses.push_back(Resp::Read {
            psn: h.psn,
            mr,
            rkey: h.rkey,
            addr: h.addr,
            len,
        });
        drop(c);
        self.epsn = (self.epsn + 1) & PSN_MASK;
        Ok(())
    }
}

/// The region a WRITE frame `h` targets, if its rkey names one that grants remote write over
/// the frame's whole range; otherwise the remote-access NAK.
fn write_target(qp: &QpShared, h: &Header) -> Result<Arc<MrInner>, Stop> {
    let mr = qp
        .pd
        .by_rkey(h.rkey)
        .ok_or(Stop::Nak(h.psn, NakCode::RemoteAccess))?;
    if mr
        .remote(h.rkey, h.addr, u64::from(h.len), Access::REMOTE_WRITE)
        .is_none()
    {
        return Err(Stop::Nak(h.psn, NakCode::RemoteAccess));
    }
    Ok(mr)
}

fn header_step() -> Step {
    Step::Header {
        buf: [0; HEADER_LEN],
        got: 0,
    }
}

/// Reads into `buf[*got..]`; `None`: nothing available now. EOF is a dead wire.
/// [`fill`], counted: adds the bytes to `read`, marks `progress`, and says whether the read
/// came back short (the socket is empty: a later arrival is a new readiness event).
fn fill_counted(
    sock: &TcpStream,
    buf: &mut [u8],
    got: &mut usize,
    read: &mut usize,
    progress: &mut Instant,
) -> Result<Option<bool>, Stop> {
    let want = buf.len().saturating_sub(*got);
    let Some(n) = fill(sock, buf, got)? else {
        return Ok(None);
    };
    *read += n;
    *progress = Instant::now();
    Ok(Some(n < want))
}

fn fill(sock: &TcpStream, buf: &mut [u8], got: &mut usize) -> Result<Option<usize>, Stop> {
    loop {
        match (&*sock).read(buf.get_mut(*got..).unwrap_or(&mut [])) {
            Ok(0) => return Err(Stop::Wire),
            Ok(n) => {
                *got += n;
                return Ok(Some(n));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(_) => return Err(Stop::Wire),
        }
    }
}

/// Reads and discards until the socket is empty (`Blocked`), or EOF, an error or `until`
/// (`Drained`): the peer learns of the NAK before it sees the connection reset.
fn drain(sock: &TcpStream, until: Instant) -> Result<Pass, Stop> {
    let mut scratch = [0u8; 16 * 1024];
    loop {
        if Instant::now() >= until {
            return Ok(Pass::Drained);
        }
        match (&*sock).read(&mut scratch) {
            Ok(0) => return Ok(Pass::Drained),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Pass::Blocked),
            Err(_) => return Ok(Pass::Drained),
        }
    }
}

/// Reserves the next RECV if one is posted (`false`: none yet).
fn take_recv(qp: &QpShared) -> Result<bool, Stop> {
    let mut c = qp.lock();
    if c.state == QpState::Err {
        return Err(Stop::Closed);
    }
    if c.cur_recv.is_none() {
        match c.rq.pop_front() {
            Some(r) => c.cur_recv = Some(r),
            None => return Ok(false),
        }
    }
    c.rnr_waiting = false;
    Ok(true)
}

/// Completes the reserved RECV with an error (it is not flushed then).
fn fail_recv(qp: &QpShared, st: WcStatus) {
    let r = qp.lock().cur_recv.take();
    if let Some(r) = r {
        qp.complete_recv(qp.wc(r.wr.wr_id, st, WcOpcode::Recv));
    }
}

/// ACK: complete every write/send ending at or before `psn`. `true`: requests are queued (the
/// window may have opened for them). A duplicate ACK, for a PSN already acknowledged (a READ
/// response acknowledged it first), is dropped, as an RC requester does; one for a PSN never
/// sent fails the QP.
fn ack(qp: &QpShared, psn: u32) -> Result<bool, Stop> {
    let mut c = qp.lock();
    let Some(through) = c.seq_of(psn) else {
        return if c.acked_already(psn) {
            Ok(false)
        } else {
            Err(Stop::Bad(WcStatus::BadResponse))
        };
    };
    while let Some(o) = c.outstanding.front() {
        if o.last_seq > through {
            break;
        }
        if o.read.is_some() {
            // An ACK past a READ whose answer is incomplete: the peer skipped it.
            return Err(Stop::Bad(WcStatus::BadResponse));
        }
        if let Some(o) = c.outstanding.pop_front() {
            qp.complete_ok(&o);
        }
    }
    c.first_unacked = through + 1;
    Ok(!c.sq.is_empty())
}

/// Completes successfully the WRITEs and SENDs at the front of the outstanding requests that
/// end before `seq` (an answer about `seq` acknowledges them: the responder executes in order);
/// stops at the first READ, whose own answer completes it.
fn complete_writes_before(qp: &QpShared, c: &mut Core, seq: u64) {
    while c
        .outstanding
        .front()
        .is_some_and(|o| o.read.is_none() && o.last_seq < seq)
    {
        if let Some(o) = c.outstanding.pop_front() {
            qp.complete_ok(&o);
            c.first_unacked = o.last_seq + 1;
        }
    }
}

/// NAK: what came before succeeded, the named request failed, the rest is flushed.
fn nak(qp: &QpShared, h: &Header) -> Stop {
    let code = NakCode::from_u64(h.aux).unwrap_or(NakCode::InvalidRequest);
    let status = match code {
        NakCode::RemoteAccess => WcStatus::RemoteAccessError,
        NakCode::RnrTimeout => WcStatus::RnrRetryExceeded,
        NakCode::RemoteOperation | NakCode::Checksum => WcStatus::RemoteOperationError,
        _ => WcStatus::RemoteInvalidRequest,
    };
    let mut c = qp.lock();
    let Some(seq) = c.seq_of(h.psn) else {
        return Stop::Bad(WcStatus::BadResponse);
    };
    complete_writes_before(qp, &mut c, seq);
    let culprit = c
        .outstanding
        .iter()
        .find(|o| o.first_seq <= seq && seq <= o.last_seq)
        .map(|o| (o.first_seq, status));
    qp.fail(&mut c, culprit, super::shared::Shut::Both);
    Stop::Closed
}

/// A READ response header: its payload lands in the oldest outstanding READ's destination.
/// The responder executes requests in order, so the response acknowledges every WRITE / SEND
/// before the READ (an RC requester takes it so; the ACK may still come, and is dropped then).
fn read_resp_start(qp: &QpShared, h: &Header) -> Result<Step, Stop> {
    let bad = Stop::Bad(WcStatus::BadResponse);
    let mut c = qp.lock();
    let seq = c.seq_of(h.psn).ok_or(bad)?;
    complete_writes_before(qp, &mut c, seq);
    let o = c.outstanding.front().ok_or(bad)?;
    let r = o.read.as_ref().ok_or(bad)?;
    let end = r.got.checked_add(h.len).ok_or(bad)?;
    if c.wire_psn(o.first_seq) != h.psn || h.first() != (r.got == 0) || end > r.len {
        return Err(bad);
    }
    if h.last() != (end == r.len) {
        return Err(bad);
    }
    // A READ's destination is written by its responses, not by a WRITE in order.
    r.mr.break_landing();
    let dst = Dst::ReadResp {
        mr: Arc::clone(&r.mr),
        addr: r.addr + u64::from(r.got),
        end,
    };
    drop(c);
    Ok(Rx::payload(h, dst, 0))
}

/// A READ response frame arrived whole. `true`: requests are queued (the READ window may have
/// opened for them).
fn read_resp_done(qp: &QpShared, h: &Header, end: u32) -> bool {
    let mut c = qp.lock();
    if let Some(r) = c.outstanding.front_mut().and_then(|o| o.read.as_mut()) {
        r.got = end;
    }
    if h.last()
        && let Some(o) = c.outstanding.pop_front()
    {
        qp.complete_ok(&o);
        c.first_unacked = o.last_seq + 1;
        c.reads_out = c.reads_out.saturating_sub(1);
    }
    !c.sq.is_empty()
}
