//! One HTTP/1.1 exchange (request out, response in) as a sans-IO state machine, reusable over a
//! kept-alive connection.
//!
//! The machine owns the request head bytes and the response decoder; a driver (blocking, or a
//! readiness loop) only moves bytes:
//!
//! ```
//! use s3_lite::Request;
//! use s3_lite::http::{BodyFraming, Event, Exchange, Limits, Output};
//!
//! let mut req = Request::new("PUT", "/b/k");
//! req.add_header("Host", "127.0.0.1");
//! req.add_header("Expect", "100-continue");
//! let mut ex = Exchange::new(Limits::default());
//! ex.request(&req, BodyFraming::Length(5)).unwrap();
//! let mut wire = Vec::new();
//! // Write what the machine asks for until it waits.
//! while let Output::Bytes(b) = ex.output() {
//!     wire.extend_from_slice(b);
//!     let n = b.len();
//!     ex.wrote(n);
//! }
//! assert_eq!(ex.output(), Output::AwaitContinue);
//! // The server's interim answer releases the body.
//! let d = ex.receive(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
//! assert_eq!(d.event, Event::NeedMore);
//! assert_eq!(ex.output(), Output::Body { remaining: 5 });
//! ex.body_written(5).unwrap(); // the driver wrote 5 bytes of its own body source
//! assert_eq!(ex.output(), Output::Done);
//! let d = ex.receive(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
//! assert!(matches!(d.event, Event::Head(ref h) if h.status == 200));
//! assert_eq!(ex.receive(b"").unwrap().event, Event::End);
//! assert!(ex.is_reusable());
//! ```
//!
//! What it decides, so no driver does:
//! - **Sending order**: the head, then (for a body) either the caller's own body bytes
//!   ([`Output::Body`], written straight from the caller's memory, never copied here) or chunks
//!   the machine frames ([`Exchange::push_chunk`], [`Exchange::end_chunks`] with trailers).
//! - **`Expect: 100-continue`**: a request carrying it holds its body until the server's
//!   `100 Continue` (or until the driver's timer calls [`Exchange::continue_without_100`], as
//!   RFC 9110 §10.1.1 allows). A final answer that arrives first (a 417, a 403) means the body is
//!   never sent, and the connection is not reused.
//! - **Early answers**: a final response head that arrives while the request is still being
//!   sent abandons the rest of the request ([`Output::Done`]); the connection is then closed.
//! - **Keep-alive**: [`Exchange::is_reusable`] only when the response ended, allowed reuse, and
//!   the request went out completely. [`Exchange::request`] refuses to start on a connection
//!   whose previous exchange did not end that way.
//! - **Trailers** of a chunked response: [`Exchange::trailers`] after [`Event::End`].
//!
//! The response side is [`ResponseDecoder`] unchanged: [`Exchange::receive`] returns its
//! [`Decoded`] events, body bytes as slices of the driver's read buffer.

use super::decode::{Decoded, Event, ResponseDecoder};
use super::encode::{encode_chunk, encode_last_chunk, encode_request_head};
use super::error::HttpError;
use super::framing::BodyFraming;
use super::head::ResponseHead;
use super::limits::Limits;
use crate::request::Request;

/// What the driver should write next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output<'a> {
    /// Bytes the machine holds (the head, chunk framing): write a prefix, then call
    /// [`Exchange::wrote`].
    Bytes(&'a [u8]),
    /// The caller's `Content-Length` body: write up to `remaining` bytes of it, then call
    /// [`Exchange::body_written`].
    Body {
        /// Body bytes still to send.
        remaining: u64,
    },
    /// A chunked body: hand chunks to [`Exchange::push_chunk`], then [`Exchange::end_chunks`].
    Chunks,
    /// `Expect: 100-continue`: nothing to write until the server answers (or the driver's
    /// timer calls [`Exchange::continue_without_100`]).
    AwaitContinue,
    /// Nothing (more) to write: the request is sent, abandoned, or none was started.
    Done,
}

/// Where the request side stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    /// No request started on this connection yet.
    Idle,
    /// The head (in `out`) is being written.
    Head,
    /// Head written; the body waits for `100 Continue`.
    AwaitContinue,
    /// Head written; the body is being sent.
    Body,
    /// Chunked body ended: the last chunk and trailers (in `out`) are being written.
    LastChunk,
    /// Everything was written.
    Sent,
    /// A final response arrived before the request was complete: the rest is never sent.
    Abandoned,
}

/// One request/response exchange at a time over one connection (sans-IO).
///
/// Errors from [`Exchange::receive`] are sticky (the decoder's): the connection must be closed.
#[derive(Debug, Clone)]
pub struct Exchange {
    limits: Limits,
    send: Send,
    /// Bytes the machine writes (head, chunk framing). INVARIANT: `out_pos <= out.len()`.
    out: Vec<u8>,
    out_pos: usize,
    body: BodyFraming,
    /// Body bytes reported written (`Length`) or handed over as chunks (`Chunked`).
    /// INVARIANT: for `Length(n)`, `body_sent <= n`.
    body_sent: u64,
    expect_continue: bool,
    decoder: ResponseDecoder,
}

/// Whether `req` asks for `Expect: 100-continue`.
fn asks_continue(req: &Request) -> bool {
    req.headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("expect") && v.eq_ignore_ascii_case("100-continue"))
}

impl Exchange {
    /// A machine for a new connection; nothing to write until [`Exchange::request`].
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            send: Send::Idle,
            out: Vec::with_capacity(1024),
            out_pos: 0,
            body: BodyFraming::None,
            body_sent: 0,
            expect_continue: false,
            decoder: ResponseDecoder::new(limits, false),
        }
    }

    /// Starts the exchange of `req` with a body framed as `body` (see
    /// [`encode_request_head`]). A request header `Expect: 100-continue` makes the body wait
    /// for the server's go-ahead. Fails with [`HttpError::NotReusable`] while a previous
    /// exchange on this connection has not ended reusably, and with the encoder's errors.
    pub fn request(&mut self, req: &Request, body: BodyFraming) -> Result<(), HttpError> {
        self.check_startable()?;
        let mut head = std::mem::take(&mut self.out);
        head.clear();
        let encoded = encode_request_head(req, body, &mut head);
        self.out = head;
        encoded?;
        self.begin(
            req.method.eq_ignore_ascii_case("HEAD"),
            body,
            asks_continue(req),
        );
        Ok(())
    }

    /// Starts an exchange whose head the caller encodes itself into the returned buffer
    /// (cleared; its capacity is kept across exchanges, so a driver that signs and encodes
    /// in place allocates nothing). `body` must be the framing that head declares;
    /// `expect_continue` whether it carries `Expect: 100-continue`.
    pub fn request_encoded(
        &mut self,
        method_is_head: bool,
        body: BodyFraming,
        expect_continue: bool,
    ) -> Result<&mut Vec<u8>, HttpError> {
        self.check_startable()?;
        if body == BodyFraming::UntilClose {
            return Err(HttpError::InvalidRequestFraming);
        }
        self.out.clear();
        self.begin(method_is_head, body, expect_continue);
        Ok(&mut self.out)
    }

    /// Takes back a started request of which no byte was written yet (its head could not be
    /// encoded, or the driver gave up before writing): the machine is startable again, as it
    /// was. `false` (and nothing changes) once bytes went out: the connection must be closed.
    pub fn abort_unsent(&mut self) -> bool {
        if self.send != Send::Head || self.out_pos > 0 {
            return false;
        }
        self.out.clear();
        self.send = Send::Idle;
        true
    }

    fn check_startable(&self) -> Result<(), HttpError> {
        match self.send {
            Send::Idle => Ok(()),
            _ if self.is_reusable() => Ok(()),
            _ => Err(HttpError::NotReusable),
        }
    }

    fn begin(&mut self, method_is_head: bool, body: BodyFraming, expect_continue: bool) {
        self.send = Send::Head;
        self.out_pos = 0;
        self.body = body;
        self.body_sent = 0;
        // A body that is empty has nothing to wait for.
        self.expect_continue = expect_continue && body != BodyFraming::None;
        self.decoder = ResponseDecoder::new(self.limits, method_is_head);
    }

    /// What to write next.
    pub fn output(&self) -> Output<'_> {
        match self.send {
            Send::Head | Send::LastChunk | Send::Body if self.out_pos < self.out.len() => {
                Output::Bytes(self.out.get(self.out_pos..).unwrap_or_default())
            }
            Send::AwaitContinue => Output::AwaitContinue,
            Send::Body => match self.body {
                BodyFraming::Length(n) => Output::Body {
                    remaining: n.saturating_sub(self.body_sent),
                },
                BodyFraming::Chunked => Output::Chunks,
                _ => Output::Done,
            },
            Send::Idle | Send::Head | Send::LastChunk | Send::Sent | Send::Abandoned => {
                Output::Done
            }
        }
    }

    /// The driver wrote `n` bytes of [`Output::Bytes`] (more than offered counts as all).
    pub fn wrote(&mut self, n: usize) {
        self.out_pos = self.out_pos.saturating_add(n).min(self.out.len());
        if self.out_pos < self.out.len() {
            return;
        }
        self.send = match self.send {
            Send::Head => self.after_head(),
            Send::LastChunk => Send::Sent,
            other => other,
        };
    }

    fn after_head(&self) -> Send {
        match self.body {
            BodyFraming::Length(0) | BodyFraming::None | BodyFraming::UntilClose => Send::Sent,
            _ if self.expect_continue && !self.decoder.continue_seen() => Send::AwaitContinue,
            _ => Send::Body,
        }
    }

    /// The driver wrote `n` bytes of its `Content-Length` body. More than
    /// [`Output::Body`] offered is [`HttpError::RequestBodyMismatch`].
    pub fn body_written(&mut self, n: u64) -> Result<(), HttpError> {
        let BodyFraming::Length(len) = self.body else {
            return Err(HttpError::RequestBodyMismatch);
        };
        if n == 0 {
            return Ok(());
        }
        let total = self.body_sent.checked_add(n);
        match (self.send, total) {
            (Send::Body, Some(t)) if t <= len => {
                self.body_sent = t;
                if t == len {
                    self.send = Send::Sent;
                }
                Ok(())
            }
            _ => Err(HttpError::RequestBodyMismatch),
        }
    }

    /// Frames `data` as the next chunk of a chunked body (an empty `data` is skipped); write
    /// the framed bytes as [`Output::Bytes`] before the next chunk.
    pub fn push_chunk(&mut self, data: &[u8]) -> Result<(), HttpError> {
        self.check_chunk_state()?;
        self.compact_out();
        encode_chunk(data, &mut self.out);
        self.body_sent = self.body_sent.saturating_add(data.len() as u64);
        Ok(())
    }

    /// Ends a chunked body with `trailers` (e.g. `x-amz-checksum-crc64nvme`).
    pub fn end_chunks(&mut self, trailers: &[(String, String)]) -> Result<(), HttpError> {
        self.check_chunk_state()?;
        self.compact_out();
        encode_last_chunk(trailers, &mut self.out)?;
        self.send = Send::LastChunk;
        Ok(())
    }

    fn check_chunk_state(&self) -> Result<(), HttpError> {
        match (self.send, self.body) {
            (Send::Body, BodyFraming::Chunked) => Ok(()),
            _ => Err(HttpError::RequestBodyMismatch),
        }
    }

    /// Drops the bytes already written from `out`, so pushing chunks does not grow it forever.
    fn compact_out(&mut self) {
        self.out.drain(..self.out_pos.min(self.out.len()));
        self.out_pos = 0;
    }

    /// The driver waited long enough for `100 Continue`: send the body anyway.
    pub fn continue_without_100(&mut self) {
        if self.send == Send::AwaitContinue {
            self.send = Send::Body;
        }
    }

    /// Whether the server's `100 Continue` arrived in this exchange.
    pub fn continue_seen(&self) -> bool {
        self.decoder.continue_seen()
    }

    /// Body bytes sent so far (`Content-Length` bytes written, or chunk payload handed over).
    pub fn body_sent(&self) -> u64 {
        self.body_sent
    }

    /// Consumes a prefix of the server's bytes (see [`ResponseDecoder::decode`]), and lets the
    /// request side react: a `100 Continue` releases a waiting body, a final head before the
    /// request is complete abandons the rest of it.
    pub fn receive<'a>(&mut self, input: &'a [u8]) -> Result<Decoded<'a>, HttpError> {
        let d = self.decoder.decode(input)?;
        let final_head = matches!(d.event, Event::Head(_));
        match self.send {
            Send::Sent | Send::Abandoned | Send::Idle => {}
            _ if final_head => self.send = Send::Abandoned,
            Send::AwaitContinue if self.decoder.continue_seen() => self.send = Send::Body,
            _ => {}
        }
        Ok(d)
    }

    /// Body bytes the caller may read straight into their destination (see
    /// [`ResponseDecoder::body_room`]).
    #[must_use]
    pub fn body_room(&self) -> Option<u64> {
        self.decoder.body_room()
    }

    /// Reports body bytes the caller read itself (see [`ResponseDecoder::body_placed`]).
    pub fn body_placed(&mut self, n: u64) -> Result<(), HttpError> {
        self.decoder.body_placed(n)
    }

    /// The peer closed the connection (see [`ResponseDecoder::finish_on_eof`]).
    pub fn finish_on_eof(&mut self) -> Result<(), HttpError> {
        self.decoder.finish_on_eof()
    }

    /// Whether the request went out completely.
    pub fn request_sent(&self) -> bool {
        self.send == Send::Sent
    }

    /// Whether the response was decoded completely.
    pub fn is_complete(&self) -> bool {
        self.decoder.is_done()
    }

    /// Whether the connection may carry the next exchange: the response ended and allowed
    /// reuse, and the request was sent completely. (A driver also checks that no unread byte
    /// is left in its read buffer.)
    pub fn is_reusable(&self) -> bool {
        self.send == Send::Sent && self.decoder.is_reusable()
    }

    /// Trailer fields of a chunked response, after [`Event::End`].
    pub fn trailers(&self) -> &[(String, String)] {
        self.decoder.trailers()
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// A complete response read into memory (see [`collect_response`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    /// The final head.
    pub head: ResponseHead,
    /// The body.
    pub body: Vec<u8>,
    /// Trailers of a chunked body.
    pub trailers: Vec<(String, String)>,
}

/// Feeds `input` (a whole response, as bytes) through `exchange` and collects it; `None` when
/// the bytes end before the response does. For tests and small in-memory replies.
pub fn collect_response(
    exchange: &mut Exchange,
    input: &[u8],
) -> Result<Option<Collected>, HttpError> {
    let mut pos = 0;
    let mut head = None;
    let mut body = Vec::new();
    loop {
        let d = exchange.receive(input.get(pos..).unwrap_or_default())?;
        pos += d.consumed;
        match d.event {
            Event::NeedMore => return Ok(None),
            Event::Head(h) => head = Some(h),
            Event::Body(b) => body.extend_from_slice(b),
            Event::End => {
                return Ok(head.map(|head| Collected {
                    head,
                    body,
                    trailers: exchange.trailers().to_vec(),
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, extra: &[(&str, &str)]) -> Request {
        let mut r = Request::new(method, "/b/k");
        r.add_header("Host", "h");
        for (n, v) in extra {
            r.add_header(*n, *v);
        }
        r
    }

    /// Writes everything the machine offers (head, chunk framing, `Length` body as `b'x'`),
    /// in pieces of `piece` bytes; returns the bytes "on the wire".
    fn pump(ex: &mut Exchange, piece: usize) -> Vec<u8> {
        let mut wire = Vec::new();
        loop {
            match ex.output() {
                Output::Bytes(b) => {
                    let n = b.len().min(piece);
                    wire.extend_from_slice(b.get(..n).unwrap());
                    ex.wrote(n);
                }
                Output::Body { remaining } => {
                    let n = remaining.min(piece as u64);
                    wire.extend(std::iter::repeat_n(b'x', n as usize));
                    ex.body_written(n).unwrap();
                }
                Output::Chunks | Output::AwaitContinue | Output::Done => return wire,
            }
        }
    }

    #[test]
    fn get_then_keep_alive_reuse() {
        let mut ex = Exchange::new(Limits::default());
        assert_eq!(ex.output(), Output::Done, "nothing before a request");
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
        let wire = pump(&mut ex, 3);
        assert_eq!(wire, b"GET /b/k HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(ex.request_sent());
        assert!(!ex.is_reusable(), "not before the response ended");
        assert_eq!(
            ex.request(&req("GET", &[]), BodyFraming::None),
            Err(HttpError::NotReusable)
        );
        let got = collect_response(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
            .unwrap()
            .unwrap();
        assert_eq!((got.head.status, got.body.as_slice()), (200, &b"hi"[..]));
        assert!(ex.is_reusable());
        // The same machine carries the next exchange.
        ex.request(&req("HEAD", &[]), BodyFraming::None).unwrap();
        pump(&mut ex, 1000);
        let got = collect_response(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(got.body.is_empty(), "a HEAD answer has no body");
        assert!(ex.is_reusable());
    }

    #[test]
    fn put_with_length_body_written_by_the_caller() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("PUT", &[]), BodyFraming::Length(10))
            .unwrap();
        let wire = pump(&mut ex, 4);
        assert!(wire.ends_with(b"Content-Length: 10\r\n\r\nxxxxxxxxxx"));
        assert_eq!(ex.body_sent(), 10);
        assert_eq!(ex.body_written(1), Err(HttpError::RequestBodyMismatch));
        assert!(ex.request_sent());
        collect_response(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(ex.is_reusable());
    }

    #[test]
    fn body_overrun_and_misuse_are_refused() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("PUT", &[]), BodyFraming::Length(3))
            .unwrap();
        assert_eq!(
            ex.body_written(1),
            Err(HttpError::RequestBodyMismatch),
            "no body before the head is written"
        );
        pump(&mut ex, 1000);
        assert!(ex.request_sent());
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("PUT", &[]), BodyFraming::Length(3))
            .unwrap();
        let Output::Bytes(b) = ex.output() else {
            panic!("head first")
        };
        let n = b.len();
        ex.wrote(n);
        assert_eq!(ex.body_written(4), Err(HttpError::RequestBodyMismatch));
        assert_eq!(
            ex.body_written(u64::MAX),
            Err(HttpError::RequestBodyMismatch)
        );
        assert_eq!(ex.push_chunk(b"a"), Err(HttpError::RequestBodyMismatch));
        assert_eq!(ex.end_chunks(&[]), Err(HttpError::RequestBodyMismatch));
        ex.body_written(3).unwrap();
        assert!(ex.request_sent());
        let mut ex = Exchange::new(Limits::default());
        assert_eq!(
            ex.request_encoded(false, BodyFraming::UntilClose, false)
                .map(|_| ()),
            Err(HttpError::InvalidRequestFraming)
        );
        // An encoder error leaves the machine startable.
        assert_eq!(
            ex.request(&Request::new("GET", "/"), BodyFraming::None),
            Err(HttpError::MissingHost)
        );
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
    }

    #[test]
    fn expect_continue_holds_the_body_until_100() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("PUT", &[("Expect", "100-continue")]),
            BodyFraming::Length(4),
        )
        .unwrap();
        let wire = pump(&mut ex, 7);
        assert!(wire.ends_with(b"\r\n\r\n"), "only the head went out");
        assert_eq!(ex.output(), Output::AwaitContinue);
        assert_eq!(ex.body_written(1), Err(HttpError::RequestBodyMismatch));
        // The interim answer, split across reads.
        assert_eq!(
            ex.receive(b"HTTP/1.1 100 Cont").unwrap().event,
            Event::NeedMore
        );
        assert_eq!(ex.output(), Output::AwaitContinue);
        assert_eq!(ex.receive(b"inue\r\n\r\n").unwrap().event, Event::NeedMore);
        assert_eq!(ex.output(), Output::Body { remaining: 4 });
        assert_eq!(pump(&mut ex, 100), b"xxxx");
        collect_response(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(ex.is_reusable());
    }

    #[test]
    fn a_final_answer_before_100_abandons_the_body() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("PUT", &[("expect", "100-Continue")]),
            BodyFraming::Length(4),
        )
        .unwrap();
        pump(&mut ex, 100);
        let got = collect_response(
            &mut ex,
            b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.head.status, 417);
        assert_eq!(ex.output(), Output::Done, "the body is never sent");
        assert!(
            ex.is_complete() && !ex.is_reusable(),
            "the connection must close"
        );
        assert_eq!(
            ex.request(&req("GET", &[]), BodyFraming::None),
            Err(HttpError::NotReusable)
        );
        // 100 and the final head in one read: the final answer wins.
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("PUT", &[("Expect", "100-continue")]),
            BodyFraming::Length(4),
        )
        .unwrap();
        pump(&mut ex, 100);
        collect_response(
            &mut ex,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ex.output(), Output::Done);
        assert!(!ex.is_reusable());
    }

    #[test]
    fn the_driver_may_stop_waiting_for_100() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("PUT", &[("Expect", "100-continue")]),
            BodyFraming::Length(2),
        )
        .unwrap();
        pump(&mut ex, 100);
        ex.continue_without_100();
        assert_eq!(pump(&mut ex, 100), b"xx");
        // A late 100 changes nothing.
        collect_response(
            &mut ex,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(ex.is_reusable());
    }

    #[test]
    fn expect_without_body_and_100_without_expect_are_ignored() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("GET", &[("Expect", "100-continue")]),
            BodyFraming::None,
        )
        .unwrap();
        pump(&mut ex, 100);
        assert!(ex.request_sent());
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("PUT", &[]), BodyFraming::Length(1))
            .unwrap();
        pump(&mut ex, 100);
        assert!(ex.request_sent());
        collect_response(
            &mut ex,
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert!(ex.is_reusable());
    }

    #[test]
    fn an_early_answer_abandons_a_body_in_progress() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("PUT", &[]), BodyFraming::Length(1 << 20))
            .unwrap();
        let Output::Bytes(b) = ex.output() else {
            panic!("head first")
        };
        let n = b.len();
        ex.wrote(n);
        ex.body_written(100).unwrap();
        collect_response(
            &mut ex,
            b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(ex.output(), Output::Done);
        assert!(!ex.request_sent() && !ex.is_reusable());
    }

    #[test]
    fn chunked_body_with_trailers_and_chunked_response_trailers() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(
            &req("PUT", &[("x-amz-trailer", "x-amz-checksum-crc32c")]),
            BodyFraming::Chunked,
        )
        .unwrap();
        let mut wire = pump(&mut ex, 5);
        assert_eq!(ex.output(), Output::Chunks);
        ex.push_chunk(b"hello").unwrap();
        ex.push_chunk(b"").unwrap();
        wire.extend(pump(&mut ex, 3));
        ex.push_chunk(b" world").unwrap();
        ex.end_chunks(&[("x-amz-checksum-crc32c".into(), "yZRlqg==".into())])
            .unwrap();
        assert_eq!(ex.push_chunk(b"late"), Err(HttpError::RequestBodyMismatch));
        wire.extend(pump(&mut ex, 2));
        assert!(ex.request_sent());
        assert_eq!(ex.body_sent(), 11);
        let text = String::from_utf8(wire).unwrap();
        assert!(
            text.ends_with(
                "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32c: yZRlqg==\r\n\r\n"
            ),
            "{text}"
        );
        let got = collect_response(
            &mut ex,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nx-t: 1\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(got.body, b"abc");
        assert_eq!(got.trailers, vec![("x-t".to_owned(), "1".to_owned())]);
        assert!(ex.is_reusable());
    }

    #[test]
    fn request_encoded_reuses_the_buffer() {
        let mut ex = Exchange::new(Limits::default());
        let buf = ex.request_encoded(true, BodyFraming::None, false).unwrap();
        encode_request_head(&req("HEAD", &[]), BodyFraming::None, buf).unwrap();
        let wire = pump(&mut ex, 100);
        assert!(wire.starts_with(b"HEAD /b/k"));
        // A HEAD answer's Content-Length frames no body: method_is_head reached the decoder.
        collect_response(&mut ex, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(ex.is_reusable());
    }

    #[test]
    fn an_unsent_request_can_be_taken_back() {
        let mut ex = Exchange::new(Limits::default());
        ex.request_encoded(false, BodyFraming::None, false)
            .unwrap()
            .extend_from_slice(b"GET / HT");
        assert!(ex.abort_unsent());
        assert_eq!(ex.output(), Output::Done);
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
        ex.wrote(1);
        assert!(!ex.abort_unsent(), "a byte went out");
        assert_eq!(
            ex.request(&req("GET", &[]), BodyFraming::None),
            Err(HttpError::NotReusable)
        );
    }

    #[test]
    fn close_delimited_and_errors() {
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
        pump(&mut ex, 100);
        assert_eq!(
            collect_response(&mut ex, b"HTTP/1.1 200 OK\r\n\r\nabc").unwrap(),
            None
        );
        ex.finish_on_eof().unwrap();
        assert_eq!(ex.receive(b"").unwrap().event, Event::End);
        assert!(
            !ex.is_reusable(),
            "a close-delimited body ends the connection"
        );
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
        pump(&mut ex, 100);
        assert_eq!(ex.finish_on_eof(), Err(HttpError::EmptyResponse));
        let mut ex = Exchange::new(Limits::default());
        ex.request(&req("GET", &[]), BodyFraming::None).unwrap();
        pump(&mut ex, 100);
        let bad = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(ex.receive(bad), Err(HttpError::ConflictingFraming));
        assert_eq!(
            ex.receive(b""),
            Err(HttpError::ConflictingFraming),
            "sticky"
        );
        assert!(!ex.is_reusable());
    }
}
