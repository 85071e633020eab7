//! The `--upstream` bridge: every operation is re-signed with the gateway's own upstream
//! credentials and forwarded to a real S3 store through s3-lite (request builders, signer, and
//! the blocking driver of `s3_lite::net`), over a small pool of kept-alive clients.
//!
//! Bodies arrive here already verified (checksums, payload hash) and spooled, and are sent
//! upstream with their CRC64NVME, so the upstream store checks them again. GET bodies stream
//! from the upstream socket to the client without being buffered. `https://` upstreams are
//! verified against the built-in roots, or the CA bundle named by `AWS_CA_BUNDLE`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::http::ResponseHead;
use s3_lite::net::blocking::{BodySink, ExchangeError, HttpClient, RequestBody};
use s3_lite::net::stream::Timeouts;
use s3_lite::net::tls::{TlsOptions, client_config};
use s3_lite::s3::{
    self, CompletedPart, ContentRange, Endpoint, GetOptions, ListOptions, ObjectMeta, PutOptions,
    Scheme,
};
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer};

use super::{
    Backend, CompletePart, GetRequest, ListEntry, ListPage, ListQuery, ObjectInfo, ObjectSink,
    PutMeta,
};
use crate::body::Spooled;
use crate::error::ApiError;
use crate::handler::Respond;
use crate::relay::Relay;
use crate::time::now_secs;

/// Largest non-object response body read from upstream (listings, errors, Complete).
const MAX_SMALL_BODY: usize = 8 << 20;
const MAX_IDLE: usize = 16;

/// Why the upstream could not be configured.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The URL does not parse as an S3 endpoint.
    #[error("upstream URL: {0}")]
    Url(#[from] s3::EndpointError),
    /// The TLS configuration for an `https://` upstream could not be built (the CA bundle
    /// named by `AWS_CA_BUNDLE`).
    #[error("upstream TLS: {0}")]
    Tls(#[from] s3_lite::net::tls::TlsError),
    /// The credentials cannot sign.
    #[error("upstream credentials: {0}")]
    Signing(#[from] s3_lite::sigv4::SigningError),
}

/// A bridge to an upstream S3 endpoint.
pub struct Upstream {
    endpoint: Endpoint,
    signer: Signer,
    region: String,
    tls: Option<std::sync::Arc<s3_lite::net::tls::TlsClientConfig>>,
    /// Clients not in use, each holding at most one kept-alive connection.
    idle: Mutex<Vec<HttpClient>>,
    spool: PathBuf,
    timeouts: Timeouts,
    /// Whether the upstream serves ListObjectVersions: 0 not known yet, 1 yes, 2 no (it
    /// answered 501 NotImplemented).
    versions: std::sync::atomic::AtomicU8,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

enum UpBody<'a> {
    None,
    Bytes(&'a [u8]),
    File(&'a mut File, u64),
}

/// What to do with a 2xx response body.
enum Collect<'a> {
    Small(&'a mut Vec<u8>),
    Object {
        sink: &'a mut dyn ObjectSink,
        head_only: bool,
    },
    /// Every response, whatever its status, goes to the client unchanged.
    Relay(Relay<'a>),
}

fn upstream_failure(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(502, "BadGateway", format!("upstream S3 store: {e}"))
}

fn build(e: s3::BuildError) -> ApiError {
    ApiError::from_build(e)
}

impl Upstream {
    /// A bridge to `url` (e.g. `http://127.0.0.1:9000`), signing as `credentials` in `region`;
    /// bodies are spooled under `spool`.
    pub fn new(
        url: &str,
        credentials: Credentials,
        region: &str,
        spool: PathBuf,
    ) -> Result<Self, UpstreamError> {
        let endpoint = Endpoint::parse(url)?;
        let tls = match endpoint.scheme {
            Scheme::Https => {
                let bundle = std::env::var_os("AWS_CA_BUNDLE")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from);
                Some(client_config(
                    &TlsOptions::default().with_aws_ca_bundle(bundle.as_deref()),
                )?)
            }
            Scheme::Http => None,
        };
        let signer = Signer::new(credentials, region, "s3")?;
        Ok(Self {
            endpoint,
            signer,
            region: region.to_owned(),
            tls,
            idle: Mutex::new(Vec::new()),
            spool,
            timeouts: Timeouts {
                connect: Duration::from_secs(5),
                io: Duration::from_secs(60),
                expect_continue: Duration::from_secs(1),
            },
            versions: std::sync::atomic::AtomicU8::new(0),
        })
    }

    /// Whether the upstream serves ListObjectVersions, asked once with
    /// `GET /bucket?versions&max-keys=0`: a store without versioning (s3s-fs) answers 501
    /// NotImplemented, and the gateway then answers the call itself, as S3 does for an
    /// unversioned bucket (every current object, version `null`). Any other answer (success,
    /// NoSuchBucket, …) leaves the call to the upstream; only a 501 is remembered.
    pub fn lists_versions(&self, bucket: &str) -> bool {
        use std::sync::atomic::Ordering;
        match self.versions.load(Ordering::Relaxed) {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let Ok(mut req) = self.bucket_req("GET", bucket) else {
            return true;
        };
        req.query = "versions&max-keys=0".into();
        match self.simple(req, Some(bucket)) {
            Ok(_) => {
                self.versions.store(1, Ordering::Relaxed);
                true
            }
            Err(e) if e.status == 501 => {
                self.versions.store(2, Ordering::Relaxed);
                false
            }
            Err(_) => true,
        }
    }

    fn take_client(&self) -> HttpClient {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.pop().unwrap_or_else(|| {
            HttpClient::new(self.endpoint.clone(), self.tls.clone(), self.timeouts)
        })
    }

    fn put_client(&self, client: HttpClient) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(client);
        }
    }

    /// Signs and sends `req`; a 2xx body goes to `collect`, anything else becomes the
    /// upstream's S3 error. A reused connection that fails before any response byte is
    /// retried once on a fresh one (every body here can be replayed: files are rewound).
    fn call(
        &self,
        mut req: Request,
        bucket: Option<&str>,
        payload: PayloadHash,
        body: UpBody<'_>,
        collect: Collect<'_>,
    ) -> Result<ResponseHead, ApiError> {
        let now = AmzDate::from_unix_secs(now_secs()).map_err(ApiError::internal)?;
        self.signer
            .sign_headers(&mut req, &payload, now)
            .map_err(ApiError::internal)?;
        let body = match body {
            UpBody::None => RequestBody::None,
            UpBody::Bytes(b) => RequestBody::Bytes(b),
            UpBody::File(f, len) => RequestBody::Rewindable(f, len),
        };
        let mut sink = Collector {
            collect,
            head_request: req.method == "HEAD",
            ok: false,
            error_body: Vec::new(),
            failed: None,
        };
        let mut client = self.take_client();
        let result = client.execute(&req, bucket, body, &mut sink);
        self.put_client(client);
        let head = match result {
            Ok(head) => head,
            Err(e) => return Err(sink.failed.take().unwrap_or_else(|| exchange_failure(e))),
        };
        if let Collect::Relay(relay) = &mut sink.collect {
            relay.end()?;
            return Ok(head);
        }
        if !(200..300).contains(&head.status) {
            let e = s3::parse_error(head.status, &head.headers, &sink.error_body);
            let mut api = ApiError::new(e.status, e.code, e.message);
            if let Some(cr) = head.header("content-range") {
                api = api.with_header("Content-Range", cr.to_owned());
            }
            return Err(api);
        }
        Ok(head)
    }

    fn simple(
        &self,
        req: Request,
        bucket: Option<&str>,
    ) -> Result<(ResponseHead, Vec<u8>), ApiError> {
        let mut body = Vec::new();
        let head = self.call(
            req,
            bucket,
            PayloadHash::Hex(EMPTY_SHA256.into()),
            UpBody::None,
            Collect::Small(&mut body),
        )?;
        Ok((head, body))
    }

    /// The upstream endpoint requests are addressed to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Forwards `req` (already addressed to the upstream, not yet signed) with `body`, and
    /// streams the upstream's answer, whatever its status, to `out` unchanged: status,
    /// headers (less hop-by-hop ones) and body bytes.
    pub fn relay(
        &self,
        req: Request,
        bucket: Option<&str>,
        payload: PayloadHash,
        body: Option<&mut Spooled>,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        let up = match body {
            Some(s) => {
                let len = s.len;
                UpBody::File(s.file.as_file_mut(), len)
            }
            None => UpBody::None,
        };
        let head_req = req.method == "HEAD";
        self.call(
            req,
            bucket,
            payload,
            up,
            Collect::Relay(Relay::new(out, head_req)),
        )?;
        Ok(())
    }

    fn bucket_req(&self, method: &str, bucket: &str) -> Result<Request, ApiError> {
        let (host, path) = self.endpoint.bucket_location(bucket).map_err(build)?;
        let mut req = Request::new(method, path);
        req.add_header("Host", host);
        Ok(req)
    }
}

/// A failed exchange as the client sees it: the upstream is a bad gateway.
fn exchange_failure(e: ExchangeError) -> ApiError {
    match e {
        ExchangeError::Encode(e) => ApiError::internal(e),
        other => upstream_failure(other),
    }
}

/// Where an upstream answer goes ([`Collect`]), as the blocking driver's body sink. A failure
/// of the destination is kept in `failed` (the driver only carries an `io::Error`).
struct Collector<'a> {
    collect: Collect<'a>,
    head_request: bool,
    /// The answer is 2xx.
    ok: bool,
    /// The body of an error answer (first 64 KiB), for its S3 error document.
    error_body: Vec<u8>,
    failed: Option<ApiError>,
}

impl Collector<'_> {
    fn fail(&mut self, e: ApiError) -> std::io::Error {
        self.failed = Some(e);
        std::io::Error::other("the upstream answer's destination failed")
    }
}

impl BodySink for Collector<'_> {
    fn begin(&mut self, h: &ResponseHead) -> std::io::Result<()> {
        self.ok = (200..300).contains(&h.status);
        let result = match &mut self.collect {
            Collect::Relay(relay) => relay.head(h),
            Collect::Object { sink, head_only } if self.ok => match object_info(h) {
                Ok((info, span)) => match sink.begin(&info, span.filter(|_| h.status == 206)) {
                    Ok(()) if *head_only && !self.head_request => {
                        Err(ApiError::internal("head-only GET"))
                    }
                    Ok(()) => Ok(()),
                    Err(e) => Err(ApiError::from(e)),
                },
                Err(e) => Err(e),
            },
            _ => Ok(()),
        };
        result.map_err(|e| self.fail(e))
    }

    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        let result = match &mut self.collect {
            Collect::Relay(relay) => relay.data(data),
            Collect::Object { sink, .. } if self.ok => sink.data(data).map_err(ApiError::from),
            Collect::Small(v) if self.ok => {
                if v.len() + data.len() > MAX_SMALL_BODY {
                    Err(upstream_failure("response too large"))
                } else {
                    v.extend_from_slice(data);
                    Ok(())
                }
            }
            _ => {
                if self.error_body.len() < 64 * 1024 {
                    self.error_body.extend_from_slice(data);
                }
                Ok(())
            }
        };
        result.map_err(|e| self.fail(e))
    }
}

fn object_info(h: &ResponseHead) -> Result<(ObjectInfo, Option<(u64, u64)>), ApiError> {
    let meta = ObjectMeta::from_headers(&h.headers).map_err(upstream_failure)?;
    let span = match meta.content_range {
        Some(ContentRange::Bytes { first, last, .. }) => Some((first, last)),
        _ => None,
    };
    let info = ObjectInfo {
        size: meta.object_size().unwrap_or(0),
        etag: meta.etag.clone().unwrap_or_default(),
        last_modified: now_secs(),
        content_type: meta.content_type.clone(),
        crc64nvme: meta.checksum_crc64nvme.clone(),
        crc32c: meta.checksum_crc32c.clone(),
        crc32: None,
        checksum_type: meta.checksum_type.clone(),
        parts: None,
        ..Default::default()
    };
    Ok((info, span))
}

impl Backend for Upstream {
    fn spool_dir(&self) -> &Path {
        &self.spool
    }

    fn upstream(&self) -> Option<&Upstream> {
        Some(self)
    }

    fn create_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        let (req, body) = s3::create_bucket(&self.endpoint, bucket, &self.region).map_err(build)?;
        let payload = PayloadHash::of_body(&body);
        let up = if body.is_empty() {
            UpBody::None
        } else {
            UpBody::Bytes(&body)
        };
        self.call(
            req,
            Some(bucket),
            payload,
            up,
            Collect::Small(&mut Vec::new()),
        )?;
        Ok(())
    }

    fn head_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        self.simple(self.bucket_req("HEAD", bucket)?, Some(bucket))
            .map(|_| ())
    }

    fn delete_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        self.simple(self.bucket_req("DELETE", bucket)?, Some(bucket))
            .map(|_| ())
    }

    fn list_buckets(&self) -> Result<Vec<String>, ApiError> {
        Err(ApiError::not_implemented(
            "ListBuckets is not bridged to the upstream yet",
        ))
    }

    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        mut body: Spooled,
        meta: &PutMeta,
    ) -> Result<ObjectInfo, ApiError> {
        let crc = body.crc64nvme_base64();
        let opts = PutOptions {
            content_type: meta.content_type.clone(),
            checksums: vec![("x-amz-checksum-crc64nvme".into(), crc.clone())],
            ..Default::default()
        };
        let req = s3::put_object(&self.endpoint, bucket, key, body.len, &opts).map_err(build)?;
        let len = body.len;
        let head = self.call(
            req,
            Some(bucket),
            PayloadHash::Unsigned,
            UpBody::File(body.file.as_file_mut(), len),
            Collect::Small(&mut Vec::new()),
        )?;
        let etag = head
            .header("etag")
            .map(str::to_owned)
            .unwrap_or_else(|| body.etag());
        Ok(ObjectInfo {
            size: len,
            etag,
            last_modified: now_secs(),
            crc64nvme: Some(crc),
            ..Default::default()
        })
    }

    fn get_object(
        &self,
        bucket: &str,
        key: &str,
        req: &GetRequest,
        sink: &mut dyn ObjectSink,
    ) -> Result<(), ApiError> {
        let opts = GetOptions {
            range: req.range,
            if_match: req.if_match.clone(),
            checksum_mode: true,
        };
        let r = if req.head_only {
            s3::head_object(&self.endpoint, bucket, key, &opts)
        } else {
            s3::get_object(&self.endpoint, bucket, key, &opts)
        }
        .map_err(build)?;
        let collect = Collect::Object {
            sink,
            head_only: req.head_only,
        };
        self.call(
            r,
            Some(bucket),
            PayloadHash::Hex(EMPTY_SHA256.into()),
            UpBody::None,
            collect,
        )?;
        Ok(())
    }

    fn delete_object(&self, bucket: &str, key: &str) -> Result<(), ApiError> {
        self.simple(
            s3::delete_object(&self.endpoint, bucket, key).map_err(build)?,
            Some(bucket),
        )
        .map(|_| ())
    }

    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, ApiError> {
        if query.max_keys == 0 {
            return Ok(ListPage::default());
        }
        let opts = ListOptions {
            prefix: Some(query.prefix.clone()).filter(|p| !p.is_empty()),
            delimiter: query.delimiter.clone(),
            continuation_token: query.continuation_token.clone(),
            start_after: query.start_after.clone(),
            max_keys: Some(query.max_keys.min(1000)),
            url_encoding: false,
        };
        let (_, body) = self.simple(
            s3::list_objects_v2(&self.endpoint, bucket, &opts).map_err(build)?,
            Some(bucket),
        )?;
        let page = s3::parse_list_objects_v2(&body).map_err(upstream_failure)?;
        Ok(ListPage {
            contents: page
                .contents
                .into_iter()
                .map(|e| ListEntry {
                    key: e.key,
                    size: e.size,
                    etag: e.etag.unwrap_or_default(),
                    last_modified: e.last_modified.unwrap_or_default(),
                })
                .collect(),
            common_prefixes: page.common_prefixes,
            is_truncated: page.is_truncated,
            next_continuation_token: page.next_continuation_token,
        })
    }

    fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        meta: &PutMeta,
    ) -> Result<String, ApiError> {
        let mut checksums = Vec::new();
        if let Some(a) = &meta.checksum_algorithm {
            checksums.push(("x-amz-checksum-algorithm".to_owned(), a.clone()));
        }
        if let Some(t) = &meta.checksum_type {
            checksums.push(("x-amz-checksum-type".to_owned(), t.clone()));
        }
        let opts = PutOptions {
            content_type: meta.content_type.clone(),
            checksums,
            ..Default::default()
        };
        let (_, body) = self.simple(
            s3::create_multipart_upload(&self.endpoint, bucket, key, &opts).map_err(build)?,
            Some(bucket),
        )?;
        s3::parse_initiate_multipart_upload(&body).map_err(upstream_failure)
    }

    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        mut body: Spooled,
    ) -> Result<ObjectInfo, ApiError> {
        let crc = body.crc64nvme_base64();
        let req = s3::upload_part(
            &self.endpoint,
            bucket,
            key,
            upload_id,
            part_number,
            body.len,
            &[("x-amz-checksum-crc64nvme".into(), crc.clone())],
        )
        .map_err(build)?;
        let len = body.len;
        let head = self.call(
            req,
            Some(bucket),
            PayloadHash::Unsigned,
            UpBody::File(body.file.as_file_mut(), len),
            Collect::Small(&mut Vec::new()),
        )?;
        let etag = head
            .header("etag")
            .map(str::to_owned)
            .ok_or_else(|| upstream_failure("UploadPart without ETag"))?;
        Ok(ObjectInfo {
            size: len,
            etag,
            crc64nvme: Some(crc),
            ..Default::default()
        })
    }

    fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
        whole: &[(String, String)],
    ) -> Result<ObjectInfo, ApiError> {
        let parts: Vec<CompletedPart> = parts
            .iter()
            .map(|p| CompletedPart {
                part_number: p.part_number,
                etag: p.etag.clone(),
                checksum_crc64nvme: p.crc64nvme.clone(),
                checksum_crc32c: None,
            })
            .collect();
        let whole: Vec<(String, String)> = whole
            .iter()
            .map(|(alg, v)| (format!("x-amz-checksum-{alg}"), v.clone()))
            .collect();
        let (req, body) =
            s3::complete_multipart_upload(&self.endpoint, bucket, key, upload_id, &parts, &whole)
                .map_err(build)?;
        let mut resp = Vec::new();
        let head = self.call(
            req,
            Some(bucket),
            PayloadHash::of_body(&body),
            UpBody::Bytes(&body),
            Collect::Small(&mut resp),
        )?;
        let done = s3::parse_complete_multipart_upload(head.status, &head.headers, &resp).map_err(
            |e| match e {
                s3::ResponseError::S3(e) => ApiError::new(e.status, e.code, e.message),
                other => upstream_failure(other),
            },
        )?;
        Ok(ObjectInfo {
            etag: done.etag.unwrap_or_default(),
            crc64nvme: done.checksum_crc64nvme,
            crc32c: done.checksum_crc32c,
            parts: Some(parts.len() as u32),
            checksum_type: Some("FULL_OBJECT".into()),
            last_modified: now_secs(),
            ..Default::default()
        })
    }

    fn abort_multipart(&self, bucket: &str, key: &str, upload_id: &str) -> Result<(), ApiError> {
        self.simple(
            s3::abort_multipart_upload(&self.endpoint, bucket, key, upload_id).map_err(build)?,
            Some(bucket),
        )
        .map(|_| ())
    }
}
