//! CopyObject and UploadPartCopy in directory mode: the source (or its
//! `x-amz-copy-source-range`) is read through the backend, spooled and digested like an
//! upload, then stored as the destination object or part. Copy-source conditions
//! (`x-amz-copy-source-if-*`) are checked against the source; the destination's own
//! `If-Match`/`If-None-Match` as for a PUT. `x-amz-metadata-directive` is `COPY` (the
//! source's content type and metadata, the default) or `REPLACE` (the request's).

use std::io::{Read, Write};

use s3_lite::s3::ByteRange;

use crate::backend::{Backend, GetRequest, ObjectInfo, ObjectSink, PutMeta};
use crate::body::{self, BodySource, ReceiveOptions, Spooled};
use crate::error::ApiError;
use crate::handler::{Respond, S3_NS, xml_ok};
use crate::ops::conditions::Conditions;
use crate::time::iso8601;
use crate::xml::element;

/// A parsed `x-amz-copy-source`: bucket and key, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// Source bucket.
    pub bucket: String,
    /// Source key.
    pub key: String,
}

fn invalid_source() -> ApiError {
    ApiError::invalid_argument(
        "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
    )
}

/// Parses `x-amz-copy-source` (`[/]bucket/key[?versionId=null]`, percent-encoded).
pub fn parse_source(value: &str) -> Result<CopySource, ApiError> {
    let (path, version) = match value.trim().split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (value.trim(), None),
    };
    if let Some(q) = version
        && q != "versionId=null"
    {
        return Err(ApiError::not_implemented(
            "versioned copy sources are not supported (the gateway keeps no versions)",
        ));
    }
    let decoded = s3_lite::uri::decode_utf8(path).map_err(|_| invalid_source())?;
    let decoded = decoded.strip_prefix('/').unwrap_or(&decoded);
    let (bucket, key) = decoded.split_once('/').ok_or_else(invalid_source)?;
    if bucket.is_empty() || key.is_empty() {
        return Err(invalid_source());
    }
    Ok(CopySource {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
    })
}

/// Parses `x-amz-copy-source-range: bytes=first-last` (both required, as S3 demands).
pub fn parse_source_range(value: &str) -> Result<ByteRange, ApiError> {
    let bad = || {
        ApiError::invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let spec = value.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let first: u64 = a.trim().parse().map_err(|_| bad())?;
    let last: u64 = b.trim().parse().map_err(|_| bad())?;
    if last < first {
        return Err(bad());
    }
    ByteRange::parse_cli(&format!("{first}-{last}")).map_err(|_| bad())
}

/// Writes the source's bytes to a temporary file, checking the copy-source conditions
/// once the source's metadata is known.
struct ToFile<'c> {
    file: std::io::BufWriter<tempfile::NamedTempFile>,
    conditions: &'c Conditions,
    info: Option<ObjectInfo>,
    refused: Option<ApiError>,
    /// The last byte an `x-amz-copy-source-range` names: unlike a GET's `Range`, a copy
    /// range reaching past the source's end is not clamped but refused (416 InvalidRange).
    range_last: Option<u64>,
}

impl ObjectSink for ToFile<'_> {
    fn begin(&mut self, info: &ObjectInfo, _span: Option<(u64, u64)>) -> std::io::Result<()> {
        if let Err(e) = self.conditions.check_copy_source(info) {
            self.refused = Some(e);
            return Err(std::io::Error::other("copy-source condition failed"));
        }
        if let Some(last) = self.range_last
            && last >= info.size
        {
            self.refused = Some(
                ApiError::new(
                    416,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                )
                .with_header("Content-Range", format!("bytes */{}", info.size))
                .with_detail("ActualObjectSize", info.size.to_string()),
            );
            return Err(std::io::Error::other("copy-source range past the end"));
        }
        self.info = Some(info.clone());
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)
    }
}

/// A file read back in pieces as a request body (so a copy is spooled and digested by the
/// same code as an upload).
struct FileBody {
    file: std::fs::File,
    buf: Vec<u8>,
}

impl BodySource for FileBody {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        let n = self.file.read(&mut self.buf)?;
        Ok((n > 0).then(|| self.buf.get(..n).unwrap_or_default()))
    }
}

/// Reads `source` (optionally a range of it) into a spooled, digested body.
fn read_source(
    backend: &dyn Backend,
    source: &CopySource,
    range: Option<ByteRange>,
    conditions: &Conditions,
    max_len: u64,
) -> Result<(Spooled, ObjectInfo), ApiError> {
    let raw = tempfile::Builder::new()
        .prefix("copy-")
        .tempfile_in(backend.spool_dir())?;
    let mut sink = ToFile {
        file: std::io::BufWriter::with_capacity(256 * 1024, raw),
        conditions,
        info: None,
        refused: None,
        range_last: match range {
            Some(ByteRange::Inclusive(_, last)) => Some(last),
            _ => None,
        },
    };
    let req = GetRequest {
        range,
        if_match: None,
        head_only: false,
    };
    if let Err(e) = backend.get_object(&source.bucket, &source.key, &req, &mut sink) {
        return Err(sink.refused.take().unwrap_or(e));
    }
    let info = sink
        .info
        .take()
        .ok_or_else(|| ApiError::internal("copy source without metadata"))?;
    let raw = sink
        .file
        .into_inner()
        .map_err(|e| ApiError::internal(e.error()))?;
    let mut body = FileBody {
        file: raw.reopen()?,
        buf: vec![0; 256 * 1024],
    };
    let opts = ReceiveOptions {
        aws_chunked: false,
        decoded_len: None,
        max_len,
    };
    let spooled = body::receive(&mut body, backend.spool_dir(), opts)?;
    Ok((spooled, info))
}

/// What a copy request asked for, from its headers.
pub struct CopyRequest<'h> {
    /// `x-amz-copy-source`.
    pub source: CopySource,
    /// `x-amz-copy-source-if-*`.
    pub source_conditions: Conditions,
    /// The request's headers.
    pub headers: &'h [(String, String)],
    /// Largest object accepted.
    pub max_len: u64,
}

impl<'h> CopyRequest<'h> {
    /// Reads the copy headers of a request.
    pub fn from_headers(headers: &'h [(String, String)], max_len: u64) -> Result<Self, ApiError> {
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_str())
        };
        let source = parse_source(header("x-amz-copy-source").unwrap_or_default())?;
        Ok(Self {
            source,
            source_conditions: Conditions::from_headers(header, "x-amz-copy-source-"),
            headers,
            max_len,
        })
    }

    fn header(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves CopyObject into `bucket`/`key`.
pub fn copy_object(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    req: &CopyRequest<'_>,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let replace = match req.header("x-amz-metadata-directive").map(str::trim) {
        None | Some("COPY") => false,
        Some("REPLACE") => true,
        Some(_) => {
            return Err(ApiError::invalid_argument("Unknown metadata directive."));
        }
    };
    if !replace && req.source.bucket == bucket && req.source.key == key {
        return Err(ApiError::new(
            400,
            "InvalidRequest",
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes.",
        ));
    }
    let (spooled, source) = read_source(
        backend,
        &req.source,
        None,
        &req.source_conditions,
        req.max_len,
    )?;
    let header = |n: &str| req.header(n);
    let mut meta = PutMeta {
        conditions: Conditions {
            if_match: header("if-match").map(|v| v.trim().to_owned()),
            if_none_match: header("if-none-match").map(|v| v.trim().to_owned()),
            ..Default::default()
        },
        ..Default::default()
    };
    if replace {
        meta.content_type = header("content-type").map(str::to_owned);
        meta.headers = crate::ops::meta::stored_headers(req.headers)?;
    } else {
        meta.content_type = source.content_type.clone();
        meta.headers = source.headers.clone();
    }
    // The bytes are the source's, so are its supplied checksums.
    if let Some(v) = &source.sha1 {
        meta.checksums
            .push(("x-amz-checksum-sha1".into(), v.clone()));
    }
    if let Some(v) = &source.sha256 {
        meta.checksums
            .push(("x-amz-checksum-sha256".into(), v.clone()));
    }
    let info = backend.put_object(bucket, key, spooled, &meta)?;
    let mut doc = format!("<CopyObjectResult xmlns=\"{S3_NS}\">");
    element(&mut doc, "LastModified", &iso8601(info.last_modified));
    element(&mut doc, "ETag", &info.etag);
    if let Some(c) = &info.crc64nvme {
        element(&mut doc, "ChecksumCRC64NVME", c);
    }
    doc.push_str("</CopyObjectResult>");
    xml_ok(out, Vec::new(), doc)
}

/// Serves UploadPartCopy: part `part_number` of upload `upload_id` from the source (or
/// its `x-amz-copy-source-range`).
pub fn upload_part_copy(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part_number: u32,
    req: &CopyRequest<'_>,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let range = req
        .header("x-amz-copy-source-range")
        .map(parse_source_range)
        .transpose()?;
    let (spooled, _) = read_source(
        backend,
        &req.source,
        range,
        &req.source_conditions,
        req.max_len,
    )?;
    let info = backend.upload_part(bucket, key, upload_id, part_number, spooled)?;
    let mut doc = format!("<CopyPartResult xmlns=\"{S3_NS}\">");
    element(&mut doc, "LastModified", &iso8601(crate::time::now_secs()));
    element(&mut doc, "ETag", &info.etag);
    if let Some(c) = &info.crc64nvme {
        element(&mut doc, "ChecksumCRC64NVME", c);
    }
    doc.push_str("</CopyPartResult>");
    xml_ok(out, Vec::new(), doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_forms() {
        let s = parse_source("/src-bucket/a%20b/c%25").unwrap();
        assert_eq!(
            (s.bucket.as_str(), s.key.as_str()),
            ("src-bucket", "a b/c%")
        );
        assert_eq!(parse_source("b/k?versionId=null").unwrap().key, "k");
        assert_eq!(parse_source("b/k?versionId=3").unwrap_err().status, 501);
        assert!(parse_source("bucket-only").is_err());
        assert!(parse_source("/b/").is_err());
        assert!(parse_source("%zz").is_err());
    }

    #[test]
    fn copy_source_ranges() {
        assert!(parse_source_range("bytes=0-9").is_ok());
        assert!(parse_source_range("bytes=9-0").is_err());
        assert!(parse_source_range("bytes=-9").is_err());
        assert!(parse_source_range("bytes=5-").is_err());
        assert!(parse_source_range("0-9").is_err());
    }
}
