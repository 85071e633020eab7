//! Percent-encoding the way S3 and SigV4 expect it.
//!
//! S3's rule: every byte except the RFC 3986 unreserved set `A-Z a-z 0-9 - _ . ~` is encoded as
//! `%XX` with upper-case hex; in object paths `/` is kept. Decoding is done at most once, and a
//! malformed escape is an error, never a silent pass-through.

use thiserror::Error;

/// A percent-escape that is not `%` followed by two hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("malformed percent-escape at byte {offset} of {input:?}")]
pub struct DecodeError {
    /// Byte offset of the offending `%`.
    pub offset: usize,
    /// The input, for the message.
    pub input: String,
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// Encodes `bytes`, keeping unreserved bytes and, when `keep_slash`, `/`.
pub fn encode_bytes(bytes: &[u8], keep_slash: bool, out: &mut String) {
    for &b in bytes {
        if is_unreserved(b) || (keep_slash && b == b'/') {
            out.push(char::from(b));
        } else {
            out.push('%');
            // Both indices are < 16 by construction.
            let hex = |nibble: u8| {
                char::from(HEX_UPPER.get(usize::from(nibble)).copied().unwrap_or(b'0'))
            };
            out.push(hex(b >> 4));
            out.push(hex(b & 0x0f));
        }
    }
}

/// Encodes a path (object key or full path): `/` is kept.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len() + 8);
    encode_bytes(path.as_bytes(), true, &mut out);
    out
}

/// Encodes a query-string key or value (or any other component): `/` is encoded too.
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    encode_bytes(s.as_bytes(), false, &mut out);
    out
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes `%XX` escapes once. `+` stays `+` (S3 does not treat it as a space).
/// The result is raw bytes: a decoded key need not be UTF-8.
pub fn decode(input: &str) -> Result<Vec<u8>, DecodeError> {
    let bytes = input.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes.get(i + 1).copied().and_then(hex_value);
            let lo = bytes.get(i + 2).copied().and_then(hex_value);
            match (hi, lo) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                }
                _ => {
                    return Err(DecodeError {
                        offset: i,
                        input: input.to_owned(),
                    });
                }
            }
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

/// Decodes once and requires UTF-8 (object keys, bucket names, query values we interpret).
pub fn decode_utf8(input: &str) -> Result<String, DecodeError> {
    let bytes = decode(input)?;
    String::from_utf8(bytes).map_err(|e| DecodeError {
        offset: e.utf8_error().valid_up_to(),
        input: input.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_s3() {
        assert_eq!(
            encode_path("/b/my key+x~y_z.-/ü"),
            "/b/my%20key%2Bx~y_z.-/%C3%BC"
        );
        assert_eq!(encode_component("a/b=c&d"), "a%2Fb%3Dc%26d");
        assert_eq!(encode_component("test$file.text"), "test%24file.text");
    }

    #[test]
    fn decodes_once_and_rejects_bad_escapes() {
        assert_eq!(decode("a%2520b+c").unwrap(), b"a%20b+c");
        assert_eq!(decode("%C3%bc").unwrap(), "ü".as_bytes());
        assert!(decode("%").is_err());
        assert!(decode("%4").is_err());
        assert!(decode("%zz").is_err());
        assert!(decode_utf8("%FF").is_err());
    }

    #[test]
    fn round_trip_is_identity() {
        for s in [
            "",
            "plain",
            "with space",
            "a/b//c/../d",
            "100%",
            "ü/🙂",
            "+&=?#",
        ] {
            assert_eq!(decode_utf8(&encode_path(s)).unwrap(), s);
            assert_eq!(decode_utf8(&encode_component(s)).unwrap(), s);
        }
    }
}
