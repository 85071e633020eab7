//! Request dispatch: authenticate, route, run the S3 operation on the backend, answer.

use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::http::BodyFraming;
use s3_lite::http::server::RequestHead;
use s3_lite::s3::ByteRange;
use s3_lite::sigv4::PayloadHash;
use s3_lite::uri;

use crate::auth::Authenticated;
use crate::backend::{
    CompletePart, GetRequest, ListPage, ListQuery, ObjectInfo, ObjectSink, PutMeta,
};
use crate::body::{self, BodySource, ReceiveOptions};
use crate::error::ApiError;
use crate::ops::conditions::Conditions;
use crate::rdma::{self, GetDecline, RdmaGrant, RdmaOp};
use crate::route::{Query, Target, route};
use crate::server::Shared;
use crate::time::http_date;
use crate::xml::{self, element};

/// Where a handler writes its response (the connection implements it).
pub trait Respond {
    /// Sends the status line and headers; `framing` adds `Content-Length` or chunking.
    fn head(
        &mut self,
        status: u16,
        headers: Vec<(String, String)>,
        framing: BodyFraming,
    ) -> std::io::Result<()>;
    /// Sends body bytes.
    fn body(&mut self, data: &[u8]) -> std::io::Result<()>;
    /// Whether the head has been sent (an error after that can only close the connection).
    fn started(&self) -> bool;
}

pub(crate) fn full(
    out: &mut dyn Respond,
    status: u16,
    mut headers: Vec<(String, String)>,
    body: &[u8],
    content_type: &str,
) -> Result<(), ApiError> {
    if !body.is_empty() {
        headers.push(("Content-Type".into(), content_type.into()));
    }
    out.head(status, headers, BodyFraming::Length(body.len() as u64))?;
    out.body(body)?;
    Ok(())
}

pub(crate) fn xml_ok(
    out: &mut dyn Respond,
    headers: Vec<(String, String)>,
    doc: String,
) -> Result<(), ApiError> {
    let mut body = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    body.push_str(&doc);
    full(out, 200, headers, body.as_bytes(), "application/xml")
}

pub(crate) const S3_NS: &str = "http://s3.amazonaws.com/doc/2006-03-01/";

/// Subresources this gateway does not implement: answered 501 rather than misread as a plain
/// object or bucket operation.
const UNSUPPORTED_SUBRESOURCES: &[&str] = &[
    "acl",
    "tagging",
    "versioning",
    "policy",
    "lifecycle",
    "cors",
    "website",
    "logging",
    "notification",
    "replication",
    "encryption",
    "object-lock",
    "retention",
    "legal-hold",
    "restore",
    "select",
    "torrent",
    "accelerate",
    "analytics",
    "inventory",
    "metrics",
    "ownershipControls",
    "publicAccessBlock",
    "requestPayment",
    "intelligent-tiering",
];

/// Handles one request whose head has been decoded. Errors returned before the response
/// started are turned into S3 error documents by the caller.
pub fn handle(
    shared: &Shared,
    head: &RequestHead,
    body: &mut dyn BodySource,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    if head.path == "*" {
        // `OPTIONS *` (RFC 9110 §9.3.7): a question about the server, not a resource, so it
        // needs no signature and names nothing. The request parser admits `*` for OPTIONS
        // only.
        return asterisk_options(head, out);
    }
    if head.method == "OPTIONS" && shared.backend.upstream().is_none() {
        return Err(cors_preflight(head));
    }
    let auth = shared.auth.authenticate(head)?;
    if head.path == s3_lite::rdma::pairing::CONNECT_PATH {
        return crate::connect::handle(shared, head, &auth, out);
    }
    if head.path == s3_lite::rdma::pairing::CAPABILITIES_PATH {
        return crate::capabilities::handle(shared, head, out);
    }
    if head.path.starts_with(s3_lite::rdma::v2::ROUTE_PREFIX) {
        // The hipobj-rc-v2 control routes (docs/protocol.md, hipobj-rc-v2), served by the fabric
        // when it can; otherwise answered as a v2 server with RC disabled does (501 + the
        // unsupported marker: docs/protocol.md, hipobj-rc-v2, status codes), so v2 clients fall back to HTTP.
        if let Some(v2) = shared.rdma.rc_v2() {
            return v2.handle(shared.backend.as_ref(), head, &auth.access_key, out);
        }
        let mut e = ApiError::not_implemented(
            "this gateway's fabric does not serve hipobj-rc-v2; use plain HTTP",
        );
        e.headers.push((
            s3_lite::rdma::RDMA_PROTOCOL_STATUS.to_owned(),
            s3_lite::rdma::PROTOCOL_STATUS_UNSUPPORTED.to_owned(),
        ));
        return Err(e);
    }
    let target = route(
        &head.path,
        head.header("host"),
        shared.config.virtual_host_suffix.as_deref(),
    )?;
    let token = match head.header(s3_lite::rdma::RDMA_TOKEN) {
        Some(v) => Some(rdma::classify(v.trim())?),
        None => None,
    };
    // Upstream mode: what the gateway does not serve itself (an RDMA transfer) goes to the
    // upstream unchanged, and its answer comes back unchanged.
    if let Some(up) = shared.backend.upstream()
        && (token.is_none() || target.key.is_none())
    {
        // ListObjectVersions on an upstream without versioning: answered here from its
        // listing, as S3 answers for an unversioned bucket (`ops/versions.rs`).
        if let (Some(bucket), None, "GET") = (&target.bucket, &target.key, head.method.as_str())
            && let Ok(query) = Query::parse(&head.query)
            && query.has("versions")
            && !up.lists_versions(bucket)
        {
            return crate::ops::versions::serve(shared.backend.as_ref(), bucket, &query, out);
        }
        return crate::forward::forward(shared, up, head, &auth, &target, body, out);
    }
    let query = Query::parse(&head.query)?;
    if let Some(sub) = UNSUPPORTED_SUBRESOURCES.iter().find(|s| query.has(s)) {
        return Err(ApiError::not_implemented(format!(
            "the ?{sub} subresource is not implemented by this gateway"
        )));
    }
    let ctx = Ctx {
        shared,
        head,
        auth: &auth,
        token: token.as_ref(),
    };
    let method = head.method.as_str();
    match (&target, method) {
        (Target { bucket: None, .. }, "GET") => ctx.list_buckets(&query, out),
        (Target { bucket: None, .. }, _) => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "The specified method is not allowed against this resource.",
        )),
        (
            Target {
                bucket: Some(b),
                key: None,
            },
            m,
        ) => ctx.bucket_op(m, b, &query, body, out),
        (
            Target {
                bucket: Some(b),
                key: Some(k),
            },
            m,
        ) => ctx.object_op(m, b, k, &query, body, out),
    }
}

/// The methods this gateway serves, as `OPTIONS *` names them.
pub(crate) const ALLOWED_METHODS: &str = "GET, HEAD, PUT, POST, DELETE, OPTIONS";

/// Answers `OPTIONS *`: 200 with `Allow` and an empty body. Any other method with the
/// asterisk form never gets here (the parser refuses it), but is answered 400 if it does.
fn asterisk_options(head: &RequestHead, out: &mut dyn Respond) -> Result<(), ApiError> {
    if head.method != "OPTIONS" {
        return Err(ApiError::new(
            400,
            "InvalidURI",
            "The asterisk request target is only valid with OPTIONS.",
        ));
    }
    out.head(
        200,
        vec![("Allow".into(), ALLOWED_METHODS.into())],
        BodyFraming::Length(0),
    )?;
    Ok(())
}

/// An `OPTIONS` on a bucket or object is a CORS preflight, which S3 answers without a
/// signature. This gateway keeps no CORS configuration, so it refuses every preflight as S3
/// does for a bucket without one: 400 `BadRequest` without `Origin`, else 403
/// `AccessForbidden`. (Upstream mode forwards the preflight: the upstream may have one.)
fn cors_preflight(head: &RequestHead) -> ApiError {
    if head.header("origin").is_none() {
        ApiError::new(
            400,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        )
    } else {
        ApiError::new(
            403,
            "AccessForbidden",
            "CORSResponse: CORS is not enabled for this bucket.",
        )
    }
}

struct Ctx<'a> {
    shared: &'a Shared,
    head: &'a RequestHead,
    auth: &'a Authenticated,
    token: Option<&'a s3_lite::rdma::TokenKind>,
}

/// Reads a small body (XML) into memory, bounded.
pub(crate) fn read_small(body: &mut dyn BodySource, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut v = Vec::new();
    while let Some(chunk) = body
        .next_chunk()
        .map_err(|_| ApiError::new(400, "IncompleteBody", "request body ended early"))?
    {
        if v.len() + chunk.len() > limit {
            return Err(ApiError::new(
                400,
                "MaxMessageLengthExceeded",
                "Your request was too big.",
            ));
        }
        v.extend_from_slice(chunk);
    }
    Ok(v)
}

/// The `(uploadId, partNumber)` of an UploadPart (or UploadPartCopy), validated.
fn part_of(query: &Query) -> Result<Option<(&str, u32)>, ApiError> {
    if !(query.has("uploadId") || query.has("partNumber")) {
        return Ok(None);
    }
    let id = query
        .get("uploadId")
        .ok_or_else(|| ApiError::invalid_argument("uploadId is required with partNumber"))?;
    let n: u32 = query
        .get("partNumber")
        .and_then(|p| p.parse().ok())
        .filter(|n| (1..=s3_lite::s3::MAX_PARTS).contains(n))
        .ok_or_else(|| {
            ApiError::invalid_argument(
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })?;
    Ok(Some((id, n)))
}

fn parse_range(value: &str) -> Option<ByteRange> {
    // Malformed or multi-range headers are ignored (RFC 9110 §14.2): the whole object is served.
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    ByteRange::parse_cli(spec.trim()).ok()
}

fn info_headers(info: &ObjectInfo, checksum_mode: bool, whole: bool) -> Vec<(String, String)> {
    let mut h = vec![
        ("ETag".to_owned(), info.etag.clone()),
        ("Last-Modified".to_owned(), http_date(info.last_modified)),
        ("Accept-Ranges".to_owned(), "bytes".to_owned()),
        (
            "Content-Type".to_owned(),
            info.content_type
                .clone()
                .unwrap_or_else(|| "binary/octet-stream".into()),
        ),
    ];
    if let Some(n) = info.parts {
        h.push(("x-amz-mp-parts-count".into(), n.to_string()));
    }
    if checksum_mode && whole {
        if let Some(c) = &info.crc64nvme {
            h.push(("x-amz-checksum-crc64nvme".into(), c.clone()));
        }
        if let Some(c) = &info.crc32c {
            h.push(("x-amz-checksum-crc32c".into(), c.clone()));
        }
        if let Some(c) = &info.crc32 {
            h.push(("x-amz-checksum-crc32".into(), c.clone()));
        }
        if let Some(c) = &info.sha1 {
            h.push(("x-amz-checksum-sha1".into(), c.clone()));
        }
        if let Some(c) = &info.sha256 {
            h.push(("x-amz-checksum-sha256".into(), c.clone()));
        }
        if let Some(t) = &info.checksum_type {
            h.push(("x-amz-checksum-type".into(), t.clone()));
        }
    }
    h.extend(info.headers.iter().cloned());
    h
}

/// GetObject's `response-*` query parameters and the response header each one sets.
const RESPONSE_OVERRIDES: &[(&str, &str)] = &[
    ("response-content-type", "Content-Type"),
    ("response-content-language", "Content-Language"),
    ("response-expires", "Expires"),
    ("response-cache-control", "Cache-Control"),
    ("response-content-disposition", "Content-Disposition"),
    ("response-content-encoding", "Content-Encoding"),
];

/// The headers a GET/HEAD's `response-*` parameters set, in place of the stored ones.
fn response_overrides(query: &Query) -> Vec<(String, String)> {
    RESPONSE_OVERRIDES
        .iter()
        .filter_map(|(param, header)| {
            query
                .get(param)
                .map(|v| ((*header).to_owned(), v.to_owned()))
        })
        .collect()
}

/// Replaces the headers named in `overrides` (case-insensitively) with their values.
fn apply_overrides(h: &mut Vec<(String, String)>, overrides: &[(String, String)]) {
    for (name, value) in overrides {
        h.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        h.push((name.clone(), value.clone()));
    }
}

/// Ranged GET bodies up to this size are answered with
/// [`s3_lite::checksum::HEADER_RANGE_CRC64NVME`]: the body is collected while its CRC64NVME is
/// computed (one pass over the bytes as the backend reads them), then the head with the
/// checksum and the body are sent. Larger ranges stream without it (their length is still
/// bound by `Content-Range`). 16 MiB covers the ranges `hipobj get` and `bench` ask for. The
/// held bytes are reserved from `max_buffered_bytes` while at most half of it is in use;
/// beyond that a range streams without the checksum rather than starve connections.
pub(crate) const RANGE_CHECKSUM_MAX: u64 = 16 << 20;

/// Whether `span` (inclusive) covers every byte of an object of `size` bytes.
fn covers_whole(span: Option<(u64, u64)>, size: u64) -> bool {
    match span {
        None => true,
        Some((a, b)) => a == 0 && b.checked_add(1) == Some(size),
    }
}

/// A ranged answer held back until its body (and so its checksum) is complete.
struct Held<'s> {
    _budget: crate::server::Reservation<'s>,
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    crc: Crc64Nvme,
}

/// The HTTP response as the sink of a GET/HEAD.
struct HttpSink<'o, 's> {
    out: &'o mut dyn Respond,
    shared: &'s Shared,
    head_only: bool,
    checksum_mode: bool,
    extra: Vec<(String, String)>,
    /// The request's conditional headers, checked once the object is known.
    conditions: Conditions,
    /// A failed condition (304 or 412): the GET stops before any byte is written.
    refused: Option<ApiError>,
    /// `?partNumber=` of a multipart object: the whole object's checksums are not this
    /// body's (the part's own are in `extra`).
    part_view: bool,
    /// Headers the request's `response-*` parameters set.
    overrides: Vec<(String, String)>,
    held: Option<Held<'s>>,
}

impl HttpSink<'_, '_> {
    /// Sends a held ranged answer (head with the body's CRC64NVME, then the body).
    fn finish(&mut self) -> Result<(), ApiError> {
        let Some(mut held) = self.held.take() else {
            return Ok(());
        };
        let expected = held
            .headers
            .iter()
            .find(|(n, _)| n == "Content-Range")
            .and_then(|(_, v)| s3_lite::s3::ContentRange::parse(v).ok());
        let announced = match expected {
            Some(s3_lite::s3::ContentRange::Bytes { first, last, .. }) => last - first + 1,
            _ => return Err(ApiError::internal("held range lost its Content-Range")),
        };
        if held.body.len() as u64 != announced {
            return Err(ApiError::internal(format!(
                "the backend produced {} of {announced} range bytes",
                held.body.len()
            )));
        }
        held.headers.push((
            s3_lite::checksum::HEADER_RANGE_CRC64NVME.into(),
            encode_crc64nvme(held.crc.finish()),
        ));
        self.out
            .head(held.status, held.headers, BodyFraming::Length(announced))?;
        self.out.body(&held.body)?;
        Ok(())
    }
}

impl ObjectSink for HttpSink<'_, '_> {
    fn begin(&mut self, info: &ObjectInfo, span: Option<(u64, u64)>) -> std::io::Result<()> {
        if let Err(e) = self.conditions.check_read(info) {
            self.refused = Some(e);
            return Err(std::io::Error::other("condition not met"));
        }
        let whole = covers_whole(span, info.size) && !self.part_view;
        let mut h = info_headers(info, self.checksum_mode, whole);
        apply_overrides(&mut h, &self.overrides);
        h.append(&mut self.extra);
        let (status, len) = match span {
            Some((a, b)) => {
                h.push((
                    "Content-Range".into(),
                    format!("bytes {a}-{b}/{}", info.size),
                ));
                (206, b - a + 1)
            }
            None => (200, info.size),
        };
        if self.head_only {
            h.push(("Content-Length".into(), len.to_string()));
            self.out.head(status, h, BodyFraming::None)
        } else if let Some(budget) = (status == 206 && len <= RANGE_CHECKSUM_MAX)
            .then(|| {
                self.shared
                    .reserve_optional(usize::try_from(len).unwrap_or(usize::MAX))
            })
            .flatten()
        {
            self.held = Some(Held {
                _budget: budget,
                status,
                headers: h,
                body: Vec::with_capacity(usize::try_from(len).unwrap_or(0)),
                crc: Crc64Nvme::new(),
            });
            Ok(())
        } else {
            self.out.head(status, h, BodyFraming::Length(len))
        }
    }

    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self.held.as_mut() {
            Some(held) => {
                held.crc.update(bytes);
                held.body.extend_from_slice(bytes);
                Ok(())
            }
            None => self.out.body(bytes),
        }
    }
}

impl Ctx<'_> {
    fn backend(&self) -> &dyn crate::backend::Backend {
        self.shared.backend.as_ref()
    }

    /// ListBuckets, with S3's `max-buckets` / `continuation-token` paging and `prefix`.
    fn list_buckets(&self, query: &Query, out: &mut dyn Respond) -> Result<(), ApiError> {
        let max = match query.get("max-buckets") {
            None => None,
            Some(v) => Some(
                v.parse::<usize>()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| {
                        ApiError::invalid_argument("max-buckets must be between 1 and 10000")
                    })?,
            ),
        };
        let prefix = query.get("prefix").unwrap_or_default();
        // The token is the last name of the previous page (names are listed in order).
        let after = query.get("continuation-token").unwrap_or_default();
        let mut names: Vec<String> = self
            .backend()
            .list_buckets()?
            .into_iter()
            .filter(|n| n.starts_with(prefix) && n.as_str() > after)
            .collect();
        let next = match max {
            Some(m) if names.len() > m => {
                names.truncate(m);
                names.last().cloned()
            }
            _ => None,
        };
        let mut doc = format!(
            "<ListAllMyBucketsResult xmlns=\"{S3_NS}\"><Owner><ID>hipobj</ID><DisplayName>hipobj</DisplayName></Owner><Buckets>"
        );
        for n in names {
            doc.push_str("<Bucket>");
            element(&mut doc, "Name", &n);
            let created = self.backend().bucket_created(&n).unwrap_or(0);
            element(&mut doc, "CreationDate", &crate::time::iso8601(created));
            doc.push_str("</Bucket>");
        }
        doc.push_str("</Buckets>");
        if let Some(t) = next {
            element(&mut doc, "ContinuationToken", &t);
        }
        if query.has("prefix") {
            element(&mut doc, "Prefix", prefix);
        }
        doc.push_str("</ListAllMyBucketsResult>");
        xml_ok(out, Vec::new(), doc)
    }

    fn bucket_op(
        &self,
        method: &str,
        bucket: &str,
        query: &Query,
        body: &mut dyn BodySource,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        match method {
            "PUT" => {
                // The CreateBucketConfiguration (location constraint) is read and ignored.
                read_small(body, 64 * 1024)?;
                self.backend().create_bucket(bucket)?;
                full(
                    out,
                    200,
                    vec![("Location".into(), format!("/{bucket}"))],
                    &[],
                    "",
                )
            }
            "HEAD" => {
                self.backend().head_bucket(bucket)?;
                out.head(
                    200,
                    vec![(
                        "x-amz-bucket-region".into(),
                        self.shared.auth.region().to_owned(),
                    )],
                    BodyFraming::Length(0),
                )?;
                Ok(())
            }
            "DELETE" => {
                self.backend().delete_bucket(bucket)?;
                out.head(204, Vec::new(), BodyFraming::None)?;
                Ok(())
            }
            "GET" if query.has("versions") => {
                crate::ops::versions::serve(self.backend(), bucket, query, out)
            }
            "GET" if query.get("list-type") == Some("2") => self.list_v2(bucket, query, out),
            "GET" if query.has("location") => {
                self.backend().head_bucket(bucket)?;
                let mut doc = format!("<LocationConstraint xmlns=\"{S3_NS}\">");
                if self.shared.auth.region() != "us-east-1" {
                    xml::escape(self.shared.auth.region(), &mut doc);
                }
                doc.push_str("</LocationConstraint>");
                xml_ok(out, Vec::new(), doc)
            }
            "GET" if query.has("uploads") => {
                crate::ops::multipart_list::list_uploads(self.backend(), bucket, query, out)
            }
            "GET" => crate::ops::list_v1::serve(self.backend(), bucket, query, out),
            "POST" if query.has("delete") => crate::ops::delete_objects::serve(
                self.backend(),
                bucket,
                &self.head.headers,
                &self.auth.payload,
                self.shared.config.max_object_size,
                body,
                out,
            ),
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
            )),
        }
    }

    fn list_v2(&self, bucket: &str, query: &Query, out: &mut dyn Respond) -> Result<(), ApiError> {
        let ListParams { max_keys, url } = ListParams::parse(query)?;
        let q = ListQuery {
            prefix: query.get("prefix").unwrap_or_default().to_owned(),
            delimiter: query
                .get("delimiter")
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
            start_after: query
                .get("start-after")
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
            continuation_token: query.get("continuation-token").map(str::to_owned),
            max_keys,
        };
        let page = self.backend().list_objects(bucket, &q)?;
        xml_ok(out, Vec::new(), render_list(bucket, &q, &page, url))
    }

    fn object_op(
        &self,
        method: &str,
        bucket: &str,
        key: &str,
        query: &Query,
        body: &mut dyn BodySource,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        // An unversioned bucket's objects have one version, `null` (ops/versions.rs).
        let null_version = match method {
            "GET" | "HEAD" | "DELETE" => crate::ops::versions::object_version(query, key)?,
            _ => false,
        };
        match method {
            "GET" if query.has("uploadId") => crate::ops::multipart_list::list_parts(
                self.backend(),
                bucket,
                key,
                query.get("uploadId").unwrap_or_default(),
                query,
                out,
            ),
            "GET" | "HEAD" => self.get(bucket, key, query, method == "HEAD", out),
            "PUT" if self.head.header("x-amz-copy-source").is_some() => {
                let copy = crate::ops::copy::CopyRequest::from_headers(
                    &self.head.headers,
                    self.shared.config.max_object_size,
                )?;
                match part_of(query)? {
                    Some((id, n)) => crate::ops::copy::upload_part_copy(
                        self.backend(),
                        bucket,
                        key,
                        id,
                        n,
                        &copy,
                        out,
                    ),
                    None => crate::ops::copy::copy_object(self.backend(), bucket, key, &copy, out),
                }
            }
            "PUT" if query.has("uploadId") || query.has("partNumber") => {
                self.put(bucket, key, part_of(query)?, body, out)
            }
            "PUT" => self.put(bucket, key, None, body, out),
            "POST" if query.has("uploads") => {
                let meta = PutMeta {
                    content_type: self.head.header("content-type").map(str::to_owned),
                    checksum_algorithm: self
                        .head
                        .header("x-amz-checksum-algorithm")
                        .map(|s| s.trim().to_ascii_uppercase()),
                    checksum_type: self
                        .head
                        .header("x-amz-checksum-type")
                        .map(|s| s.trim().to_ascii_uppercase()),
                    headers: crate::ops::meta::stored_headers(&self.head.headers)?,
                    ..Default::default()
                };
                let id = self.backend().create_multipart(bucket, key, &meta)?;
                let mut doc = format!("<InitiateMultipartUploadResult xmlns=\"{S3_NS}\">");
                element(&mut doc, "Bucket", bucket);
                element(&mut doc, "Key", key);
                element(&mut doc, "UploadId", &id);
                doc.push_str("</InitiateMultipartUploadResult>");
                let mut h = Vec::new();
                if let Some(a) = meta.checksum_algorithm {
                    h.push(("x-amz-checksum-algorithm".into(), a));
                }
                xml_ok(out, h, doc)
            }
            "POST" if query.has("uploadId") => self.complete(
                bucket,
                key,
                query.get("uploadId").unwrap_or_default(),
                body,
                out,
            ),
            "DELETE" if query.has("uploadId") => {
                self.backend().abort_multipart(
                    bucket,
                    key,
                    query.get("uploadId").unwrap_or_default(),
                )?;
                out.head(204, Vec::new(), BodyFraming::None)?;
                Ok(())
            }
            "DELETE" => {
                self.backend().delete_object(bucket, key)?;
                let mut h = Vec::new();
                if null_version {
                    h.push((
                        "x-amz-version-id".into(),
                        crate::ops::versions::NULL_VERSION.into(),
                    ));
                }
                out.head(204, h, BodyFraming::None)?;
                Ok(())
            }
            _ => Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
            )),
        }
    }

    fn get(
        &self,
        bucket: &str,
        key: &str,
        query: &Query,
        head_only: bool,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        if query.has("attributes") {
            if head_only {
                return Err(ApiError::new(
                    405,
                    "MethodNotAllowed",
                    "The specified method is not allowed against this resource.",
                ));
            }
            let header = |n: &str| self.head.header(n).map(str::to_owned);
            return crate::ops::parts::attributes(self.backend(), bucket, key, &header, out);
        }
        let mut req = GetRequest {
            range: self.head.header("range").and_then(parse_range),
            if_match: self.head.header("if-match").map(str::to_owned),
            head_only,
        };
        let checksum_mode = self
            .head
            .header("x-amz-checksum-mode")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("ENABLED"));
        let mut extra = Vec::new();
        let mut part_view = false;
        if let Some(n) = crate::ops::parts::part_number(query)? {
            let info = crate::ops::parts::stat(self.backend(), bucket, key)?;
            req.range = crate::ops::parts::part_range(&info, n)?;
            if info.parts.is_some() {
                part_view = true;
                if checksum_mode {
                    extra = crate::ops::parts::part_checksum_headers(&info, n);
                }
            }
            // The part's span is only valid for the object just looked at.
            req.if_match = Some(info.etag);
        }
        if let (Some(token), false) = (self.token, head_only) {
            let grant = RdmaGrant {
                op: RdmaOp::Get,
                token,
                principal: &self.auth.access_key,
                declared_len: None,
                session: self.head.header(s3_lite::rdma::RDMA_SESSION),
                checked_end_to_end: self
                    .head
                    .header(s3_lite::rdma::pairing::RDMA_FRAME_CHECK)
                    .map(str::trim)
                    == Some(s3_lite::rdma::pairing::FRAME_CHECK_LANDING),
                early_answer: self.asks_early_answer(),
            };
            match self.shared.rdma.open(&grant)? {
                Some(mut path) => {
                    let overrides = response_overrides(query);
                    return self.rdma_get(bucket, key, &req, &overrides, path.as_mut(), out);
                }
                None if self.shared.config.get_decline == GetDecline::Error => {
                    return Err(rdma::decline_error(token));
                }
                None => extra.extend(rdma::decline_headers(token)),
            }
        }
        let mut sink = HttpSink {
            out,
            shared: self.shared,
            head_only,
            checksum_mode,
            extra,
            conditions: Conditions::from_headers(|n| self.head.header(n), ""),
            refused: None,
            part_view,
            overrides: response_overrides(query),
            held: None,
        };
        match self.backend().get_object(bucket, key, &req, &mut sink) {
            Err(e) => match sink.refused.take() {
                Some(r) if r.status == 304 => {
                    sink.out.head(304, r.headers, BodyFraming::None)?;
                    Ok(())
                }
                Some(r) => Err(r),
                None => Err(e),
            },
            Ok(()) => sink.finish(),
        }
    }

    /// `x-amz-rdma-early-answer: 1`: the client takes a GET's answer before its WRITEs
    /// complete (served so by a data path that [`rdma::DataPath::answers_early`]).
    fn asks_early_answer(&self) -> bool {
        self.head
            .header(s3_lite::rdma::pairing::RDMA_EARLY_ANSWER)
            .map(str::trim)
            == Some("1")
    }

    fn rdma_get(
        &self,
        bucket: &str,
        key: &str,
        req: &GetRequest,
        overrides: &[(String, String)],
        path: &mut dyn rdma::DataPath,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        struct Span(Option<(u64, u64)>, ObjectInfo);
        struct Tee<'p> {
            path: &'p mut dyn rdma::DataPath,
            seen: Option<Span>,
            /// CRC64NVME of exactly the bytes handed to the data path (computed in the pass
            /// that moves them), returned as `x-amz-rdma-checksum-crc64nvme`.
            crc: Crc64Nvme,
        }
        impl ObjectSink for Tee<'_> {
            fn begin(
                &mut self,
                info: &ObjectInfo,
                span: Option<(u64, u64)>,
            ) -> std::io::Result<()> {
                self.seen = Some(Span(span, info.clone()));
                self.path.begin(info, span)
            }
            fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
                self.crc.update(bytes);
                self.path.data(bytes)
            }
            fn data_from_file(
                &mut self,
                file: &std::fs::File,
                at: u64,
                len: u64,
                seen: &mut dyn FnMut(&[u8]),
            ) -> Option<std::io::Result<()>> {
                let crc = &mut self.crc;
                self.path.data_from_file(file, at, len, &mut |bytes| {
                    crc.update(bytes);
                    seen(bytes);
                })
            }
        }
        let mut tee = Tee {
            path,
            seen: None,
            crc: Crc64Nvme::new(),
        };
        if let Err(e) = self.backend().get_object(bucket, key, req, &mut tee) {
            return Err(tee.path.take_error().unwrap_or(e));
        }
        // Early answer (soft, asked for): the answer goes out once every WRITE is posted; the
        // client completes the op when its landing digest covers the bytes and equals the
        // checksum named here.
        let early = tee.path.answers_early() && self.asks_early_answer();
        let bytes = if early {
            tee.path.post_all()?
        } else {
            tee.path.finish()?
        };
        let Some(Span(span, info)) = tee.seen else {
            return Err(ApiError::internal("no object head"));
        };
        let mut h = info_headers(&info, false, span.is_none());
        apply_overrides(&mut h, overrides);
        let (status, expected) = match span {
            Some((a, b)) => {
                h.push((
                    "Content-Range".into(),
                    format!("bytes {a}-{b}/{}", info.size),
                ));
                (206, b - a + 1)
            }
            None => (200, info.size),
        };
        if bytes != expected {
            return Err(ApiError::new(
                500,
                "RDMATransferFailed",
                format!("moved {bytes} of {expected} bytes"),
            ));
        }
        h.push((s3_lite::rdma::RDMA_REPLY.into(), status.to_string()));
        h.push((
            s3_lite::rdma::RDMA_BYTES_TRANSFERRED.into(),
            bytes.to_string(),
        ));
        h.push((s3_lite::rdma::RDMA_BYTES.into(), bytes.to_string()));
        h.push((
            s3_lite::rdma::RDMA_CHECKSUM_CRC64NVME.into(),
            encode_crc64nvme(tee.crc.finish()),
        ));
        if early {
            h.push((s3_lite::rdma::pairing::RDMA_EARLY_ANSWER.into(), "1".into()));
        }
        out.head(status, h, BodyFraming::Length(0))?;
        if early {
            tee.path.leave_in_flight();
        }
        Ok(())
    }

    fn put(
        &self,
        bucket: &str,
        key: &str,
        part: Option<(&str, u32)>,
        body: &mut dyn BodySource,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        let cfg = &self.shared.config;
        let signed_chunks =
            crate::ops::signed_chunks::signing_for(&self.shared.auth, self.head, self.auth)?;
        if signed_chunks.is_some() && self.token.is_some() {
            return Err(ApiError::not_implemented(
                "a signed aws-chunked body cannot carry an RDMA transfer",
            ));
        }
        let aws_chunked = matches!(
            self.auth.payload,
            PayloadHash::StreamingUnsignedTrailer
                | PayloadHash::StreamingSigned
                | PayloadHash::StreamingSignedTrailer
        );
        let decoded_len =
            match self.head.header("x-amz-decoded-content-length") {
                Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                    ApiError::invalid_argument("invalid x-amz-decoded-content-length")
                })?),
                None if aws_chunked => {
                    return Err(ApiError::new(
                        411,
                        "MissingContentLength",
                        "x-amz-decoded-content-length is required with aws-chunked",
                    ));
                }
                None => None,
            };
        let declared = decoded_len.or(self.head.content_length());
        if declared.is_some_and(|n| n > cfg.max_object_size) {
            return Err(ApiError::new(
                400,
                "EntityTooLarge",
                "Your proposed upload exceeds the maximum allowed size",
            ));
        }
        let op = if part.is_some() {
            RdmaOp::UploadPart
        } else {
            RdmaOp::Put
        };
        let mut rdma_path = None;
        if let Some(token) = self.token {
            let grant = RdmaGrant {
                op,
                token,
                principal: &self.auth.access_key,
                declared_len: declared,
                session: self.head.header(s3_lite::rdma::RDMA_SESSION),
                checked_end_to_end: false,
                early_answer: false,
            };
            match self.shared.rdma.open(&grant)? {
                Some(p) => rdma_path = Some(p),
                None => return Err(rdma::decline_error(token)),
            }
        }
        let opts = ReceiveOptions {
            aws_chunked: aws_chunked && rdma_path.is_none(),
            decoded_len,
            max_len: cfg.max_object_size,
        };
        let spool_dir = self.backend().spool_dir().to_owned();
        let (spooled, rdma_bytes) = match rdma_path.as_mut() {
            Some(p) => {
                let s = match body::receive(p.as_mut(), &spool_dir, opts) {
                    Ok(s) => s,
                    Err(e) => return Err(p.take_error().unwrap_or(e)),
                };
                let n = p.finish()?;
                (s, Some(n))
            }
            None => match signed_chunks {
                Some(signing) => (
                    crate::ops::signed_chunks::receive(
                        body,
                        signing,
                        self.head,
                        &spool_dir,
                        cfg.max_object_size,
                    )?,
                    None,
                ),
                None => (body::receive(body, &spool_dir, opts)?, None),
            },
        };
        let payload = match &self.auth.payload {
            // The chunk signatures covered the bytes.
            _ if rdma_bytes.is_some() => PayloadHash::Unsigned,
            PayloadHash::StreamingSigned | PayloadHash::StreamingSignedTrailer => {
                PayloadHash::Unsigned
            }
            p => p.clone(),
        };
        let mut headers = body::verify(&spooled, &self.head.headers, &payload)?;
        headers.extend(crate::ops::checksums::verify_sha1(
            &spooled,
            &self.head.headers,
        )?);
        if !headers.iter().any(|(n, _)| n == "x-amz-checksum-crc64nvme") {
            headers.push((
                "x-amz-checksum-crc64nvme".into(),
                spooled.crc64nvme_base64(),
            ));
        }
        let info = match part {
            Some((id, n)) => self.backend().upload_part(bucket, key, id, n, spooled)?,
            None => {
                let meta = PutMeta {
                    content_type: self.head.header("content-type").map(str::to_owned),
                    headers: crate::ops::meta::stored_headers(&self.head.headers)?,
                    checksums: headers.clone(),
                    conditions: Conditions::from_headers(|n| self.head.header(n), ""),
                    ..Default::default()
                };
                self.backend().put_object(bucket, key, spooled, &meta)?
            }
        };
        headers.push(("ETag".into(), info.etag));
        if let Some(n) = rdma_bytes {
            headers.push((s3_lite::rdma::RDMA_REPLY.into(), "200".into()));
            headers.push((s3_lite::rdma::RDMA_BYTES_TRANSFERRED.into(), n.to_string()));
            headers.push((s3_lite::rdma::RDMA_BYTES.into(), n.to_string()));
        }
        full(out, 200, headers, &[], "")
    }

    fn complete(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        body: &mut dyn BodySource,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        let _budget = self.shared.reserve(xml::MAX_XML_BODY)?;
        let doc = read_small(body, xml::MAX_XML_BODY)?;
        if let PayloadHash::Hex(h) = &self.auth.payload {
            let actual = PayloadHash::of_body(&doc);
            if actual.as_str() != h.to_ascii_lowercase() {
                return Err(ApiError::new(
                    400,
                    "XAmzContentSHA256Mismatch",
                    "The provided 'x-amz-content-sha256' header does not match what was computed.",
                ));
            }
        }
        let parts: Vec<CompletePart> = xml::parse_complete(&doc)?
            .into_iter()
            .map(|p| CompletePart {
                part_number: p.part_number,
                etag: p.etag,
                crc64nvme: p.checksum_crc64nvme,
                checksums: [
                    ("CRC32", p.checksum_crc32),
                    ("CRC32C", p.checksum_crc32c),
                    ("SHA1", p.checksum_sha1),
                    ("SHA256", p.checksum_sha256),
                ]
                .into_iter()
                .filter_map(|(n, v)| Some((n.to_owned(), v?)))
                .collect(),
            })
            .collect();
        let whole = crate::backend::complete::whole_checksums(&self.head.headers);
        let conditions = Conditions::from_headers(|n| self.head.header(n), "");
        // Only the write conditions exist on CompleteMultipartUpload (as on PutObject).
        let conditions = Conditions {
            if_match: conditions.if_match,
            if_none_match: conditions.if_none_match,
            ..Default::default()
        };
        let info = self.backend().complete_multipart_if(
            bucket,
            key,
            upload_id,
            &parts,
            &whole,
            &conditions,
        )?;
        let host = self.head.header("host").unwrap_or("localhost");
        let mut doc = format!("<CompleteMultipartUploadResult xmlns=\"{S3_NS}\">");
        element(
            &mut doc,
            "Location",
            &format!("http://{host}/{bucket}/{}", uri::encode_path(key)),
        );
        element(&mut doc, "Bucket", bucket);
        element(&mut doc, "Key", key);
        element(&mut doc, "ETag", &info.etag);
        for (name, value) in [
            ("ChecksumCRC64NVME", &info.crc64nvme),
            ("ChecksumCRC32C", &info.crc32c),
            ("ChecksumCRC32", &info.crc32),
            ("ChecksumSHA1", &info.sha1),
            ("ChecksumSHA256", &info.sha256),
        ] {
            if let Some(v) = value {
                element(&mut doc, name, v);
            }
        }
        if let Some(t) = &info.checksum_type {
            element(&mut doc, "ChecksumType", t);
        }
        doc.push_str("</CompleteMultipartUploadResult>");
        xml_ok(out, Vec::new(), doc)
    }
}

/// The `max-keys` and `encoding-type` of a listing, validated.
pub(crate) struct ListParams {
    /// 0..=1000.
    pub max_keys: u32,
    /// `encoding-type=url`.
    pub url: bool,
}

impl ListParams {
    pub(crate) fn parse(query: &Query) -> Result<Self, ApiError> {
        let max_keys = match query.get("max-keys") {
            None => 1000,
            Some(v) => v
                .parse::<u32>()
                .map_err(|_| {
                    ApiError::invalid_argument(
                        "Provided max-keys not an integer or within integer range",
                    )
                })?
                .min(1000),
        };
        let url = match query.get("encoding-type") {
            None => false,
            Some("url") => true,
            Some(_) => {
                return Err(ApiError::invalid_argument(
                    "Invalid Encoding Method specified in Request",
                ));
            }
        };
        Ok(Self { max_keys, url })
    }

    /// The backend query of a listing that resumes after a key (`marker` of ListObjects v1,
    /// `key-marker` of ListObjectVersions; empty: from the start): the request's `prefix` and
    /// `delimiter` (an empty one is none), no continuation token.
    pub(crate) fn after_marker(&self, query: &Query, marker: &str) -> ListQuery {
        ListQuery {
            prefix: query.get("prefix").unwrap_or_default().to_owned(),
            delimiter: query
                .get("delimiter")
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
            start_after: Some(marker.to_owned()).filter(|m| !m.is_empty()),
            continuation_token: None,
            max_keys: self.max_keys,
        }
    }

    /// A key or prefix as the listing carries it.
    pub(crate) fn encode(&self, s: &str) -> String {
        if self.url {
            uri::encode_path(s)
        } else {
            s.to_owned()
        }
    }
}

/// A listing page's entries (`Contents`, `CommonPrefixes`) and the closing tag, keys and
/// prefixes written through `enc` (the listing's encoding); ListObjects v1 and v2 share it.
pub(crate) fn render_list_entries(d: &mut String, page: &ListPage, enc: impl Fn(&str) -> String) {
    for e in &page.contents {
        d.push_str("<Contents>");
        element(d, "Key", &enc(&e.key));
        element(d, "LastModified", &e.last_modified);
        element(d, "ETag", &e.etag);
        element(d, "Size", &e.size.to_string());
        element(d, "StorageClass", "STANDARD");
        d.push_str("</Contents>");
    }
    for p in &page.common_prefixes {
        d.push_str("<CommonPrefixes>");
        element(d, "Prefix", &enc(p));
        d.push_str("</CommonPrefixes>");
    }
    d.push_str("</ListBucketResult>");
}

fn render_list(bucket: &str, q: &ListQuery, page: &ListPage, url: bool) -> String {
    let enc = |s: &str| {
        if url {
            uri::encode_path(s)
        } else {
            s.to_owned()
        }
    };
    let mut d = format!("<ListBucketResult xmlns=\"{S3_NS}\">");
    element(&mut d, "Name", bucket);
    element(&mut d, "Prefix", &enc(&q.prefix));
    if let Some(x) = &q.delimiter {
        element(&mut d, "Delimiter", &enc(x));
    }
    element(&mut d, "MaxKeys", &q.max_keys.to_string());
    element(
        &mut d,
        "KeyCount",
        &(page.contents.len() + page.common_prefixes.len()).to_string(),
    );
    element(
        &mut d,
        "IsTruncated",
        if page.is_truncated { "true" } else { "false" },
    );
    if let Some(t) = &q.continuation_token {
        element(&mut d, "ContinuationToken", t);
    }
    if let Some(t) = &page.next_continuation_token {
        element(&mut d, "NextContinuationToken", t);
    }
    if let Some(s) = &q.start_after {
        element(&mut d, "StartAfter", &enc(s));
    }
    if url {
        element(&mut d, "EncodingType", "url");
    }
    render_list_entries(&mut d, page, enc);
    d
}
