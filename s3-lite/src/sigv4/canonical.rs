//! The canonical request, S3 flavour.
//!
//! S3 differs from the generic SigV4 rules in two ways that break naive signers: the path is
//! *not* normalized (no dot-segment removal, `//` stays) and it is encoded exactly once (the
//! generic rules double-encode). Everything here works on the request as it travels, so the
//! client signer and the gateway verifier canonicalize through the same code.

use std::borrow::Cow;

use super::error::SigningError;
use crate::uri;

/// SHA-256 of the empty string, the payload hash of every body-less request.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// What the last line of the canonical request says about the body.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayloadHash {
    /// Lower-case hex SHA-256 of the whole body (see [`PayloadHash::of_body`]).
    Hex(String),
    /// `UNSIGNED-PAYLOAD`: the body is not covered (TLS or RDMA protects it).
    Unsigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD`: aws-chunked body, each chunk signed.
    StreamingSigned,
    /// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`: signed chunks plus a signed trailer.
    StreamingSignedTrailer,
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: unsigned chunks plus a trailer.
    StreamingUnsignedTrailer,
}

impl PayloadHash {
    /// Hashes a body held in memory.
    pub fn of_body(body: &[u8]) -> Self {
        Self::Hex(super::hex::encode(
            ring::digest::digest(&ring::digest::SHA256, body).as_ref(),
        ))
    }

    /// Interprets an `x-amz-content-sha256` value: one of the literals, or 64 hex digits
    /// (kept exactly as given, since the verifier hashes what was sent).
    pub fn parse(value: &str) -> Result<Self, SigningError> {
        Ok(match value {
            "UNSIGNED-PAYLOAD" => Self::Unsigned,
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" => Self::StreamingSigned,
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER" => Self::StreamingSignedTrailer,
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER" => Self::StreamingUnsignedTrailer,
            v if v.starts_with("STREAMING-") => {
                return Err(SigningError::Unsupported(
                    "this streaming payload mode (e.g. SigV4a ECDSA) is not implemented",
                ));
            }
            v if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Self::Hex(v.to_owned())
            }
            v => return Err(SigningError::BadPayloadHash(v.to_owned())),
        })
    }

    /// The value written in the canonical request and in `x-amz-content-sha256`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Hex(h) => h,
            Self::Unsigned => "UNSIGNED-PAYLOAD",
            Self::StreamingSigned => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            Self::StreamingSignedTrailer => "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
            Self::StreamingUnsignedTrailer => "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        }
    }
}

/// The canonical URI: decode once, encode every byte but `A-Z a-z 0-9 - _ . ~ /`. Never
/// normalized. An empty path is `/`; a path without a leading `/` (as in AWS's own examples,
/// `PUT test$file.text`) gets one.
pub fn canonical_uri(path: &str) -> Result<String, SigningError> {
    let decoded = uri::decode(path).map_err(SigningError::BadPath)?;
    let mut out = String::with_capacity(decoded.len() + 8);
    if decoded.first() != Some(&b'/') {
        out.push('/');
    }
    uri::encode_bytes(&decoded, true, &mut out);
    Ok(out)
}

/// Splits an encoded query into decoded-once, re-encoded `(key, value)` pairs, in input order.
/// Pieces split on `&`, key and value at the first `=` (no `=`: empty value); empty pieces
/// (`a=1&&b=2`, a trailing `&`) carry no parameter and are skipped. `+` stays `+` (`%2B`).
pub fn query_pairs(query: &str) -> Result<Vec<(String, String)>, SigningError> {
    let mut pairs = Vec::new();
    for piece in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = piece.split_once('=').unwrap_or((piece, ""));
        let mut key = String::with_capacity(k.len());
        let mut value = String::with_capacity(v.len());
        uri::encode_bytes(
            &uri::decode(k).map_err(SigningError::BadQuery)?,
            false,
            &mut key,
        );
        uri::encode_bytes(
            &uri::decode(v).map_err(SigningError::BadQuery)?,
            false,
            &mut value,
        );
        pairs.push((key, value));
    }
    Ok(pairs)
}

/// Sorts pairs by key, then value (byte order of the encoded forms) and joins them.
pub fn join_sorted_query(mut pairs: Vec<(String, String)>) -> String {
    pairs.sort_unstable();
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
    out
}

/// The canonical query string of an encoded query.
pub fn canonical_query(query: &str) -> Result<String, SigningError> {
    Ok(join_sorted_query(query_pairs(query)?))
}

/// Trims a header value and collapses inner runs of spaces and tabs into one space.
pub fn normalize_header_value(value: &str, out: &mut String) {
    let trimmed = value.trim_matches([' ', '\t']);
    // Fast path: most values (hashes, dates, hosts) have nothing to collapse.
    if !trimmed.contains('\t') && !trimmed.contains("  ") {
        out.push_str(trimmed);
        return;
    }
    let mut pending_space = false;
    for c in value.trim_matches([' ', '\t']).chars() {
        if c == ' ' || c == '\t' {
            pending_space = true;
        } else {
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            out.push(c);
        }
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks that a header can be signed and sent: the name an HTTP token, the value free of CR,
/// LF and NUL (header injection would otherwise be signed as legitimate).
pub fn check_header(name: &str, value: &str) -> Result<(), SigningError> {
    if name.is_empty() || !name.bytes().all(is_token_byte) {
        return Err(SigningError::InvalidHeader {
            name: name.to_owned(),
            reason: "name is not an HTTP token",
        });
    }
    if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | 0)) {
        return Err(SigningError::InvalidHeader {
            name: name.to_owned(),
            reason: "value contains CR, LF or NUL",
        });
    }
    Ok(())
}

/// Canonical header block and signed-header list of the headers `select` accepts.
///
/// Names are lower-cased and sorted; values normalized; repeated headers joined with `,` in
/// the order they appear.
pub struct CanonicalHeaders {
    /// `name:value\n` lines, sorted by name.
    pub block: String,
    /// `a;b;c`.
    pub signed_headers: String,
}

impl CanonicalHeaders {
    /// Builds both from `headers`, keeping those for which `select(lower_case_name)` is true.
    pub fn build<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        mut select: impl FnMut(&str) -> bool,
    ) -> Result<Self, SigningError> {
        let mut entries: Vec<(Cow<'a, str>, &'a str)> = Vec::with_capacity(8);
        for (name, value) in headers {
            check_header(name, value)?;
            let lower = if name.bytes().any(|b| b.is_ascii_uppercase()) {
                Cow::Owned(name.to_ascii_lowercase())
            } else {
                Cow::Borrowed(name)
            };
            if select(&lower) {
                entries.push((lower, value));
            }
        }
        // Stable sort by name keeps the values of a repeated header in arrival order.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut block =
            String::with_capacity(entries.iter().map(|(n, v)| n.len() + v.len() + 2).sum());
        let mut signed_headers =
            String::with_capacity(entries.iter().map(|(n, _)| n.len() + 1).sum());
        let mut previous: Option<&str> = None;
        for (name, value) in &entries {
            if previous == Some(name.as_ref()) {
                block.pop(); // the '\n' of the previous value of this name
                block.push(',');
            } else {
                if previous.is_some() {
                    signed_headers.push(';');
                }
                signed_headers.push_str(name);
                block.push_str(name);
                block.push(':');
            }
            normalize_header_value(value, &mut block);
            block.push('\n');
            previous = Some(name.as_ref());
        }
        Ok(Self {
            block,
            signed_headers,
        })
    }
}

/// Assembles the canonical request from its already-canonical parts (no trailing newline).
pub fn assemble(
    method: &str,
    canonical_uri: &str,
    canonical_query: &str,
    headers: &CanonicalHeaders,
    payload: &str,
) -> String {
    let mut out = String::with_capacity(
        method.len() + canonical_uri.len() + canonical_query.len() + headers.block.len() * 2 + 80,
    );
    for part in [
        method,
        "\n",
        canonical_uri,
        "\n",
        canonical_query,
        "\n",
        &headers.block,
        "\n",
    ] {
        out.push_str(part);
    }
    out.push_str(&headers.signed_headers);
    out.push('\n');
    out.push_str(payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uri_is_encoded_once_and_never_normalized() {
        assert_eq!(
            canonical_uri("/test$file.text").unwrap(),
            "/test%24file.text"
        );
        assert_eq!(
            canonical_uri("test$file.text").unwrap(),
            "/test%24file.text"
        );
        assert_eq!(canonical_uri("").unwrap(), "/");
        assert_eq!(canonical_uri("/a/./b/../c//d/").unwrap(), "/a/./b/../c//d/");
        assert_eq!(canonical_uri("/a%20b/c d+e").unwrap(), "/a%20b/c%20d%2Be");
        assert_eq!(canonical_uri("/100%25").unwrap(), "/100%25");
        assert_eq!(canonical_uri("/%c3%bc/ü").unwrap(), "/%C3%BC/%C3%BC");
        assert_eq!(canonical_uri("/a%2Fb").unwrap(), "/a/b");
        assert!(canonical_uri("/100%").is_err());
    }

    #[test]
    fn query_is_sorted_by_key_then_value() {
        assert_eq!(
            canonical_query("prefix=J&max-keys=2").unwrap(),
            "max-keys=2&prefix=J"
        );
        assert_eq!(canonical_query("lifecycle").unwrap(), "lifecycle=");
        assert_eq!(canonical_query("b=2&a=2&a=1&a").unwrap(), "a=&a=1&a=2&b=2");
        assert_eq!(
            canonical_query("k=a+b&x=a%20b&y=a b").unwrap(),
            "k=a%2Bb&x=a%20b&y=a%20b"
        );
        assert_eq!(canonical_query("a=b=c&&").unwrap(), "a=b%3Dc");
        assert_eq!(canonical_query("").unwrap(), "");
        assert!(canonical_query("a=%zz").is_err());
    }

    #[test]
    fn headers_are_lowercased_sorted_trimmed_and_joined() {
        let h = [
            ("Host", " h "),
            ("X-B", "a   b\t c"),
            ("x-a", "1"),
            ("X-A", " 2 "),
        ];
        let c = CanonicalHeaders::build(h, |_| true).unwrap();
        assert_eq!(c.block, "host:h\nx-a:1,2\nx-b:a b c\n");
        assert_eq!(c.signed_headers, "host;x-a;x-b");
        assert!(CanonicalHeaders::build([("Bad Name", "v")], |_| true).is_err());
        assert!(CanonicalHeaders::build([("n", "a\r\nb")], |_| true).is_err());
    }

    #[test]
    fn payload_hash_literals() {
        assert_eq!(PayloadHash::of_body(b"").as_str(), EMPTY_SHA256);
        for lit in [
            "UNSIGNED-PAYLOAD",
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            EMPTY_SHA256,
        ] {
            assert_eq!(PayloadHash::parse(lit).unwrap().as_str(), lit);
        }
        assert!(matches!(
            PayloadHash::parse("STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"),
            Err(SigningError::Unsupported(_))
        ));
        assert!(matches!(
            PayloadHash::parse("nope"),
            Err(SigningError::BadPayloadHash(_))
        ));
    }
}
