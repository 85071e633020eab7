//! Building and signing the request head of an operation.

use std::time::{SystemTime, UNIX_EPOCH};

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::Request;
use s3_lite::http::{BodyFraming, encode_request_head};
use s3_lite::s3::{
    ByteRange, Endpoint, GetOptions, PutOptions, get_object, head_object, put_object,
};
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer};

use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};

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

/// The unsigned request for `op`, its payload hash and body framing. `rdma`: the payload
/// moves by RDMA, so a PUT is body-less (`Content-Length: 0`).
fn request(
    ep: &Endpoint,
    op: &InFlight,
    rdma: bool,
) -> Result<(Request, PayloadHash, BodyFraming), Outcome> {
    let (bucket, key) = (&*op.object.bucket, &*op.object.key);
    let empty = || PayloadHash::Hex(EMPTY_SHA256.to_owned());
    let built = match op.kind {
        OpKind::Get => get_object(ep, bucket, key, &GetOptions::default())
            .map(|r| (r, empty(), BodyFraming::None)),
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
        // UNSIGNED-PAYLOAD: hashing the body would read all of it once more before sending;
        // integrity over plain HTTP is the job of checksums (a later issue), as with RDMA.
        OpKind::Put => {
            let len = if rdma { 0 } else { op.buf_len() };
            put_object(ep, bucket, key, len, &PutOptions::default())
                .map(|r| (r, PayloadHash::Unsigned, BodyFraming::Length(len)))
        }
    };
    built.map_err(|_| local(ErrorCode::InvalidArgument))
}

/// Appends the signed request head for `op` to `out` (with the RDMA dialect's headers,
/// which are signed like every other header).
pub(crate) fn encode(
    ep: &Endpoint,
    signer: &Signer,
    dates: &mut DateCache,
    op: &InFlight,
    rdma: Option<&[(String, String)]>,
    out: &mut Vec<u8>,
) -> Result<(), Outcome> {
    let (mut req, payload, framing) = request(ep, op, rdma.is_some())?;
    for (n, v) in rdma.unwrap_or_default() {
        req.add_header(n.clone(), v.clone());
    }
    let now = dates.now().ok_or(local(ErrorCode::Io))?;
    signer
        .sign_headers(&mut req, &payload, now)
        .map_err(|_| local(ErrorCode::InvalidArgument))?;
    encode_request_head(&req, framing, out).map_err(|_| local(ErrorCode::InvalidArgument))
}
