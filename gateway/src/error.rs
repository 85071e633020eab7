//! S3 errors as the gateway answers them: status, code, message, and the `<Error>` document.

use crate::xml::escape;

/// An S3 error response. `code` is one of S3's error codes (`NoSuchKey`, `BadDigest`, ...);
/// `headers` carries extras a particular error needs (`Content-Range: bytes */size` on 416,
/// `x-amz-rdma-reply: 501` on a declined RDMA request).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// S3 error code (upstream codes pass through unchanged).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Extra response headers.
    pub headers: Vec<(String, String)>,
    /// Extra `<Name>value</Name>` elements (SignatureDoesNotMatch carries the canonical
    /// request and string to sign, as S3 does).
    pub details: Vec<(&'static str, String)>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            headers: Vec::new(),
            details: Vec::new(),
        }
    }

    /// Adds a response header.
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// Adds an element to the error document.
    pub fn with_detail(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.details.push((name, value.into()));
        self
    }

    /// 404 NoSuchBucket.
    pub fn no_such_bucket(bucket: &str) -> Self {
        Self::new(404, "NoSuchBucket", "The specified bucket does not exist")
            .with_detail("BucketName", bucket)
    }

    /// 400 InvalidBucketName (what S3 answers for a name it does not accept).
    pub fn invalid_bucket_name(bucket: &str) -> Self {
        Self::new(
            400,
            "InvalidBucketName",
            "The specified bucket is not valid.",
        )
        .with_detail("BucketName", bucket)
    }

    /// A request that names what S3 cannot hold, as S3 itself refuses it: a bucket name
    /// → 400 `InvalidBucketName`, a key over 1024 bytes → 400 `KeyTooLongError`, anything
    /// else → 400 `InvalidArgument`.
    pub fn from_build(e: s3_lite::s3::BuildError) -> Self {
        match e {
            s3_lite::s3::BuildError::InvalidBucket(b) => Self::invalid_bucket_name(&b),
            s3_lite::s3::BuildError::InvalidKey => {
                Self::new(400, "KeyTooLongError", "Your key is too long")
            }
            other => Self::invalid_argument(other.to_string()),
        }
    }

    /// 404 NoSuchKey.
    pub fn no_such_key(key: &str) -> Self {
        Self::new(404, "NoSuchKey", "The specified key does not exist.").with_detail("Key", key)
    }

    /// 404 NoSuchUpload.
    pub fn no_such_upload(id: &str) -> Self {
        Self::new(
            404,
            "NoSuchUpload",
            "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.",
        )
        .with_detail("UploadId", id)
    }

    /// 500 InternalError for a local failure (the message names what failed, never a path
    /// outside the request's own names).
    pub fn internal(what: impl std::fmt::Display) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("We encountered an internal error: {what}"),
        )
    }

    /// 400 InvalidArgument.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(400, "InvalidArgument", message)
    }

    /// 501 NotImplemented.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(501, "NotImplemented", message)
    }

    /// 503 SlowDown.
    pub fn slow_down() -> Self {
        Self::new(503, "SlowDown", "Please reduce your request rate.")
    }

    /// The `<Error>` XML document.
    pub fn to_xml(&self, resource: &str, request_id: &str) -> Vec<u8> {
        let mut s = String::with_capacity(256);
        s.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>");
        s.push_str(&self.code);
        s.push_str("</Code><Message>");
        escape(&self.message, &mut s);
        s.push_str("</Message>");
        for (name, value) in &self.details {
            s.push('<');
            s.push_str(name);
            s.push('>');
            escape(value, &mut s);
            s.push_str("</");
            s.push_str(name);
            s.push('>');
        }
        s.push_str("<Resource>");
        escape(resource, &mut s);
        s.push_str("</Resource><RequestId>");
        s.push_str(request_id);
        s.push_str("</RequestId><HostId>");
        s.push_str(request_id);
        s.push_str("</HostId></Error>");
        s.into_bytes()
    }
}

impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        Self::internal(e)
    }
}
