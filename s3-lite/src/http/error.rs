//! The one error type of the HTTP codec.
//!
//! Every variant is a reason the caller may branch on (retry on a fresh connection, report a
//! broken server, report API misuse); none carries peer-controlled text of unbounded size.

use thiserror::Error;

/// Why a head or body could not be encoded or decoded.
///
/// Once a [`crate::http::ResponseDecoder`] has returned an error it keeps returning the same one:
/// the connection's framing is lost and the connection must be closed.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HttpError {
    /// httparse rejected the response head (bad status line, header name, header value, ...).
    #[error("malformed response head: {0}")]
    Malformed(Malformed),
    /// The head grew past `Limits::max_head_bytes` before its terminating empty line.
    #[error("response head exceeds {limit} bytes")]
    HeadTooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// More header lines than `Limits::max_headers`.
    #[error("response has more than {limit} header lines")]
    TooManyHeaders {
        /// The limit in force.
        limit: usize,
    },
    /// One line of the head is longer than `Limits::max_line_bytes`.
    #[error("a response head line exceeds {limit} bytes")]
    LineTooLong {
        /// The limit in force.
        limit: usize,
    },
    /// A `Content-Length` value that is not a plain decimal number fitting in 64 bits.
    #[error("invalid Content-Length")]
    InvalidContentLength,
    /// Several `Content-Length` values that disagree (a request-smuggling pattern).
    #[error("conflicting Content-Length values")]
    DuplicateContentLength,
    /// `Transfer-Encoding` and `Content-Length` together (RFC 9112 §6.3 rule 3: a smuggling
    /// pattern), or a request whose headers disagree with the framing the caller asked for.
    #[error("conflicting message framing (Transfer-Encoding with Content-Length)")]
    ConflictingFraming,
    /// A transfer coding other than a single, final `chunked`.
    #[error("unsupported Transfer-Encoding (only a single `chunked` is accepted)")]
    UnsupportedTransferEncoding,
    /// `101 Switching Protocols`: this client never asks for an upgrade.
    #[error("unexpected 101 Switching Protocols")]
    SwitchingProtocols,
    /// Chunked framing violated (missing CRLF, non-hex size, control bytes in an extension).
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
    /// A chunk size that does not fit in 64 bits.
    #[error("chunk size overflows 64 bits")]
    ChunkSizeOverflow,
    /// A chunk-size line (size plus extensions) longer than `Limits::max_chunk_line_bytes`.
    #[error("chunk-size line exceeds {limit} bytes")]
    ChunkLineTooLong {
        /// The limit in force.
        limit: usize,
    },
    /// The trailer section is larger than `Limits::max_trailer_bytes`.
    #[error("trailer section exceeds {limit} bytes")]
    TrailersTooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// The trailer section is not a valid header block (or has too many fields).
    #[error("malformed trailer section: {0}")]
    MalformedTrailers(Malformed),
    /// The connection closed inside a head, a `Content-Length` body or a chunked body.
    #[error("connection closed before the response was complete")]
    UnexpectedEof,
    /// The connection closed before a single byte of the response arrived: on a reused
    /// keep-alive connection this usually means the server timed it out, and an idempotent
    /// request may be retried on a fresh connection.
    #[error("connection closed before any response byte")]
    EmptyResponse,
    /// Request encoding: the method is not an RFC 9110 token.
    #[error("invalid request method")]
    InvalidMethod,
    /// Request encoding: the path does not start with `/` or the target has bytes that cannot
    /// appear on a request line (space, CR, LF, NUL, `#`, non-ASCII).
    #[error("invalid request target")]
    InvalidTarget,
    /// Request encoding: a header name that is not a token.
    #[error("invalid header name {0:?}")]
    InvalidHeaderName(String),
    /// Request encoding: a header value with CR, LF, NUL or other control bytes, or with
    /// leading/trailing whitespace (which receivers would strip, changing what was signed).
    #[error("invalid value for header {0:?}")]
    InvalidHeaderValue(String),
    /// Request encoding: HTTP/1.1 requires a `Host` header.
    #[error("request has no Host header")]
    MissingHost,
    /// Request encoding: `UntilClose` framing is only meaningful for responses.
    #[error("a request body cannot be delimited by closing the connection")]
    InvalidRequestFraming,
    /// Request sending: body bytes reported beyond the declared `Content-Length`, a chunk for a
    /// body that is not chunked, or body bytes at a point where none may be sent.
    #[error("request body does not match its framing")]
    RequestBodyMismatch,
    /// `reset_for_next` on a decoder whose response has not ended or whose connection cannot
    /// be reused.
    #[error("connection is not reusable for another response")]
    NotReusable,
    /// Body bytes reported as placed by the caller ([`crate::http::ResponseDecoder::body_placed`])
    /// where none may be: past the body's `Content-Length`, or outside a length-delimited body.
    #[error("body bytes placed beyond what the response's framing allows")]
    PlacedPastBody,
}

/// What httparse (or our own head scanner) found wrong in a head or trailer block.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Invalid byte in a header name.
    HeaderName,
    /// Invalid byte in a header value.
    HeaderValue,
    /// Invalid or missing line ending.
    NewLine,
    /// Invalid status line or status code.
    Status,
    /// Invalid token.
    Token,
    /// Too many header fields for the parser's table.
    TooManyHeaders,
    /// Not `HTTP/1.0` or `HTTP/1.1`.
    Version,
    /// The parser and the head scanner disagree on where the head ends.
    Framing,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Self::HeaderName => "invalid header name",
            Self::HeaderValue => "invalid header value",
            Self::NewLine => "invalid line ending",
            Self::Status => "invalid status line",
            Self::Token => "invalid token",
            Self::TooManyHeaders => "too many headers",
            Self::Version => "unsupported HTTP version",
            Self::Framing => "head boundary mismatch",
        };
        f.write_str(s)
    }
}

impl From<httparse::Error> for Malformed {
    fn from(e: httparse::Error) -> Self {
        match e {
            httparse::Error::HeaderName => Self::HeaderName,
            httparse::Error::HeaderValue => Self::HeaderValue,
            httparse::Error::NewLine => Self::NewLine,
            httparse::Error::Status => Self::Status,
            httparse::Error::Token => Self::Token,
            httparse::Error::TooManyHeaders => Self::TooManyHeaders,
            httparse::Error::Version => Self::Version,
        }
    }
}
