//! Streaming signatures: aws-chunked bodies (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`) and their
//! trailing headers (`...-PAYLOAD-TRAILER`).
//!
//! Each chunk's signature chains on the previous one (the first on the seed signature of the
//! request head), so a chunk cannot be reordered or dropped without detection.

use ring::digest;

use super::canonical::EMPTY_SHA256;
use super::error::SigningError;
use super::hex;
use super::sign::Signer;
use super::time::AmzDate;

/// First line of a chunk's string to sign.
pub const CHUNK_ALGORITHM: &str = "AWS4-HMAC-SHA256-PAYLOAD";
/// First line of a trailer's string to sign.
pub const TRAILER_ALGORITHM: &str = "AWS4-HMAC-SHA256-TRAILER";
/// Most trailing headers accepted by [`canonical_trailer`] (S3 sends one checksum).
pub const MAX_TRAILER_LINES: usize = 64;

/// String to sign and signature of one chunk or trailer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainedSignature {
    /// The string to sign.
    pub string_to_sign: String,
    /// 64 lower-case hex digits; the next link's previous signature.
    pub signature: String,
}

fn check_previous(prev: &str) -> Result<(), SigningError> {
    if hex::decode_signature(prev).is_none() {
        return Err(SigningError::InvalidPreviousSignature(prev.to_owned()));
    }
    Ok(())
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(digest::digest(&digest::SHA256, data).as_ref())
}

/// Canonical form of trailing headers given as text, one `name:value` per line (CRLF or LF,
/// blank lines ignored): names lower-cased, values trimmed, each line ending in `\n`. This is
/// the exact byte string whose SHA-256 the trailer signature covers.
pub fn canonical_trailer(text: &str) -> Result<String, SigningError> {
    let mut out = String::with_capacity(text.len() + 1);
    let mut count = 0usize;
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        count += 1;
        let bad = || SigningError::BadTrailer {
            line: i + 1,
            text: line.to_owned(),
        };
        if count > MAX_TRAILER_LINES {
            return Err(bad());
        }
        let (name, value) = line.split_once(':').ok_or_else(bad)?;
        let name = name.trim();
        if name.is_empty()
            || name
                .bytes()
                .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
        {
            return Err(bad());
        }
        out.push_str(&name.to_ascii_lowercase());
        out.push(':');
        out.push_str(value.trim());
        out.push('\n');
    }
    Ok(out)
}

impl Signer {
    /// Signs one chunk of an aws-chunked body. `prev_signature` is the seed signature (the
    /// request's) for the first chunk, then each chunk's; the final chunk is empty.
    pub fn sign_chunk(
        &self,
        prev_signature: &str,
        now: AmzDate,
        chunk: &[u8],
    ) -> Result<ChainedSignature, SigningError> {
        check_previous(prev_signature)?;
        let string_to_sign = format!(
            "{CHUNK_ALGORITHM}\n{now}\n{}\n{prev_signature}\n{EMPTY_SHA256}\n{}",
            self.scope(now),
            sha256_hex(chunk)
        );
        let signature = self.sign_string(now, &string_to_sign);
        Ok(ChainedSignature {
            string_to_sign,
            signature,
        })
    }

    /// Signs the trailing headers after the final (empty) chunk. `canonical_trailer_text` is
    /// the output of [`canonical_trailer`]; `prev_signature` the final chunk's signature.
    pub fn sign_trailer(
        &self,
        prev_signature: &str,
        now: AmzDate,
        canonical_trailer_text: &str,
    ) -> Result<ChainedSignature, SigningError> {
        check_previous(prev_signature)?;
        let string_to_sign = format!(
            "{TRAILER_ALGORITHM}\n{now}\n{}\n{prev_signature}\n{}",
            self.scope(now),
            sha256_hex(canonical_trailer_text.as_bytes())
        );
        let signature = self.sign_string(now, &string_to_sign);
        Ok(ChainedSignature {
            string_to_sign,
            signature,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_text_is_canonicalized() {
        assert_eq!(
            canonical_trailer("X-Amz-Checksum-Crc32c: sOO8/Q== \r\n\r\n").unwrap(),
            "x-amz-checksum-crc32c:sOO8/Q==\n"
        );
        assert_eq!(canonical_trailer("").unwrap(), "");
        assert!(matches!(
            canonical_trailer("a:1\nnocolon"),
            Err(SigningError::BadTrailer { line: 2, .. })
        ));
        assert!(canonical_trailer(":v").is_err());
        assert!(canonical_trailer(&"a:b\n".repeat(MAX_TRAILER_LINES + 1)).is_err());
    }
}
