//! A blocking S3 client: `s3-lite` requests, signed and sent over [`s3_lite::net`].
//!
//! Uploads carry `x-amz-checksum-crc64nvme` (per part for multipart uploads, plus the combined
//! full-object value on Complete), so a server that stores something other than what we sent
//! answers `BadDigest` instead of keeping corrupt data. Downloads of a whole object ask for the
//! stored checksum (`x-amz-checksum-mode: ENABLED`) and compare it with the bytes received.
//!
//! An upload succeeds only with a proof that the server holds what we sent
//! ([`crate::upload_proof`]): each PUT and UploadPart also carries `Content-MD5`, its answer is
//! judged (echoed checksum, MD5 ETag), and a multipart upload is checked after Complete (its
//! checksum, its MD5-of-MD5s ETag, and a HEAD for the stored size and checksum). A difference
//! is [`ClientError::Integrity`]; an answer that proves nothing is reported as unverified.
//!
//! Every request that is safe to repeat is retried after `503 SlowDown`, 5xx and connection
//! failures, with the engine's backoff and retry budget ([`engine::retry`]): GET, HEAD,
//! ListObjectsV2 (each page), ListBuckets, DeleteObject, CreateBucket, DeleteBucket,
//! CreateMultipartUpload, AbortMultipartUpload, and PUT and UploadPart (whose bytes we still
//! hold). A GET cut after body bytes arrived resumes with a `Range` request for the rest,
//! `If-Match` on the first answer's ETag. CompleteMultipartUpload is repeated only after an
//! S3 error answer (the server did not complete it).
//!
//! What proves a download (docs/protocol.md, "What proves success"): a whole-object GET is
//! sent as `Range: bytes=0-`, so a `206` answer commits to the object's size in its
//! `Content-Range` and exactly that many bytes must arrive, whatever `Content-Length` says;
//! `hipobj serve` names the CRC64NVME of exactly a ranged body
//! (`x-hipobj-range-checksum-crc64nvme`) and S3 servers the stored full-object checksum. A
//! checksum that disagrees is an error; [`GetResult::checksum_verified`] says whether one
//! matched.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engine::RetryPolicy;
use engine::retry::{RetryBudget, RetryStats};

use s3_lite::Request;
use s3_lite::checksum::{
    Checksum, ChecksumAlgorithm, Crc64Nvme, HEADER_CRC64NVME, HEADER_RANGE_CRC64NVME,
};
use s3_lite::credentials::Credentials;
use s3_lite::http::ResponseHead;
use s3_lite::s3::{
    self, ByteRange, CompletedPart, ContentRange, Endpoint, GetOptions, ListOptions, ObjectEntry,
    ObjectMeta, PutOptions, S3Error,
};
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use s3_lite::net::blocking::{BodySink, ExchangeError, HttpClient, RequestBody, WriteSink};
use s3_lite::net::stream::Timeouts;
use s3_lite::net::tls::{TlsOptions, client_config};

use crate::upload_proof::{
    DigestPass, IntegrityMismatch, Proof, SourceDigest, judge_multipart_etag, judge_put,
    judge_stored,
};

/// Error bodies larger than this are cut (the XML parser has its own, larger bound).
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Why an S3 call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with an S3 error.
    #[error("{0}")]
    S3(Box<S3Error>),
    /// Network or protocol failure.
    #[error(transparent)]
    Exchange(#[from] ExchangeError),
    /// A request could not be built (invalid bucket, key, part number, ...).
    #[error("{0}")]
    Build(#[from] s3::BuildError),
    /// Signing failed (invalid credentials format, ...).
    #[error("signing: {0}")]
    Signing(#[from] s3_lite::sigv4::SigningError),
    /// The server's answer could not be understood.
    #[error("unexpected response: {0}")]
    Response(String),
    /// The bytes received do not match the checksum the server returned.
    #[error("checksum mismatch on download: server says {expected}, received bytes give {actual}")]
    ChecksumMismatch {
        /// Server's value (base64).
        expected: String,
        /// Ours (base64).
        actual: String,
    },
    /// The server sent a different range or length than asked for.
    #[error("short or wrong response: {0}")]
    WrongLength(String),
    /// Reading the local source or writing the destination failed.
    #[error("{context}: {source}")]
    Local {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] s3_lite::net::tls::TlsError),
    /// The server's answer shows it holds something other than what we sent.
    #[error(transparent)]
    Integrity(#[from] IntegrityMismatch),
}

impl ClientError {
    fn response(e: impl std::fmt::Display) -> Self {
        ClientError::Response(e.to_string())
    }
}

/// Everything needed to build a client.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// Where requests go.
    pub endpoint: Endpoint,
    /// Who signs them.
    pub credentials: Credentials,
    /// Region of the signature scope.
    pub region: String,
    /// TLS trust settings (for `https://`).
    pub tls: TlsOptions,
    /// Socket timeouts.
    pub timeouts: Timeouts,
}

/// Result of a download.
#[derive(Debug, Clone)]
pub struct GetResult {
    /// Response metadata.
    pub meta: ObjectMeta,
    /// Bytes written to the destination.
    pub bytes: u64,
    /// Whether a server checksum was compared with the received bytes.
    pub checksum_verified: bool,
}

/// Result of an upload.
#[derive(Debug, Clone)]
pub struct PutResult {
    /// The object's ETag.
    pub etag: Option<String>,
    /// CRC64NVME of the bytes we sent (base64): ours, proven only when `verified_by` says so.
    pub sent_crc64nvme: String,
    /// Number of parts (1 for a single PUT).
    pub parts: u32,
    /// Bytes uploaded.
    pub bytes: u64,
    /// What proved the server holds our bytes (e.g. `checksum-echoed`; for a multipart upload
    /// the parts' and the object's proof); `None`: unverified, see `unverified`.
    pub verified_by: Option<String>,
    /// Why the upload is unverified (the server's answers proved nothing).
    pub unverified: Option<String>,
}

/// A blocking S3 client for one endpoint.
pub struct S3Client {
    http: HttpClient,
    signer: Signer,
    retry: RetryPolicy,
    budget: Arc<RetryBudget>,
    /// Bound on one operation including its retries.
    op_deadline: Duration,
}

/// Whether a failure may go away on a retry: `Some(transport)` when it may.
fn transient(e: &ClientError) -> Option<bool> {
    match e {
        ClientError::S3(e) if e.is_retryable() => Some(false),
        ClientError::Exchange(e) if e.is_retryable() => Some(true),
        _ => None,
    }
}

/// Writes into a `Vec` up to a bound and drops the rest (error bodies).
struct BoundedSink(Vec<u8>);

impl BodySink for BoundedSink {
    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        let room = MAX_ERROR_BODY.saturating_sub(self.0.len());
        self.0
            .extend_from_slice(data.get(..room.min(data.len())).unwrap_or_default());
        Ok(())
    }
}

/// Sends body bytes to `inner` only when the status was a success; keeps error bodies aside.
struct StatusSink<'a> {
    inner: &'a mut dyn BodySink,
    error_body: BoundedSink,
    success: Option<bool>,
}

fn empty_payload() -> PayloadHash {
    PayloadHash::Hex(s3_lite::sigv4::EMPTY_SHA256.to_owned())
}

fn now() -> AmzDate {
    #[allow(clippy::disallowed_methods)] // the blocking driver owns the clock
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The clock is after 1970 on every machine this runs on; fall back to the epoch otherwise.
    AmzDate::from_unix_secs(secs)
        .unwrap_or_else(|_| AmzDate::from_unix_secs(0).expect("epoch is a valid date"))
}

impl S3Client {
    /// Builds a client (TLS configuration is prepared once here).
    pub fn new(settings: ClientSettings) -> Result<Self, ClientError> {
        let tls = match settings.endpoint.scheme {
            s3::Scheme::Https => Some(client_config(&settings.tls)?),
            s3::Scheme::Http => None,
        };
        let signer = Signer::new(settings.credentials, settings.region, "s3")?;
        Ok(Self {
            http: HttpClient::new(settings.endpoint, tls, settings.timeouts),
            signer,
            retry: RetryPolicy::default(),
            budget: Arc::new(RetryBudget::default()),
            op_deadline: Duration::from_secs(120),
        })
    }

    /// The same client with another retry policy (`RetryPolicy::none()`: never retry).
    #[must_use]
    pub fn with_retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The same client with another bound on one operation including its retries (default
    /// 120 s): no retry starts whose backoff would end after it.
    #[must_use]
    pub fn with_op_deadline(mut self, deadline: Duration) -> Self {
        self.op_deadline = deadline;
        self
    }

    /// Retries so far (and those the budget refused).
    pub fn retry_stats(&self) -> RetryStats {
        self.budget.stats()
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy, the operation's
    /// deadline or the budget stop the retries. `attempt` returns its error with whether a
    /// retry is safe (a GET that delivered body bytes is not).
    /// Sends `req` with `len` bytes of `source` from `offset` as its body (unsigned payload),
    /// retried like every idempotent request: each attempt seeks back and resends the bytes,
    /// which we still hold.
    fn send_body_retrying<R: Read + Seek>(
        &mut self,
        req: &Request,
        bucket: &str,
        source: &mut R,
        offset: u64,
        len: u64,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<ResponseHead, ClientError> {
        self.retrying(|c| {
            seek(source, offset).map_err(|e| (e, false))?;
            let mut reader = ProgressReader {
                inner: (&mut *source).take(len),
                on_bytes: &mut *on_bytes,
            };
            c.send(
                req.clone(),
                Some(bucket),
                PayloadHash::Unsigned,
                RequestBody::Reader(&mut reader, len),
                &mut Vec::new(),
            )
            .map_err(|e| (e, true))
        })
    }

    fn retrying<T>(
        &mut self,
        mut attempt: impl FnMut(&mut Self) -> Result<T, (ClientError, bool)>,
    ) -> Result<T, ClientError> {
        #[allow(clippy::disallowed_methods)] // the blocking driver owns the clock
        let started = Instant::now();
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let (err, safe) = match attempt(self) {
                Ok(v) => {
                    self.budget.on_success();
                    return Ok(v);
                }
                Err(e) => e,
            };
            let Some(transport) = transient(&err).filter(|_| safe) else {
                return Err(err);
            };
            let left = self.op_deadline.saturating_sub(started.elapsed());
            match self.budget.next_retry(
                &self.retry,
                attempts,
                transport,
                rand::random::<f64>(),
                Some(left),
            ) {
                Ok(wait) => std::thread::sleep(wait),
                Err(_) => return Err(err),
            }
        }
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        self.http.endpoint()
    }

    /// Sends a request without a body and discards the answer's body (DELETE, Abort): only
    /// success or the S3 error matters. Retried; `settled` as in [`S3Client::send_retrying`].
    fn send_bodiless(
        &mut self,
        req: Request,
        bucket: &str,
        settled: &[&str],
    ) -> Result<(), ClientError> {
        self.send_retrying(&req, Some(bucket), &[], None, &mut Vec::new(), settled)
            .map(drop)
    }

    /// Sends `req` with the in-memory `body` (its payload hash `payload`, default: of `body`)
    /// and collects the answer's body in `out`, retried like every idempotent request (after
    /// `503 SlowDown`, 5xx and connection failures, within the policy, the deadline and the
    /// budget). Every request sent here must be safe to repeat: a listing, a DELETE, a
    /// CreateBucket. An attempt whose connection failed may still have been carried out; when
    /// a later attempt is then refused with one of the `settled` error codes (e.g.
    /// `NoSuchBucket` for a DeleteBucket), that refusal is the lost attempt's success: `Ok`
    /// with the refusal (`None`: the server answered with success).
    fn send_retrying(
        &mut self,
        req: &Request,
        bucket: Option<&str>,
        body: &[u8],
        payload: Option<PayloadHash>,
        out: &mut Vec<u8>,
        settled: &[&str],
    ) -> Result<Option<Box<S3Error>>, ClientError> {
        let payload = payload.unwrap_or_else(|| {
            if body.is_empty() {
                empty_payload()
            } else {
                PayloadHash::of_body(body)
            }
        });
        let mut maybe_done = false;
        self.retrying(|c| {
            out.clear();
            let request_body = if body.is_empty() {
                RequestBody::None
            } else {
                RequestBody::Bytes(body)
            };
            match c.send(req.clone(), bucket, payload.clone(), request_body, out) {
                Ok(_) => Ok(None),
                Err(ClientError::S3(e)) if maybe_done && settled.contains(&e.code.as_str()) => {
                    out.clear();
                    Ok(Some(e))
                }
                Err(e) => {
                    maybe_done |= matches!(e, ClientError::Exchange(_));
                    Err((e, true))
                }
            }
        })
    }

    fn send(
        &mut self,
        mut req: Request,
        bucket: Option<&str>,
        payload: PayloadHash,
        body: RequestBody<'_>,
        sink: &mut dyn BodySink,
    ) -> Result<ResponseHead, ClientError> {
        self.signer.sign_headers(&mut req, &payload, now())?;
        let mut status_sink = StatusSink {
            inner: sink,
            error_body: BoundedSink(Vec::new()),
            success: None,
        };
        let head =
            self.http
                .execute(&req, bucket, body, &mut StatusSinkAdapter(&mut status_sink))?;
        if (200..300).contains(&head.status) {
            Ok(head)
        } else {
            Err(ClientError::S3(Box::new(s3::parse_error(
                head.status,
                &head.headers,
                &status_sink.error_body.0,
            ))))
        }
    }

    /// HeadObject.
    pub fn head(&mut self, bucket: &str, key: &str) -> Result<ObjectMeta, ClientError> {
        self.head_with(bucket, key, false)
    }

    /// HeadObject, asking for the stored checksum (`x-amz-checksum-mode: ENABLED`) when
    /// `checksum_mode` is set, so a download that moves by another path can be verified.
    pub fn head_with(
        &mut self,
        bucket: &str,
        key: &str,
        checksum_mode: bool,
    ) -> Result<ObjectMeta, ClientError> {
        let opts = GetOptions {
            checksum_mode,
            ..Default::default()
        };
        let req = s3::head_object(self.endpoint(), bucket, key, &opts)?;
        let head = self.retrying(|c| {
            c.send(
                req.clone(),
                Some(bucket),
                empty_payload(),
                RequestBody::None,
                &mut Vec::new(),
            )
            .map_err(|e| (e, true))
        })?;
        ObjectMeta::from_headers(&head.headers).map_err(ClientError::response)
    }

    /// GetObject (whole or `range`) streamed into `dest`; `on_bytes` reports progress.
    pub fn get(
        &mut self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        dest: &mut dyn Write,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<GetResult, ClientError> {
        self.get_with(bucket, key, range, None, dest, on_bytes)
    }

    /// GetObject with an optional `If-Match` ETag (ranged reads of one object version).
    ///
    /// A whole-object read asks for `bytes=0-` (see the module doc); a server that answers it
    /// `416` holds an empty object, which is then read with a plain GET.
    pub fn get_with(
        &mut self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        if_match: Option<&str>,
        dest: &mut dyn Write,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<GetResult, ClientError> {
        let asked = range.unwrap_or(ByteRange::From(0));
        match self.get_once(
            bucket,
            key,
            Some(asked),
            range.is_none(),
            if_match,
            dest,
            on_bytes,
        ) {
            Err(ClientError::S3(e)) if range.is_none() && e.status == 416 => {
                self.get_once(bucket, key, None, true, if_match, dest, on_bytes)
            }
            r => r,
        }
    }

    /// One GetObject: `range` as sent, `whole` whether the caller wants the whole object.
    ///
    /// Retried like every idempotent request; an answer cut partway (reset, closed, timed out
    /// after body bytes arrived) is resumed: a `Range` request for the rest of the same range,
    /// `If-Match` on the first answer's ETag, so the pieces are of one object version (a
    /// changed object is an error). The checks after the last piece (length, checksums) judge
    /// the whole range as the first answer described it.
    #[allow(clippy::too_many_arguments)]
    fn get_once(
        &mut self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
        whole: bool,
        if_match: Option<&str>,
        dest: &mut dyn Write,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<GetResult, ClientError> {
        let opts = GetOptions {
            range,
            if_match: if_match.map(str::to_owned),
            checksum_mode: whole,
        };
        let req = s3::get_object(self.endpoint(), bucket, key, &opts)?;
        let mut crc = Crc64Nvme::new();
        let mut received = 0u64;
        // The first answer (its head describes the whole range) and, once it was cut, where
        // the rest is asked for.
        let mut first: Option<ResponseHead> = None;
        let mut resume: Option<Resume> = None;
        let head = self.retrying(|c| {
            let (req, expect) = match &resume {
                None => (req.clone(), None),
                Some(r) => {
                    let next = r.start + received;
                    let opts = GetOptions {
                        range: Some(ByteRange::Inclusive(next, r.last)),
                        if_match: Some(r.etag.clone()),
                        checksum_mode: false,
                    };
                    let req = s3::get_object(c.endpoint(), bucket, key, &opts)
                        .map_err(|e| (e.into(), false))?;
                    (req, Some((next, r.last, r.total)))
                }
            };
            let mut progress = |n: u64| {
                received += n;
                on_bytes(n)
            };
            let mut sink = HashingSink {
                crc: &mut crc,
                expect,
                head: None,
                inner: WriteSink {
                    writer: &mut *dest,
                    on_bytes: &mut progress,
                },
            };
            let r = c.send(
                req,
                Some(bucket),
                empty_payload(),
                RequestBody::None,
                &mut sink,
            );
            let answered = sink.head.take();
            match (r, &resume) {
                (Ok(h), None) => Ok(h),
                (Ok(h), Some(r)) => {
                    // The rest arrived (its Content-Range was checked before its first byte was
                    // written): every byte of the range must now be here.
                    drop(h);
                    let want = r.last + 1 - r.start;
                    if received != want {
                        return Err((
                            ClientError::WrongLength(format!(
                                "resumed GET of bytes {}-{}: {received} of {want} bytes in all",
                                r.start, r.last
                            )),
                            false,
                        ));
                    }
                    first.clone().map(Ok).unwrap_or_else(|| {
                        Err((
                            ClientError::Response("resumed GET without a first answer".into()),
                            false,
                        ))
                    })
                }
                (Err(ClientError::S3(e)), Some(r)) if e.status == 412 => Err((
                    ClientError::Response(format!(
                        "s3://{bucket}/{key} changed while it was being downloaded: the rest of \
                         the cut answer was asked for with If-Match {} and the server answered \
                         412 ({}); download it again",
                        r.etag, e.code
                    )),
                    false,
                )),
                (Err(e), _) if received == 0 => Err((e, true)),
                (Err(e), _) => {
                    if first.is_none() {
                        first = answered;
                    }
                    if resume.is_none() {
                        resume = first
                            .as_ref()
                            .and_then(|h| Resume::of(h, if_match, received));
                    }
                    // Without an ETag to pin the version, or a known end, bytes cannot be
                    // resumed: the cut answer is the error.
                    Err((e, resume.is_some()))
                }
            }
        })?;
        let meta = ObjectMeta::from_headers(&head.headers).map_err(ClientError::response)?;
        match (whole, head.status) {
            // `bytes=0-` answered 206: the range must be the whole object, every byte here.
            (true, 206) => check_whole(&meta, received)?,
            // A server that ignored the range (or the plain GET of an empty object).
            (true, _) => check_length(&meta, None, received)?,
            (false, _) => check_length(&meta, range, received)?,
        }
        let whole_object = match meta.content_range {
            None => true,
            Some(ContentRange::Bytes {
                first,
                last,
                total: Some(total),
            }) => first == 0 && last.checked_add(1) == Some(total),
            Some(_) => false,
        };
        let ours = Checksum::Crc64Nvme(crc.finish()).to_base64();
        let mut checksum_verified = false;
        // Our gateway's checksum of exactly this body.
        if head.status == 206
            && let Some(expected) = head.header(HEADER_RANGE_CRC64NVME).map(str::trim)
        {
            if ours != expected {
                return Err(ClientError::ChecksumMismatch {
                    expected: expected.to_owned(),
                    actual: ours,
                });
            }
            checksum_verified = true;
        }
        if let (true, Some(expected)) = (whole_object, meta.checksum_crc64nvme.as_deref()) {
            let composite = meta
                .checksum_type
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"))
                || expected.contains('-');
            if !composite {
                if ours != expected {
                    return Err(ClientError::ChecksumMismatch {
                        expected: expected.to_owned(),
                        actual: ours,
                    });
                }
                checksum_verified = true;
            }
        }
        Ok(GetResult {
            meta,
            bytes: received,
            checksum_verified,
        })
    }

    /// PutObject of `len` bytes from `source` (read twice: once for the digests, once to
    /// send; again on a retry). Sends CRC64NVME and `Content-MD5`; the answer is judged
    /// ([`crate::upload_proof::judge_put`]).
    pub fn put_single<R: Read + Seek>(
        &mut self,
        bucket: &str,
        key: &str,
        source: &mut R,
        len: u64,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<PutResult, ClientError> {
        let digest = digest_of_range(source, 0, len)?;
        let checksum = Checksum::Crc64Nvme(digest.crc64nvme).to_base64();
        let opts = PutOptions {
            checksums: vec![(HEADER_CRC64NVME.into(), checksum.clone())],
            ..Default::default()
        };
        let mut req = s3::put_object(self.endpoint(), bucket, key, len, &opts)?;
        req.add_header("Content-MD5", digest.content_md5());
        let head = self.send_body_retrying(&req, bucket, source, 0, len, on_bytes)?;
        let meta = ObjectMeta::from_headers(&head.headers).map_err(ClientError::response)?;
        let proof = judge_put(
            "PUT",
            &digest,
            meta.checksum_crc64nvme.as_deref(),
            meta.etag.as_deref(),
        )?;
        Ok(PutResult {
            etag: meta.etag,
            sent_crc64nvme: checksum,
            parts: 1,
            bytes: len,
            verified_by: proof.map(|p| p.name().to_owned()),
            unverified: proof
                .is_none()
                .then(|| "the PUT answer echoed no checksum and its ETag is not an MD5".to_owned()),
        })
    }

    /// Multipart upload of `len` bytes from `source` in parts of `part_size`; aborted on failure
    /// so no orphaned parts stay behind. Each part is judged as it is acknowledged, the object
    /// after Complete ([`S3Client::judge_completed`]).
    pub fn put_multipart<R: Read + Seek>(
        &mut self,
        bucket: &str,
        key: &str,
        source: &mut R,
        len: u64,
        part_size: u64,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<PutResult, ClientError> {
        let part_count = len.div_ceil(part_size.max(1));
        if part_count == 0 || part_count > u64::from(s3::multipart::MAX_PARTS) {
            return Err(ClientError::Build(s3::BuildError::InvalidOption(
                "multipart upload needs 1..=10000 parts: raise --part-size",
            )));
        }
        let opts = PutOptions {
            checksums: vec![
                (
                    "x-amz-checksum-algorithm".into(),
                    ChecksumAlgorithm::Crc64Nvme.name().into(),
                ),
                ("x-amz-checksum-type".into(), "FULL_OBJECT".into()),
            ],
            ..Default::default()
        };
        let upload_id = self.create_multipart(bucket, key, &opts)?;
        match self.upload_parts(bucket, key, &upload_id, source, len, part_size, on_bytes) {
            Ok(result) => Ok(result),
            Err(e) => {
                // Best effort: the original error is what the user needs to see. (After a
                // failed check of a completed upload there is nothing left to abort.)
                let _ = self.abort_multipart(bucket, key, &upload_id);
                Err(e)
            }
        }
    }

    /// CreateMultipartUpload; returns the upload id.
    pub fn create_multipart(
        &mut self,
        bucket: &str,
        key: &str,
        opts: &PutOptions,
    ) -> Result<String, ClientError> {
        let req = s3::create_multipart_upload(self.endpoint(), bucket, key, opts)?;
        let mut body = Vec::new();
        // Retried like the idempotent ops: at worst a repeat leaves an unused upload id.
        self.retrying(|c| {
            body.clear();
            c.send(
                req.clone(),
                Some(bucket),
                empty_payload(),
                RequestBody::None,
                &mut body,
            )
            .map_err(|e| (e, true))
        })?;
        s3::parse_initiate_multipart_upload(&body).map_err(ClientError::response)
    }

    /// AbortMultipartUpload.
    pub fn abort_multipart(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), ClientError> {
        let req = s3::abort_multipart_upload(self.endpoint(), bucket, key, upload_id)?;
        // A repeat of an Abort that was carried out finds no upload.
        self.send_bodiless(req, bucket, &["NoSuchUpload"])
    }

    /// UploadPart of an in-memory part (with its CRC64NVME and `Content-MD5`); returns the
    /// part's ETag and what proved the part (`None`: the answer proved nothing).
    pub fn upload_part_bytes(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        data: &[u8],
    ) -> Result<(String, Option<Proof>), ClientError> {
        let digest = SourceDigest::of(data);
        let mut cursor = std::io::Cursor::new(data);
        self.upload_part(
            bucket,
            key,
            upload_id,
            part_number,
            &mut cursor,
            0,
            &digest,
            data.len() as u64,
            &mut |_| {},
        )
    }

    /// One UploadPart of `len` bytes at `offset` of `source` whose digests are `digest`,
    /// retried while we still hold the bytes; judges the answer.
    #[allow(clippy::too_many_arguments)]
    fn upload_part<R: Read + Seek>(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        source: &mut R,
        offset: u64,
        digest: &SourceDigest,
        len: u64,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<(String, Option<Proof>), ClientError> {
        let checksum = Checksum::Crc64Nvme(digest.crc64nvme).to_base64();
        let mut req = s3::upload_part(
            self.endpoint(),
            bucket,
            key,
            upload_id,
            part_number,
            len,
            &[(HEADER_CRC64NVME.into(), checksum)],
        )?;
        req.add_header("Content-MD5", digest.content_md5());
        let head = self.send_body_retrying(&req, bucket, source, offset, len, on_bytes)?;
        let meta = ObjectMeta::from_headers(&head.headers).map_err(ClientError::response)?;
        let what = format!("part {part_number}");
        let proof = judge_put(
            &what,
            digest,
            meta.checksum_crc64nvme.as_deref(),
            meta.etag.as_deref(),
        )?;
        let etag = meta
            .etag
            .ok_or_else(|| ClientError::Response(format!("UploadPart {part_number}: no ETag")))?;
        Ok((etag, proof))
    }

    #[allow(clippy::too_many_arguments)]
    fn upload_parts<R: Read + Seek>(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        source: &mut R,
        len: u64,
        part_size: u64,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<PutResult, ClientError> {
        let mut parts = Vec::new();
        let mut part_md5s = Vec::new();
        let mut unproven_parts = Vec::new();
        let mut part_proofs = Vec::new();
        let mut whole_crc = 0u64;
        let mut offset = 0u64;
        let mut part_number = 1u32;
        while offset < len {
            let this_len = part_size.min(len - offset);
            let digest = digest_of_range(source, offset, this_len)?;
            whole_crc = if offset == 0 {
                digest.crc64nvme
            } else {
                Crc64Nvme::combine(whole_crc, digest.crc64nvme, this_len)
            };
            let (etag, proof) = self.upload_part(
                bucket,
                key,
                upload_id,
                part_number,
                source,
                offset,
                &digest,
                this_len,
                &mut *on_bytes,
            )?;
            match proof {
                Some(p) => part_proofs.push(p),
                None => unproven_parts.push(part_number),
            }
            parts.push(CompletedPart {
                part_number,
                etag,
                checksum_crc64nvme: Some(Checksum::Crc64Nvme(digest.crc64nvme).to_base64()),
                checksum_crc32c: None,
            });
            part_md5s.push(digest.md5);
            offset += this_len;
            part_number += 1;
        }
        let whole = Checksum::Crc64Nvme(whole_crc).to_base64();
        let (req, body) = s3::complete_multipart_upload(
            self.endpoint(),
            bucket,
            key,
            upload_id,
            &parts,
            &[(HEADER_CRC64NVME.into(), whole.clone())],
        )?;
        let mut response = Vec::new();
        // Retried after an S3 error answer (SlowDown, 5xx: the server did not complete) and
        // after a lost connection (the server may or may not have completed: a repeat of a
        // completed upload is refused with NoSuchUpload, which then means done). An answer
        // whose connection failed, or whose body cannot be read (cut short), is not a failure
        // yet: the object is asked for below.
        let mut lost: Option<ClientError> = None;
        let completed = self.retrying(|c| {
            response.clear();
            match c.send(
                req.clone(),
                Some(bucket),
                PayloadHash::of_body(&body),
                RequestBody::Bytes(&body),
                &mut response,
            ) {
                Ok(head) => {
                    match s3::parse_complete_multipart_upload(head.status, &head.headers, &response)
                    {
                        Ok(done) => Ok(Some(done)),
                        Err(s3::ResponseError::S3(e)) => Err((ClientError::S3(e), true)),
                        // A 200 whose body was cut or garbled: the server completed, and its
                        // answer is lost.
                        Err(other) => {
                            let e = ClientError::Response(format!(
                                "the CompleteMultipartUpload answer ({} bytes) cannot be read: {other}",
                                response.len()
                            ));
                            lost = Some(ClientError::Response(e.to_string()));
                            Err((e, false))
                        }
                    }
                }
                Err(ClientError::S3(e)) if lost.is_some() && e.code == "NoSuchUpload" => Ok(None),
                Err(ClientError::Exchange(e)) => {
                    lost = Some(ClientError::Response(format!(
                        "the CompleteMultipartUpload answer was lost: {e}"
                    )));
                    Err((ClientError::Exchange(e), true))
                }
                Err(e) => Err((e, true)),
            }
        });
        let (done_etag, object_proof, lost) = match (completed, lost) {
            (Ok(Some(done)), _) => {
                let proof = self.judge_completed(
                    bucket,
                    key,
                    len,
                    whole_crc,
                    &part_md5s,
                    done.checksum_crc64nvme.as_deref(),
                    done.etag.as_deref(),
                )?;
                (done.etag, proof, None)
            }
            (Ok(None), Some(why)) | (Err(_), Some(why)) => {
                let (etag, proof) =
                    self.confirm_completed(bucket, key, len, whole_crc, &part_md5s, &why)?;
                (etag, proof, Some(why))
            }
            (Ok(None), None) => {
                return Err(ClientError::Response(
                    "CompleteMultipartUpload: NoSuchUpload".into(),
                ));
            }
            (Err(e), None) => return Err(e),
        };
        let parts_proof = match (part_proofs.first(), unproven_parts.is_empty()) {
            (Some(first), true) if part_proofs.iter().all(|p| p == first) => {
                Some(first.name().to_owned())
            }
            (Some(_), true) => Some("mixed".to_owned()),
            _ => None,
        };
        let (verified_by, unverified) = match (parts_proof, object_proof) {
            (Some(p), Some(o)) => (Some(format!("parts: {p}; object: {}", o.name())), None),
            (None, _) => (
                None,
                Some(format!(
                    "the answers to parts {unproven_parts:?} echoed no checksum and their ETags are not MD5s"
                )),
            ),
            (Some(_), None) => (
                None,
                Some(match &lost {
                    None => "Complete and HEAD named no full-object checksum and no MD5-of-MD5s ETag (the stored size matched)"
                        .to_owned(),
                    Some(why) => format!(
                        "{why}; a HEAD found an object of our size, with no full-object checksum and no MD5-of-MD5s ETag to prove its bytes"
                    ),
                }),
            ),
        };
        Ok(PutResult {
            etag: done_etag,
            sent_crc64nvme: whole,
            parts: parts.len() as u32,
            bytes: len,
            verified_by,
            unverified,
        })
    }

    /// After a CompleteMultipartUpload whose answer was lost (`why`): a HEAD (with the stored
    /// checksum) says whether the object is there with our size, and not refuted by its
    /// full-object CRC64NVME or its MD5-of-MD5s ETag. Returns its ETag and what proved it
    /// (`None`: the size matched but nothing proved the bytes). No object, or another one, is
    /// the error `why`, with what the HEAD found.
    pub fn confirm_completed(
        &mut self,
        bucket: &str,
        key: &str,
        len: u64,
        crc64nvme: u64,
        part_md5s: &[[u8; 16]],
        why: &ClientError,
    ) -> Result<(Option<String>, Option<Proof>), ClientError> {
        let meta = self.head_with(bucket, key, true).map_err(|e| {
            ClientError::Response(format!(
                "{why}, and a HEAD afterwards found no object s3://{bucket}/{key} ({e}): the upload did not complete"
            ))
        })?;
        let not_ours = |m: IntegrityMismatch| {
            ClientError::Response(format!(
                "{why}, and the object a HEAD found afterwards is not the one we sent ({m}): the upload did not complete"
            ))
        };
        let stored = judge_stored(
            len,
            crc64nvme,
            meta.content_length,
            meta.checksum_crc64nvme.as_deref(),
            meta.checksum_type.as_deref(),
        )
        .map_err(not_ours)?;
        let by_etag = judge_multipart_etag(part_md5s, meta.etag.as_deref()).map_err(not_ours)?;
        Ok((meta.etag, stored.or(by_etag)))
    }

    /// After CompleteMultipartUpload: the object the server assembled must be ours. Its
    /// full-object CRC64NVME when Complete names one; else its ETag when it is the MD5 of our
    /// part MD5s; and when Complete named no checksum, a HEAD for the stored size (and the
    /// stored CRC64NVME where the server keeps one). `Ok(None)`: the size matched but nothing
    /// proved the content.
    #[allow(clippy::too_many_arguments)]
    pub fn judge_completed(
        &mut self,
        bucket: &str,
        key: &str,
        len: u64,
        crc64nvme: u64,
        part_md5s: &[[u8; 16]],
        completed_crc64nvme: Option<&str>,
        completed_etag: Option<&str>,
    ) -> Result<Option<Proof>, ClientError> {
        let ours = s3_lite::checksum::encode_crc64nvme(crc64nvme);
        let mut proof = None;
        if let Some(server) = completed_crc64nvme.filter(|c| !c.contains('-')) {
            if server != ours {
                return Err(IntegrityMismatch {
                    what: "CompleteMultipartUpload CRC64NVME".into(),
                    expected: ours,
                    got: server.to_owned(),
                }
                .into());
            }
            proof = Some(Proof::ChecksumEchoed);
        }
        if let Some(p) = judge_multipart_etag(part_md5s, completed_etag)? {
            proof = proof.or(Some(p));
        }
        if completed_crc64nvme.is_none() {
            let meta = self.head_with(bucket, key, true)?;
            let stored = judge_stored(
                len,
                crc64nvme,
                meta.content_length,
                meta.checksum_crc64nvme.as_deref(),
                meta.checksum_type.as_deref(),
            )?;
            proof = stored.or(proof);
        }
        Ok(proof)
    }

    /// ListObjectsV2, following continuation tokens until the listing ends.
    pub fn list(
        &mut self,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
    ) -> Result<Listing, ClientError> {
        let mut listing = Listing::default();
        let mut token: Option<String> = None;
        loop {
            let opts = ListOptions {
                prefix: prefix.map(str::to_owned),
                delimiter: delimiter.map(str::to_owned),
                continuation_token: token.take(),
                ..Default::default()
            };
            let req = s3::list_objects_v2(self.endpoint(), bucket, &opts)?;
            let mut body = Vec::new();
            // Each page is retried on its own (its continuation token names it).
            self.send_retrying(&req, Some(bucket), &[], None, &mut body, &[])?;
            let page = s3::parse_list_objects_v2(&body).map_err(ClientError::response)?;
            listing.objects.extend(page.contents);
            listing.common_prefixes.extend(page.common_prefixes);
            listing.pages += 1;
            match (page.is_truncated, page.next_continuation_token) {
                (true, Some(next)) => token = Some(next),
                (true, None) => {
                    return Err(ClientError::Response(
                        "truncated listing without a continuation token".into(),
                    ));
                }
                (false, _) => return Ok(listing),
            }
        }
    }

    /// Whether `bucket` exists and these credentials may list it: one ListObjectsV2 of at
    /// most one key, whose error document names what is wrong (`NoSuchBucket`,
    /// `AccessDenied`, ...) where a HEAD's bare 404 cannot.
    pub fn probe_bucket(&mut self, bucket: &str) -> Result<(), ClientError> {
        let opts = ListOptions {
            max_keys: Some(1),
            ..Default::default()
        };
        let req = s3::list_objects_v2(self.endpoint(), bucket, &opts)?;
        self.send_retrying(&req, Some(bucket), &[], None, &mut Vec::new(), &[])?;
        Ok(())
    }

    /// DeleteObject.
    pub fn delete(&mut self, bucket: &str, key: &str) -> Result<(), ClientError> {
        let req = s3::delete_object(self.endpoint(), bucket, key)?;
        // Deleting a missing key succeeds on S3 (204): a repeat is harmless.
        self.send_bodiless(req, bucket, &[])
    }

    /// CreateBucket in the client's region.
    pub fn create_bucket(&mut self, bucket: &str) -> Result<(), ClientError> {
        let region = self.signer.region().to_owned();
        let (req, body) = s3::create_bucket(self.endpoint(), bucket, &region)?;
        let payload = PayloadHash::of_body(&body);
        // A repeat of a CreateBucket that was carried out is refused as already ours, or (by
        // servers that do not tell owners apart, s3s-fs) as existing: then it must be among
        // the buckets these credentials own.
        let settled = self.send_retrying(
            &req,
            Some(bucket),
            &body,
            Some(payload),
            &mut Vec::new(),
            &["BucketAlreadyOwnedByYou", "BucketAlreadyExists"],
        )?;
        match settled {
            Some(e) if e.code == "BucketAlreadyExists" => {
                let ours = self
                    .list_buckets()
                    .map_err(|list| {
                        ClientError::Response(format!(
                            "CreateBucket {bucket}: the first attempt's connection failed and a \
                             repeat was refused ({e}); listing our buckets to tell whether the \
                             first attempt created it failed too: {list}"
                        ))
                    })?
                    .iter()
                    .any(|b| b.name == bucket);
                if ours {
                    Ok(())
                } else {
                    Err(ClientError::S3(e))
                }
            }
            _ => Ok(()),
        }
    }

    /// ListBuckets: every bucket the credentials own, in the server's order.
    pub fn list_buckets(&mut self) -> Result<Vec<s3::BucketEntry>, ClientError> {
        let req = s3::list_buckets(self.endpoint());
        let mut body = Vec::new();
        self.send_retrying(&req, None, &[], None, &mut body, &[])?;
        s3::parse_list_buckets(&body).map_err(ClientError::response)
    }

    /// DeleteBucket (the server refuses a bucket that is not empty).
    pub fn delete_bucket(&mut self, bucket: &str) -> Result<(), ClientError> {
        let req = s3::delete_bucket(self.endpoint(), bucket)?;
        // A repeat of a DeleteBucket that was carried out finds no bucket.
        self.send_bodiless(req, bucket, &["NoSuchBucket"])
    }
}

/// Where the rest of a cut GET answer is asked for.
struct Resume {
    /// ETag of the object version the first answer came from (`If-Match` of the rest).
    etag: String,
    /// First byte of the first answer.
    start: u64,
    /// Last byte of the range.
    last: u64,
    /// The object's size, when the first answer named it.
    total: Option<u64>,
}

impl Resume {
    /// From the head of the first answer, `received` of whose bytes arrived: `None` when the
    /// answer names no ETag (nothing pins the object version) or no end.
    fn of(first: &ResponseHead, if_match: Option<&str>, received: u64) -> Option<Self> {
        let meta = ObjectMeta::from_headers(&first.headers).ok()?;
        let etag = if_match.map(str::to_owned).or(meta.etag)?;
        let (start, last, total) = match (first.status, meta.content_range) {
            (206, Some(ContentRange::Bytes { first, last, total })) => (first, last, total),
            (200, None) => {
                let len = meta.content_length?;
                (0, len.checked_sub(1)?, Some(len))
            }
            _ => return None,
        };
        // Nothing left to ask for: the cut came after the last byte (the checks judge it).
        (start.checked_add(received)? <= last).then_some(Resume {
            etag,
            start,
            last,
            total,
        })
    }
}

/// All pages of a listing.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Objects, in the server's order.
    pub objects: Vec<ObjectEntry>,
    /// Common prefixes (with a delimiter).
    pub common_prefixes: Vec<String>,
    /// Pages fetched.
    pub pages: u32,
}

struct StatusSinkAdapter<'a, 'b>(&'a mut StatusSink<'b>);

impl BodySink for StatusSinkAdapter<'_, '_> {
    fn begin(&mut self, head: &ResponseHead) -> std::io::Result<()> {
        let success = (200..300).contains(&head.status);
        self.0.success = Some(success);
        if success {
            self.0.inner.begin(head)
        } else {
            Ok(())
        }
    }

    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self.0.success {
            Some(true) => self.0.inner.accept(data),
            _ => self.0.error_body.accept(data),
        }
    }
}

/// Feeds a download's bytes to the CRC and the destination; keeps the answer's head. When it
/// carries the rest of a cut answer (`expect`: first byte, last byte, object size), an answer
/// that is not exactly that range is refused before any of its bytes is written.
struct HashingSink<'a, W: Write> {
    crc: &'a mut Crc64Nvme,
    expect: Option<(u64, u64, Option<u64>)>,
    head: Option<ResponseHead>,
    inner: WriteSink<'a, W>,
}

impl<W: Write> BodySink for HashingSink<'_, W> {
    fn begin(&mut self, head: &ResponseHead) -> std::io::Result<()> {
        self.head = Some(head.clone());
        let Some((first, last, total)) = self.expect else {
            return Ok(());
        };
        let got = ObjectMeta::from_headers(&head.headers)
            .ok()
            .and_then(|m| m.content_range);
        match got {
            Some(ContentRange::Bytes {
                first: f,
                last: l,
                total: t,
            }) if head.status == 206
                && f == first
                && l == last
                && (total.is_none() || t.is_none() || t == total) =>
            {
                Ok(())
            }
            _ => Err(std::io::Error::other(format!(
                "the resumed GET asked for bytes {first}-{last}, the server answered {} with Content-Range {}",
                head.status,
                head.header("content-range").unwrap_or("(none)")
            ))),
        }
    }

    fn accept(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.crc.update(data);
        self.inner.accept(data)
    }
}

struct ProgressReader<'a, R: Read> {
    inner: R,
    on_bytes: &'a mut dyn FnMut(u64),
}

impl<R: Read> Read for ProgressReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        (self.on_bytes)(n as u64);
        Ok(n)
    }
}

fn seek<R: Seek>(source: &mut R, offset: u64) -> Result<(), ClientError> {
    source
        .seek(SeekFrom::Start(offset))
        .map(|_| ())
        .map_err(|source| ClientError::Local {
            context: "seek in the source file".into(),
            source,
        })
}

/// CRC64NVME and MD5 of `len` bytes at `offset` of `source`, in one pass.
fn digest_of_range<R: Read + Seek>(
    source: &mut R,
    offset: u64,
    len: u64,
) -> Result<SourceDigest, ClientError> {
    seek(source, offset)?;
    let mut pass = DigestPass::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        let piece = buf.get_mut(..want).unwrap_or_default();
        let n = source.read(piece).map_err(|source| ClientError::Local {
            context: "read the source file".into(),
            source,
        })?;
        if n == 0 {
            return Err(ClientError::Local {
                context: "read the source file".into(),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "file shrank while uploading",
                ),
            });
        }
        pass.update(piece.get(..n).unwrap_or_default());
        left -= n as u64;
    }
    Ok(pass.finish())
}

/// The `206` answer to a whole-object `bytes=0-`: it must name bytes `0..total` and all of
/// them must have arrived (a lowered `Content-Length` cannot shorten the object).
fn check_whole(meta: &ObjectMeta, received: u64) -> Result<(), ClientError> {
    match meta.content_range {
        Some(ContentRange::Bytes {
            first: 0,
            last,
            total: Some(total),
        }) if last.checked_add(1) == Some(total) && received == total => Ok(()),
        Some(ContentRange::Bytes { first, last, total }) => Err(ClientError::WrongLength(format!(
            "asked for the whole object (bytes=0-), got Content-Range bytes {first}-{last}/{} and {received} bytes",
            total.map_or_else(|| "*".to_owned(), |t| t.to_string())
        ))),
        _ => Err(ClientError::WrongLength(format!(
            "asked for the whole object (bytes=0-), got a 206 without a usable Content-Range and {received} bytes"
        ))),
    }
}

fn check_length(
    meta: &ObjectMeta,
    range: Option<ByteRange>,
    received: u64,
) -> Result<(), ClientError> {
    if let Some(cl) = meta.content_length
        && cl != received
    {
        return Err(ClientError::WrongLength(format!(
            "Content-Length {cl}, received {received}"
        )));
    }
    let Some(range) = range else { return Ok(()) };
    let Some(ContentRange::Bytes {
        first: start,
        last: end,
        total,
    }) = meta.content_range
    else {
        return Err(ClientError::WrongLength(format!(
            "asked for {}, server sent no Content-Range",
            range.to_header()
        )));
    };
    let span = end.checked_sub(start).and_then(|d| d.checked_add(1));
    let expected_start_ok = match range {
        ByteRange::Inclusive(a, b) => {
            start == a && (end == b || total.is_some_and(|t| end + 1 == t && b >= t))
        }
        ByteRange::From(a) => start == a && total.is_none_or(|t| end + 1 == t),
        ByteRange::Suffix(n) => {
            total.is_none_or(|t| end + 1 == t && span.is_some_and(|s| s == n.min(t)))
        }
    };
    if !expected_start_ok || span != Some(received) {
        return Err(ClientError::WrongLength(format!(
            "asked for {}, got Content-Range bytes {start}-{end} and {received} bytes",
            range.to_header()
        )));
    }
    Ok(())
}
