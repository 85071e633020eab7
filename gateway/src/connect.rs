//! The `rc-persistent` connect route, `POST /.hipobj/rc/connect` (see [`crate::rdma_target`]).
//!
//! Request (SigV4-signed like every request; every `x-amz-rdma-*` header must be signed,
//! which [`crate::auth`] enforces): `x-amz-rdma-token: <88-hex client RC token>` (QPN, GID)
//! and `x-amz-rdma-psn: <6 hex>` (the client's first send PSN), optionally
//! `x-amz-rdma-fabric: soft|verbs` (the client QP's fabric; a mismatch is declined). Answer
//! `200` with `x-amz-rdma-reply: 200:<88-hex gateway token>`, `x-amz-rdma-psn`,
//! `x-amz-rdma-qpn`, `x-amz-rdma-session` (the connection id, bound to the signing access key),
//! `x-amz-rdma-fabric`, and on the soft fabric `x-amz-rdma-soft-addr` (where the client's QP
//! dials). A gateway without connections, or of the other fabric, answers `501` with
//! `x-amz-rdma-reply: 501`, so the client learns to use HTTP.

use s3_lite::http::server::RequestHead;
use s3_lite::rdma::{RcToken, v2};

use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::handler::Respond;
use crate::rdma::ConnectRequest;
use crate::server::Shared;

/// `x-amz-rdma-protocol` value of the connect reply.
pub use s3_lite::rdma::pairing::PROTOCOL;

/// Handles the connect route (already authenticated).
pub fn handle(
    shared: &Shared,
    head: &RequestHead,
    auth: &Authenticated,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    if head.method != "POST" {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "The specified method is not allowed against this resource.",
        ));
    }
    let token = head.header(s3_lite::rdma::RDMA_TOKEN).ok_or_else(|| {
        ApiError::invalid_argument(format!("{} is required", s3_lite::rdma::RDMA_TOKEN))
    })?;
    let token = RcToken::decode(token.trim()).map_err(|e| {
        ApiError::invalid_argument(format!("invalid {}: {e}", s3_lite::rdma::RDMA_TOKEN))
    })?;
    let psn = head
        .header(s3_lite::rdma::RDMA_PSN)
        .ok_or_else(|| {
            ApiError::invalid_argument(format!("{} is required", s3_lite::rdma::RDMA_PSN))
        })
        .and_then(|v| {
            v2::Psn::parse(v.trim()).map_err(|e| {
                ApiError::invalid_argument(format!("invalid {}: {e}", s3_lite::rdma::RDMA_PSN))
            })
        })?;
    let req = ConnectRequest {
        token: &token,
        psn: psn.get(),
        principal: &auth.access_key,
        fabric: head.header(s3_lite::rdma::pairing::RDMA_FABRIC),
        soft_features: head.header(s3_lite::rdma::pairing::RDMA_SOFT_FEATURES),
    };
    let Some(reply) = shared.rdma.connect(&req)? else {
        let mut e = ApiError::not_implemented(
            "this gateway has no RDMA fabric (fabric none); use plain HTTP",
        );
        e.headers
            .push((s3_lite::rdma::RDMA_REPLY.to_owned(), "501".to_owned()));
        return Err(e);
    };
    let psn =
        v2::Psn::new(reply.psn).map_err(|e| ApiError::internal(format!("gateway PSN: {e}")))?;
    let headers = vec![
        (s3_lite::rdma::RDMA_PROTOCOL.to_owned(), PROTOCOL.to_owned()),
        (
            s3_lite::rdma::RDMA_REPLY.to_owned(),
            format!("200:{}", reply.token.encode()),
        ),
        (s3_lite::rdma::RDMA_PSN.to_owned(), psn.encode()),
        (
            s3_lite::rdma::RDMA_QPN.to_owned(),
            v2::encode_hex(u64::from(reply.token.qpn)),
        ),
        (s3_lite::rdma::RDMA_SESSION.to_owned(), reply.session),
        (
            s3_lite::rdma::pairing::RDMA_FABRIC.to_owned(),
            reply.fabric.as_str().to_owned(),
        ),
    ];
    let mut headers = headers;
    if let Some(a) = reply.soft_addr {
        headers.push((
            s3_lite::rdma::pairing::RDMA_SOFT_ADDR.to_owned(),
            a.to_string(),
        ));
    }
    out.head(200, headers, s3_lite::http::BodyFraming::Length(0))?;
    Ok(())
}
