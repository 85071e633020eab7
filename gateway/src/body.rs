//! Receiving a request body: spooled to a temporary file while every digest the gateway may
//! need is computed in the same pass, then verified before any backend sees it.
//!
//! Why spool: a PUT must not be stored (or forwarded upstream) until its `x-amz-checksum-*`
//! and `x-amz-content-sha256` have been checked, and both are only known at the end of the
//! body. Memory stays bounded by the read buffer whatever the object size.

use std::io::Write;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use md5::Digest as _;
use s3_lite::checksum::{Crc32c, Crc64Nvme, encode_crc32c, encode_crc64nvme};
use s3_lite::http::{ChunkEvent, ChunkedDecoder, Limits};
use s3_lite::sigv4::PayloadHash;

use crate::error::ApiError;

/// A source of request-body bytes (the connection's decoder), in order.
pub trait BodySource {
    /// The next piece of the body, `None` at its end. Errors mean the connection is broken.
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>>;
}

/// A fully received body in a temporary file, with its digests.
#[derive(Debug)]
pub struct Spooled {
    /// The bytes (already decoded from aws-chunked when that was the encoding).
    pub file: tempfile::NamedTempFile,
    /// Decoded length.
    pub len: u64,
    /// MD5 (the ETag of a single-part object).
    pub md5: [u8; 16],
    /// CRC64NVME.
    pub crc64nvme: u64,
    /// CRC32C.
    pub crc32c: u32,
    /// CRC32 (ISO-HDLC, boto3's default checksum).
    pub crc32: u32,
    /// SHA-256 of the decoded bytes.
    pub sha256: [u8; 32],
    /// Trailer fields of an aws-chunked body.
    pub trailers: Vec<(String, String)>,
}

impl Spooled {
    /// `"<md5 hex>"`.
    pub fn etag(&self) -> String {
        format!("\"{}\"", hex(&self.md5))
    }

    /// Base64 CRC64NVME.
    pub fn crc64nvme_base64(&self) -> String {
        encode_crc64nvme(self.crc64nvme)
    }
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How the body is encoded and bounded.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveOptions {
    /// The body is aws-chunked (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`): chunks and trailers.
    pub aws_chunked: bool,
    /// `x-amz-decoded-content-length`, required with aws-chunked.
    pub decoded_len: Option<u64>,
    /// Largest decoded body accepted (EntityTooLarge).
    pub max_len: u64,
}

struct Hashers {
    md5: md5::Md5,
    crc64: Crc64Nvme,
    crc32c: Crc32c,
    crc32: crc_fast::Digest,
    sha256: ring::digest::Context,
    len: u64,
}

impl Hashers {
    fn new() -> Self {
        Self {
            md5: md5::Md5::new(),
            crc64: Crc64Nvme::new(),
            crc32c: Crc32c::new(),
            crc32: crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32IsoHdlc),
            sha256: ring::digest::Context::new(&ring::digest::SHA256),
            len: 0,
        }
    }

    fn update(&mut self, data: &[u8]) {
        self.md5.update(data);
        self.crc64.update(data);
        self.crc32c.update(data);
        self.crc32.update(data);
        self.sha256.update(data);
        self.len += data.len() as u64;
    }
}

fn too_large(max: u64) -> ApiError {
    ApiError::new(
        400,
        "EntityTooLarge",
        "Your proposed upload exceeds the maximum allowed size",
    )
    .with_detail("MaxSizeAllowed", max.to_string())
}

/// A body that stopped arriving: S3's `RequestTimeout` when the connection was too slow
/// (the gateway's body-progress check), else `IncompleteBody`.
fn body_read_error(e: std::io::Error) -> ApiError {
    if e.kind() == std::io::ErrorKind::TimedOut {
        ApiError::new(400, "RequestTimeout", e.to_string())
    } else {
        incomplete()
    }
}

fn incomplete() -> ApiError {
    ApiError::new(
        400,
        "IncompleteBody",
        "You did not provide the number of bytes specified by the Content-Length HTTP header",
    )
}

/// Reads the whole body from `source` into a temporary file in `dir`.
pub fn receive(
    source: &mut dyn BodySource,
    dir: &Path,
    opts: ReceiveOptions,
) -> Result<Spooled, ApiError> {
    let file = tempfile::Builder::new().prefix("spool-").tempfile_in(dir)?;
    let mut writer = std::io::BufWriter::with_capacity(256 * 1024, file);
    let mut h = Hashers::new();
    let mut trailers = Vec::new();
    let mut chunked = opts
        .aws_chunked
        .then(|| ChunkedDecoder::new(Limits::default()));
    let mut ended = false;
    while let Some(raw) = source.next_chunk().map_err(body_read_error)? {
        let Some(dec) = chunked.as_mut() else {
            if h.len + raw.len() as u64 > opts.max_len {
                return Err(too_large(opts.max_len));
            }
            h.update(raw);
            writer.write_all(raw)?;
            continue;
        };
        let mut input = raw;
        while !input.is_empty() {
            if ended {
                return Err(ApiError::new(
                    400,
                    "InvalidRequest",
                    "bytes after the end of the aws-chunked body",
                ));
            }
            let (n, ev) = dec.decode(input).map_err(|e| {
                ApiError::new(
                    400,
                    "InvalidRequest",
                    format!("malformed aws-chunked body: {e}"),
                )
            })?;
            match ev {
                ChunkEvent::Data(d) => {
                    if h.len + d.len() as u64 > opts.max_len {
                        return Err(too_large(opts.max_len));
                    }
                    h.update(d);
                    writer.write_all(d)?;
                }
                ChunkEvent::End => {
                    trailers = dec.take_trailers();
                    ended = true;
                }
                ChunkEvent::NeedMore => {}
            }
            input = input.get(n..).unwrap_or_default();
        }
    }
    if chunked.is_some() && !ended {
        return Err(incomplete());
    }
    if let Some(expected) = opts.decoded_len.filter(|_| opts.aws_chunked)
        && expected != h.len
    {
        return Err(incomplete().with_detail("DecodedContentLength", expected.to_string()));
    }
    let file = writer
        .into_inner()
        .map_err(|e| ApiError::internal(e.error()))?;
    let mut md5 = [0u8; 16];
    md5.copy_from_slice(&h.md5.finalize());
    let mut sha256 = [0u8; 32];
    sha256.copy_from_slice(h.sha256.finish().as_ref());
    Ok(Spooled {
        file,
        len: h.len,
        md5,
        crc64nvme: h.crc64.finish(),
        crc32c: h.crc32c.finish(),
        crc32: h.crc32.finalize() as u32,
        sha256,
        trailers,
    })
}

fn bad_digest(alg: &str) -> ApiError {
    ApiError::new(
        400,
        "BadDigest",
        format!("The {alg} you specified did not match the calculated checksum."),
    )
}

/// The checksums a request declared (headers, or trailers of an aws-chunked body) that the
/// gateway verified, as `(header name, base64)`; the response echoes them.
pub type Echo = Vec<(String, String)>;

/// Verifies the body against `x-amz-content-sha256` (when it is a hex hash), `Content-MD5`
/// and every `x-amz-checksum-{crc64nvme,crc32c,crc32,sha256}` given in `headers` or the
/// trailers. Returns the checksums to echo.
pub fn verify(
    body: &Spooled,
    headers: &[(String, String)],
    payload: &PayloadHash,
) -> Result<Echo, ApiError> {
    if let PayloadHash::Hex(declared) = payload
        && !declared.eq_ignore_ascii_case(&hex(&body.sha256))
    {
        return Err(ApiError::new(
            400,
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
        )
        .with_detail("ClientComputedContentSHA256", declared.clone())
        .with_detail("S3ComputedContentSHA256", hex(&body.sha256)));
    }
    let find = |name: &str| {
        headers
            .iter()
            .chain(body.trailers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    };
    if let Some(md5) = find("content-md5")
        && md5 != STANDARD.encode(body.md5)
    {
        return Err(ApiError::new(
            400,
            "BadDigest",
            "The Content-MD5 you specified did not match what we received.",
        ));
    }
    let mut echo = Vec::new();
    let checks: [(&str, String); 4] = [
        ("x-amz-checksum-crc64nvme", encode_crc64nvme(body.crc64nvme)),
        ("x-amz-checksum-crc32c", encode_crc32c(body.crc32c)),
        (
            "x-amz-checksum-crc32",
            STANDARD.encode(body.crc32.to_be_bytes()),
        ),
        ("x-amz-checksum-sha256", STANDARD.encode(body.sha256)),
    ];
    for (name, actual) in checks {
        if let Some(given) = find(name) {
            if given != actual {
                let alg = name
                    .trim_start_matches("x-amz-checksum-")
                    .to_ascii_uppercase();
                return Err(bad_digest(&format!("{alg} checksum")));
            }
            echo.push((name.to_owned(), actual));
        }
    }
    Ok(echo)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pieces(Vec<Vec<u8>>, usize);
    impl BodySource for Pieces {
        fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
            self.1 += 1;
            Ok(self.0.get(self.1 - 1).map(Vec::as_slice))
        }
    }

    fn opts(aws_chunked: bool, decoded_len: Option<u64>) -> ReceiveOptions {
        ReceiveOptions {
            aws_chunked,
            decoded_len,
            max_len: 1 << 20,
        }
    }

    #[test]
    fn digests_and_verification() {
        let dir = tempfile::tempdir().unwrap();
        let mut src = Pieces(vec![b"1234".to_vec(), b"56789".to_vec()], 0);
        let s = receive(&mut src, dir.path(), opts(false, None)).unwrap();
        assert_eq!(s.len, 9);
        assert_eq!(s.crc64nvme_base64(), "rosUhgp5mIg=");
        assert_eq!(s.crc32, 0xCBF4_3926, "CRC-32 check value");
        assert_eq!(
            s.etag(),
            "\"25f9e794323b453885f5181f1b624d0b\"",
            "MD5 of 123456789"
        );
        let h = |n: &str, v: &str| vec![(n.to_owned(), v.to_owned())];
        let echo = verify(
            &s,
            &h("x-amz-checksum-crc64nvme", "rosUhgp5mIg="),
            &PayloadHash::Unsigned,
        )
        .unwrap();
        assert_eq!(echo, h("x-amz-checksum-crc64nvme", "rosUhgp5mIg="));
        let err = verify(
            &s,
            &h("x-amz-checksum-crc64nvme", "AAAAAAAAAAA="),
            &PayloadHash::Unsigned,
        )
        .unwrap_err();
        assert_eq!((err.status, err.code.as_str()), (400, "BadDigest"));
        let err = verify(&s, &[], &PayloadHash::of_body(b"other")).unwrap_err();
        assert_eq!(err.code, "XAmzContentSHA256Mismatch");
        verify(&s, &[], &PayloadHash::of_body(b"123456789")).unwrap();
    }

    #[test]
    fn aws_chunked_with_trailer() {
        let dir = tempfile::tempdir().unwrap();
        let wire = b"4\r\n1234\r\n5\r\n56789\r\n0\r\nx-amz-checksum-crc64nvme:rosUhgp5mIg=\r\n\r\n"
            .to_vec();
        let pieces = wire.chunks(3).map(<[u8]>::to_vec).collect();
        let s = receive(&mut Pieces(pieces, 0), dir.path(), opts(true, Some(9))).unwrap();
        assert_eq!(s.len, 9);
        assert_eq!(
            verify(&s, &[], &PayloadHash::StreamingUnsignedTrailer)
                .unwrap()
                .len(),
            1
        );
        let s = receive(
            &mut Pieces(vec![wire.clone()], 0),
            dir.path(),
            opts(true, Some(8)),
        );
        assert_eq!(s.unwrap_err().code, "IncompleteBody");
        let s = receive(
            &mut Pieces(vec![wire[..10].to_vec()], 0),
            dir.path(),
            opts(true, Some(9)),
        );
        assert_eq!(s.unwrap_err().code, "IncompleteBody");
        let bad = b"4\r\n1234\r\n0\r\nx-amz-checksum-crc64nvme:AAAAAAAAAAA=\r\n\r\n".to_vec();
        let s = receive(&mut Pieces(vec![bad], 0), dir.path(), opts(true, Some(4))).unwrap();
        assert_eq!(
            verify(&s, &[], &PayloadHash::StreamingUnsignedTrailer)
                .unwrap_err()
                .code,
            "BadDigest"
        );
        let big = receive(
            &mut Pieces(vec![vec![0; 10]], 0),
            dir.path(),
            ReceiveOptions {
                aws_chunked: false,
                decoded_len: None,
                max_len: 9,
            },
        );
        assert_eq!(big.unwrap_err().code, "EntityTooLarge");
    }
}
