//! Object metadata from response headers (GetObject, HeadObject, PutObject, UploadPart).

use super::error::ParseError;
use super::range::ContentRange;

/// What S3 says about an object in response headers. Absent headers are `None`; present but
/// malformed ones (`Content-Length`, `Content-Range`) are errors, because the caller sizes
/// buffers and verifies ranges with them.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectMeta {
    /// `Content-Length`: bytes in this response's body (the object size for HEAD and full GET).
    pub content_length: Option<u64>,
    /// `ETag`, quotes included as sent.
    pub etag: Option<String>,
    /// `Last-Modified` (HTTP date, unparsed).
    pub last_modified: Option<String>,
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Content-Range` of a 206 (or 416) response.
    pub content_range: Option<ContentRange>,
    /// `x-amz-checksum-crc64nvme` (base64 of the big-endian CRC).
    pub checksum_crc64nvme: Option<String>,
    /// `x-amz-checksum-crc32c` (base64 of the big-endian CRC).
    pub checksum_crc32c: Option<String>,
    /// `x-amz-checksum-type` (`FULL_OBJECT` or `COMPOSITE`).
    pub checksum_type: Option<String>,
    /// `x-amz-request-id`.
    pub request_id: Option<String>,
    /// `x-amz-version-id`.
    pub version_id: Option<String>,
}

impl ObjectMeta {
    /// Reads the headers it knows; unknown ones are ignored.
    pub fn from_headers(headers: &[(String, String)]) -> Result<Self, ParseError> {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        };
        let content_length = match get("content-length") {
            Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => Some(
                v.parse()
                    .map_err(|_| ParseError::InvalidValue("Content-Length"))?,
            ),
            Some(_) => return Err(ParseError::InvalidValue("Content-Length")),
            None => None,
        };
        let content_range = match get("content-range") {
            Some(v) => Some(
                ContentRange::parse(&v).map_err(|_| ParseError::InvalidValue("Content-Range"))?,
            ),
            None => None,
        };
        Ok(Self {
            content_length,
            etag: get("etag"),
            last_modified: get("last-modified"),
            content_type: get("content-type"),
            content_range,
            checksum_crc64nvme: get("x-amz-checksum-crc64nvme"),
            checksum_crc32c: get("x-amz-checksum-crc32c"),
            checksum_type: get("x-amz-checksum-type"),
            request_id: get("x-amz-request-id"),
            version_id: get("x-amz-version-id"),
        })
    }

    /// The complete object size: the `Content-Range` total of a ranged response, else
    /// `Content-Length` (which is the object size only for HEAD and whole-object GET).
    pub fn object_size(&self) -> Option<u64> {
        match self.content_range {
            Some(ContentRange::Bytes { total, .. }) => total,
            Some(ContentRange::Unsatisfied { total }) => Some(total),
            None => self.content_length,
        }
    }
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
    fn reads_headers() {
        let m = ObjectMeta::from_headers(&h(&[
            ("Content-Length", "100"),
            ("ETag", "\"abc\""),
            ("Content-Range", "bytes 100-199/1000"),
            ("x-amz-checksum-crc64nvme", "AAAAAAAAAAA="),
            ("X-Amz-Request-Id", "RID"),
            ("Last-Modified", "Wed, 12 Oct 2009 17:50:00 GMT"),
        ]))
        .unwrap();
        assert_eq!(m.content_length, Some(100));
        assert_eq!(m.etag.as_deref(), Some("\"abc\""));
        assert_eq!(
            m.content_range,
            Some(ContentRange::Bytes {
                first: 100,
                last: 199,
                total: Some(1000)
            })
        );
        assert_eq!(m.object_size(), Some(1000));
        assert_eq!(m.checksum_crc64nvme.as_deref(), Some("AAAAAAAAAAA="));
        assert_eq!(m.request_id.as_deref(), Some("RID"));
        assert_eq!(m.checksum_crc32c, None);
        let unsat = ObjectMeta::from_headers(&h(&[("Content-Range", "bytes */42")])).unwrap();
        assert_eq!(unsat.object_size(), Some(42));
        assert_eq!(
            ObjectMeta::from_headers(&h(&[("Content-Length", "-1")])),
            Err(ParseError::InvalidValue("Content-Length"))
        );
        assert_eq!(
            ObjectMeta::from_headers(&h(&[("Content-Range", "bytes 9-1/10")])),
            Err(ParseError::InvalidValue("Content-Range"))
        );
    }
}
