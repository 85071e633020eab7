//! The capability route, `GET /.hipobj/rc/capabilities`: one cheap, signed question a client
//! asks before choosing its data path ("does this endpoint carry payloads over RDMA?").
//!
//! A plain S3 server answers the same request with an error (the path names the invalid
//! bucket `.hipobj`), so a client that treats anything but `200` as "no RDMA" pays one small
//! round trip against any S3 store and never uploads twice. This gateway answers (after
//! SigV4 authentication, like every route):
//!
//! - with a fabric: `200`, `x-amz-rdma-fabric: soft|verbs`, `x-amz-rdma-protocol:
//!   rc-persistent` and `x-amz-rdma-dialects` (the pairing dialects served: `rc-persistent`,
//!   plus `hipobj-rc-v2` when the fabric has the v2 session service, then also
//!   `x-amz-rdma-capabilities: mp`: UploadPart over v2 is served), empty body;
//! - with fabric `none`: `501 NotImplemented` with `x-amz-rdma-reply: 501`.

use s3_lite::http::server::RequestHead;

use crate::error::ApiError;
use crate::handler::Respond;
use crate::server::Shared;

/// Handles the capability route (already authenticated).
pub fn handle(shared: &Shared, head: &RequestHead, out: &mut dyn Respond) -> Result<(), ApiError> {
    if head.method != "GET" && head.method != "HEAD" {
        return Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "The specified method is not allowed against this resource.",
        ));
    }
    let fabric = shared.rdma.fabric();
    if fabric == "none" {
        let mut e = ApiError::not_implemented(
            "this gateway has no RDMA fabric (fabric none); use plain HTTP",
        );
        e.headers
            .push((s3_lite::rdma::RDMA_REPLY.to_owned(), "501".to_owned()));
        return Err(e);
    }
    let mut dialects = crate::connect::PROTOCOL.to_owned();
    if shared.rdma.rc_v2().is_some() {
        dialects.push(',');
        dialects.push_str(s3_lite::rdma::v2::PROTOCOL);
    }
    let headers = vec![
        (
            s3_lite::rdma::pairing::RDMA_FABRIC.to_owned(),
            fabric.to_owned(),
        ),
        (
            s3_lite::rdma::RDMA_PROTOCOL.to_owned(),
            crate::connect::PROTOCOL.to_owned(),
        ),
        (s3_lite::rdma::pairing::RDMA_DIALECTS.to_owned(), dialects),
    ];
    let mut headers = headers;
    if shared.rdma.rc_v2().is_some() {
        headers.push(crate::rdma_target::v2::capabilities());
    }
    out.head(200, headers, s3_lite::http::BodyFraming::Length(0))?;
    Ok(())
}
