//! Building and signing the request head of an operation.

use std::time::{SystemTime, UNIX_EPOCH};

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::Request;
use s3_lite::http::{BodyFraming, encode_request_head};
use s3_lite::s3::{
    ByteRange, Endpoint, GetOptions, PutOptions, abort_multipart_upload, complete_multipart_upload,
    create_multipart_upload, get_object, head_object, put_object, upload_part,
};
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer};

use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, MultipartOp, OpKind};

/// Caches the `X-Amz-Date` value per second (the signer's key cache handles the day).
#[derive(Debug, Default)]
pub(crate) struct DateCache {
    cached: Option<(u64, AmzDate)>,
}

impl DateCache {
    #[allow(clippy::disallowed_methods)] // the engine's I/O layer owns the wall clock
    pub(crate) fn now(&mut self) -> Option<AmzDate> {
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        match self.cached {
            Some((s, d)) if s == secs => Some(d),
            _ => {
                let d = AmzDate::from_unix_secs(secs).ok()?;
                self.cached = Some((secs, d));
                Some(d)
            }
        }
    }
}

const fn local(code: ErrorCode) -> Outcome {
    Outcome::fail(code, ErrorClass::Local, Retry::No)
}

/// A request, its payload hash, body framing and (for CompleteMultipart) an in-line body.
type Built = (Request, PayloadHash, BodyFraming, Option<Vec<u8>>);

fn empty() -> PayloadHash {
    PayloadHash::Hex(EMPTY_SHA256.to_owned())
}

/// The unsigned multipart request of `op`. An UploadPart body is the leased source, sent from
/// registered memory like a PUT's (`UNSIGNED-PAYLOAD`, for the same reason; none when `rdma`
/// moves it); Complete's small XML part list is signed and sent in-line after the head.
fn multipart_request(
    ep: &Endpoint,
    op: &InFlight,
    step: &MultipartOp,
    rdma: bool,
) -> Result<Built, Outcome> {
    let (bucket, key) = (&*op.object.bucket, &*op.object.key);
    let built = match step {
        MultipartOp::Create => create_multipart_upload(ep, bucket, key, &PutOptions::default())
            .map(|r| (r, empty(), BodyFraming::None, None)),
        MultipartOp::Part {
            part, upload_id, ..
        } => {
            let len = if rdma { 0 } else { op.buf_len() };
            upload_part(ep, bucket, key, upload_id, *part, len, &[])
                .map(|r| (r, PayloadHash::Unsigned, BodyFraming::Length(len), None))
        }
        MultipartOp::Complete {
            upload_id, parts, ..
        } => complete_multipart_upload(ep, bucket, key, upload_id, parts, &[]).map(|(r, body)| {
            let hash = PayloadHash::of_body(&body);
            let framing = BodyFraming::Length(body.len() as u64);
            (r, hash, framing, Some(body))
        }),
        MultipartOp::Abort { upload_id, .. } => abort_multipart_upload(ep, bucket, key, upload_id)
            .map(|r| (r, empty(), BodyFraming::None, None)),
        MultipartOp::VerifyStored { .. } => {
            let opts = GetOptions {
                checksum_mode: true,
                ..GetOptions::default()
            };
            head_object(ep, bucket, key, &opts).map(|r| (r, empty(), BodyFraming::None, None))
        }
    };
    built.map_err(|_| local(ErrorCode::InvalidArgument))
}

/// The unsigned request for `op`, its payload hash, body framing and in-line body. `rdma`:
/// the payload moves by RDMA, so a PUT is body-less (`Content-Length: 0`).
fn request(ep: &Endpoint, op: &InFlight, rdma: bool) -> Result<Built, Outcome> {
    if let Some(step) = &op.multipart {
        return multipart_request(ep, op, step, rdma);
    }
    let (bucket, key) = (&*op.object.bucket, &*op.object.key);
    let built = match op.kind {
        // `bytes=0-` makes the answer commit to the object's size (`Content-Range` total),
        // which a shortened `Content-Length` cannot change (response.rs checks it). An RDMA
        // GET names the size in its byte count instead and keeps the plain request.
        OpKind::Get => {
            let opts = GetOptions {
                range: (!rdma).then_some(ByteRange::From(0)),
                ..GetOptions::default()
            };
            get_object(ep, bucket, key, &opts).map(|r| (r, empty(), BodyFraming::None))
        }
        OpKind::RangeGet { offset } => {
            let last = offset
                .checked_add(op.buf_len())
                .and_then(|e| e.checked_sub(1));
            let Some(last) = last else {
                return Err(local(ErrorCode::InvalidArgument));
            };
            let opts = GetOptions {
                range: Some(ByteRange::Inclusive(offset, last)),
                ..GetOptions::default()
            };
            get_object(ep, bucket, key, &opts).map(|r| (r, empty(), BodyFraming::None))
        }
        OpKind::Head => head_object(ep, bucket, key, &GetOptions::default())
            .map(|r| (r, empty(), BodyFraming::None)),
        // UNSIGNED-PAYLOAD (a SHA-256 of the body would cost far more than sending it); the
        // body's CRC64NVME goes in `x-amz-checksum-crc64nvme` instead, so the server refuses a
        // body that changed on the way (`BadDigest`) rather than storing it. (Over RDMA the
        // dialect sends the same checksum and checks the server's echo.)
        OpKind::Put => {
            let len = if rdma { 0 } else { op.buf_len() };
            let mut opts = PutOptions::default();
            if !rdma && let Some(crc) = op.source_crc64() {
                opts.checksums
                    .push(("x-amz-checksum-crc64nvme".to_owned(), crc.to_owned()));
            }
            put_object(ep, bucket, key, len, &opts)
                .map(|r| (r, PayloadHash::Unsigned, BodyFraming::Length(len)))
        }
    };
    built
        .map(|(r, h, f)| (r, h, f, None))
        .map_err(|_| local(ErrorCode::InvalidArgument))
}

/// Appends the signed request head for `op` to `out` (with the RDMA dialect's headers,
/// which are signed like every other header), followed by the body when it is in-line
/// (CompleteMultipart's part list), so the connection writes both as one buffer.
pub(crate) fn encode(
    ep: &Endpoint,
    signer: &Signer,
    dates: &mut DateCache,
    op: &InFlight,
    rdma: Option<&[(String, String)]>,
    out: &mut Vec<u8>,
) -> Result<(), Outcome> {
    let (mut req, payload, framing, inline) = request(ep, op, rdma.is_some())?;
    for (n, v) in rdma.unwrap_or_default() {
        req.add_header(n.clone(), v.clone());
    }
    let now = dates.now().ok_or(local(ErrorCode::Io))?;
    signer
        .sign_headers(&mut req, &payload, now)
        .map_err(|_| local(ErrorCode::InvalidArgument))?;
    encode_request_head(&req, framing, out).map_err(|_| local(ErrorCode::InvalidArgument))?;
    if let Some(body) = inline {
        out.extend_from_slice(&body);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ring_api::{ObjectName, UploadHandle};
    use s3_lite::credentials::Credentials;
    use s3_lite::s3::CompletedPart;

    use super::*;
    use crate::inflight::Phase;

    fn op(multipart: MultipartOp) -> InFlight {
        InFlight {
            queue: crate::inflight::QueueRef::default(),
            user_data: 1,
            kind: OpKind::Head,
            object: Arc::new(ObjectName {
                bucket: "bkt".into(),
                key: "a b".into(),
            }),
            buf: None,
            deadline: None,
            attempts: 0,
            may_retry: true,
            retried: false,
            free_retries: 0,
            throttled_waits: 0,
            phase: Phase::Ready,
            multipart: Some(multipart),
            uploads: Some(Arc::default()),
            source_crc: std::cell::OnceCell::new(),
            verify_stored: std::cell::Cell::new(None),
            stripe: None,
            times: None,
            want_crc64: false,
            landed_crc64: std::cell::Cell::new(None),
        }
    }

    fn encoded(m: MultipartOp) -> String {
        let ep = Endpoint::parse("http://127.0.0.1:9000").unwrap();
        let signer = Signer::new(Credentials::new("k", "s"), "us-east-1", "s3").unwrap();
        let mut out = Vec::new();
        encode(
            &ep,
            &signer,
            &mut DateCache::default(),
            &op(m),
            None,
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn multipart_requests() {
        let create = encoded(MultipartOp::Create);
        assert!(
            create.starts_with("POST /bkt/a%20b?uploads= HTTP/1.1\r\n"),
            "{create}"
        );
        let id: Arc<str> = Arc::from("id/1");
        let part = encoded(MultipartOp::Part {
            upload: UploadHandle(1),
            part: 7,
            upload_id: id.clone(),
        });
        assert!(
            part.starts_with("PUT /bkt/a%20b?partNumber=7&uploadId=id%2F1 HTTP/1.1\r\n"),
            "{part}"
        );
        assert!(part.to_ascii_lowercase().contains("content-length: 0\r\n"));
        let parts: Arc<[CompletedPart]> = vec![CompletedPart {
            part_number: 1,
            etag: "\"e\"".into(),
            ..CompletedPart::default()
        }]
        .into();
        let complete = encoded(MultipartOp::Complete {
            upload: UploadHandle(1),
            upload_id: id.clone(),
            parts,
            expect: None,
        });
        let body = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                    <Part><ETag>\"e\"</ETag><PartNumber>1</PartNumber></Part>\
                    </CompleteMultipartUpload>";
        assert!(complete.starts_with("POST /bkt/a%20b?uploadId=id%2F1 HTTP/1.1\r\n"));
        assert!(complete.ends_with(&format!("\r\n\r\n{body}")), "{complete}");
        assert!(
            complete
                .to_ascii_lowercase()
                .contains(&format!("content-length: {}\r\n", body.len()))
        );
        let abort = encoded(MultipartOp::Abort {
            upload: UploadHandle(1),
            upload_id: id,
        });
        assert!(abort.starts_with("DELETE /bkt/a%20b?uploadId=id%2F1 HTTP/1.1\r\n"));
    }
}
