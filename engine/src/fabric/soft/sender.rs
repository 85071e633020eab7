//! The sender thread of a queue pair: the only writer of its socket.
//!
//! It sends, in this priority order, the responder's answers (ACK, NAK, READ responses, in PSN
//! order) and the requester's frames (one posted work request at a time, split into frames of
//! at most `max_frame` bytes, answers flushed between frames). Payload goes from registered
//! memory to the socket in one `sendmsg` with the header (no copy), under the region's gate,
//! with the grant re-checked for every frame. A request is put on the outstanding list before
//! its first byte is sent, so its ACK can never overtake it.

use std::io::{self, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use super::frame::{FIRST, Header, LAST, NakCode, Opcode, frame_crc, trailer};
use super::mr::Granted;
use super::qp::{MAX_RD_ATOMIC, QpState};
use super::shared::{Core, Outstanding, Posted, QpShared, ReadDst, Resp, Shut, Wire, send_opcode};
use super::wr::Access;
use super::wr::{SendOp, WcStatus};

/// Frames in flight at most (keeps 24-bit PSNs unambiguous).
const SEQ_WINDOW: u64 = 1 << 22;

/// Why sending stopped.
enum Stop {
    /// The QP is in `Err` (someone else failed it).
    Closed,
    /// The socket broke or stalled past the timeout.
    Wire,
}

pub(crate) fn run(qp: &Arc<QpShared>, sock: &Arc<TcpStream>) {
    let tx = Tx { qp, sock };
    loop {
        let job = {
            let mut c = qp.lock();
            loop {
                if c.state == QpState::Err {
                    return;
                }
                if let Some(r) = c.responses.pop_front() {
                    c.answering = true;
                    break Job::Resp(r);
                }
                if c.state == QpState::Rts
                    && !c.requesting
                    && let Some(job) = take_send(&mut c, qp.caps.frame_size())
                {
                    c.requesting = true;
                    break job;
                }
                if qp.ack_rest_pending.load(Ordering::Acquire) {
                    break Job::Flush;
                }
                c = qp
                    .cv
                    .wait(c)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let res = match job {
            Job::Resp(r) => tx.answer(r),
            Job::Send(p, seq, psn) => {
                let res = tx.request(&p, seq, psn);
                qp.lock().requesting = false;
                res
            }
            Job::Flush => tx.flush_ack_rest(),
        };
        match res {
            Ok(()) => {}
            Err(Stop::Closed) => return,
            Err(Stop::Wire) => {
                let mut c = qp.lock();
                let culprit = c
                    .outstanding
                    .front()
                    .map(|o| (o.first_seq, WcStatus::RetryExceeded));
                qp.fail(&mut c, culprit, Shut::Both);
                return;
            }
        }
    }
}

enum Job {
    Resp(Resp),
    Send(Posted, u64, u32),
    /// Finish the ACK the receiver left partly written.
    Flush,
}

/// Largest payload a post writes from the posting thread itself ([`send_inline`]).
pub(crate) const INLINE_MAX: u32 = 1 << 20;

/// Takes the request just posted for the posting thread to write itself, when that is safe and
/// cheap: the QP's threads run, no other request is being written or queued ahead of it, it is
/// one frame of at most [`INLINE_MAX`] bytes, and the windows allow it. Moves it to the
/// outstanding list and marks the wire as carrying a request (`Core::requesting`).
pub(crate) fn take_inline(c: &mut Core, frame_size: u32) -> Option<(Posted, u64, u32)> {
    let p = c.sq.front()?;
    let small = p.wr.sge.length <= INLINE_MAX.min(frame_size);
    if !c.started || c.requesting || c.sq.len() != 1 || !small {
        return None;
    }
    match take_send(c, frame_size)? {
        Job::Send(p, seq, psn) => {
            c.requesting = true;
            Some((p, seq, psn))
        }
        _ => None,
    }
}

/// Writes a request taken by [`take_inline`] from the posting thread: one frame, with no
/// hand-off to the sender thread (whose wake-up costs a context switch per message). Blocks
/// only while the socket's send buffer is full, as the sender thread would. A broken socket
/// fails the QP as the sender thread does.
pub(crate) fn send_inline(qp: &Arc<QpShared>, sock: &Arc<TcpStream>, job: (Posted, u64, u32)) {
    let (p, seq, psn) = job;
    let res = Tx { qp, sock }.request(&p, seq, psn);
    let mut c = qp.lock();
    c.requesting = false;
    if let Err(Stop::Wire) = res {
        let culprit = c
            .outstanding
            .front()
            .map(|o| (o.first_seq, WcStatus::RetryExceeded));
        qp.fail(&mut c, culprit, Shut::Both);
    }
    // Requests posted meanwhile wait for the sender thread (`fail` wakes everyone itself).
    if !c.sq.is_empty() {
        qp.cv.notify_all();
    }
}

/// Moves the next posted request to the outstanding list (assigning its sequence numbers) if
/// the READ and PSN windows allow.
fn take_send(c: &mut Core, frame_size: u32) -> Option<Job> {
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
    Some(Job::Send(p, first_seq, psn0))
}

fn frame_count(p: &Posted, max_frame: u32) -> u64 {
    match p.wr.op {
        SendOp::Read(_) => 1,
        _ => u64::from(p.wr.sge.length.div_ceil(max_frame)).max(1),
    }
}

struct Tx<'a> {
    qp: &'a Arc<QpShared>,
    sock: &'a Arc<TcpStream>,
}

impl Tx<'_> {
    /// Whether to keep waiting after a send timed out with no progress since `since`.
    fn stalled(&self, since: Instant) -> Result<(), Stop> {
        let c = self.qp.lock();
        if c.state == QpState::Err {
            return Err(Stop::Closed);
        }
        if since.elapsed() > c.timeout {
            Err(Stop::Wire)
        } else {
            Ok(())
        }
    }

    /// Writes `bytes` completely (blocking; a stall past the QP's timeout is a dead wire).
    fn write_bytes(&self, bytes: &[u8]) -> Result<(), Stop> {
        self.write_all(bytes.len(), |done| {
            (&**self.sock).write(bytes.get(done..).unwrap_or(&[]))
        })
    }

    /// Writes `total` bytes, `write(done)` sending what follows the first `done` of them,
    /// until all are out (blocking; a stall past the QP's timeout is a dead wire).
    fn write_all(
        &self,
        total: usize,
        mut write: impl FnMut(usize) -> io::Result<usize>,
    ) -> Result<(), Stop> {
        let mut done = 0usize;
        let mut progress = Instant::now();
        while done < total {
            match write(done) {
                Ok(0) => return Err(Stop::Wire),
                Ok(n) => {
                    done += n;
                    progress = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    self.stalled(progress)?;
                }
                Err(_) => return Err(Stop::Wire),
            }
        }
        Ok(())
    }

    /// With the wire held: writes the end of an ACK the receiver left partly written.
    fn finish_ack_rest(&self, w: &mut Wire) -> Result<(), Stop> {
        if w.ack_rest.is_empty() {
            return Ok(());
        }
        let rest = std::mem::take(&mut w.ack_rest);
        let res = self.write_bytes(&rest);
        self.qp.ack_rest_pending.store(false, Ordering::Release);
        let _c = self.qp.lock();
        self.qp.cv.notify_all();
        res
    }

    /// Takes the wire and finishes a partly written ACK, if any.
    fn flush_ack_rest(&self) -> Result<(), Stop> {
        let mut w = self.qp.wire.lock().unwrap_or_else(PoisonError::into_inner);
        self.finish_ack_rest(&mut w)
    }

    /// Writes `hdr` and, if given, the granted payload followed by the frame's CRC-32C
    /// trailer (header and payload; see `frame.rs`), completely, holding the wire.
    fn frame(&self, hdr: &Header, payload: Option<&Granted<'_>>) -> Result<(), Stop> {
        let mut wire = self.qp.wire.lock().unwrap_or_else(PoisonError::into_inner);
        self.finish_ack_rest(&mut wire)?;
        let head = hdr.encode();
        let len = hdr.len as usize;
        let tail = match payload {
            Some(g) if hdr.opcode.has_trailer() => {
                let mut crc = frame_crc(&head);
                if g.mem.crc32c_into(&mut crc, g.off, len).is_err() {
                    return Err(Stop::Wire);
                }
                Some(trailer(&crc))
            }
            _ => None,
        };
        let tail = tail.as_ref().map_or(&[][..], |t| &t[..]);
        let body = if payload.is_some() { len } else { 0 };
        let total = head.len() + body + tail.len();
        self.write_all(total, |done| match payload {
            Some(g) => {
                let h = head.get(done.min(head.len())..).unwrap_or(&[]);
                let p = done.saturating_sub(head.len()).min(len);
                let t = tail
                    .get(done.saturating_sub(head.len() + len)..)
                    .unwrap_or(&[]);
                g.mem.send_from(self.sock, h, g.off + p, len - p, t)
            }
            None => (&**self.sock).write(head.get(done..).unwrap_or(&[])),
        })
    }

    /// Sends one answer taken off `responses` (with `answering` set), then clears `answering`
    /// and wakes a teardown waiting in [`QpShared::drain_answers`].
    fn answer(&self, r: Resp) -> Result<(), Stop> {
        let res = self.respond(r);
        let mut c = self.qp.lock();
        c.answering = false;
        drop(c);
        self.qp.cv.notify_all();
        res
    }

    /// Sends the answers queued meanwhile (between frames of a long request).
    fn flush_responses(&self) -> Result<(), Stop> {
        loop {
            let r = {
                let mut c = self.qp.lock();
                if c.state == QpState::Err {
                    return Err(Stop::Closed);
                }
                let r = c.responses.pop_front();
                c.answering = r.is_some();
                r
            };
            match r {
                Some(r) => self.answer(r)?,
                None => return Ok(()),
            }
        }
    }

    fn respond(&self, r: Resp) -> Result<(), Stop> {
        match r {
            Resp::Ack(psn) => self.frame(&Header::new(Opcode::Ack, psn), None),
            Resp::Nak(psn, code) => self.nak(psn, code),
            Resp::Read {
                psn,
                mr,
                rkey,
                addr,
                len,
            } => {
                let max = self.qp.caps.frame_size();
                let mut off = 0u32;
                loop {
                    let n = (len - off).min(max);
                    let at = addr.wrapping_add(u64::from(off));
                    let Some(g) = mr.remote(rkey, at, u64::from(n), Access::REMOTE_READ) else {
                        // Re-keyed or deregistered since the request: refuse the rest.
                        return self.nak(psn, NakCode::RemoteAccess);
                    };
                    let mut flags = 0;
                    if off == 0 {
                        flags |= FIRST;
                    }
                    if off + n == len {
                        flags |= LAST;
                    }
                    let h = Header {
                        flags,
                        len: n,
                        ..Header::new(Opcode::ReadResp, psn)
                    };
                    self.frame(&h, Some(&g))?;
                    drop(g);
                    off += n;
                    if off == len {
                        break;
                    }
                }
                let mut c = self.qp.lock();
                c.reads_pending = c.reads_pending.saturating_sub(1);
                Ok(())
            }
        }
    }

    /// Sends a NAK, then fails the QP, closing only our write side so the peer still reads
    /// the NAK (the receiver drains and closes).
    fn nak(&self, psn: u32, code: NakCode) -> Result<(), Stop> {
        let h = Header {
            aux: code.to_u64(),
            ..Header::new(Opcode::Nak, psn)
        };
        let sent = self.frame(&h, None);
        let mut c = self.qp.lock();
        self.qp.fail(&mut c, None, Shut::Write);
        sent.and(Err(Stop::Closed))
    }

    /// Sends every frame of one work request.
    fn request(&self, p: &Posted, seq: u64, psn0: u32) -> Result<(), Stop> {
        let wr = &p.wr;
        if let SendOp::Read(remote) = wr.op {
            let h = Header {
                rkey: remote.rkey,
                addr: remote.addr,
                aux: u64::from(wr.sge.length),
                ..Header::new(Opcode::ReadReq, psn0)
            };
            return self.frame(&h, None);
        }
        let max = self.qp.caps.frame_size();
        let len = wr.sge.length;
        let (mut off, mut i) = (0u32, 0u32);
        loop {
            let n = (len - off).min(max);
            let last = off + n == len;
            let mut h = Header::new(Opcode::Write, psn0.wrapping_add(i) & super::frame::PSN_MASK);
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
            let at = wr.sge.addr.wrapping_add(u64::from(off));
            let g = match p.mr.local(at, u64::from(n), Access::NONE) {
                Ok(g) => g,
                Err(st) => {
                    // Deregistered under a posted request.
                    let mut c = self.qp.lock();
                    self.qp.fail(&mut c, Some((seq, st)), Shut::Both);
                    return Err(Stop::Closed);
                }
            };
            self.frame(&h, Some(&g))?;
            drop(g);
            off += n;
            i = i.wrapping_add(1);
            if last {
                return Ok(());
            }
            self.flush_responses()?;
        }
    }
}
