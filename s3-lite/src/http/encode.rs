//! HTTP/1.1 request-head and chunk encoding.
//!
//! The encoder refuses anything that would let a value escape its field (CR, LF, NUL) or change
//! meaning between what was signed and what a server parses, because SigV4 signs header values
//! and the request target: an injected line would be both a smuggling vector and a signature
//! mismatch.

use super::error::HttpError;
use super::framing::BodyFraming;
use crate::request::Request;

/// RFC 9110 `tchar`: the bytes allowed in a method or header name.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// A field value we are willing to send: VCHAR, obs-text, SP and HTAB, no leading or trailing
/// whitespace. An empty value is allowed (`Content-Type:` is legal, if odd).
fn is_valid_value(v: &str) -> bool {
    let ok_bytes = v
        .bytes()
        .all(|b| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80);
    let trimmed = v.trim_matches([' ', '\t']);
    ok_bytes && trimmed.len() == v.len()
}

/// A target byte: visible ASCII except `#` (fragments are never sent); `?` only in the query.
fn is_target_byte(b: u8, in_path: bool) -> bool {
    (0x21..=0x7e).contains(&b) && b != b'#' && !(in_path && b == b'?')
}

fn parse_length(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// Checks the framing headers the caller may already have set (the signer may have signed a
/// `Content-Length`) against the framing requested, and says which header the encoder must add.
fn reconcile_framing(req: &Request, body: BodyFraming) -> Result<Option<String>, HttpError> {
    let mut lengths = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"));
    let mut tes = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"));
    let length = match lengths.next() {
        Some((_, v)) => Some(parse_length(v).ok_or(HttpError::InvalidContentLength)?),
        None => None,
    };
    if lengths.next().is_some() {
        return Err(HttpError::DuplicateContentLength);
    }
    let te = tes.next().map(|(_, v)| v.as_str());
    if tes.next().is_some() || te.is_some_and(|v| !v.eq_ignore_ascii_case("chunked")) {
        return Err(HttpError::UnsupportedTransferEncoding);
    }
    if length.is_some() && te.is_some() {
        return Err(HttpError::ConflictingFraming);
    }
    match body {
        BodyFraming::UntilClose => Err(HttpError::InvalidRequestFraming),
        BodyFraming::None => match (length, te) {
            (None | Some(0), None) => Ok(None),
            _ => Err(HttpError::ConflictingFraming),
        },
        BodyFraming::Length(n) => match (length, te) {
            (None, None) => Ok(Some(format!("Content-Length: {n}\r\n"))),
            (Some(m), None) if m == n => Ok(None),
            _ => Err(HttpError::ConflictingFraming),
        },
        BodyFraming::Chunked => match (length, te) {
            (None, None) => Ok(Some("Transfer-Encoding: chunked\r\n".to_owned())),
            (None, Some(_)) => Ok(None),
            _ => Err(HttpError::ConflictingFraming),
        },
    }
}

/// Appends the request line and headers of `req`, then the framing header `body` calls for, then
/// the empty line, to `out`.
///
/// `body` chooses how the body (sent separately by the caller) is delimited:
/// - [`BodyFraming::None`]: no framing header (GET, HEAD, DELETE). A PUT with an empty body
///   should pass `Length(0)` instead, since some servers answer 411 without a length.
/// - [`BodyFraming::Length`]: `Content-Length: n`, unless `req` already carries the same value.
/// - [`BodyFraming::Chunked`]: `Transfer-Encoding: chunked`; send the body with
///   [`encode_chunk`] and [`encode_last_chunk`].
///
/// Nothing is written on error: `out` keeps its previous length.
pub fn encode_request_head(
    req: &Request,
    body: BodyFraming,
    out: &mut Vec<u8>,
) -> Result<(), HttpError> {
    if !is_token(&req.method) {
        return Err(HttpError::InvalidMethod);
    }
    if !req.path.starts_with('/')
        || !req.path.bytes().all(|b| is_target_byte(b, true))
        || !req.query.bytes().all(|b| is_target_byte(b, false))
    {
        return Err(HttpError::InvalidTarget);
    }
    let mut has_host = false;
    for (name, value) in &req.headers {
        if !is_token(name) {
            return Err(HttpError::InvalidHeaderName(name.clone()));
        }
        if !is_valid_value(value) {
            return Err(HttpError::InvalidHeaderValue(name.clone()));
        }
        has_host |= name.eq_ignore_ascii_case("host");
    }
    if !has_host {
        return Err(HttpError::MissingHost);
    }
    let extra = reconcile_framing(req, body)?;

    out.extend_from_slice(req.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.path.as_bytes());
    if !req.query.is_empty() {
        out.push(b'?');
        out.extend_from_slice(req.query.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &req.headers {
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

/// Appends one chunk (`<hex size>\r\n<data>\r\n`). An empty `data` writes nothing, because a
/// zero-size chunk would end the body; use [`encode_last_chunk`] for that.
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:X}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk (`0\r\n`), the trailer fields and the final empty line. S3 uses
/// trailers for `x-amz-checksum-*` on streaming uploads (`x-amz-trailer` announces them).
pub fn encode_last_chunk(
    trailers: &[(String, String)],
    out: &mut Vec<u8>,
) -> Result<(), HttpError> {
    for (name, value) in trailers {
        if !is_token(name) {
            return Err(HttpError::InvalidHeaderName(name.clone()));
        }
        if !is_valid_value(value) {
            return Err(HttpError::InvalidHeaderValue(name.clone()));
        }
    }
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get() -> Request {
        let mut r = Request::new("GET", "/b/k%20x");
        r.query = "partNumber=1&uploadId=a%2Fb".into();
        r.add_header("Host", "127.0.0.1:9000");
        r.add_header("x-amz-date", "20130524T000000Z");
        r
    }

    #[test]
    fn encodes_exact_bytes() {
        let mut out = b"junk".to_vec();
        encode_request_head(&get(), BodyFraming::None, &mut out).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "junkGET /b/k%20x?partNumber=1&uploadId=a%2Fb HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n\
             x-amz-date: 20130524T000000Z\r\n\r\n"
        );
    }

    #[test]
    fn adds_or_checks_framing_headers() {
        let mut r = get();
        r.method = "PUT".into();
        let mut out = Vec::new();
        encode_request_head(&r, BodyFraming::Length(0), &mut out).unwrap();
        assert!(out.ends_with(b"Content-Length: 0\r\n\r\n"));
        r.add_header("Content-Length", "5");
        out.clear();
        encode_request_head(&r, BodyFraming::Length(5), &mut out).unwrap();
        assert_eq!(
            out.windows(16)
                .filter(|w| w.eq_ignore_ascii_case(b"content-length: "))
                .count(),
            1
        );
        assert_eq!(
            encode_request_head(&r, BodyFraming::Length(6), &mut out),
            Err(HttpError::ConflictingFraming)
        );
        assert_eq!(
            encode_request_head(&r, BodyFraming::None, &mut out),
            Err(HttpError::ConflictingFraming)
        );
        assert_eq!(
            encode_request_head(&r, BodyFraming::Chunked, &mut out),
            Err(HttpError::ConflictingFraming)
        );
        let mut c = get();
        out.clear();
        encode_request_head(&c, BodyFraming::Chunked, &mut out).unwrap();
        assert!(out.ends_with(b"Transfer-Encoding: chunked\r\n\r\n"));
        c.add_header("Transfer-Encoding", "gzip");
        assert_eq!(
            encode_request_head(&c, BodyFraming::Chunked, &mut out),
            Err(HttpError::UnsupportedTransferEncoding)
        );
        assert_eq!(
            encode_request_head(&get(), BodyFraming::UntilClose, &mut out),
            Err(HttpError::InvalidRequestFraming)
        );
    }

    #[test]
    fn rejects_injection() {
        let mut out = Vec::new();
        let cases: Vec<(Request, HttpError)> = vec![
            (
                {
                    let mut r = get();
                    r.method = "GE T".into();
                    r
                },
                HttpError::InvalidMethod,
            ),
            (
                {
                    let mut r = get();
                    r.method = String::new();
                    r
                },
                HttpError::InvalidMethod,
            ),
            (
                {
                    let mut r = get();
                    r.path = "b/k".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.path = "/a b".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.path = "/a\r\nX: y".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.path = "/a\0".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.path = "/a?b".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.query = "a=\n".into();
                    r
                },
                HttpError::InvalidTarget,
            ),
            (
                {
                    let mut r = get();
                    r.add_header("X Y", "1");
                    r
                },
                HttpError::InvalidHeaderName("X Y".into()),
            ),
            (
                {
                    let mut r = get();
                    r.add_header("X:", "1");
                    r
                },
                HttpError::InvalidHeaderName("X:".into()),
            ),
            (
                {
                    let mut r = get();
                    r.add_header("X", "a\r\nEvil: 1");
                    r
                },
                HttpError::InvalidHeaderValue("X".into()),
            ),
            (
                {
                    let mut r = get();
                    r.add_header("X", "a\0");
                    r
                },
                HttpError::InvalidHeaderValue("X".into()),
            ),
            (
                {
                    let mut r = get();
                    r.add_header("X", " a");
                    r
                },
                HttpError::InvalidHeaderValue("X".into()),
            ),
            (
                {
                    let mut r = get();
                    r.remove_header("host");
                    r
                },
                HttpError::MissingHost,
            ),
        ];
        for (req, want) in cases {
            assert_eq!(
                encode_request_head(&req, BodyFraming::None, &mut out),
                Err(want),
                "{req:?}"
            );
            assert!(out.is_empty(), "nothing written on error");
        }
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        encode_chunk(b"hello world, this is 26 b.", &mut out);
        encode_chunk(b"", &mut out);
        encode_last_chunk(
            &[("x-amz-checksum-crc64nvme".into(), "AAAAAAAAAAA=".into())],
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            b"1A\r\nhello world, this is 26 b.\r\n0\r\nx-amz-checksum-crc64nvme: AAAAAAAAAAA=\r\n\r\n".to_vec()
        );
        assert!(encode_last_chunk(&[("a".into(), "\n".into())], &mut out).is_err());
    }
}
