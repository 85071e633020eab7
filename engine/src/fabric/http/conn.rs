//! One keep-alive HTTP/1.1 connection driven by readiness events (one request at a time).
//!
//! The mio driver of the exchange machine (`s3_lite::http::Exchange`): the machine says what to
//! write and decodes the answer; this module moves bytes between it, the socket and registered
//! memory. The socket is a `Transport`: plain TCP, or TLS (rustls, sans-IO) for `https://`
//! endpoints, so the handshake and record layer run inside the worker's loop too.
//!
//! Reads land in the connection's read buffer; the decoder hands body bytes back as slices of
//! it, and those are copied straight to their offset in the registered destination. Once a
//! payload's head is in and the buffer is drained, the rest of a `Content-Length` body is read
//! from the socket straight into the destination (no copy at all: `Conn::direct_target`),
//! and checksummed there while it is in cache. PUT bodies are written to the socket straight
//! from registered memory.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use mio::net::TcpStream;
use ring_api::{ErrorClass, ErrorCode};
use s3_lite::checksum::Crc64Nvme;
use s3_lite::http::{BodyFraming, Event, Exchange, HttpError, Limits, Output};
use s3_lite::net::transport::Transport;

use super::ReplyJudge;
use super::tls::{CERTIFICATE_REFUSED, TlsContext};

use super::response::{
    MAX_XML_ANSWER, Plan, error_outcome, finish_multipart, named_size, needs_stored_check, plan_for,
};
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};

/// Largest error-response body kept for diagnostics; the rest is read and discarded.
const MAX_ERROR_BODY: usize = 16 * 1024;

/// Payload bytes still to come from which a read goes straight into the destination rather
/// than through the read buffer (below it, one read may also take what follows the body).
const DIRECT_MIN: u64 = 16 * 1024;

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

/// One connection; `J` judges the answers of carried exchanges.
#[derive(Debug)]
pub(crate) struct Conn<J: ReplyJudge> {
    pub(crate) stream: Transport<TcpStream>,
    /// The endpoint's TLS context (`https://`), where refused certificates are reported.
    tls: Option<Arc<TlsContext>>,
    /// Whether the TCP handshake is known to have completed.
    connected: bool,
    /// Whether a previous exchange completed on this connection (it may have gone stale).
    pub(crate) reused: bool,
    /// The request/response state machine (head bytes, body accounting, the decoder, reuse).
    exchange: Exchange,
    rbuf: Box<[u8]>,
    /// INVARIANT: `rstart <= rend <= rbuf.len()`; `rbuf[rstart..rend]` is unread input.
    rstart: usize,
    rend: usize,
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
    /// The judge of this exchange's answer, when it carries its payload elsewhere.
    judge: Option<J>,
    /// What the judge noted (taken by the transport when the exchange ends).
    pub(crate) note: Option<J::Note>,
    /// A GET body the server named a checksum of: its value and ours, fed as bytes land.
    body_sum: Option<BodySum>,
    /// The object size a GET's answer named (`Content-Range` total, else the 200's length).
    object_size: u64,
}

/// The checksum a GET answer names for exactly its body (if any), and ours of the bytes
/// received, fed as they land: computed when the server names one, or when the operation asks
/// for its CRC ([`InFlight::want_crc64`]).
#[derive(Debug)]
struct BodySum {
    expected: Option<String>,
    ours: Crc64Nvme,
}

impl BodySum {
    /// For the payload of a GET: the range checksum of our gateway's answer
    /// (`x-hipobj-range-checksum-crc64nvme`) and/or the operation's own request for a CRC.
    fn of(op: &InFlight, head: &s3_lite::http::ResponseHead) -> Option<Self> {
        if !matches!(op.kind, OpKind::Get | OpKind::RangeGet { .. }) || op.multipart.is_some() {
            return None;
        }
        let expected = head
            .header(s3_lite::checksum::HEADER_RANGE_CRC64NVME)
            .map(|v| v.trim().to_owned());
        (expected.is_some() || op.want_crc64).then(|| Self {
            expected,
            ours: Crc64Nvme::new(),
        })
    }

    /// `None`: the server named no checksum; else whether ours matches it.
    fn matches(&self) -> Option<bool> {
        let expected = self.expected.as_deref()?;
        Some(s3_lite::checksum::encode_crc64nvme(self.ours.finish()) == expected)
    }
}

fn io_fail(reused: bool, got_bytes: bool) -> Step {
    Step::Finished {
        outcome: Outcome::transport(reused && !got_bytes),
        reusable: false,
    }
}

/// Whether an exchange that ended with `outcome` leaves a connection nobody should trust
/// with another request: the answer did not parse or contradicted itself (class
/// `Integrity`), so the bytes that followed its framing may belong to it (a body longer than
/// its `Content-Length`, a server that cut its answer short and closes).
fn untrustworthy(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Failed {
            class: ErrorClass::Integrity,
            ..
        }
    )
}

const fn integrity(code: ErrorCode) -> Outcome {
    Outcome::fail(code, ErrorClass::Integrity, Retry::No)
}

impl<J: ReplyJudge> Conn<J> {
    /// Whether the server dropped this connection before it ever answered: a first exchange
    /// with no byte of response (a server at its connection limit does this).
    pub(crate) fn dropped_unanswered(&self) -> bool {
        !self.reused && !self.got_bytes
    }

    pub(crate) fn new(
        stream: Transport<TcpStream>,
        tls: Option<Arc<TlsContext>>,
        read_buffer: usize,
        quickack: bool,
    ) -> Self {
        Self {
            stream,
            tls,
            connected: false,
            reused: false,
            exchange: Exchange::new(Limits::default()),
            rbuf: vec![0; read_buffer].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            plan: None,
            received: 0,
            got_bytes: false,
            err_body: Vec::new(),
            etag: None,
            answer: Vec::new(),
            quickack,
            judge: None,
            note: None,
            body_sum: None,
            object_size: 0,
        }
    }

    /// Starts the exchange of `op` with a body of `body_len` bytes sent from its registered
    /// source (the fabric sizes PUT and UploadPart bodies: the leased source, or none when RDMA
    /// moves it; the other multipart steps send none or an in-line head suffix). Returns the
    /// buffer to encode the request head into; `None` if the connection cannot carry a request.
    pub(crate) fn head_buf(&mut self, op: &InFlight, body_len: u64) -> Option<&mut Vec<u8>> {
        let framing = match body_len {
            0 => BodyFraming::None,
            n => BodyFraming::Length(n),
        };
        self.exchange
            .request_encoded(op.head_only(), framing, false)
            .ok()
    }

    /// Takes back a request whose head could not be encoded (nothing was written).
    pub(crate) fn unsent(&mut self) -> bool {
        self.exchange.abort_unsent()
    }

    /// Prepares the rest of the exchange of `op`, whose head is in [`Conn::head_buf`].
    pub(crate) fn begin(&mut self, judge: Option<J>) {
        self.judge = judge;
        self.note = None;
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
        if !self.connected {
            self.connected = connect_finished(self.stream.socket())?;
        }
        Ok(self.connected)
    }

    /// Probes an idle connection without consuming anything a request could need: `true` only
    /// if no unread input is buffered and the socket has nothing to say (would block). A
    /// connection the server closed (end of stream, reset) or that holds bytes nobody asked for
    /// (a response longer than its framing said) is not healthy and must not carry a request.
    ///
    /// Plain TCP is peeked (`MSG_PEEK`). TLS reads through the record layer: a session ticket
    /// or other handshake record is consumed there and yields no plaintext (would block), while
    /// any plaintext is unread response bytes.
    pub(crate) fn idle_is_healthy(&mut self) -> bool {
        if self.rstart != self.rend {
            return false;
        }
        let mut probe = [0u8; 1];
        loop {
            let r = match &mut self.stream {
                Transport::Plain(s) => s.peek(&mut probe),
                tls @ Transport::Tls(_) => tls.read(&mut probe),
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return false,
            }
        }
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
            Err(e) => return self.io_error(&e),
        }
        if fresh {
            return Step::Pending;
        }
        self.receive(op)
    }

    /// The step for a failed socket or TLS call: a refused certificate is final and reported;
    /// anything else is a transport failure.
    fn io_error(&mut self, e: &io::Error) -> Step {
        if TlsContext::refusal(self.tls.as_deref(), e) {
            return Step::Finished {
                outcome: CERTIFICATE_REFUSED,
                reusable: false,
            };
        }
        io_fail(self.reused, self.got_bytes)
    }

    /// Writes what the exchange offers: the head, then the body straight from registered
    /// memory; then the queued TLS records. `Ok(false)`: would block. A final answer that
    /// arrived early stops the request (the machine offers nothing more).
    fn send(&mut self, op: &InFlight) -> io::Result<bool> {
        loop {
            let written = match self.exchange.output() {
                Output::Bytes(head) => self.stream.write(head),
                Output::Body { remaining } => {
                    let Some(src) = op.buf.as_ref() else {
                        return Err(io::ErrorKind::InvalidInput.into());
                    };
                    let rest = src.bytes_from(self.exchange.body_sent());
                    let rest = rest
                        .get(..usize::try_from(remaining).unwrap_or(usize::MAX))
                        .unwrap_or(rest);
                    if rest.is_empty() {
                        return Err(io::ErrorKind::InvalidInput.into());
                    }
                    self.stream.write(rest)
                }
                Output::Chunks | Output::AwaitContinue | Output::Done => break,
            };
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => match self.exchange.output() {
                    Output::Bytes(_) => self.exchange.wrote(n),
                    _ => self
                        .exchange
                        .body_written(n as u64)
                        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.stream.flush()
    }

    fn receive(&mut self, op: &InFlight) -> Step {
        loop {
            if let Some(step) = self.decode_buffered(op) {
                return step;
            }
            // Buffer fully consumed: read more, into the destination when the rest of a
            // payload may go there.
            self.rstart = 0;
            self.rend = 0;
            let direct = self.direct_target();
            let read = match direct {
                Some((at, len)) => match self.read_direct(op, at, len) {
                    Some(read) => read,
                    // What a buffered write there would have found too.
                    None => {
                        return Step::Finished {
                            outcome: integrity(ErrorCode::TooLarge),
                            reusable: false,
                        };
                    }
                },
                None => self.stream.read(&mut self.rbuf),
            };
            match read {
                Ok(0) => {
                    if let Err(e) = self.exchange.finish_on_eof() {
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
                    if direct.is_some() {
                        // Counted into `received` and the body checksum by `read_direct`.
                        if self.exchange.body_placed(n as u64).is_err() {
                            return Step::Finished {
                                outcome: integrity(ErrorCode::Protocol),
                                reusable: false,
                            };
                        }
                    } else {
                        self.rend = n;
                    }
                    self.got_bytes = true;
                    op.mark_first_byte();
                    if let Some(step) = self.decode_buffered(op) {
                        // Complete: our next request carries the ACK; no re-arm needed.
                        return step;
                    }
                    // Incomplete: the rest may wait on our ACK (a server that writes head and
                    // body separately under Nagle), so acknowledge at once.
                    if self.quickack {
                        crate::sys::set_quickack(self.stream.socket().as_raw_fd());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.io_error(&e),
            }
        }
    }

    /// Where the next read may go straight into the destination: `(offset, length)` of the rest
    /// of a `Content-Length` payload, when at least [`DIRECT_MIN`] bytes of it are to come and
    /// they fit the destination (a longer body takes the buffered path, which refuses it).
    fn direct_target(&self) -> Option<(u64, usize)> {
        let Some(Plan::Payload { cap, .. }) = self.plan else {
            return None;
        };
        let room = self.exchange.body_room()?;
        let fits = self
            .received
            .checked_add(room)
            .is_some_and(|end| end <= cap);
        (fits && room >= DIRECT_MIN).then_some((self.received, usize::try_from(room).ok()?))
    }

    /// Reads up to `len` payload bytes from the socket into the destination at `at`, and
    /// counts what arrived (`received`, and the body checksum while the bytes are in cache).
    /// `None`: the destination has no such host range (a buffered write would fail there too).
    fn read_direct(&mut self, op: &InFlight, at: u64, len: usize) -> Option<io::Result<usize>> {
        let stream = &mut self.stream;
        let sum = self.body_sum.as_mut();
        let read = op.buf.as_ref()?.fill_with(at, len, |dst| {
            let n = stream.read(dst)?;
            if let Some(sum) = sum {
                sum.ours.update(dst.get(..n).unwrap_or_default());
            }
            Ok(n)
        })?;
        if let Ok(n) = &read {
            self.received += *n as u64;
        }
        Some(read)
    }

    /// Feeds buffered input to the decoder until it needs more (`None`) or the exchange ends.
    fn decode_buffered(&mut self, op: &InFlight) -> Option<Step> {
        loop {
            let input = self.rbuf.get(self.rstart..self.rend).unwrap_or_default();
            let d = match self.exchange.receive(input) {
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
                    let p = match &self.judge {
                        Some(judge) => {
                            let (p, note) = judge.judge(op, &head);
                            self.note = Some(note);
                            p
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
        // Framing clean and nothing left over; whether the answer made sense is judged below.
        let framed_cleanly = self.exchange.is_reusable() && self.rstart == self.rend;
        // An error status is the server's word, read as framed (even `BadDigest`, class
        // Integrity, says nothing against the connection).
        let server_error = matches!(self.plan, Some(Plan::Error(_)));
        let outcome = match self.plan.take() {
            Some(Plan::Payload { expected, .. }) => {
                let sum = self.body_sum.take();
                let verdict = sum.as_ref().and_then(BodySum::matches);
                match (expected, verdict) {
                    (Some(n), _) if n != self.received => integrity(ErrorCode::Integrity),
                    // The server's checksum of exactly this body disagrees with our bytes.
                    (_, Some(false)) => integrity(ErrorCode::Integrity),
                    (_, verdict) => {
                        if op.want_crc64
                            && let Some(sum) = &sum
                        {
                            op.landed_crc64.set(Some(sum.ours.finish()));
                        }
                        Outcome::got(self.received, self.object_size, verdict == Some(true))
                    }
                }
            }
            Some(Plan::Finish(o)) => o,
            // The error document may name a more precise cause than the status.
            Some(Plan::Error(o)) => error_outcome(o, &self.err_body),
            Some(Plan::Collect) => Outcome::Done { bytes: 0, aux: 0 },
            None => integrity(ErrorCode::Protocol),
        };
        let outcome = match (&op.multipart, op.uploads.as_deref()) {
            (Some(step), Some(table)) => {
                let outcome = finish_multipart(
                    table,
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
            // Dispatch gives every multipart step its engine's table; one without has no
            // upload to apply its answer to.
            (Some(_), None) => Outcome::fail(ErrorCode::BadHandle, ErrorClass::Local, Retry::No),
            (None, _) => outcome,
        };
        let reusable = framed_cleanly && (server_error || !untrustworthy(outcome));
        if reusable {
            self.reused = true;
        }
        Step::Finished { outcome, reusable }
    }
}

/// Whether the non-blocking connect of `sock` has finished (after a writable event): its error
/// if it failed, `false` while it is still in progress. Shared with the dialects' side
/// connections (`fabric/rdma/ctrl.rs`).
pub(crate) fn connect_finished(sock: &TcpStream) -> io::Result<bool> {
    if let Some(e) = sock.take_error()? {
        return Err(e);
    }
    match sock.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}
