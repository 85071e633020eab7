//! Signed aws-chunked request bodies (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD` and its
//! `-TRAILER` variant), verified chunk by chunk before any byte is passed on.
//!
//! Wire form: `<hex size>;chunk-signature=<64 hex>\r\n<data>\r\n` per chunk, a final chunk of
//! size 0, then either `\r\n` or (trailer variant) trailing header lines, one
//! `x-amz-trailer-signature:<64 hex>` line and `\r\n`. Each chunk's signature chains on the
//! previous one, starting from the request's own (seed) signature
//! ([`s3_lite::sigv4::Signer::sign_chunk`]); the trailer's on the final chunk's
//! ([`s3_lite::sigv4::Signer::sign_trailer`]). A chunk is held in memory until its signature
//! is checked, so chunks are bounded ([`MAX_CHUNK`]).

use std::path::Path;

use s3_lite::http::server::RequestHead;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer, canonical_trailer, parse_authorization};

use crate::auth::{Authenticated, Authenticator};
use crate::body::{self, BodySource, ReceiveOptions, Spooled};
use crate::error::ApiError;

/// Largest chunk accepted (SDKs send 64 KiB to 1 MiB).
pub const MAX_CHUNK: usize = 8 << 20;
/// Longest chunk header line and longest trailer section.
const MAX_LINE: usize = 4096;

/// What a signed body must be checked with.
#[derive(Debug)]
pub struct ChunkSigning {
    /// A signer for the request's credentials, region and service.
    pub signer: Signer,
    /// The request's `X-Amz-Date`.
    pub date: AmzDate,
    /// The request's verified signature.
    pub seed: String,
    /// The `-TRAILER` variant: trailing headers follow the final chunk.
    pub trailer: bool,
}

enum State {
    Header,
    Data { size: usize, signature: String },
    DataEnd { signature: String },
    Trailer,
    Done,
}

/// Decodes and verifies a signed aws-chunked body read from `inner`, yielding the payload.
pub struct SignedChunks<'a> {
    inner: &'a mut dyn BodySource,
    signing: ChunkSigning,
    previous: String,
    pending: Vec<u8>,
    chunk: Vec<u8>,
    state: State,
    trailers: Vec<(String, String)>,
    /// An error already reported (the decoder is stuck after it).
    failed: Option<ApiError>,
}

fn malformed(why: &str) -> ApiError {
    ApiError::new(
        400,
        "InvalidRequest",
        format!("malformed signed aws-chunked body: {why}"),
    )
}

fn bad_signature(what: &str) -> ApiError {
    ApiError::new(
        403,
        "SignatureDoesNotMatch",
        format!("The {what} signature we calculated does not match the signature you provided."),
    )
}

fn is_sig(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Parses `<hex>;chunk-signature=<sig>`.
fn parse_header(line: &str) -> Result<(usize, String), ApiError> {
    let (size, ext) = line
        .split_once(';')
        .ok_or_else(|| malformed("chunk without a signature"))?;
    let sig = ext
        .strip_prefix("chunk-signature=")
        .filter(|s| is_sig(s))
        .ok_or_else(|| malformed("bad chunk-signature"))?;
    if size.is_empty() || size.len() > 16 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(malformed("bad chunk size"));
    }
    let n = usize::from_str_radix(size, 16).map_err(|_| malformed("bad chunk size"))?;
    if n > MAX_CHUNK {
        return Err(malformed("chunk larger than 8 MiB"));
    }
    Ok((n, sig.to_owned()))
}

impl<'a> SignedChunks<'a> {
    /// A decoder over `inner`, checked with `signing`.
    pub fn new(inner: &'a mut dyn BodySource, signing: ChunkSigning) -> Self {
        let previous = signing.seed.clone();
        Self {
            inner,
            signing,
            previous,
            pending: Vec::new(),
            chunk: Vec::new(),
            state: State::Header,
            trailers: Vec::new(),
            failed: None,
        }
    }

    /// The verified trailing headers (trailer variant), once the body has ended.
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }

    /// The first error met, if any (what a failed [`BodySource::next_chunk`] stood for).
    pub fn take_error(&mut self) -> Option<ApiError> {
        self.failed.take()
    }

    fn verify_chunk(&mut self, data_sig: &str) -> Result<(), ApiError> {
        let expected = self
            .signing
            .signer
            .sign_chunk(&self.previous, self.signing.date, &self.chunk)
            .map_err(ApiError::internal)?;
        if expected.signature != data_sig {
            return Err(bad_signature("chunk"));
        }
        self.previous = expected.signature;
        Ok(())
    }

    /// Position of the first CRLF in `pending`, bounded.
    fn line_end(&self) -> Result<Option<usize>, ApiError> {
        match self.pending.windows(2).position(|w| w == b"\r\n") {
            Some(i) if i <= MAX_LINE => Ok(Some(i)),
            Some(_) => Err(malformed("line too long")),
            None if self.pending.len() > MAX_LINE => Err(malformed("line too long")),
            None => Ok(None),
        }
    }

    /// Advances as far as `pending` allows; `Ok(true)` when a verified chunk is ready in
    /// `self.chunk`.
    fn step(&mut self) -> Result<bool, ApiError> {
        loop {
            match std::mem::replace(&mut self.state, State::Done) {
                State::Header => {
                    let Some(i) = self.line_end()? else {
                        self.state = State::Header;
                        return Ok(false);
                    };
                    let line = String::from_utf8_lossy(self.pending.get(..i).unwrap_or_default())
                        .into_owned();
                    self.pending.drain(..i + 2);
                    let (size, signature) = parse_header(&line)?;
                    self.chunk.clear();
                    self.state = State::Data { size, signature };
                }
                State::Data { size, signature } => {
                    let want = size - self.chunk.len();
                    let take = want.min(self.pending.len());
                    self.chunk.extend(self.pending.drain(..take));
                    if self.chunk.len() < size {
                        self.state = State::Data { size, signature };
                        return Ok(false);
                    }
                    if size == 0 {
                        self.verify_chunk(&signature)?;
                        self.state = if self.signing.trailer {
                            State::Trailer
                        } else {
                            State::DataEnd {
                                signature: String::new(),
                            }
                        };
                        continue;
                    }
                    self.state = State::DataEnd { signature };
                }
                State::DataEnd { signature } => {
                    if self.pending.len() < 2 {
                        self.state = State::DataEnd { signature };
                        return Ok(false);
                    }
                    if self.pending.get(..2) != Some(b"\r\n".as_slice()) {
                        return Err(malformed("chunk data not followed by CRLF"));
                    }
                    self.pending.drain(..2);
                    if signature.is_empty() {
                        // The CRLF after the final chunk.
                        self.state = State::Done;
                        return Ok(false);
                    }
                    self.verify_chunk(&signature)?;
                    self.state = State::Header;
                    return Ok(true);
                }
                State::Trailer => {
                    let Some(end) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") else {
                        if self.pending.len() > MAX_LINE {
                            return Err(malformed("trailer section too long"));
                        }
                        self.state = State::Trailer;
                        return Ok(false);
                    };
                    if end > MAX_LINE {
                        return Err(malformed("trailer section too long"));
                    }
                    let text =
                        String::from_utf8(self.pending.get(..end).unwrap_or_default().to_vec())
                            .map_err(|_| malformed("trailer is not UTF-8"))?;
                    self.pending.drain(..end + 4);
                    self.check_trailer(&text)?;
                    self.state = State::Done;
                    return Ok(false);
                }
                State::Done => {
                    if !self.pending.is_empty() {
                        return Err(malformed("bytes after the end of the body"));
                    }
                    self.state = State::Done;
                    return Ok(false);
                }
            }
        }
    }

    fn check_trailer(&mut self, text: &str) -> Result<(), ApiError> {
        let mut fields = String::new();
        let mut signature = None;
        for line in text.split("\r\n") {
            match line.split_once(':') {
                Some((n, v)) if n.trim().eq_ignore_ascii_case("x-amz-trailer-signature") => {
                    signature = Some(v.trim().to_owned());
                }
                Some((n, v)) => {
                    self.trailers
                        .push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
                    fields.push_str(line);
                    fields.push('\n');
                }
                None => return Err(malformed("trailer line without ':'")),
            }
        }
        let signature = signature.ok_or_else(|| malformed("no x-amz-trailer-signature"))?;
        let canonical = canonical_trailer(&fields).map_err(|e| malformed(&e.to_string()))?;
        let expected = self
            .signing
            .signer
            .sign_trailer(&self.previous, self.signing.date, &canonical)
            .map_err(ApiError::internal)?;
        if expected.signature != signature {
            return Err(bad_signature("trailer"));
        }
        Ok(())
    }

    fn next_verified(&mut self) -> Result<bool, ApiError> {
        loop {
            if self.step()? {
                return Ok(true);
            }
            if matches!(self.state, State::Done) {
                // Nothing may follow the body.
                if !self.pending.is_empty() {
                    return Err(malformed("bytes after the end of the body"));
                }
                while let Some(rest) = self
                    .inner
                    .next_chunk()
                    .map_err(|e| ApiError::new(400, "IncompleteBody", e.to_string()))?
                {
                    if !rest.is_empty() {
                        return Err(malformed("bytes after the end of the body"));
                    }
                }
                return Ok(false);
            }
            let more = self
                .inner
                .next_chunk()
                .map_err(|e| ApiError::new(400, "IncompleteBody", e.to_string()))?;
            match more {
                Some(bytes) => self.pending.extend_from_slice(bytes),
                None => return Err(malformed("body ended inside a chunk")),
            }
        }
    }
}

impl BodySource for SignedChunks<'_> {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        if self.failed.is_some() {
            return Err(std::io::Error::other("signed aws-chunked body refused"));
        }
        match self.next_verified() {
            Ok(true) => Ok(Some(&self.chunk)),
            Ok(false) => Ok(None),
            Err(e) => {
                self.failed = Some(e);
                Err(std::io::Error::other("signed aws-chunked body refused"))
            }
        }
    }
}

/// What a request signed with a streaming payload must be checked with; `None` for any other
/// payload.
pub fn signing_for(
    authenticator: &Authenticator,
    head: &RequestHead,
    auth: &Authenticated,
) -> Result<Option<ChunkSigning>, ApiError> {
    let trailer = match auth.payload {
        PayloadHash::StreamingSigned => false,
        PayloadHash::StreamingSignedTrailer => true,
        _ => return Ok(None),
    };
    let seed = head
        .header("authorization")
        .and_then(|h| parse_authorization(h).ok())
        .map(|p| p.signature)
        .ok_or_else(|| malformed("a streaming signature needs an Authorization header"))?;
    let date = head
        .header("x-amz-date")
        .and_then(|d| AmzDate::parse(d.trim()).ok())
        .ok_or_else(|| malformed("a streaming signature needs X-Amz-Date"))?;
    let signer = authenticator
        .signer_for(&auth.access_key)
        .ok_or_else(|| ApiError::internal("authenticated key has no signer"))?;
    Ok(Some(ChunkSigning {
        signer,
        date,
        seed,
        trailer,
    }))
}

/// Receives a signed aws-chunked body into a spooled file: every chunk (and the trailer)
/// verified first, the trailing checksums kept for [`body::verify`], the decoded length
/// compared with `x-amz-decoded-content-length` (required).
pub fn receive(
    source: &mut dyn BodySource,
    signing: ChunkSigning,
    head: &RequestHead,
    dir: &Path,
    max_len: u64,
) -> Result<Spooled, ApiError> {
    let decoded_len: u64 = head
        .header("x-amz-decoded-content-length")
        .ok_or_else(|| {
            ApiError::new(
                411,
                "MissingContentLength",
                "x-amz-decoded-content-length is required with aws-chunked",
            )
        })?
        .trim()
        .parse()
        .map_err(|_| ApiError::invalid_argument("invalid x-amz-decoded-content-length"))?;
    let mut chunks = SignedChunks::new(source, signing);
    let opts = ReceiveOptions {
        aws_chunked: false,
        decoded_len: None,
        max_len,
    };
    let mut spooled = match body::receive(&mut chunks, dir, opts) {
        Ok(s) => s,
        Err(e) => return Err(chunks.take_error().unwrap_or(e)),
    };
    if spooled.len != decoded_len {
        return Err(ApiError::new(
            400,
            "IncompleteBody",
            "You did not provide the number of bytes specified by the x-amz-decoded-content-length header",
        ));
    }
    spooled.trailers = chunks.trailers().to_vec();
    Ok(spooled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3_lite::credentials::Credentials;

    struct Pieces(Vec<Vec<u8>>, usize);
    impl BodySource for Pieces {
        fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
            self.1 += 1;
            Ok(self.0.get(self.1 - 1).map(Vec::as_slice))
        }
    }

    fn signer() -> Signer {
        Signer::new(Credentials::new("AK", "SK"), "us-east-1", "s3").unwrap()
    }

    fn date() -> AmzDate {
        AmzDate::from_unix_secs(1_700_000_000).unwrap()
    }

    const SEED: &str = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";

    /// Encodes `chunks` (and a trailer) the way a client does.
    fn encode(chunks: &[&[u8]], trailer: Option<&str>) -> Vec<u8> {
        let s = signer();
        let mut prev = SEED.to_owned();
        let mut out = Vec::new();
        for c in chunks.iter().chain([&b""[..]].iter()) {
            let sig = s.sign_chunk(&prev, date(), c).unwrap().signature;
            out.extend_from_slice(format!("{:x};chunk-signature={sig}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            if !c.is_empty() {
                out.extend_from_slice(b"\r\n");
            }
            prev = sig;
        }
        match trailer {
            None => out.extend_from_slice(b"\r\n"),
            Some(t) => {
                let canon = canonical_trailer(t).unwrap();
                let sig = s.sign_trailer(&prev, date(), &canon).unwrap().signature;
                out.extend_from_slice(
                    format!("{t}\r\nx-amz-trailer-signature:{sig}\r\n\r\n").as_bytes(),
                );
            }
        }
        out
    }

    /// The payload and the trailing headers.
    type Decoded = (Vec<u8>, Vec<(String, String)>);

    fn decode(wire: &[u8], split: usize, trailer: bool) -> Result<Decoded, ApiError> {
        let pieces = wire.chunks(split.max(1)).map(<[u8]>::to_vec).collect();
        let mut src = Pieces(pieces, 0);
        let signing = ChunkSigning {
            signer: signer(),
            date: date(),
            seed: SEED.into(),
            trailer,
        };
        let mut dec = SignedChunks::new(&mut src, signing);
        let mut out = Vec::new();
        loop {
            match dec.next_chunk() {
                Ok(Some(b)) => out.extend_from_slice(b),
                Ok(None) => return Ok((out, dec.trailers().to_vec())),
                Err(_) => return Err(dec.take_error().unwrap()),
            }
        }
    }

    #[test]
    fn verified_at_every_split() {
        let wire = encode(&[b"hello ", b"signed world"], None);
        for split in [1, 2, 3, 7, 64, wire.len()] {
            assert_eq!(
                decode(&wire, split, false).unwrap().0,
                b"hello signed world"
            );
        }
        let wire = encode(&[b"abc"], Some("x-amz-checksum-crc32c:sOO8/Q=="));
        for split in [1, 5, wire.len()] {
            let (data, trailers) = decode(&wire, split, true).unwrap();
            assert_eq!(data, b"abc");
            assert_eq!(
                trailers,
                vec![("x-amz-checksum-crc32c".to_owned(), "sOO8/Q==".to_owned())]
            );
        }
    }

    #[test]
    fn tampering_is_refused() {
        let wire = encode(&[b"hello ", b"signed world"], None);
        let mut bad = wire.clone();
        let i = bad.windows(5).position(|w| w == b"hello").unwrap();
        bad[i] = b'j';
        assert_eq!(
            decode(&bad, 9, false).unwrap_err().code,
            "SignatureDoesNotMatch"
        );
        // A dropped chunk breaks the chain.
        let first_len = format!("6;chunk-signature={SEED}\r\n").len() + 6 + 2;
        assert_eq!(
            decode(&wire[first_len..], 9, false).unwrap_err().code,
            "SignatureDoesNotMatch"
        );
        let wire_t = encode(&[b"abc"], Some("x-amz-checksum-crc32c:sOO8/Q=="));
        let tampered = String::from_utf8(wire_t)
            .unwrap()
            .replace("sOO8/Q==", "AAAAAA==");
        assert_eq!(
            decode(tampered.as_bytes(), 4, true).unwrap_err().code,
            "SignatureDoesNotMatch"
        );
        assert!(decode(b"zz;chunk-signature=00\r\n", 3, false).is_err());
        assert!(decode(&wire[..wire.len() - 3], 5, false).is_err());
        let mut extra = wire.clone();
        extra.extend_from_slice(b"junk");
        assert!(decode(&extra, 5, false).is_err());
    }
}
