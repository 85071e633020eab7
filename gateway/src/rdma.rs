//! The RDMA seam: where the soft and verbs fabrics plug in.
//!
//! A request carrying `x-amz-rdma-token` (authenticated, every `x-amz-rdma-*` header signed)
//! is classified ([`s3_lite::rdma::classify`]); a malformed token is answered `400
//! InvalidArgument` without an RDMA reply header (docs/rdma-headers.md, token-shape dispatch, rule 5). Otherwise the
//! gateway asks its [`RdmaTarget`] for a [`DataPath`]:
//!
//! - `None`: the fabric cannot honour the token. PUT/UploadPart are answered `501
//!   NotImplemented` with `x-amz-rdma-reply: 501` and nothing is stored; GET is answered per
//!   [`GetDecline`] (data in the HTTP body with reply 501, the aws-c-s3 spec style, or a 501
//!   error, the MinIO style). An RC token on an object request also gets
//!   `X-Amz-Rdma-Protocol-Status: unsupported` (the hipobj-rc-v2 servers' marker).
//! - `Some(path)`: for GET the backend writes the object into `path` (it is an
//!   [`ObjectSink`], exactly like the HTTP response), for PUT the body is read from it (a
//!   [`BodySource`], exactly like the socket), then [`DataPath::finish`] reports the bytes
//!   moved; the reply carries `x-amz-rdma-reply`, `x-amz-rdma-bytes-transferred` and
//!   `x-amz-rdma-bytes`, for GET `x-amz-rdma-checksum-crc64nvme` (the CRC64NVME of exactly the
//!   bytes handed to the path, computed as they pass), and `Content-Length: 0`. Backends do
//!   not change.
//!
//! Targets: [`NoFabric`] (`--fabric none`, declines everything) and
//! [`crate::rdma_target::RcTarget`] (`--fabric soft` or `--fabric verbs`: `rc-persistent` and
//! hipobj-rc-v2 over `engine::rc`).

use s3_lite::rdma::TokenKind;

use crate::backend::ObjectSink;
use crate::body::BodySource;
use crate::error::ApiError;

/// How a GET that cannot be served over RDMA is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GetDecline {
    /// HTTP 200/206 with the data in the body and `x-amz-rdma-reply: 501` (aws-c-s3 spec;
    /// clients fall back without another round trip).
    #[default]
    Body,
    /// `501 NotImplemented` error with `x-amz-rdma-reply: 501` and no data (MinIO AIStor);
    /// the client retries without the token.
    Error,
}

/// The object operation a token came with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RdmaOp {
    /// GetObject (whole or ranged).
    Get,
    /// PutObject.
    Put,
    /// UploadPart.
    UploadPart,
}

/// What a token grants, as the target needs it to open a data path.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RdmaGrant<'a> {
    /// The operation.
    pub op: RdmaOp,
    /// The parsed token.
    pub token: &'a TokenKind,
    /// The authenticated access key (sessions and connections are bound to it).
    pub principal: &'a str,
    /// Bytes announced for a PUT (`x-amz-decoded-content-length` or the token's size).
    pub declared_len: Option<u64>,
    /// `x-amz-rdma-session`: the paired connection (`rc-persistent`), when sent.
    pub session: Option<&'a str>,
    /// `x-amz-rdma-frame-check: landing` (GET): the client checks the bytes end to end by
    /// its landing digest, so the soft fabric's frames may go without their trailers.
    pub checked_end_to_end: bool,
    /// `x-amz-rdma-early-answer: 1` (GET): the client takes the answer before the WRITEs
    /// complete.
    pub early_answer: bool,
}

/// A client's pairing request on the `rc-persistent` connect route.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ConnectRequest<'a> {
    /// The client QP's RC token (transport RC, QPN, GID).
    pub token: &'a s3_lite::rdma::RcToken,
    /// The client's first send PSN (`x-amz-rdma-psn`).
    pub psn: u32,
    /// The authenticated access key the connection is bound to.
    pub principal: &'a str,
    /// The client QP's fabric (`x-amz-rdma-fabric`: `soft` / `verbs`), when sent.
    pub fabric: Option<&'a str>,
    /// What the client's soft QP understands (`x-amz-rdma-soft-features`), when sent.
    pub soft_features: Option<&'a str>,
}

/// What the gateway answers a successful pairing with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectReply {
    /// The gateway QP's RC token (`x-amz-rdma-reply: 200:<token>`).
    pub token: s3_lite::rdma::RcToken,
    /// The gateway's first send PSN.
    pub psn: u32,
    /// The connection id (`x-amz-rdma-session`, 32 hex).
    pub session: String,
    /// Where the client's QP dials (soft fabric only).
    pub soft_addr: Option<std::net::SocketAddr>,
    /// The gateway QP's fabric (`x-amz-rdma-fabric` in the reply).
    pub fabric: engine::rc::RcKind,
}

/// One transfer over a fabric: an [`ObjectSink`] for GET (object bytes go to the client's
/// registered memory) and a [`BodySource`] for PUT (bytes come from it).
pub trait DataPath: ObjectSink + BodySource {
    /// Completes the transfer (e.g. the WRITE_WITH_IMM / READ completion) and returns the
    /// bytes moved; an error fails the request, and nothing is stored for a PUT.
    fn finish(&mut self) -> Result<u64, ApiError>;

    /// Whether this GET may be answered before its WRITEs complete ([`DataPath::post_all`],
    /// the answer, then [`DataPath::leave_in_flight`]): only where the client sees its bytes
    /// land and checks them itself (the soft fabric's landing digest), when it asked for that
    /// (`x-amz-rdma-early-answer: 1`).
    fn answers_early(&self) -> bool {
        false
    }

    /// Posts the rest of the transfer without waiting for it to complete; the bytes posted.
    /// An error fails the request as [`DataPath::finish`]'s would.
    fn post_all(&mut self) -> Result<u64, ApiError> {
        self.finish()
    }

    /// After the early answer: hands what [`DataPath::post_all`] posted to the target, which
    /// frees its buffers when the completions come, or fails the connection when one fails or
    /// does not come in time (the client then sees its bytes never land). The request thread
    /// goes on at once.
    fn leave_in_flight(&mut self) {}

    /// The error that made an [`ObjectSink`] / [`BodySource`] call fail, if the path recorded
    /// one (a typed S3 error is better than the I/O error the backend saw).
    fn take_error(&mut self) -> Option<ApiError> {
        None
    }
}

/// A fabric's server side.
pub trait RdmaTarget: Send + Sync {
    /// `none`, `soft`, `verbs`: reported in logs and tests.
    fn fabric(&self) -> &'static str;
    /// Opens a data path for `grant`, or `Ok(None)` to decline (501 fallback).
    fn open(&self, grant: &RdmaGrant<'_>) -> Result<Option<Box<dyn DataPath>>, ApiError>;

    /// Pairs a client QP (`rc-persistent` connect route); `Ok(None)`: this fabric has no
    /// connections (answered `501` with `x-amz-rdma-reply: 501`).
    /// The hipobj-rc-v2 session service (`/.hipobj-rc/*`), if this fabric has one; `None`
    /// answers those routes `501` with the unsupported marker.
    fn rc_v2(&self) -> Option<&crate::rdma_target::v2::RcV2> {
        None
    }

    fn connect(&self, _req: &ConnectRequest<'_>) -> Result<Option<ConnectReply>, ApiError> {
        Ok(None)
    }
}

/// `--fabric none`: declines every token, so clients fall back to HTTP per request.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFabric;

impl RdmaTarget for NoFabric {
    fn fabric(&self) -> &'static str {
        "none"
    }

    fn open(&self, _grant: &RdmaGrant<'_>) -> Result<Option<Box<dyn DataPath>>, ApiError> {
        Ok(None)
    }
}

/// Classifies a token value: `400 InvalidArgument` (no reply header) when malformed.
pub fn classify(value: &str) -> Result<TokenKind, ApiError> {
    s3_lite::rdma::classify(value).map_err(|e| {
        ApiError::invalid_argument(format!("invalid {}: {e}", s3_lite::rdma::RDMA_TOKEN))
    })
}

/// Headers of a declined RDMA request.
pub fn decline_headers(token: &TokenKind) -> Vec<(String, String)> {
    let mut h = vec![(s3_lite::rdma::RDMA_REPLY.to_owned(), "501".to_owned())];
    if matches!(token, TokenKind::HipObjectRc(_)) {
        h.push((
            s3_lite::rdma::RDMA_PROTOCOL_STATUS.to_owned(),
            s3_lite::rdma::PROTOCOL_STATUS_UNSUPPORTED.to_owned(),
        ));
    }
    h
}

/// The `501 NotImplemented` of a declined PUT/UploadPart (or a GET under [`GetDecline::Error`]).
pub fn decline_error(token: &TokenKind) -> ApiError {
    let mut e = ApiError::not_implemented(format!(
        "this gateway cannot serve the request over RDMA (fabric none); resend without {}",
        s3_lite::rdma::RDMA_TOKEN
    ));
    e.headers = decline_headers(token);
    e
}
