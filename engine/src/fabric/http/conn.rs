//! One keep-alive HTTP/1.1 connection driven by readiness events (one request at a time).
//!
//! Reads land in the connection's read buffer; the decoder hands body bytes back as slices of
//! it, and those are copied straight to their offset in the registered destination (one copy,
//! no intermediate payload buffer). PUT bodies are written to the socket straight from
//! registered memory.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;

use mio::net::TcpStream;
use ring_api::{ErrorClass, ErrorCode};
use s3_lite::checksum::Crc64Nvme;
use s3_lite::http::{Event, HttpError, Limits, ResponseDecoder};

use super::response::{MAX_XML_ANSWER, Plan, finish_multipart, needs_stored_check, plan_for};
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};

/// Largest error-response body kept for diagnostics; the rest is read and discarded.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// Where a driven exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Waiting for readiness.
    Pending,
    /// The exchange ended; `reusable` says whether the connection may carry another request.
    Finished {
        /// The attempt's outcome.
        outcome: Outcome,
        /// Keep the connection.
        reusable: bool,
    },
}

/// One connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    /// Whether the TCP handshake is known to have completed.
    connected: bool,
    /// Whether a previous exchange completed on this connection (it may have gone stale).
    pub(crate) reused: bool,
    wbuf: Vec<u8>,
    /// INVARIANT: `wpos <= wbuf.len()`.
    wpos: usize,
    /// Bytes of the registered source (PUT body) written so far.
    body_sent: u64,
    body_len: u64,
    rbuf: Box<[u8]>,
    /// INVARIANT: `rstart <= rend <= rbuf.len()`; `rbuf[rstart..rend]` is unread input.
    rstart: usize,
    rend: usize,
    decoder: ResponseDecoder,
    plan: Option<Plan>,
    /// Body bytes written to the destination in this attempt.
    received: u64,
    got_bytes: bool,
    err_body: Vec<u8>,
    /// A multipart answer: the response's `ETag` and the collected XML body ([`Plan::Collect`]).
    etag: Option<String>,
    answer: Vec<u8>,
    /// Re-arm `TCP_QUICKACK` after every read (see `sys::set_quickack`).
    quickack: bool,
    /// This exchange carries an RDMA token: `Some(our PUT CRC)`; judged by `rdma::verdict`.
    rdma: Option<Option<String>>,
    /// What the RDMA answer meant (taken by the fabric when the exchange ends).
    pub(crate) verdict: Option<crate::fabric::rdma::verdict::Verdict>,
    /// A GET body the server named a checksum of: its value and ours, fed as bytes land.
    body_sum: Option<BodySum>,
    /// The object size a GET's answer named (`Content-Range` total, else the 200's length).
    object_size: u64,
}

/// The checksum a GET answer names for exactly its body, and ours of the bytes received.
#[derive(Debug)]
struct BodySum {
    expected: String,
    ours: Crc64Nvme,
}

impl BodySum {
    /// The range checksum of our gateway's answer (`x-hipobj-range-checksum-crc64nvme`), when
    /// the body is the payload of a GET.
    fn of(op: &InFlight, head: &s3_lite::http::ResponseHead) -> Option<Self> {
        if !matches!(op.kind, OpKind::Get | OpKind::RangeGet { .. }) || op.multipart.is_some() {
            return None;
        }
        let v = head.header(s3_lite::checksum::HEADER_RANGE_CRC64NVME)?;
        Some(Self {
            expected: v.trim().to_owned(),
            ours: Crc64Nvme::new(),
        })
    }

    fn matches(&self) -> bool {
        s3_lite::checksum::encode_crc64nvme(self.ours.finish()) == self.expected
    }
}

/// The object size an answer names: the `Content-Range` total, else a 200's body length.
fn named_size(head: &s3_lite::http::ResponseHead) -> u64 {
    match head
        .header("content-range")
        .map(s3_lite::s3::ContentRange::parse)
    {
        Some(Ok(s3_lite::s3::ContentRange::Bytes { total: Some(t), .. })) => t,
        Some(_) => 0,
        None if head.status == 200 => head.content_length().unwrap_or(0),
        None => 0,
    }
}

fn io_fail(reused: bool, got_bytes: bool) -> Step {
    Step::Finished {
        outcome: Outcome::transport(reused && !got_bytes),
        reusable: false,
    }
}

const fn integrity(code: ErrorCode) -> Outcome {
    Outcome::fail(code, ErrorClass::Integrity, Retry::No)
}

impl Conn {
    pub(crate) fn new(stream: TcpStream, read_buffer: usize, quickack: bool) -> Self {
        Self {
            stream,
            connected: false,
            reused: false,
            wbuf: Vec::with_capacity(1024),
            wpos: 0,
            body_sent: 0,
            body_len: 0,
            rbuf: vec![0; read_buffer].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            decoder: ResponseDecoder::new(Limits::default(), false),
            plan: None,
            received: 0,
            got_bytes: false,
            err_body: Vec::new(),
            etag: None,
            answer: Vec::new(),
            quickack,
            rdma: None,
            verdict: None,
            body_sum: None,
            object_size: 0,
        }
    }

    /// Buffer for the next request head (cleared).
    pub(crate) fn head_buf(&mut self) -> &mut Vec<u8> {
        self.wbuf.clear();
        self.wpos = 0;
        &mut self.wbuf
    }

    /// Prepares for the exchange of `op`, whose head is already in [`Conn::head_buf`].
    pub(crate) fn begin(&mut self, op: &InFlight, body_len: u64, rdma: Option<Option<String>>) {
        self.rdma = rdma;
        self.verdict = None;
        self.body_sent = 0;
        // The fabric sizes PUT and UploadPart bodies (the leased source, or none when RDMA
        // moves it); the other multipart steps send none or an in-line head suffix.
        self.body_len = body_len;
        self.decoder = ResponseDecoder::new(Limits::default(), op.head_only());
        self.etag = None;
        self.answer.clear();
        self.plan = None;
        self.received = 0;
        self.got_bytes = false;
        self.err_body.clear();
        self.body_sum = None;
        self.object_size = 0;
    }

    /// Checks the outcome of a non-blocking connect after a writable event.
    fn check_connected(&mut self) -> Result<bool, io::Error> {
        if self.connected {
            return Ok(true);
        }
        if let Some(e) = self.stream.take_error()? {
            return Err(e);
        }
        match self.stream.peer_addr() {
            Ok(_) => {
                self.connected = true;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Probes an idle connection: `true` if the socket has nothing to say (would block).
    pub(crate) fn idle_is_healthy(&mut self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.stream.read(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Makes as much progress on the exchange of `op` as the socket allows.
    ///
    /// `fresh`: called right after [`Conn::begin`], not from a readiness event. Then a request
    /// written completely in this call is not followed by a read: no response byte can be there
    /// yet, and the socket is edge-triggered, so the response's arrival produces its own event.
    /// (Saves one `recvfrom` returning `EAGAIN` per request.)
    pub(crate) fn drive(&mut self, op: &InFlight, fresh: bool) -> Step {
        match self.check_connected() {
            Ok(true) => {}
            Ok(false) => return Step::Pending,
            Err(_) => return io_fail(false, false),
        }
        match self.send(op) {
            Ok(true) => {}
            Ok(false) => return Step::Pending,
            Err(_) => return io_fail(self.reused, self.got_bytes),
        }
        if fresh {
            return Step::Pending;
        }
        self.receive(op)
    }

    /// Writes the head, then the body from registered memory. `Ok(false)`: would block.
    fn send(&mut self, op: &InFlight) -> io::Result<bool> {
        while self.wpos < self.wbuf.len() {
            let rest = self.wbuf.get(self.wpos..).unwrap_or_default();
            match self.stream.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.wpos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        while self.body_sent < self.body_len {
            let Some(src) = op.buf.as_ref() else {
                return Err(io::ErrorKind::InvalidInput.into());
            };
            let rest = src.bytes_from(self.body_sent);
            if rest.is_empty() {
                return Err(io::ErrorKind::InvalidInput.into());
            }
            match self.stream.write(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.body_sent += n as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn receive(&mut self, op: &InFlight) -> Step {
        loop {
            if let Some(step) = self.decode_buffered(op) {
                return step;
            }
            // Buffer fully consumed: read more.
            self.rstart = 0;
            self.rend = 0;
            match self.stream.read(&mut self.rbuf) {
                Ok(0) => {
                    if let Err(e) = self.decoder.finish_on_eof() {
                        let free = self.reused && !self.got_bytes && e == HttpError::EmptyResponse;
                        return Step::Finished {
                            outcome: Outcome::transport(free),
                            reusable: false,
                        };
                    }
                    // A body delimited by close ended: the next decode reports End.
                    if let Some(step) = self.decode_buffered(op) {
                        return match step {
                            Step::Finished { outcome, .. } => Step::Finished {
                                outcome,
                                reusable: false,
                            },
                            Step::Pending => io_fail(false, true),
                        };
                    }
                    return io_fail(self.reused, self.got_bytes);
                }
                Ok(n) => {
                    self.rend = n;
                    self.got_bytes = true;
                    if let Some(step) = self.decode_buffered(op) {
                        // Complete: our next request carries the ACK; no re-arm needed.
                        return step;
                    }
                    // Incomplete: the rest may wait on our ACK (a server that writes head and
                    // body separately under Nagle), so acknowledge at once.
                    if self.quickack {
                        crate::sys::set_quickack(self.stream.as_raw_fd());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return io_fail(self.reused, self.got_bytes),
            }
        }
    }

    /// Feeds buffered input to the decoder until it needs more (`None`) or the exchange ends.
    fn decode_buffered(&mut self, op: &InFlight) -> Option<Step> {
        loop {
            let input = self.rbuf.get(self.rstart..self.rend).unwrap_or_default();
            let d = match self.decoder.decode(input) {
                Ok(d) => d,
                Err(_) => {
                    return Some(Step::Finished {
                        outcome: integrity(ErrorCode::Protocol),
                        reusable: false,
                    });
                }
            };
            self.rstart += d.consumed;
            match d.event {
                Event::NeedMore => return None,
                Event::Head(head) => {
                    let p = match &self.rdma {
                        Some(crc) => {
                            let (p, v) = crate::fabric::rdma::verdict::judge(
                                op.kind,
                                op.buf_len(),
                                &head,
                                crc.as_deref(),
                            );
                            self.verdict = Some(v);
                            // An accepted RDMA GET: the bytes are already in the destination.
                            // When the server names a checksum of them, verify before completing.
                            match (p, op.buf.as_ref()) {
                                (Plan::Finish(Outcome::Done { bytes, aux }), Some(buf)) => {
                                    let landed = buf.bytes_from(0);
                                    let landed = landed
                                        .get(..usize::try_from(bytes).unwrap_or(usize::MAX))
                                        .unwrap_or(landed);
                                    match crate::fabric::rdma::cuobject::check_destination(
                                        op.kind, &head, landed,
                                    ) {
                                        Ok(proven) if op.kind != OpKind::Put => {
                                            // The size: the byte count's `/total`, else the
                                            // reply's `Content-Range` total.
                                            let size =
                                                if aux == 0 { named_size(&head) } else { aux };
                                            Plan::Finish(Outcome::got(bytes, size, proven))
                                        }
                                        Ok(_) => Plan::Finish(Outcome::Done { bytes, aux }),
                                        Err(code) => Plan::Finish(integrity(code)),
                                    }
                                }
                                (p, _) => p,
                            }
                        }
                        None => plan_for(op, &head),
                    };
                    if op.multipart.is_some() {
                        self.etag = head.header("etag").map(str::to_owned);
                    }
                    if let Plan::Payload { .. } = p {
                        self.body_sum = BodySum::of(op, &head);
                        self.object_size = named_size(&head);
                    }
                    if let Plan::Finish(o @ Outcome::Failed { .. }) = p {
                        // The body is of no use (wrong range, too large): drop the connection
                        // rather than read it.
                        return Some(Step::Finished {
                            outcome: o,
                            reusable: false,
                        });
                    }
                    self.plan = Some(p);
                }
                Event::Body(data) => match self.plan {
                    Some(Plan::Payload { cap, .. }) => {
                        let fits = self
                            .received
                            .checked_add(data.len() as u64)
                            .is_some_and(|e| e <= cap);
                        let written = fits
                            && op
                                .buf
                                .as_ref()
                                .is_some_and(|b| b.write(self.received, data));
                        if !written {
                            return Some(Step::Finished {
                                outcome: integrity(ErrorCode::TooLarge),
                                reusable: false,
                            });
                        }
                        if let Some(sum) = self.body_sum.as_mut() {
                            sum.ours.update(data);
                        }
                        self.received += data.len() as u64;
                    }
                    Some(Plan::Collect) => {
                        if self.answer.len().saturating_add(data.len()) > MAX_XML_ANSWER {
                            return Some(Step::Finished {
                                outcome: integrity(ErrorCode::Protocol),
                                reusable: false,
                            });
                        }
                        self.answer.extend_from_slice(data);
                    }
                    Some(Plan::Error(_)) => {
                        let room = MAX_ERROR_BODY.saturating_sub(self.err_body.len());
                        self.err_body.extend_from_slice(
                            data.get(..room.min(data.len())).unwrap_or_default(),
                        );
                    }
                    _ => {}
                },
                Event::End => return Some(self.finish(op)),
            }
        }
    }

    fn finish(&mut self, op: &InFlight) -> Step {
        let reusable = self.decoder.is_reusable() && self.rstart == self.rend;
        if reusable {
            self.reused = true;
        }
        let outcome = match self.plan.take() {
            Some(Plan::Payload { expected, .. }) => match (expected, self.body_sum.take()) {
                (Some(n), _) if n != self.received => integrity(ErrorCode::Integrity),
                // The server's checksum of exactly this body disagrees with the bytes we hold.
                (_, Some(sum)) if !sum.matches() => integrity(ErrorCode::Integrity),
                (_, sum) => Outcome::got(self.received, self.object_size, sum.is_some()),
            },
            Some(Plan::Finish(o) | Plan::Error(o)) => o,
            Some(Plan::Collect) => Outcome::Done { bytes: 0, aux: 0 },
            None => integrity(ErrorCode::Protocol),
        };
        let outcome = match &op.multipart {
            Some(step) => {
                let outcome = finish_multipart(
                    crate::multipart::uploads(),
                    &op.object,
                    step,
                    outcome,
                    self.etag.as_deref(),
                    &self.answer,
                );
                op.verify_stored
                    .set(needs_stored_check(step, outcome, &self.answer));
                outcome
            }
            None => outcome,
        };
        Step::Finished { outcome, reusable }
    }
}
