//! The incremental, keep-alive aware response decoder.
//!
//! Usage (a driver's read loop):
//!
//! ```
//! use s3_lite::http::{Event, Limits, ResponseDecoder};
//!
//! let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
//! let mut dec = ResponseDecoder::new(Limits::default(), false);
//! let (mut pos, mut body) = (0, Vec::new());
//! loop {
//!     let d = dec.decode(&wire[pos..]).unwrap();
//!     pos += d.consumed;
//!     match d.event {
//!         Event::Head(head) => assert_eq!(head.status, 200),
//!         Event::Body(bytes) => body.extend_from_slice(bytes), // or copy into a registered buffer
//!         Event::End => break,
//!         Event::NeedMore => unreachable!("a socket read would go here"),
//!     }
//! }
//! assert_eq!(body, b"hello");
//! ```
//!
//! Call `decode` again after every event, also with empty input: the end of a message is reported
//! without waiting for more bytes, which is what makes keep-alive reuse possible. Bytes after
//! `End` belong to the next response; call [`ResponseDecoder::reset_for_next`] and continue.

use super::body::{BodyDecoder, BodyStep};
use super::error::HttpError;
use super::head::{HeadScanner, ResponseHead, parse_head};
use super::limits::Limits;

/// What one call to [`ResponseDecoder::decode`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// The input was consumed (buffered head bytes or framing) and more is needed.
    NeedMore,
    /// The final (non-1xx) response head. Interim `100 Continue`-style heads are skipped.
    Head(ResponseHead),
    /// Body bytes: a slice of the input, ending at the consumed prefix, so the caller can copy
    /// them straight to their destination.
    Body(&'a [u8]),
    /// The response is complete. Trailers, if any, are in [`ResponseDecoder::trailers`].
    End,
}

/// The result of [`ResponseDecoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// Bytes of the input used. INVARIANT: `consumed <= input.len()`, and equals it for
    /// [`Event::NeedMore`].
    pub consumed: usize,
    /// What those bytes meant.
    pub event: Event<'a>,
}

#[derive(Debug, Clone)]
enum State {
    Head,
    Body(BodyDecoder),
    Done,
    Failed(HttpError),
}

/// Decodes one HTTP/1.1 response at a time from a byte stream (sans-IO).
///
/// Partial input is never an error. The only memory it keeps is the partial head (at most
/// `Limits::max_head_bytes`) and the trailer section (at most `Limits::max_trailer_bytes`);
/// body bytes are never copied. Errors are sticky: the connection must be closed.
#[derive(Debug, Clone)]
pub struct ResponseDecoder {
    limits: Limits,
    method_is_head: bool,
    state: State,
    scanner: HeadScanner,
    /// Head bytes of an incomplete head. INVARIANT: `head_buf.len() <= limits.max_head_bytes`
    /// (the scanner fails before more would be appended).
    head_buf: Vec<u8>,
    /// Whether any byte of this response (interim heads included) has been consumed.
    received_any: bool,
    keep_alive: bool,
    /// Whether an interim `100 Continue` head was skipped (an exchange waiting to send its body
    /// on `Expect: 100-continue` asks [`ResponseDecoder::continue_seen`]).
    continued: bool,
    trailers: Vec<(String, String)>,
}

impl ResponseDecoder {
    /// A decoder for the response to one request; `method_is_head` because a HEAD response
    /// carries `Content-Length` but no body.
    pub fn new(limits: Limits, method_is_head: bool) -> Self {
        Self {
            limits,
            method_is_head,
            state: State::Head,
            scanner: HeadScanner::default(),
            head_buf: Vec::new(),
            received_any: false,
            keep_alive: false,
            continued: false,
            trailers: Vec::new(),
        }
    }

    /// Prepares for the next response on the same connection. Fails with
    /// [`HttpError::NotReusable`] unless the current response has ended and allowed reuse.
    pub fn reset_for_next(&mut self, method_is_head: bool) -> Result<(), HttpError> {
        if !self.is_reusable() {
            return Err(HttpError::NotReusable);
        }
        *self = Self::new(self.limits, method_is_head);
        Ok(())
    }

    /// Whether the response has ended and the connection may carry another request.
    pub fn is_reusable(&self) -> bool {
        matches!(self.state, State::Done) && self.keep_alive
    }

    /// Whether the response has been decoded completely.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Whether an interim `100 Continue` response was received (and skipped) before the final
    /// head.
    pub fn continue_seen(&self) -> bool {
        self.continued
    }

    /// Trailer fields of a chunked response, once [`Event::End`] was returned.
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Tells the decoder the peer closed the connection. Ends an `UntilClose` body cleanly (the
    /// next `decode` returns [`Event::End`]); inside a head, a `Content-Length` body or a chunked
    /// body it is [`HttpError::UnexpectedEof`], and before any byte [`HttpError::EmptyResponse`].
    pub fn finish_on_eof(&mut self) -> Result<(), HttpError> {
        let err = match &self.state {
            State::Done => return Ok(()),
            State::Body(body) if body.ends_at_eof() => {
                self.state = State::Done;
                return Ok(());
            }
            State::Failed(e) => return Err(e.clone()),
            State::Head if !self.received_any => HttpError::EmptyResponse,
            State::Head | State::Body(_) => HttpError::UnexpectedEof,
        };
        self.state = State::Failed(err.clone());
        Err(err)
    }

    /// The body bytes still to come when the caller may read them itself, straight into
    /// their destination, instead of passing them through [`ResponseDecoder::decode`]: inside
    /// a `Content-Length` body with bytes left (`None` otherwise: before the head, in a chunked
    /// or read-until-close body, after the end). Saves the copy out of a read buffer.
    #[must_use]
    pub fn body_room(&self) -> Option<u64> {
        match &self.state {
            State::Body(body) => body.direct_room(),
            _ => None,
        }
    }

    /// Reports `n` body bytes the caller read itself (at most [`ResponseDecoder::body_room`];
    /// more is [`HttpError::PlacedPastBody`] and fails the decoder). Once the body is complete,
    /// the next [`ResponseDecoder::decode`] (with no input) reports its end.
    pub fn body_placed(&mut self, n: u64) -> Result<(), HttpError> {
        let placed = match &mut self.state {
            State::Body(body) => body.placed(n),
            _ => Err(HttpError::PlacedPastBody),
        };
        if let Err(e) = &placed {
            self.state = State::Failed(e.clone());
        }
        placed
    }

    /// Consumes a prefix of `input` and reports what it was. See the module docs for the loop.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<Decoded<'a>, HttpError> {
        match self.step(input) {
            Ok(d) => Ok(d),
            Err(e) => {
                self.state = State::Failed(e.clone());
                Err(e)
            }
        }
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<Decoded<'a>, HttpError> {
        let (consumed, event) = match &mut self.state {
            State::Failed(e) => return Err(e.clone()),
            State::Done => (0, Event::End),
            State::Head => return self.head(input),
            State::Body(body) => match body.step(input)? {
                (n, BodyStep::NeedMore) => (n, Event::NeedMore),
                (n, BodyStep::Data(d)) => (n, Event::Body(d)),
                (n, BodyStep::End(trailers)) => {
                    self.trailers = trailers;
                    self.state = State::Done;
                    (n, Event::End)
                }
            },
        };
        Ok(Decoded { consumed, event })
    }

    /// Head phase: scan for the end of the head, skipping interim 1xx responses.
    fn head<'a>(&mut self, input: &'a [u8]) -> Result<Decoded<'a>, HttpError> {
        let mut pos = 0;
        loop {
            let rest = input.get(pos..).unwrap_or_default();
            self.received_any |= !rest.is_empty();
            let Some(n) = self.scanner.scan(rest, &self.limits)? else {
                self.head_buf.extend_from_slice(rest);
                return Ok(Decoded {
                    consumed: input.len(),
                    event: Event::NeedMore,
                });
            };
            let complete = rest.get(..n).unwrap_or_default();
            let head = if self.head_buf.is_empty() {
                parse_head(complete, &self.limits, self.method_is_head)?
            } else {
                self.head_buf.extend_from_slice(complete);
                parse_head(&self.head_buf, &self.limits, self.method_is_head)?
            };
            self.head_buf.clear();
            self.scanner = HeadScanner::default();
            pos += n;
            if head.is_informational() {
                self.continued |= head.status == 100;
                continue;
            }
            self.keep_alive = head.keep_alive;
            self.state = State::Body(BodyDecoder::new(head.framing, self.limits));
            return Ok(Decoded {
                consumed: pos,
                event: Event::Head(head),
            });
        }
    }
}
