//! Why a request could not be decoded, and the status a server answers with.

use thiserror::Error;

use crate::http::error::HttpError;

/// A request the server must refuse. Sticky in [`super::RequestDecoder`]: after an error the
/// framing of the connection is lost, so the server answers [`RequestError::status`] with
/// `Connection: close` and closes.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// A framing or limit error shared with the response side (malformed head, smuggling
    /// patterns, oversized head, broken chunked body, ...).
    #[error(transparent)]
    Http(#[from] HttpError),
    /// An HTTP/1.1 request without `Host` (RFC 9112 §3.2: answer 400).
    #[error("HTTP/1.1 request without a Host header")]
    MissingHost,
    /// More than one `Host` field (RFC 9112 §3.2: answer 400).
    #[error("request has more than one Host header")]
    DuplicateHost,
    /// The request target is neither origin form (`/path[?query]`), absolute form
    /// (`http[s]://authority/path[?query]`) nor `*` on an `OPTIONS` request, or it has bytes
    /// that cannot appear on a request line.
    #[error("request target is not a path, an http(s) URL, or * (OPTIONS only)")]
    InvalidTarget,
    /// An absolute-form target names another host than the `Host` field.
    #[error("the request target's authority and the Host header name different hosts")]
    HostMismatch,
    /// The connection closed in the middle of a request.
    #[error("connection closed inside a request")]
    UnexpectedEof,
}

impl RequestError {
    /// The status a server should answer with before closing the connection.
    ///
    /// 431 for oversized heads or header counts, 501 for transfer codings we do not implement,
    /// 400 for everything else (malformed or ambiguous framing).
    pub fn status(&self) -> u16 {
        match self {
            Self::Http(
                HttpError::HeadTooLarge { .. }
                | HttpError::TooManyHeaders { .. }
                | HttpError::LineTooLong { .. },
            ) => 431,
            Self::Http(HttpError::UnsupportedTransferEncoding) => 501,
            _ => 400,
        }
    }
}
