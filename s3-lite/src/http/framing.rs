//! Message framing: how the end of a body is found (RFC 9112 §6.3), and connection reuse.

use super::error::HttpError;

/// How a message body is delimited.
///
/// For requests the caller picks one (`UntilClose` is refused by the encoder); for responses
/// the decoder derives it from the status, the request method and the headers.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: HEAD responses, 1xx/204/304, requests without a body.
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Response body runs until the server closes the connection (HTTP/1.0 style). Such a
    /// connection can never be reused.
    UntilClose,
}

/// Iterates the comma-separated elements of every header named `name`, trimmed, empty ones
/// skipped (RFC 9110 §5.6.1 list syntax).
fn list_elements<'h>(
    headers: &'h [(String, String)],
    name: &'h str,
) -> impl Iterator<Item = &'h str> + 'h {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .flat_map(|(_, v)| v.split(','))
        .map(|e| e.trim_matches([' ', '\t']))
        .filter(|e| !e.is_empty())
}

/// The one Content-Length value all `Content-Length` fields agree on, if any.
///
/// Several fields, or a comma list, with one identical value are accepted (RFC 9110 §8.6 allows a
/// recipient to); differing values are a smuggling pattern and rejected.
pub(crate) fn content_length(headers: &[(String, String)]) -> Result<Option<u64>, HttpError> {
    let mut found: Option<u64> = None;
    let mut any_field = false;
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case("content-length") {
            continue;
        }
        any_field = true;
        for element in v.split(',') {
            let element = element.trim_matches([' ', '\t']);
            if element.is_empty() || !element.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::InvalidContentLength);
            }
            let value: u64 = element
                .parse()
                .map_err(|_| HttpError::InvalidContentLength)?;
            match found {
                Some(prev) if prev != value => return Err(HttpError::DuplicateContentLength),
                _ => found = Some(value),
            }
        }
    }
    if any_field && found.is_none() {
        return Err(HttpError::InvalidContentLength);
    }
    Ok(found)
}

/// Decides the body framing of a response (RFC 9112 §6.3), checking the smuggling patterns even
/// where the body is known to be empty.
pub(crate) fn response_framing(
    status: u16,
    method_is_head: bool,
    headers: &[(String, String)],
) -> Result<BodyFraming, HttpError> {
    let length = content_length(headers)?;
    let has_te = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"));
    if has_te && length.is_some() {
        return Err(HttpError::ConflictingFraming);
    }
    let mut codings = list_elements(headers, "transfer-encoding");
    let chunked = if has_te {
        // Exactly one coding, `chunked`: anything else we could not decode, and a `chunked`
        // that is not final (or repeated) makes the framing ambiguous.
        match (codings.next(), codings.next()) {
            (Some(c), None) if c.eq_ignore_ascii_case("chunked") => true,
            _ => return Err(HttpError::UnsupportedTransferEncoding),
        }
    } else {
        false
    };
    if method_is_head || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(BodyFraming::None);
    }
    Ok(match (chunked, length) {
        (true, _) => BodyFraming::Chunked,
        (false, Some(n)) => BodyFraming::Length(n),
        (false, None) => BodyFraming::UntilClose,
    })
}

/// Whether the connection may carry another request after this response (RFC 9112 §9.3).
pub(crate) fn keep_alive(
    version_minor: u8,
    framing: BodyFraming,
    headers: &[(String, String)],
) -> bool {
    if framing == BodyFraming::UntilClose {
        return false;
    }
    let mut close = false;
    let mut keep = false;
    for token in list_elements(headers, "connection") {
        close |= token.eq_ignore_ascii_case("close");
        keep |= token.eq_ignore_ascii_case("keep-alive");
    }
    // A chunked HTTP/1.0 response has faulty framing (RFC 9112 §6.1): never reuse it.
    let te_in_10 = version_minor == 0
        && headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("transfer-encoding"));
    if close || te_in_10 {
        return false;
    }
    version_minor >= 1 || keep
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn framing_rules() {
        let f = |s, head, p: &[(&str, &str)]| response_framing(s, head, &h(p));
        assert_eq!(
            f(200, false, &[("Content-Length", "10")]),
            Ok(BodyFraming::Length(10))
        );
        assert_eq!(
            f(200, true, &[("Content-Length", "10")]),
            Ok(BodyFraming::None)
        );
        assert_eq!(f(204, false, &[]), Ok(BodyFraming::None));
        assert_eq!(
            f(304, false, &[("Content-Length", "5")]),
            Ok(BodyFraming::None)
        );
        assert_eq!(f(200, false, &[]), Ok(BodyFraming::UntilClose));
        assert_eq!(
            f(200, false, &[("Transfer-Encoding", "Chunked")]),
            Ok(BodyFraming::Chunked)
        );
        assert_eq!(
            f(
                200,
                false,
                &[("Transfer-Encoding", "chunked"), ("Content-Length", "3")]
            ),
            Err(HttpError::ConflictingFraming)
        );
        assert_eq!(
            f(200, false, &[("Transfer-Encoding", "gzip, chunked")]),
            Err(HttpError::UnsupportedTransferEncoding)
        );
        assert_eq!(
            f(200, false, &[("Transfer-Encoding", "chunked, gzip")]),
            Err(HttpError::UnsupportedTransferEncoding)
        );
        assert_eq!(
            f(
                200,
                false,
                &[
                    ("Transfer-Encoding", "chunked"),
                    ("transfer-encoding", "chunked")
                ]
            ),
            Err(HttpError::UnsupportedTransferEncoding)
        );
        assert_eq!(
            f(200, false, &[("Transfer-Encoding", "")]),
            Err(HttpError::UnsupportedTransferEncoding)
        );
        assert_eq!(
            f(
                200,
                false,
                &[("Content-Length", "5, 5"), ("content-length", "5")]
            ),
            Ok(BodyFraming::Length(5))
        );
        assert_eq!(
            f(
                200,
                false,
                &[("Content-Length", "5"), ("content-length", "6")]
            ),
            Err(HttpError::DuplicateContentLength)
        );
        for bad in [
            "",
            "-1",
            "+1",
            "1.0",
            "0x10",
            "18446744073709551616",
            " ",
            "1 2",
        ] {
            assert_eq!(
                f(200, false, &[("Content-Length", bad)]),
                Err(HttpError::InvalidContentLength),
                "{bad:?}"
            );
        }
        assert_eq!(
            f(200, false, &[("Content-Length", "18446744073709551615")]),
            Ok(BodyFraming::Length(u64::MAX))
        );
    }

    #[test]
    fn keep_alive_rules() {
        let len = BodyFraming::Length(1);
        assert!(keep_alive(1, len, &h(&[])));
        assert!(!keep_alive(1, len, &h(&[("Connection", "Close")])));
        assert!(!keep_alive(1, len, &h(&[("Connection", "upgrade, close")])));
        assert!(!keep_alive(0, len, &h(&[])));
        assert!(keep_alive(0, len, &h(&[("Connection", "Keep-Alive")])));
        assert!(!keep_alive(1, BodyFraming::UntilClose, &h(&[])));
        assert!(!keep_alive(
            0,
            BodyFraming::Chunked,
            &h(&[
                ("Connection", "keep-alive"),
                ("Transfer-Encoding", "chunked")
            ])
        ));
    }
}
