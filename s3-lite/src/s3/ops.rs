//! Request builders for the single-request S3 operations. Each returns an unsigned
//! [`Request`] with `Host` set; the caller signs it and sends it with the framing its
//! `Content-Length` header (if any) names.
//!
//! Query strings are built already in SigV4 canonical form (components encoded with
//! [`uri::encode_component`], `key=value` even for empty values, sorted by key), so what the
//! signer canonicalizes is byte-for-byte what goes on the wire.

use super::endpoint::{BuildError, Endpoint};
use super::range::ByteRange;
use crate::request::Request;
use crate::uri;

/// Options of GetObject and HeadObject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetOptions {
    /// `Range`: only these bytes.
    pub range: Option<ByteRange>,
    /// `If-Match`: fail with 412 unless the ETag matches (keeps ranged reads of one object
    /// consistent across parts).
    pub if_match: Option<String>,
    /// `x-amz-checksum-mode: ENABLED`: ask S3 to return the stored `x-amz-checksum-*`.
    pub checksum_mode: bool,
}

/// Options of PutObject (and, for `content_type`/`extra_headers`, CreateMultipartUpload).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PutOptions {
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// Checksum headers, e.g. `("x-amz-checksum-crc64nvme", "<base64>")`.
    pub checksums: Vec<(String, String)>,
    /// Any other headers (`x-amz-meta-*`, `x-amz-storage-class`, ...).
    pub extra_headers: Vec<(String, String)>,
}

/// Options of ListObjectsV2.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only keys starting with this.
    pub prefix: Option<String>,
    /// Roll keys up to the first occurrence of this after the prefix (usually `/`).
    pub delimiter: Option<String>,
    /// The previous page's `NextContinuationToken`.
    pub continuation_token: Option<String>,
    /// Only keys after this one.
    pub start_after: Option<String>,
    /// Page size, 1..=1000 (S3's default and maximum is 1000).
    pub max_keys: Option<u32>,
    /// Ask for `encoding-type=url` (keys with control characters survive XML); the parser
    /// decodes when the answer says it is encoded.
    pub url_encoding: bool,
}

/// Builds a query string from `(key, value)` pairs: encodes both, sorts by encoded key then
/// value, joins with `&`.
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut encoded: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (uri::encode_component(k), uri::encode_component(v)))
        .collect();
    encoded.sort();
    encoded
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// A request for `method` on an object, with `Host` set.
pub(crate) fn object_request(
    ep: &Endpoint,
    method: &str,
    bucket: &str,
    key: &str,
) -> Result<Request, BuildError> {
    let (host, path) = ep.object_location(bucket, key)?;
    let mut req = Request::new(method, path);
    req.add_header("Host", host);
    Ok(req)
}

/// A request for `method` on a bucket, with `Host` set.
pub(crate) fn bucket_request(
    ep: &Endpoint,
    method: &str,
    bucket: &str,
) -> Result<Request, BuildError> {
    let (host, path) = ep.bucket_location(bucket)?;
    let mut req = Request::new(method, path);
    req.add_header("Host", host);
    Ok(req)
}

fn apply_get_options(req: &mut Request, opts: &GetOptions) {
    if let Some(range) = &opts.range {
        req.add_header("Range", range.to_header());
    }
    if let Some(etag) = &opts.if_match {
        req.add_header("If-Match", etag.clone());
    }
    if opts.checksum_mode {
        req.add_header("x-amz-checksum-mode", "ENABLED");
    }
}

/// GetObject: `GET /bucket/key` with optional `Range`, `If-Match`, checksum mode.
pub fn get_object(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    opts: &GetOptions,
) -> Result<Request, BuildError> {
    let mut req = object_request(ep, "GET", bucket, key)?;
    apply_get_options(&mut req, opts);
    Ok(req)
}

/// HeadObject: like GetObject, answered without a body.
pub fn head_object(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    opts: &GetOptions,
) -> Result<Request, BuildError> {
    let mut req = object_request(ep, "HEAD", bucket, key)?;
    apply_get_options(&mut req, opts);
    Ok(req)
}

/// PutObject: `PUT /bucket/key` with `Content-Length: content_length` (the body is sent by the
/// caller). Checksum names must start with `x-amz-checksum-`.
pub fn put_object(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    content_length: u64,
    opts: &PutOptions,
) -> Result<Request, BuildError> {
    let mut req = object_request(ep, "PUT", bucket, key)?;
    req.add_header("Content-Length", content_length.to_string());
    if let Some(ct) = &opts.content_type {
        req.add_header("Content-Type", ct.clone());
    }
    add_checksums(&mut req, &opts.checksums)?;
    for (n, v) in &opts.extra_headers {
        req.add_header(n.clone(), v.clone());
    }
    Ok(req)
}

pub(crate) fn add_checksums(
    req: &mut Request,
    checksums: &[(String, String)],
) -> Result<(), BuildError> {
    for (n, v) in checksums {
        let lower = n.to_ascii_lowercase();
        if !lower.starts_with("x-amz-checksum-") || v.is_empty() {
            return Err(BuildError::InvalidOption(
                "checksum header must be x-amz-checksum-<alg> with a value",
            ));
        }
        req.add_header(lower, v.clone());
    }
    Ok(())
}

/// DeleteObject: `DELETE /bucket/key`.
pub fn delete_object(ep: &Endpoint, bucket: &str, key: &str) -> Result<Request, BuildError> {
    object_request(ep, "DELETE", bucket, key)
}

/// ListObjectsV2: `GET /bucket?list-type=2&...`.
pub fn list_objects_v2(
    ep: &Endpoint,
    bucket: &str,
    opts: &ListOptions,
) -> Result<Request, BuildError> {
    let mut req = bucket_request(ep, "GET", bucket)?;
    let max_keys = match opts.max_keys {
        Some(n @ 1..=1000) => Some(n.to_string()),
        Some(_) => return Err(BuildError::InvalidOption("max_keys must be 1..=1000")),
        None => None,
    };
    let mut pairs: Vec<(&str, &str)> = vec![("list-type", "2")];
    let optional = [
        ("prefix", opts.prefix.as_deref()),
        ("delimiter", opts.delimiter.as_deref()),
        ("continuation-token", opts.continuation_token.as_deref()),
        ("start-after", opts.start_after.as_deref()),
        ("max-keys", max_keys.as_deref()),
        ("encoding-type", opts.url_encoding.then_some("url")),
    ];
    pairs.extend(optional.iter().filter_map(|(k, v)| v.map(|v| (*k, v))));
    req.query = query(&pairs);
    Ok(req)
}

/// ListBuckets: `GET /` on the service host (no bucket in the host or path).
pub fn list_buckets(ep: &Endpoint) -> Request {
    let mut req = Request::new("GET", "/");
    req.add_header("Host", ep.host_header(None));
    req
}

/// DeleteBucket: `DELETE /bucket` (servers refuse it with `BucketNotEmpty` unless it is empty).
pub fn delete_bucket(ep: &Endpoint, bucket: &str) -> Result<Request, BuildError> {
    bucket_request(ep, "DELETE", bucket)
}

/// CreateBucket: `PUT /bucket`, with a `CreateBucketConfiguration` body naming the region
/// unless it is `us-east-1` (S3 rejects an explicit us-east-1 constraint). Returns the request
/// (with `Content-Length` set) and the body.
pub fn create_bucket(
    ep: &Endpoint,
    bucket: &str,
    region: &str,
) -> Result<(Request, Vec<u8>), BuildError> {
    if region.is_empty()
        || !region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(BuildError::InvalidRegion(region.chars().take(64).collect()));
    }
    let mut req = bucket_request(ep, "PUT", bucket)?;
    let body = if region == "us-east-1" {
        Vec::new()
    } else {
        format!(
            "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <LocationConstraint>{region}</LocationConstraint></CreateBucketConfiguration>"
        )
        .into_bytes()
    };
    req.add_header("Content-Length", body.len().to_string());
    Ok((req, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Endpoint {
        Endpoint::parse("http://127.0.0.1:9000").unwrap()
    }

    #[test]
    fn get_and_head() {
        let opts = GetOptions {
            range: Some(ByteRange::Suffix(10)),
            if_match: Some("\"e\"".into()),
            checksum_mode: true,
        };
        let r = get_object(&local(), "bkt", "dir/a b", &opts).unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("GET", "/bkt/dir/a%20b", "")
        );
        assert_eq!(
            r.headers,
            vec![
                ("Host".to_owned(), "127.0.0.1:9000".to_owned()),
                ("Range".to_owned(), "bytes=-10".to_owned()),
                ("If-Match".to_owned(), "\"e\"".to_owned()),
                ("x-amz-checksum-mode".to_owned(), "ENABLED".to_owned()),
            ]
        );
        assert_eq!(
            head_object(&local(), "bkt", "k", &GetOptions::default())
                .unwrap()
                .method,
            "HEAD"
        );
        assert_eq!(
            get_object(&local(), "BKT", "k", &opts),
            Err(BuildError::InvalidBucket("BKT".into()))
        );
        assert_eq!(
            delete_object(&local(), "bkt", ""),
            Err(BuildError::InvalidKey)
        );
    }

    #[test]
    fn put() {
        let opts = PutOptions {
            content_type: Some("text/plain".into()),
            checksums: vec![("X-Amz-Checksum-CRC64NVME".into(), "AAAAAAAAAAA=".into())],
            extra_headers: vec![("x-amz-meta-a".into(), "1".into())],
        };
        let r = put_object(&local(), "bkt", "k", 5, &opts).unwrap();
        assert_eq!(r.header("content-length"), Some("5"));
        assert_eq!(r.header("x-amz-checksum-crc64nvme"), Some("AAAAAAAAAAA="));
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.header("x-amz-meta-a"), Some("1"));
        let bad = PutOptions {
            checksums: vec![("content-md5".into(), "x".into())],
            ..PutOptions::default()
        };
        assert!(matches!(
            put_object(&local(), "bkt", "k", 5, &bad),
            Err(BuildError::InvalidOption(_))
        ));
    }

    #[test]
    fn list_query_is_canonical() {
        let opts = ListOptions {
            prefix: Some("a b/".into()),
            delimiter: Some("/".into()),
            continuation_token: Some("1ueG/x+y=".into()),
            start_after: Some("a b/c".into()),
            max_keys: Some(2),
            url_encoding: true,
        };
        let r = list_objects_v2(&local(), "bkt", &opts).unwrap();
        assert_eq!(r.path, "/bkt");
        assert_eq!(
            r.query,
            "continuation-token=1ueG%2Fx%2By%3D&delimiter=%2F&encoding-type=url&list-type=2&max-keys=2&\
             prefix=a%20b%2F&start-after=a%20b%2Fc"
        );
        assert_eq!(
            list_objects_v2(&local(), "bkt", &ListOptions::default())
                .unwrap()
                .query,
            "list-type=2"
        );
        let zero = ListOptions {
            max_keys: Some(0),
            ..ListOptions::default()
        };
        assert!(list_objects_v2(&local(), "bkt", &zero).is_err());
    }

    #[test]
    fn create_bucket_body() {
        let (r, body) = create_bucket(&local(), "bkt", "us-east-1").unwrap();
        assert_eq!(
            (
                r.method.as_str(),
                r.path.as_str(),
                r.header("content-length")
            ),
            ("PUT", "/bkt", Some("0"))
        );
        assert!(body.is_empty());
        let (r, body) = create_bucket(&local(), "bkt", "eu-west-1").unwrap();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>\
             eu-west-1</LocationConstraint></CreateBucketConfiguration>"
        );
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str())
        );
        assert!(matches!(
            create_bucket(&local(), "bkt", "EU<"),
            Err(BuildError::InvalidRegion(_))
        ));
    }
}
