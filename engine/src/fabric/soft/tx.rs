//! The write side of a queue pair, as resumable steps: the frame partly written, the READ
//! answer and the request whose frames are being sent, and the choice of what goes next.
//!
//! [`pump`] runs on the QP's device I/O thread (`io.rs`) whenever the socket may take bytes or
//! there is something new to send; it writes until the socket's buffer is full (the frame's
//! remainder waits in [`Wire::cur`] for the next writable event) and never blocks. Order:
//! the frame in progress, then the READ answer in progress, then the responder's queued answers
//! (ACK / NAK / READ), then the request in progress, then the next posted request. A posting
//! thread may write a one-frame request to an idle QP itself ([`take_inline`], [`send_inline`]),
//! also without blocking: what the socket did not take is left in [`Wire::cur`] for the loop.
//!
//! Every payload chunk is sent under a fresh grant of its region (the local grant for a
//! request, the rkey's for a READ answer), so a deregistration or re-key stops the bytes at
//! the next chunk.

use std::io;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use super::frame::{
    ACK_LATER, FIRST, HEADER_LEN, Header, LAST, NakCode, Opcode, TRAILER_LEN, UNCHECKED, frame_crc,
    trailer,
};
use super::mr::MrInner;
use super::qp::{MAX_RD_ATOMIC, QpState};
use super::shared::{Core, Outstanding, Posted, QpShared, ReadDst, Resp, Shut, send_opcode};
use super::wr::Access;
use super::wr::{SendOp, WcStatus};

/// Frames in flight at most (keeps 24-bit PSNs unambiguous).
const SEQ_WINDOW: u64 = 1 << 22;

/// Largest payload a post writes from the posting thread itself ([`send_inline`]).
pub(crate) const INLINE_MAX: u32 = 1 << 20;

/// Why sending stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The QP is in `Err` (someone failed it).
    Closed,
    /// The socket broke.
    Wire,
}

/// Where a frame's payload comes from; re-granted for every chunk written.
#[derive(Debug)]
enum Source {
    /// A posted request's local buffer.
    Local { mr: Arc<MrInner>, addr: u64 },
    /// A READ answer: the responder's window, named by the requester's rkey.
    Remote {
        mr: Arc<MrInner>,
        rkey: u32,
        addr: u64,
    },
}

/// What finishing a frame means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An ACK taken off `responses`.
    Ack,
    /// A NAK: the QP fails (write side closed) once it is out.
    Nak,
    /// A READ response frame (`last`: the answer is complete).
    ReadResp { last: bool },
    /// A request frame (`last`: the request is on the wire).
    Request { last: bool, seq: u64 },
}

/// A frame being written.
#[derive(Debug)]
pub(crate) struct OutFrame {
    head: [u8; HEADER_LEN],
    payload: Option<(Source, usize)>,
    tail: [u8; TRAILER_LEN],
    tail_len: usize,
    done: usize,
    kind: Kind,
}

impl OutFrame {
    /// A frame that is its header alone (an ACK, a NAK, a READ request).
    fn header_only(head: [u8; HEADER_LEN], kind: Kind) -> Self {
        Self {
            head,
            payload: None,
            tail: [0; TRAILER_LEN],
            tail_len: 0,
            done: 0,
            kind,
        }
    }

    fn total(&self) -> usize {
        HEADER_LEN + self.payload.as_ref().map_or(0, |p| p.1) + self.tail_len
    }
}

/// A READ answer being sent.
#[derive(Debug)]
pub(crate) struct ReadJob {
    psn: u32,
    mr: Arc<MrInner>,
    rkey: u32,
    addr: u64,
    len: u32,
    off: u32,
}

/// A request whose frames are being sent.
#[derive(Debug)]
pub(crate) struct ReqJob {
    p: Posted,
    seq: u64,
    psn0: u32,
    off: u32,
    i: u32,
}

/// The write side's resumable state (behind `QpShared::wire`: whoever holds it may write).
#[derive(Debug)]
pub(crate) struct Wire {
    /// The frame partly written: finished before anything else.
    pub(crate) cur: Option<OutFrame>,
    answer: Option<ReadJob>,
    request: Option<ReqJob>,
    /// The last write progress (or the start of `cur`): a stall past the QP's timeout fails it.
    pub(crate) since: Instant,
}

impl Default for Wire {
    fn default() -> Self {
        Self {
            cur: None,
            answer: None,
            request: None,
            since: Instant::now(),
        }
    }
}

/// Writes what can be written now (see the module doc). `Ok(true)`: the socket is full with a
/// frame partly written (a writable event resumes it); `Ok(false)`: nothing more to write now.
///
/// A posting thread holding the write side (an inline post) is not waited for: it kicks the
/// I/O thread when it leaves work behind ([`send_inline`]).
pub(crate) fn pump(qp: &Arc<QpShared>, sock: &TcpStream) -> Result<bool, Stop> {
    let Some(mut w) = qp.wire_try() else {
        return Ok(false);
    };
    loop {
        if w.cur.is_some() {
            if !write_cur(qp, sock, &mut w)? {
                return Ok(true);
            }
            continue;
        }
        let mut c = qp.lock();
        if c.state == QpState::Err {
            return Err(Stop::Closed);
        }
        let fs = qp.caps.frame_size();
        if let Some(job) = w.answer.as_mut() {
            let f = match next_read_frame(job, fs) {
                Some(f) => {
                    if job.off == job.len {
                        w.answer = None;
                    }
                    f
                }
                None => {
                    // Re-keyed or deregistered since the request: refuse the rest.
                    let psn = job.psn;
                    w.answer = None;
                    nak_frame(psn, NakCode::RemoteAccess)
                }
            };
            w.cur = Some(f);
            w.since = Instant::now();
            continue;
        }
        if let Some(r) = c.responses.pop_front() {
            c.answering = true;
            w.cur = Some(match r {
                Resp::Ack(psn) => {
                    c.counters.acks_sent += 1;
                    OutFrame::header_only(Header::new(Opcode::Ack, psn).encode(), Kind::Ack)
                }
                Resp::Nak(psn, code) => nak_frame(psn, code),
                Resp::Read {
                    psn,
                    mr,
                    rkey,
                    addr,
                    len,
                } => {
                    let mut job = ReadJob {
                        psn,
                        mr,
                        rkey,
                        addr,
                        len,
                        off: 0,
                    };
                    match next_read_frame(&mut job, fs) {
                        Some(f) => {
                            if job.off != job.len {
                                w.answer = Some(job);
                            }
                            f
                        }
                        None => nak_frame(psn, NakCode::RemoteAccess),
                    }
                }
            });
            w.since = Instant::now();
            continue;
        }
        if w.request.is_none() {
            if c.state != QpState::Rts || c.requesting {
                return Ok(false);
            }
            let Some(job) = take_send(&mut c, qp.caps.frame_size()) else {
                return Ok(false);
            };
            c.requesting = true;
            w.request = Some(job);
        }
        drop(c);
        if let Some(job) = w.request.as_mut() {
            match next_request_frame(qp, job) {
                Ok((f, last)) => {
                    if last {
                        w.request = None;
                    }
                    w.cur = Some(f);
                    w.since = Instant::now();
                }
                Err(st) => {
                    // Deregistered under a posted request.
                    let seq = job.seq;
                    w.request = None;
                    let mut c = qp.lock();
                    c.requesting = false;
                    qp.fail(&mut c, Some((seq, st)), Shut::Both);
                    return Err(Stop::Closed);
                }
            }
        }
    }
}

fn nak_head(psn: u32, code: NakCode) -> [u8; HEADER_LEN] {
    Header {
        aux: code.to_u64(),
        ..Header::new(Opcode::Nak, psn)
    }
    .encode()
}

fn nak_frame(psn: u32, code: NakCode) -> OutFrame {
    OutFrame::header_only(nak_head(psn, code), Kind::Nak)
}

/// The next frame of a READ answer (advancing `job.off`), or `None` when the window no longer
/// grants the range.
fn next_read_frame(job: &mut ReadJob, frame_size: u32) -> Option<OutFrame> {
    let n = (job.len - job.off).min(frame_size);
    let at = job.addr.wrapping_add(u64::from(job.off));
    let g = job
        .mr
        .remote(job.rkey, at, u64::from(n), Access::REMOTE_READ)?;
    let mut flags = 0;
    if job.off == 0 {
        flags |= FIRST;
    }
    if job.off + n == job.len {
        flags |= LAST;
    }
    let h = Header {
        flags,
        len: n,
        ..Header::new(Opcode::ReadResp, job.psn)
    };
    let head = h.encode();
    let mut crc = frame_crc(&head);
    g.mem
        .checksum_into(Some(&mut crc), None, g.off, n as usize)
        .ok()?;
    drop(g);
    job.off += n;
    Some(OutFrame {
        head,
        payload: Some((
            Source::Remote {
                mr: Arc::clone(&job.mr),
                rkey: job.rkey,
                addr: at,
            },
            n as usize,
        )),
        tail: trailer(&crc),
        tail_len: TRAILER_LEN,
        done: 0,
        kind: Kind::ReadResp {
            last: job.off == job.len,
        },
    })
}

/// The next frame of a request (advancing the job); `true`: it is the last.
fn next_request_frame(qp: &QpShared, job: &mut ReqJob) -> Result<(OutFrame, bool), WcStatus> {
    let wr = &job.p.wr;
    if let SendOp::Read(remote) = wr.op {
        let h = Header {
            rkey: remote.rkey,
            addr: remote.addr,
            aux: u64::from(wr.sge.length),
            ..Header::new(Opcode::ReadReq, job.psn0)
        };
        let f = OutFrame::header_only(
            h.encode(),
            Kind::Request {
                last: true,
                seq: job.seq,
            },
        );
        return Ok((f, true));
    }
    let max = qp.caps.frame_size();
    let len = wr.sge.length;
    let off = job.off;
    let n = (len - off).min(max);
    let last = off + n == len;
    let mut h = Header::new(
        Opcode::Write,
        job.psn0.wrapping_add(job.i) & super::frame::PSN_MASK,
    );
    h.len = n;
    h.flags = if off == 0 { FIRST } else { 0 } | if last { LAST } else { 0 };
    match wr.op {
        SendOp::Write(r) | SendOp::WriteWithImm(r, _) => {
            h.rkey = r.rkey;
            h.addr = r.addr.wrapping_add(u64::from(off));
        }
        _ => h.opcode = Opcode::Send,
    }
    if last {
        match wr.op {
            SendOp::WriteWithImm(_, imm) => {
                h.opcode = Opcode::WriteImm;
                h.imm = imm;
            }
            SendOp::SendWithImm(imm) => {
                h.opcode = Opcode::SendImm;
                h.imm = imm;
            }
            _ => {}
        }
    }
    if matches!(h.opcode, Opcode::Write | Opcode::WriteImm) {
        // A WRITE whose receiver checks its bytes end to end goes without the trailer.
        if wr.checked_end_to_end {
            h.flags |= UNCHECKED;
        }
        // A WRITE nobody waits on soon lets the receiver acknowledge it with a later one.
        if wr.ack_later {
            h.flags |= ACK_LATER;
        }
    }
    let at = wr.sge.addr.wrapping_add(u64::from(off));
    let head = h.encode();
    let mut crc = frame_crc(&head);
    {
        let g = job.p.mr.local(at, u64::from(n), Access::NONE)?;
        if h.has_trailer() {
            g.mem
                .checksum_into(Some(&mut crc), None, g.off, n as usize)
                .map_err(|_| WcStatus::LocalProtectionError)?;
        }
    }
    job.off += n;
    job.i = job.i.wrapping_add(1);
    let f = OutFrame {
        head,
        payload: Some((
            Source::Local {
                mr: Arc::clone(&job.p.mr),
                addr: at,
            },
            n as usize,
        )),
        tail: trailer(&crc),
        tail_len: if h.has_trailer() { TRAILER_LEN } else { 0 },
        done: 0,
        kind: Kind::Request { last, seq: job.seq },
    };
    Ok((f, last))
}

/// Writes `w.cur` as far as the socket takes it. `Ok(true)`: the frame is out (and its
/// completion handled); `Ok(false)`: the socket is full.
fn write_cur(qp: &Arc<QpShared>, sock: &TcpStream, w: &mut Wire) -> Result<bool, Stop> {
    let Some(f) = w.cur.as_mut() else {
        return Ok(true);
    };
    let before = f.done;
    let res = write_frame(qp, sock, f);
    if f.done != before {
        w.since = Instant::now();
    }
    if res? {
        if let Some(f) = w.cur.take() {
            finished(qp, f.kind)?;
        }
        return Ok(true);
    }
    Ok(false)
}

/// Writes `f` until it is out (`true`) or the socket is full (`false`), each payload chunk
/// under a fresh grant.
fn write_frame(qp: &QpShared, sock: &TcpStream, f: &mut OutFrame) -> Result<bool, Stop> {
    let total = f.total();
    let plen = f.payload.as_ref().map_or(0, |p| p.1);
    while f.done < total {
        let head = f.head.get(f.done.min(HEADER_LEN)..).unwrap_or(&[]);
        let p = f.done.saturating_sub(HEADER_LEN).min(plen);
        let tail = f
            .tail
            .get(..f.tail_len)
            .and_then(|t| t.get(f.done.saturating_sub(HEADER_LEN + plen).min(t.len())..))
            .unwrap_or(&[]);
        let res = match &f.payload {
            None => super::raw::send_now(sock, head),
            Some((src, len)) => {
                let rest = (len - p) as u64;
                let granted = match src {
                    Source::Local { mr, addr } => mr
                        .local(addr.wrapping_add(p as u64), rest, Access::NONE)
                        .ok(),
                    Source::Remote { mr, rkey, addr } => mr.remote(
                        *rkey,
                        addr.wrapping_add(p as u64),
                        rest,
                        Access::REMOTE_READ,
                    ),
                };
                let Some(g) = granted else {
                    // The grant ended mid-frame: the frame cannot be finished.
                    let culprit = match f.kind {
                        Kind::Request { seq, .. } => Some((seq, WcStatus::LocalProtectionError)),
                        _ => None,
                    };
                    let mut c = qp.lock();
                    qp.fail(&mut c, culprit, Shut::Both);
                    return Err(Stop::Closed);
                };
                g.mem.send_from(sock, head, g.off, len - p, tail)
            }
        };
        match res {
            Ok(0) => return Err(Stop::Wire),
            Ok(n) => f.done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(_) => return Err(Stop::Wire),
        }
    }
    Ok(true)
}

/// A frame is out: clear the flags it held.
fn finished(qp: &Arc<QpShared>, kind: Kind) -> Result<(), Stop> {
    let mut c = qp.lock();
    match kind {
        Kind::Ack => {
            c.answering = false;
            qp.answers_moved(&c);
        }
        Kind::ReadResp { last } => {
            if last {
                c.answering = false;
                c.reads_pending = c.reads_pending.saturating_sub(1);
                qp.answers_moved(&c);
            }
        }
        Kind::Nak => {
            c.answering = false;
            // Only the write side closes: the peer still reads the NAK (the receive side
            // drains and closes).
            qp.fail(&mut c, None, Shut::Write);
            return Err(Stop::Closed);
        }
        Kind::Request { last, .. } => {
            if last {
                c.requesting = false;
            }
        }
    }
    Ok(())
}

/// Takes the request just posted for the posting thread to write itself, when that is safe and
/// cheap: the QP is attached to its I/O thread, no request is being written or queued ahead of
/// it, no answer is waiting, it is one frame of at most [`INLINE_MAX`] bytes, and the windows
/// allow it. Moves it to the outstanding list and marks the wire as carrying a request
/// (`Core::requesting`).
pub(crate) fn take_inline(c: &mut Core, frame_size: u32) -> Option<ReqJob> {
    if !inline_ok(c, frame_size) {
        return None;
    }
    let job = take_send(c, frame_size)?;
    c.requesting = true;
    Some(job)
}

/// Whether the request just posted may be written by the posting thread (see [`take_inline`]).
pub(crate) fn inline_ok(c: &Core, frame_size: u32) -> bool {
    let Some(p) = c.sq.front() else {
        return false;
    };
    let small = p.wr.sge.length <= INLINE_MAX.min(frame_size);
    c.started && !c.requesting && !c.answering && c.sq.len() == 1 && c.responses.is_empty() && small
}

/// Writes a request taken by [`take_inline`] from the posting thread, holding the write side
/// `w` (taken with `try_lock`: a post never waits for the I/O thread), without blocking: what
/// the socket does not take now is left for the I/O thread, as is the whole request if a frame
/// is already partly written. The I/O thread is kicked when work is left behind: the rest of
/// the frame, requests posted meanwhile, or answers it queued while this thread held the write
/// side (its own write attempt then skipped). A broken socket fails the QP.
pub(crate) fn send_inline(
    qp: &Arc<QpShared>,
    sock: &TcpStream,
    mut w: std::sync::MutexGuard<'_, Wire>,
    job: ReqJob,
) {
    if w.cur.is_some() || w.request.is_some() {
        w.request = Some(job);
        drop(w);
        qp.kick();
        return;
    }
    let mut job = job;
    let res = match next_request_frame(qp, &mut job) {
        Ok((f, _)) => {
            w.cur = Some(f);
            w.since = Instant::now();
            write_cur(qp, sock, &mut w)
        }
        Err(st) => {
            drop(w);
            let mut c = qp.lock();
            c.requesting = false;
            qp.fail(&mut c, Some((job.seq, st)), Shut::Both);
            return;
        }
    };
    let left = w.cur.is_some() || w.answer.is_some() || w.request.is_some();
    drop(w);
    match res {
        Ok(_) => {
            let more = {
                let c = qp.lock();
                !c.sq.is_empty() || !c.responses.is_empty()
            };
            if left || more {
                qp.kick();
            }
        }
        Err(Stop::Closed) => {}
        Err(Stop::Wire) => {
            let mut c = qp.lock();
            c.requesting = false;
            let culprit = c
                .outstanding
                .front()
                .map(|o| (o.first_seq, WcStatus::RetryExceeded));
            qp.fail(&mut c, culprit, Shut::Both);
        }
    }
}

/// Moves the next posted request to the outstanding list (assigning its sequence numbers) if
/// the READ and PSN windows allow.
fn take_send(c: &mut Core, frame_size: u32) -> Option<ReqJob> {
    let p = c.sq.front()?;
    let frames = frame_count(p, frame_size);
    let is_read = matches!(p.wr.op, SendOp::Read(_));
    let in_flight = c.next_seq - c.first_unacked;
    if (is_read && c.reads_out >= MAX_RD_ATOMIC) || in_flight + frames > SEQ_WINDOW {
        return None;
    }
    let p = c.sq.pop_front()?;
    let first_seq = c.next_seq;
    c.next_seq += frames;
    if is_read {
        c.reads_out += 1;
    }
    let read = match p.wr.op {
        SendOp::Read(_) => Some(ReadDst {
            mr: Arc::clone(&p.mr),
            addr: p.wr.sge.addr,
            len: p.wr.sge.length,
            got: 0,
        }),
        _ => None,
    };
    c.outstanding.push_back(Outstanding {
        wr_id: p.wr.wr_id,
        signaled: p.wr.signaled,
        opcode: send_opcode(&p.wr),
        byte_len: p.wr.sge.length,
        first_seq,
        last_seq: first_seq + frames - 1,
        read,
        sent_at: Instant::now(),
    });
    let psn0 = c.wire_psn(first_seq);
    Some(ReqJob {
        p,
        seq: first_seq,
        psn0,
        off: 0,
        i: 0,
    })
}

fn frame_count(p: &Posted, max_frame: u32) -> u64 {
    match p.wr.op {
        SendOp::Read(_) => 1,
        _ => u64::from(p.wr.sge.length.div_ceil(max_frame)).max(1),
    }
}
