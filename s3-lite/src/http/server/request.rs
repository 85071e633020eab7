//! The request head and the incremental, keep-alive aware request decoder (server side).
//!
//! Usage (a server's read loop):
//!
//! ```
//! use s3_lite::http::Limits;
//! use s3_lite::http::server::{RequestDecoder, RequestEvent};
//!
//! let wire = b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello";
//! let mut dec = RequestDecoder::new(Limits::default());
//! let (mut pos, mut body) = (0, Vec::new());
//! loop {
//!     let d = dec.decode(&wire[pos..]).unwrap();
//!     pos += d.consumed;
//!     match d.event {
//!         RequestEvent::Head(head) => assert_eq!(head.path, "/b/k"),
//!         RequestEvent::Body(bytes) => body.extend_from_slice(bytes),
//!         RequestEvent::End => break,
//!         RequestEvent::NeedMore => unreachable!("a socket read would go here"),
//!     }
//! }
//! assert_eq!(body, b"hello");
//! ```
//!
//! Framing follows RFC 9112 §6.3 for requests: `Transfer-Encoding` with `Content-Length` is
//! refused (the classic smuggling pattern), differing `Content-Length` values are refused, the
//! only transfer coding is a single final `chunked`, and a request with neither has no body.
//! `Expect: 100-continue` is surfaced on the head so the server can answer `100 Continue` (or
//! refuse) before the client sends the body.

use super::error::RequestError;
use crate::Request;
use crate::http::body::{BodyDecoder, BodyStep};
use crate::http::error::{HttpError, Malformed};
use crate::http::framing::{self, BodyFraming};
use crate::http::head::{HeadScanner, check_parsed, owned_headers, with_header_slots};
use crate::http::limits::Limits;

/// A parsed request line and header block.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method token as sent (case-sensitive, RFC 9110 §9.1).
    pub method: String,
    /// Encoded path of the target, starting with `/` (an absolute-form target's path; `*`
    /// for an `OPTIONS *` request).
    pub path: String,
    /// Encoded query without `?` (empty when there is none).
    pub query: String,
    /// `0` for HTTP/1.0, `1` for HTTP/1.1.
    pub version_minor: u8,
    /// Header fields in wire order; names keep the client's case. Non-UTF-8 bytes in a value
    /// are replaced with U+FFFD (such a value then fails any signature check).
    pub headers: Vec<(String, String)>,
    /// How the body is delimited: [`BodyFraming::None`], [`BodyFraming::Length`] or
    /// [`BodyFraming::Chunked`] (never `UntilClose` for a request).
    pub framing: BodyFraming,
    /// Whether the client allows another request on this connection after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on an HTTP/1.1 request with a body: the client waits (a while)
    /// for `100 Continue` before sending the body.
    pub expect_continue: bool,
}

impl RequestHead {
    /// First value of `name`, matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body length announced by `Content-Length`, when the body is length-delimited.
    pub fn content_length(&self) -> Option<u64> {
        match self.framing {
            BodyFraming::Length(n) => Some(n),
            BodyFraming::None => Some(0),
            _ => None,
        }
    }

    /// The head as the shared [`Request`] type (what the SigV4 verifier takes).
    pub fn to_request(&self) -> Request {
        Request {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers: self.headers.clone(),
        }
    }
}

/// What one call to [`RequestDecoder::decode`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestEvent<'a> {
    /// The input was consumed (buffered head bytes or framing); more is needed.
    NeedMore,
    /// A complete request head.
    Head(RequestHead),
    /// Body bytes: a slice of the input ending at the consumed prefix (no copy).
    Body(&'a [u8]),
    /// The request is complete; trailers (chunked bodies) are in [`RequestDecoder::trailers`].
    End,
}

/// The result of [`RequestDecoder::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRequest<'a> {
    /// Bytes of the input used. INVARIANT: `consumed <= input.len()`, and equals it for
    /// [`RequestEvent::NeedMore`].
    pub consumed: usize,
    /// What those bytes meant.
    pub event: RequestEvent<'a>,
}

#[derive(Debug, Clone)]
enum State {
    Head,
    Body(BodyDecoder),
    Done,
    Failed(RequestError),
}

/// Decodes one HTTP/1.1 request at a time from a byte stream (sans-IO).
///
/// Memory: at most `Limits::max_head_bytes` of partial head and `Limits::max_trailer_bytes` of
/// trailers; body bytes are never copied. Errors are sticky.
#[derive(Debug, Clone)]
pub struct RequestDecoder {
    limits: Limits,
    state: State,
    scanner: HeadScanner,
    /// INVARIANT: `head_buf.len() <= limits.max_head_bytes`.
    head_buf: Vec<u8>,
    received_any: bool,
    keep_alive: bool,
    trailers: Vec<(String, String)>,
}

impl RequestDecoder {
    /// A decoder waiting for the first request of a connection.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: State::Head,
            scanner: HeadScanner::default(),
            head_buf: Vec::new(),
            received_any: false,
            keep_alive: false,
            trailers: Vec::new(),
        }
    }

    /// Prepares for the next request on the same connection; fails unless the current one has
    /// ended and allowed reuse.
    pub fn reset_for_next(&mut self) -> Result<(), RequestError> {
        if !self.is_reusable() {
            return Err(RequestError::Http(HttpError::NotReusable));
        }
        *self = Self::new(self.limits);
        Ok(())
    }

    /// Whether the request has ended and the connection may carry another one.
    pub fn is_reusable(&self) -> bool {
        matches!(self.state, State::Done) && self.keep_alive
    }

    /// Whether the current request has been decoded completely.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    /// Whether any byte of the current request has arrived (a close before that is a clean
    /// end of a keep-alive connection).
    pub fn has_started(&self) -> bool {
        self.received_any
    }

    /// Trailer fields of a chunked request, once [`RequestEvent::End`] was returned.
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Tells the decoder the client closed the connection: fine between requests, an
    /// [`RequestError::UnexpectedEof`] inside one.
    pub fn finish_on_eof(&mut self) -> Result<(), RequestError> {
        match &self.state {
            State::Done => Ok(()),
            State::Body(body) if body.ends_at_eof() => Ok(()),
            State::Head if !self.received_any => Ok(()),
            State::Failed(e) => Err(e.clone()),
            State::Head | State::Body(_) => {
                self.state = State::Failed(RequestError::UnexpectedEof);
                Err(RequestError::UnexpectedEof)
            }
        }
    }

    /// Consumes a prefix of `input` and reports what it was. Call again after every event,
    /// also with empty input: the end of a request is reported without waiting for more bytes.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<DecodedRequest<'a>, RequestError> {
        match self.step(input) {
            Ok(d) => Ok(d),
            Err(e) => {
                self.state = State::Failed(e.clone());
                Err(e)
            }
        }
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<DecodedRequest<'a>, RequestError> {
        let (consumed, event) = match &mut self.state {
            State::Failed(e) => return Err(e.clone()),
            State::Done => (0, RequestEvent::End),
            State::Head => return self.head(input),
            State::Body(body) => match body.step(input)? {
                (n, BodyStep::NeedMore) => (n, RequestEvent::NeedMore),
                (n, BodyStep::Data(d)) => (n, RequestEvent::Body(d)),
                (n, BodyStep::End(trailers)) => {
                    self.trailers = trailers;
                    self.state = State::Done;
                    (n, RequestEvent::End)
                }
            },
        };
        Ok(DecodedRequest { consumed, event })
    }

    fn head<'a>(&mut self, input: &'a [u8]) -> Result<DecodedRequest<'a>, RequestError> {
        self.received_any |= !input.is_empty();
        let Some(n) = self.scanner.scan(input, &self.limits)? else {
            self.head_buf.extend_from_slice(input);
            return Ok(DecodedRequest {
                consumed: input.len(),
                event: RequestEvent::NeedMore,
            });
        };
        let complete = input.get(..n).unwrap_or_default();
        let head = if self.head_buf.is_empty() {
            parse_request_head(complete, &self.limits)?
        } else {
            self.head_buf.extend_from_slice(complete);
            parse_request_head(&self.head_buf, &self.limits)?
        };
        self.head_buf.clear();
        self.scanner = HeadScanner::default();
        self.keep_alive = head.keep_alive;
        // A request without Content-Length or chunked coding has no body (never read-to-close).
        let framing = match head.framing {
            f @ (BodyFraming::Length(_) | BodyFraming::Chunked) => f,
            _ => BodyFraming::None,
        };
        self.state = State::Body(BodyDecoder::new(framing, self.limits));
        Ok(DecodedRequest {
            consumed: n,
            event: RequestEvent::Head(head),
        })
    }
}

/// A byte allowed in a request target: visible ASCII except `#`.
fn is_target_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'#'
}

/// The forms of request target a server must accept (RFC 9112 §3.2): origin form
/// (`/path?query`), absolute form (`http://authority/path?query`, sent by proxies and by
/// clients such as the AWS SDK for C++), and asterisk form (`*`, for `OPTIONS` only).
/// Authority form (`host:port`) belongs to `CONNECT`, which an S3 server does not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RequestTarget<'a> {
    Origin(&'a str),
    Absolute {
        scheme: &'a str,
        authority: &'a str,
        /// The path and query after the authority (`""` when the target ends there).
        rest: &'a str,
    },
    Asterisk,
}

impl<'a> RequestTarget<'a> {
    fn parse(method: &str, target: &'a str) -> Result<Self, RequestError> {
        if target.starts_with('/') {
            return Ok(Self::Origin(target));
        }
        if target == "*" {
            return if method == "OPTIONS" {
                Ok(Self::Asterisk)
            } else {
                Err(RequestError::InvalidTarget)
            };
        }
        let (scheme, after) = target
            .split_once("://")
            .ok_or(RequestError::InvalidTarget)?;
        if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
            return Err(RequestError::InvalidTarget);
        }
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, rest) = after.split_at(end);
        // No userinfo (RFC 9110 §4.2.4: deprecated, and a classic way to disguise a host).
        if authority.is_empty() || authority.contains('@') {
            return Err(RequestError::InvalidTarget);
        }
        Ok(Self::Absolute {
            scheme,
            authority,
            rest,
        })
    }

    /// The encoded path (starting with `/`; `*` for the asterisk form) and the query.
    fn path_and_query(&self) -> (&'a str, &'a str) {
        match *self {
            Self::Origin(t) => t.split_once('?').unwrap_or((t, "")),
            Self::Absolute { rest, .. } => {
                let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
                // An empty path is the root (RFC 9110 §4.2.3).
                (if path.is_empty() { "/" } else { path }, query)
            }
            Self::Asterisk => ("*", ""),
        }
    }
}

/// Whether `authority` (of a `scheme` target) and a `Host` value name the same host and port
/// (case-insensitive; a scheme's default port may be left out on either side).
fn same_authority(scheme: &str, authority: &str, host: &str) -> bool {
    let default = if scheme.eq_ignore_ascii_case("https") {
        ":443"
    } else {
        ":80"
    };
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        match s.strip_suffix(default) {
            Some(h) => h.to_owned(),
            None => s,
        }
    };
    norm(authority) == norm(host)
}

/// Parses a complete request head (as delimited by the scanner) and derives its framing.
pub(crate) fn parse_request_head(buf: &[u8], limits: &Limits) -> Result<RequestHead, RequestError> {
    with_header_slots(limits.max_headers, |slots| {
        let mut req = httparse::Request::new(slots);
        check_parsed(req.parse(buf), buf.len(), limits)?;
        head_of(&req)
    })
}

/// The owned head of a parsed request, checked (target, `Host`) and with its framing.
fn head_of(req: &httparse::Request<'_, '_>) -> Result<RequestHead, RequestError> {
    let (Some(method), Some(target), Some(version_minor)) = (req.method, req.path, req.version)
    else {
        return Err(HttpError::Malformed(Malformed::Token).into());
    };
    if !target.bytes().all(is_target_byte) {
        return Err(RequestError::InvalidTarget);
    }
    let form = RequestTarget::parse(method, target)?;
    let headers = owned_headers(req.headers);
    let mut hosts = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.as_str());
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(RequestError::DuplicateHost);
    }
    if host.is_none() && version_minor >= 1 {
        return Err(RequestError::MissingHost);
    }
    // RFC 9112 §3.2.2: the target's authority names the host. The Host field is part of what
    // a SigV4 client signed, so it is kept, and it must name the same host.
    if let (
        RequestTarget::Absolute {
            scheme, authority, ..
        },
        Some(host),
    ) = (&form, host)
        && !same_authority(scheme, authority, host)
    {
        return Err(RequestError::HostMismatch);
    }
    let (path, query) = form.path_and_query();
    let framing = request_framing(version_minor, &headers)?;
    let keep_alive = framing::keep_alive(version_minor, framing, &headers);
    let expect_continue = version_minor >= 1
        && framing != BodyFraming::None
        && headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("expect") && v.trim().eq_ignore_ascii_case("100-continue")
        });
    Ok(RequestHead {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        version_minor,
        headers,
        framing,
        keep_alive,
        expect_continue,
    })
}

/// RFC 9112 §6.3 for requests, strict: TE with CL is refused, only a single final `chunked`,
/// no transfer coding on HTTP/1.0, and no framing header means no body.
fn request_framing(
    version_minor: u8,
    headers: &[(String, String)],
) -> Result<BodyFraming, RequestError> {
    let length = framing::content_length(headers)?;
    let mut te_fields = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"))
        .peekable();
    if te_fields.peek().is_none() {
        return Ok(match length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        });
    }
    if length.is_some() || version_minor == 0 {
        return Err(HttpError::ConflictingFraming.into());
    }
    let mut codings = te_fields
        .flat_map(|(_, v)| v.split(','))
        .map(|e| e.trim_matches([' ', '\t']))
        .filter(|e| !e.is_empty());
    match (codings.next(), codings.next()) {
        (Some(c), None) if c.eq_ignore_ascii_case("chunked") => Ok(BodyFraming::Chunked),
        _ => Err(HttpError::UnsupportedTransferEncoding.into()),
    }
}
