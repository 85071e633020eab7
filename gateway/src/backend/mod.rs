//! Where objects live: the [`Backend`] trait and its two implementations, a local directory
//! ([`local::LocalDir`]) and a bridge to an upstream S3 store ([`upstream::Upstream`]).
//!
//! The connection layer has already authenticated the request, received the body into a
//! [`crate::body::Spooled`] temporary file and verified its checksums and payload hash, so a
//! backend only ever sees verified bytes: a bad checksum never reaches it, and nothing is
//! stored.

pub mod complete;
pub mod composite;
pub mod keymap;
pub mod list;
pub mod local;
pub mod upstream;

use s3_lite::s3::ByteRange;

use crate::body::Spooled;
use crate::error::ApiError;

/// What the gateway knows about a stored object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectInfo {
    /// Size in bytes.
    pub size: u64,
    /// ETag, quotes included.
    pub etag: String,
    /// Last modification, Unix seconds.
    pub last_modified: u64,
    /// `Content-Type` given at upload.
    pub content_type: Option<String>,
    /// Full-object CRC64NVME (base64).
    pub crc64nvme: Option<String>,
    /// CRC32C (base64; for multipart uploads only when composite values are not involved).
    pub crc32c: Option<String>,
    /// CRC32 (base64), as boto3 sends by default.
    pub crc32: Option<String>,
    /// `FULL_OBJECT` or `COMPOSITE` (multipart uploads).
    pub checksum_type: Option<String>,
    /// Number of parts for a multipart object.
    pub parts: Option<u32>,
    /// SHA-1 (base64), when the upload supplied one.
    #[serde(default)]
    pub sha1: Option<String>,
    /// SHA-256 (base64), when the upload supplied one.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Stored metadata headers (`x-amz-meta-*`, Cache-Control, ...; see
    /// [`crate::ops::meta`]), returned on GET and HEAD.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Sizes of a multipart object's parts, in order (GET `?partNumber=`,
    /// GetObjectAttributes).
    #[serde(default)]
    pub part_sizes: Vec<u64>,
    /// Each part's checksum of the upload's algorithm, `(algorithm, base64)`, for a
    /// composite multipart object.
    #[serde(default)]
    pub part_checksums: Vec<(String, String)>,
    /// The multipart upload that made this object (a retried CompleteMultipartUpload of it
    /// is answered with this object, as S3 does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_id: Option<String>,
}

/// Metadata supplied at upload (PutObject, CreateMultipartUpload).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PutMeta {
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `x-amz-checksum-algorithm` of a multipart upload (`CRC64NVME`, `CRC32C`, ...).
    pub checksum_algorithm: Option<String>,
    /// `x-amz-checksum-type` of a multipart upload.
    pub checksum_type: Option<String>,
    /// Metadata headers to store with the object ([`crate::ops::meta`]).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// Checksums the upload supplied and the gateway verified, `(header name, base64)`,
    /// kept beyond the ones every object gets (SHA-1, SHA-256).
    #[serde(default)]
    pub checksums: Vec<(String, String)>,
    /// `If-Match` / `If-None-Match` of the write, checked against the object under the key
    /// at the moment it is replaced.
    #[serde(skip)]
    pub conditions: crate::ops::conditions::Conditions,
}

/// Conditions and range of a GET or HEAD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GetRequest {
    /// `Range`.
    pub range: Option<ByteRange>,
    /// `If-Match`.
    pub if_match: Option<String>,
    /// HEAD: no body bytes are produced.
    pub head_only: bool,
}

/// Receives a GET's head and body from a backend (the HTTP response today; an RDMA target
/// later, see [`crate::rdma`]).
pub trait ObjectSink {
    /// Called once before any data: the object and the inclusive byte span being served
    /// (`None` for the whole object).
    fn begin(&mut self, info: &ObjectInfo, span: Option<(u64, u64)>) -> std::io::Result<()>;
    /// The next bytes of the span, in order.
    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// The next `len` bytes of the span, taken from `file` at offset `at` straight into the
    /// sink's own memory (an RDMA target's registered staging buffers), without a backend
    /// buffer and a copy in between. Each run of bytes that landed is shown to `seen`, in
    /// order (the handler's checksum). `None`: this sink has no such path, and the backend
    /// reads the bytes itself and hands them to [`ObjectSink::data`]. A sink must never let
    /// bytes land outside its own memory, and a file shorter than `at + len` is an error.
    fn data_from_file(
        &mut self,
        file: &std::fs::File,
        at: u64,
        len: u64,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<std::io::Result<()>> {
        let _ = (file, at, len, seen);
        None
    }
}

/// A ListObjectsV2 query, already validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up at the first occurrence after the prefix.
    pub delimiter: Option<String>,
    /// Keys (and prefixes) strictly after this.
    pub start_after: Option<String>,
    /// Opaque token from a previous page.
    pub continuation_token: Option<String>,
    /// 0..=1000.
    pub max_keys: u32,
}

/// One listed object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListEntry {
    /// The key.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag, quotes included.
    pub etag: String,
    /// ISO 8601.
    pub last_modified: String,
}

/// One page of a listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Objects in key order.
    pub contents: Vec<ListEntry>,
    /// Common prefixes in order.
    pub common_prefixes: Vec<String>,
    /// Whether more follow.
    pub is_truncated: bool,
    /// Token for the next page.
    pub next_continuation_token: Option<String>,
}

/// One part named by CompleteMultipartUpload, checked against what was uploaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletePart {
    /// 1..=10000, strictly ascending across the list.
    pub part_number: u32,
    /// ETag the client got from UploadPart.
    pub etag: String,
    /// Per-part CRC64NVME the client claims, if any.
    pub crc64nvme: Option<String>,
    /// Other per-part checksums the client claims, `(algorithm, base64)` with the
    /// algorithm as S3 names it (`CRC32`, `CRC32C`, `SHA1`, `SHA256`).
    pub checksums: Vec<(String, String)>,
}

/// One uploaded part of an open multipart upload (ListParts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartEntry {
    /// 1..=10000.
    pub part_number: u32,
    /// Size in bytes.
    pub size: u64,
    /// ETag, quotes included.
    pub etag: String,
    /// When the part was stored, Unix seconds.
    pub last_modified: u64,
    /// The part's checksum of the upload's algorithm, `(algorithm, base64)`.
    pub checksum: Option<(String, String)>,
}

/// An open multipart upload (ListParts' header, ListMultipartUploads' entries).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadEntry {
    /// The key it will be stored under.
    pub key: String,
    /// Its id.
    pub upload_id: String,
    /// When CreateMultipartUpload ran, Unix seconds.
    pub initiated: u64,
    /// `x-amz-checksum-algorithm` given at creation.
    pub checksum_algorithm: Option<String>,
    /// `x-amz-checksum-type` given at creation (or implied by the algorithm).
    pub checksum_type: Option<String>,
}

/// The object storage behind the gateway. Implementations are shared by all connection
/// threads (`Send + Sync`) and must make every write atomic: a reader sees the old object or
/// the new one, never a mix, and a failed upload leaves nothing behind.
pub trait Backend: Send + Sync {
    /// Where request bodies are spooled before they reach the backend (for the local
    /// directory: on the same file system, so storing is a rename).
    fn spool_dir(&self) -> &std::path::Path;
    /// CreateBucket (idempotent for the same owner: an existing bucket is
    /// `BucketAlreadyOwnedByYou`).
    fn create_bucket(&self, bucket: &str) -> Result<(), ApiError>;
    /// HeadBucket.
    fn head_bucket(&self, bucket: &str) -> Result<(), ApiError>;
    /// DeleteBucket (must be empty).
    fn delete_bucket(&self, bucket: &str) -> Result<(), ApiError>;
    /// ListBuckets: names in order.
    fn list_buckets(&self) -> Result<Vec<String>, ApiError>;
    /// When `bucket` was created (Unix seconds), where the backend knows it.
    fn bucket_created(&self, _bucket: &str) -> Option<u64> {
        None
    }
    /// PutObject of a verified body.
    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Spooled,
        meta: &PutMeta,
    ) -> Result<ObjectInfo, ApiError>;
    /// GetObject / HeadObject into `sink`. Range and If-Match are resolved here (416 with
    /// `Content-Range: bytes */size`, 412 PreconditionFailed) before `sink.begin`.
    fn get_object(
        &self,
        bucket: &str,
        key: &str,
        req: &GetRequest,
        sink: &mut dyn ObjectSink,
    ) -> Result<(), ApiError>;
    /// DeleteObject (a missing key is not an error, as in S3).
    fn delete_object(&self, bucket: &str, key: &str) -> Result<(), ApiError>;
    /// ListObjectsV2.
    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, ApiError>;
    /// CreateMultipartUpload: returns the upload id.
    fn create_multipart(&self, bucket: &str, key: &str, meta: &PutMeta)
    -> Result<String, ApiError>;
    /// UploadPart of a verified body: returns the part's ETag and CRC64NVME.
    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        body: Spooled,
    ) -> Result<ObjectInfo, ApiError>;
    /// CompleteMultipartUpload. `whole` are the full-object checksums the client sent,
    /// `(algorithm, value)` ([`complete::whole_checksums`]; checked, `BadDigest` on mismatch).
    fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
        whole: &[(String, String)],
    ) -> Result<ObjectInfo, ApiError>;
    /// AbortMultipartUpload.
    fn abort_multipart(&self, bucket: &str, key: &str, upload_id: &str) -> Result<(), ApiError>;
    /// CompleteMultipartUpload whose write conditions (`If-None-Match: *`, `If-Match`) are
    /// checked against the object under the key at the moment the result replaces it; a
    /// failed condition leaves the upload open. A backend that cannot check them atomically
    /// refuses conditions (501) rather than ignore them.
    fn complete_multipart_if(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
        whole: &[(String, String)],
        conditions: &crate::ops::conditions::Conditions,
    ) -> Result<ObjectInfo, ApiError> {
        if !conditions.is_empty() {
            return Err(ApiError::not_implemented(
                "conditional CompleteMultipartUpload is not supported by this backend",
            ));
        }
        self.complete_multipart(bucket, key, upload_id, parts, whole)
    }
    /// ListParts: the upload and its parts in part-number order (pagination is the
    /// caller's, [`crate::ops::multipart_list`]).
    fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(UploadEntry, Vec<PartEntry>), ApiError> {
        let _ = (bucket, key, upload_id);
        Err(ApiError::not_implemented(
            "ListParts is not supported by this backend",
        ))
    }
    /// ListMultipartUploads: every open upload of `bucket`, in any order.
    fn list_uploads(&self, bucket: &str) -> Result<Vec<UploadEntry>, ApiError> {
        let _ = bucket;
        Err(ApiError::not_implemented(
            "ListMultipartUploads is not supported by this backend",
        ))
    }
    /// The upstream store requests are forwarded to unchanged ([`crate::forward`]), when
    /// this backend is a bridge to one.
    fn upstream(&self) -> Option<&upstream::Upstream> {
        None
    }
}

/// ETags compare without their quotes (clients send them either way).
pub fn etag_eq(a: &str, b: &str) -> bool {
    a.trim().trim_matches('"') == b.trim().trim_matches('"')
}

/// Checks `If-Match` against an object's ETag (`*` matches any existing object).
pub fn check_if_match(if_match: Option<&str>, etag: &str) -> Result<(), ApiError> {
    match if_match {
        None => Ok(()),
        Some(v) if v.split(',').any(|t| t.trim() == "*" || etag_eq(t, etag)) => Ok(()),
        Some(_) => Err(ApiError::new(
            412,
            "PreconditionFailed",
            "At least one of the pre-conditions you specified did not hold",
        )
        .with_detail("Condition", "If-Match")),
    }
}

/// Resolves a `Range` against `size`: `Ok(None)` whole object, `Ok(Some(span))`, or 416.
pub fn resolve_range(range: Option<ByteRange>, size: u64) -> Result<Option<(u64, u64)>, ApiError> {
    match range {
        None => Ok(None),
        Some(r) => match r.resolve(size) {
            Some(span) => Ok(Some(span)),
            None => Err(ApiError::new(
                416,
                "InvalidRange",
                "The requested range is not satisfiable",
            )
            .with_header("Content-Range", format!("bytes */{size}"))
            .with_detail("RangeRequested", r.to_header())
            .with_detail("ActualObjectSize", size.to_string())),
        },
    }
}
