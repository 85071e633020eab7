//! The response-head encoder (server side).
//!
//! Like the request encoder it validates everything it writes: no header value or reason
//! phrase can inject a line, and the framing header always agrees with what the caller will
//! send, so a response cannot be read two ways by a client or an intermediary.

use crate::http::encode::is_tchar;
use crate::http::error::HttpError;
use crate::http::framing::BodyFraming;

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// VCHAR, obs-text, SP and HTAB; no leading or trailing whitespace.
fn is_valid_value(v: &str) -> bool {
    v.bytes()
        .all(|b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80)
        && v.trim_matches([' ', '\t']).len() == v.len()
}

fn parse_length(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Appends `HTTP/1.1 <status> <reason>`, the headers, the framing header `framing` calls for
/// and the empty line to `out`.
///
/// - [`BodyFraming::Length`]: `Content-Length: n` is added unless `headers` already has the
///   same value (a different one is [`HttpError::ConflictingFraming`]).
/// - [`BodyFraming::Chunked`]: `Transfer-Encoding: chunked` is added; write the body with
///   [`crate::http::encode_chunk`] / [`crate::http::encode_last_chunk`].
/// - [`BodyFraming::None`]: no body follows. `headers` may carry one `Content-Length` (a HEAD
///   response names the object size that way), except on 1xx and 204.
/// - [`BodyFraming::UntilClose`]: no framing header; the caller closes after the body.
///
/// `Transfer-Encoding` in `headers` is always refused (the encoder owns it). Nothing is
/// written on error.
pub fn encode_response_head(
    status: u16,
    reason: &str,
    headers: &[(String, String)],
    framing: BodyFraming,
    out: &mut Vec<u8>,
) -> Result<(), HttpError> {
    if !(100..=999).contains(&status) {
        return Err(HttpError::Malformed(crate::http::Malformed::Status));
    }
    if !reason.is_empty() && !is_valid_value(reason) {
        return Err(HttpError::InvalidHeaderValue("reason phrase".into()));
    }
    let mut length = None;
    for (name, value) in headers {
        if !is_token(name) {
            return Err(HttpError::InvalidHeaderName(name.clone()));
        }
        if !is_valid_value(value) {
            return Err(HttpError::InvalidHeaderValue(name.clone()));
        }
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::UnsupportedTransferEncoding);
        }
        if name.eq_ignore_ascii_case("content-length") {
            if length.is_some() {
                return Err(HttpError::DuplicateContentLength);
            }
            length = Some(parse_length(value).ok_or(HttpError::InvalidContentLength)?);
        }
    }
    let no_body_status = (100..200).contains(&status) || status == 204;
    let extra = match framing {
        BodyFraming::Length(n) if no_body_status && n > 0 => {
            return Err(HttpError::ConflictingFraming);
        }
        BodyFraming::Length(_) | BodyFraming::None if no_body_status => {
            if length.is_some() {
                return Err(HttpError::ConflictingFraming);
            }
            None
        }
        BodyFraming::Length(n) => match length {
            None => Some(format!("Content-Length: {n}\r\n")),
            Some(m) if m == n => None,
            Some(_) => return Err(HttpError::ConflictingFraming),
        },
        BodyFraming::None => None,
        BodyFraming::Chunked | BodyFraming::UntilClose if no_body_status => {
            return Err(HttpError::ConflictingFraming);
        }
        BodyFraming::Chunked => {
            if length.is_some() {
                return Err(HttpError::ConflictingFraming);
            }
            Some("Transfer-Encoding: chunked\r\n".to_owned())
        }
        BodyFraming::UntilClose => {
            if length.is_some() {
                return Err(HttpError::ConflictingFraming);
            }
            None
        }
    };
    out.extend_from_slice(format!("HTTP/1.1 {status} ").as_bytes());
    out.extend_from_slice(reason.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(line) = extra {
        out.extend_from_slice(line.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// The interim `HTTP/1.1 100 Continue` a server sends when it accepts a request that carried
/// `Expect: 100-continue`, before reading its body.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The standard reason phrase of `status` (RFC 9110), or `""` for unknown codes.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}
