//! `x-amz-rdma-target`: `/bucket/key[?query]` (docs/rdma-headers.md, `rdma::v2`).
//!
//! Encoding follows hipObject's `v2-wire.cpp`: RFC 3986 unreserved characters kept, everything
//! else `%XX` in upper-case hex, `/` kept inside the key. Decoding is done once. Queries follow
//! the servers: Ceph accepts only `versionId=…` on GET, versitygw only exactly
//! `uploadId=…&partNumber=N` (1..=10000) on PUT (multipart over RC).

use thiserror::Error;

use super::Op;
use crate::rdma::field::{self, FieldError};
use crate::uri;

/// Longest target accepted. Every target within the decoded limits below encodes to less than
/// this, so a canonical encoding is always accepted back.
pub const MAX_TARGET_LEN: usize = 8192;
/// Longest decoded bucket name (S3 allows 63; legacy Ceph buckets up to 255).
pub const MAX_BUCKET_LEN: usize = 255;
/// Longest decoded object key (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;
/// Longest decoded `versionId` / `uploadId`.
pub const MAX_QUERY_VALUE_LEN: usize = 1024;
/// Highest S3 part number.
pub const MAX_PART_NUMBER: u16 = 10_000;

/// Why a target was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TargetError {
    /// Longer than [`MAX_TARGET_LEN`].
    #[error("x-amz-rdma-target of {0} bytes is too long")]
    TooLong(usize),
    /// Does not start with `/`.
    #[error("x-amz-rdma-target must start with '/'")]
    NoLeadingSlash,
    /// A control character, space or non-ASCII byte (those must be percent-encoded).
    #[error("x-amz-rdma-target: unencoded byte at offset {0}")]
    InvalidChar(usize),
    /// No bucket, or a bucket that decodes to something containing `/`.
    #[error("x-amz-rdma-target: missing or invalid bucket")]
    Bucket,
    /// A decoded bucket, key or query value above its limit.
    #[error("x-amz-rdma-target: {0} too long")]
    FieldTooLong(&'static str),
    /// No key after the bucket.
    #[error("x-amz-rdma-target: missing object key")]
    MissingKey,
    /// A malformed percent escape or non-UTF-8 result.
    #[error("x-amz-rdma-target: {0}")]
    Decode(#[from] uri::DecodeError),
    /// A query this op does not allow (GET: `versionId=`; PUT: `uploadId=…&partNumber=N`).
    #[error("x-amz-rdma-target: query not allowed for {op}")]
    Query {
        /// `GET` or `PUT`.
        op: &'static str,
    },
    /// `partNumber` not a decimal in 1..=10000.
    #[error("x-amz-rdma-target partNumber: {0}")]
    PartNumber(FieldError),
}

/// The query part of a target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TargetQuery {
    /// No query.
    None,
    /// GET of a specific version.
    VersionId(String),
    /// PUT of one part of a multipart upload.
    Part {
        /// The upload id.
        upload_id: String,
        /// 1..=10000.
        part_number: u16,
    },
}

/// A decoded target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// Bucket name.
    pub bucket: String,
    /// Object key (may contain `/`).
    pub key: String,
    /// Query.
    pub query: TargetQuery,
}

impl Target {
    /// A plain `/bucket/key` target.
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> Self {
        Target {
            bucket: bucket.into(),
            key: key.into(),
            query: TargetQuery::None,
        }
    }

    /// The header value.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(self.bucket.len() + self.key.len() + 16);
        s.push('/');
        uri::encode_bytes(self.bucket.as_bytes(), false, &mut s);
        s.push('/');
        uri::encode_bytes(self.key.as_bytes(), true, &mut s);
        match &self.query {
            TargetQuery::None => {}
            TargetQuery::VersionId(v) => {
                s.push_str("?versionId=");
                uri::encode_bytes(v.as_bytes(), false, &mut s);
            }
            TargetQuery::Part {
                upload_id,
                part_number,
            } => {
                s.push_str("?uploadId=");
                uri::encode_bytes(upload_id.as_bytes(), false, &mut s);
                s.push_str("&partNumber=");
                s.push_str(&part_number.to_string());
            }
        }
        s
    }

    /// Parses a header value for `op`.
    pub fn parse(op: Op, value: &str) -> Result<Self, TargetError> {
        if value.len() > MAX_TARGET_LEN {
            return Err(TargetError::TooLong(value.len()));
        }
        if let Some(offset) = value.bytes().position(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(TargetError::InvalidChar(offset));
        }
        let path = value.strip_prefix('/').ok_or(TargetError::NoLeadingSlash)?;
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let (bucket, key) = path.split_once('/').ok_or(TargetError::MissingKey)?;
        let bucket = uri::decode_utf8(bucket)?;
        if bucket.is_empty() || bucket.contains('/') {
            return Err(TargetError::Bucket);
        }
        let bucket = limit(bucket, MAX_BUCKET_LEN, "bucket")?;
        let key = limit(uri::decode_utf8(key)?, MAX_KEY_LEN, "key")?;
        if key.is_empty() {
            return Err(TargetError::MissingKey);
        }
        let query = match query {
            None => TargetQuery::None,
            Some(q) => parse_query(op, q)?,
        };
        Ok(Target { bucket, key, query })
    }
}

fn limit(s: String, max: usize, what: &'static str) -> Result<String, TargetError> {
    if s.len() > max {
        Err(TargetError::FieldTooLong(what))
    } else {
        Ok(s)
    }
}

fn parse_query(op: Op, q: &str) -> Result<TargetQuery, TargetError> {
    let bad = || TargetError::Query { op: op.as_str() };
    match op {
        Op::Get => {
            let v = q.strip_prefix("versionId=").ok_or_else(bad)?;
            if v.is_empty() || v.contains('&') {
                return Err(bad());
            }
            Ok(TargetQuery::VersionId(limit(
                uri::decode_utf8(v)?,
                MAX_QUERY_VALUE_LEN,
                "versionId",
            )?))
        }
        Op::Put => {
            let rest = q.strip_prefix("uploadId=").ok_or_else(bad)?;
            let (upload, part) = rest.split_once("&partNumber=").ok_or_else(bad)?;
            if upload.is_empty() || upload.contains('&') {
                return Err(bad());
            }
            let n = field::decimal_u64(part, 5)
                .and_then(|n| field::in_range(n, 1, u64::from(MAX_PART_NUMBER)))
                .map_err(TargetError::PartNumber)?;
            let part_number =
                u16::try_from(n).map_err(|_| TargetError::PartNumber(FieldError::Overflow))?;
            let upload_id = limit(uri::decode_utf8(upload)?, MAX_QUERY_VALUE_LEN, "uploadId")?;
            Ok(TargetQuery::Part {
                upload_id,
                part_number,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_hipobject() {
        let t = Target::new("my-bucket", "dir/sub dir/ü+x~y_z.-");
        assert_eq!(t.encode(), "/my-bucket/dir/sub%20dir/%C3%BC%2Bx~y_z.-");
        assert_eq!(Target::parse(Op::Get, &t.encode()), Ok(t));
        let v = Target {
            query: TargetQuery::VersionId("v1/=".into()),
            ..Target::new("b", "k")
        };
        assert_eq!(v.encode(), "/b/k?versionId=v1%2F%3D");
        assert_eq!(Target::parse(Op::Get, &v.encode()), Ok(v));
        let p = Target {
            query: TargetQuery::Part {
                upload_id: "up&load".into(),
                part_number: 10_000,
            },
            ..Target::new("b", "k/")
        };
        assert_eq!(p.encode(), "/b/k/?uploadId=up%26load&partNumber=10000");
        assert_eq!(Target::parse(Op::Put, &p.encode()), Ok(p));
    }

    #[test]
    fn decoding_rules() {
        assert_eq!(
            Target::parse(Op::Get, "/b/a%2fb").map(|t| t.key),
            Ok("a/b".to_owned())
        );
        assert_eq!(
            Target::parse(Op::Get, "b/k"),
            Err(TargetError::NoLeadingSlash)
        );
        assert_eq!(Target::parse(Op::Get, "/b"), Err(TargetError::MissingKey));
        assert_eq!(Target::parse(Op::Get, "/b/"), Err(TargetError::MissingKey));
        assert_eq!(Target::parse(Op::Get, "//k"), Err(TargetError::Bucket));
        assert_eq!(Target::parse(Op::Get, "/a%2Fb/k"), Err(TargetError::Bucket));
        assert_eq!(
            Target::parse(Op::Get, "/b/k k"),
            Err(TargetError::InvalidChar(4))
        );
        assert_eq!(
            Target::parse(Op::Get, "/b/kü"),
            Err(TargetError::InvalidChar(4))
        );
        assert!(matches!(
            Target::parse(Op::Get, "/b/k%zz"),
            Err(TargetError::Decode(_))
        ));
        assert!(matches!(
            Target::parse(Op::Get, "/b/k%FF"),
            Err(TargetError::Decode(_))
        ));
        assert_eq!(
            Target::parse(Op::Get, &format!("/b/{}", "k".repeat(9000))),
            Err(TargetError::TooLong(9003))
        );
        assert_eq!(
            Target::parse(Op::Get, &format!("/b/{}", "k".repeat(1025))),
            Err(TargetError::FieldTooLong("key"))
        );
        assert!(Target::parse(Op::Get, &format!("/b/{}", "k".repeat(1024))).is_ok());
        assert_eq!(
            Target::parse(Op::Get, &format!("/{}/k", "b".repeat(256))),
            Err(TargetError::FieldTooLong("bucket"))
        );
        // The largest targets within the limits still encode below MAX_TARGET_LEN.
        let big = Target {
            bucket: "!".repeat(MAX_BUCKET_LEN),
            key: "!".repeat(MAX_KEY_LEN),
            query: TargetQuery::Part {
                upload_id: "!".repeat(MAX_QUERY_VALUE_LEN),
                part_number: 10_000,
            },
        };
        assert!(big.encode().len() < MAX_TARGET_LEN);
        assert_eq!(Target::parse(Op::Put, &big.encode()), Ok(big));
    }

    #[test]
    fn query_rules_per_op() {
        let get = Err(TargetError::Query { op: "GET" });
        let put = Err(TargetError::Query { op: "PUT" });
        assert_eq!(Target::parse(Op::Get, "/b/k?uploadId=u&partNumber=1"), get);
        assert_eq!(Target::parse(Op::Get, "/b/k?versionId="), get);
        assert_eq!(Target::parse(Op::Get, "/b/k?versionId=a&x=y"), get);
        assert_eq!(Target::parse(Op::Get, "/b/k?"), get);
        assert_eq!(Target::parse(Op::Put, "/b/k?versionId=v"), put);
        assert_eq!(Target::parse(Op::Put, "/b/k?partNumber=1&uploadId=u"), put);
        assert_eq!(Target::parse(Op::Put, "/b/k?uploadId=&partNumber=1"), put);
        assert_eq!(Target::parse(Op::Put, "/b/k?uploadId=u"), put);
        assert_eq!(
            Target::parse(Op::Put, "/b/k?uploadId=u&partNumber=0"),
            Err(TargetError::PartNumber(FieldError::OutOfRange {
                value: 0,
                min: 1,
                max: 10_000
            }))
        );
        assert_eq!(
            Target::parse(Op::Put, "/b/k?uploadId=u&partNumber=10001"),
            Err(TargetError::PartNumber(FieldError::OutOfRange {
                value: 10_001,
                min: 1,
                max: 10_000
            }))
        );
        assert!(matches!(
            Target::parse(Op::Put, "/b/k?uploadId=u&partNumber=1&x=2"),
            Err(TargetError::PartNumber(FieldError::NotDecimal { .. }))
        ));
        assert_eq!(
            Target::parse(Op::Put, "/b/k?uploadId=u&partNumber=7").map(|t| t.query),
            Ok(TargetQuery::Part {
                upload_id: "u".into(),
                part_number: 7
            })
        );
        // Plain targets are fine for both ops.
        assert!(Target::parse(Op::Put, "/b/k").is_ok());
    }
}
