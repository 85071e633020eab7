//! Upstream mode's transparent path: a client request the gateway does not serve itself (no
//! RDMA token, no capability route) is forwarded to the upstream S3 store as it came,
//! re-addressed and re-signed with the gateway's upstream credentials, and the upstream's
//! answer goes back unchanged ([`crate::relay`]).
//!
//! What changes on the way: `Host` and the signature (the client signed for the gateway with
//! a gateway key), hop-by-hop headers, and an aws-chunked body, which is decoded here (its
//! trailing checksums become headers) so the upstream receives a plain, length-delimited
//! body. The path is rebuilt from the routed bucket and key, so a key's bytes reach the
//! upstream exactly as the client named them; the query string is passed on as sent (less
//! presigning parameters). The body is received and verified against the client's payload
//! hash before anything is sent, as for every upload the gateway accepts.

use s3_lite::Request;
use s3_lite::http::server::RequestHead;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::PayloadHash;

use crate::auth::Authenticated;
use crate::backend::upstream::Upstream;
use crate::body::{self, BodySource, ReceiveOptions};
use crate::error::ApiError;
use crate::handler::Respond;
use crate::route::Target;
use crate::server::Shared;

/// Request headers that are the client's business with the gateway, not the upstream's:
/// hop-by-hop headers, framing, and the client's signature.
const NOT_FORWARDED: &[&str] = &[
    "host",
    "authorization",
    "x-amz-date",
    "x-amz-content-sha256",
    "x-amz-security-token",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "expect",
];

/// Headers that describe an aws-chunked encoding, dropped once the body is decoded.
const CHUNKING: &[&str] = &["x-amz-decoded-content-length", "x-amz-trailer"];

/// Query parameters of a presigned URL (the client's signature, not part of the operation).
const PRESIGN_PARAMS: &[&str] = &[
    "x-amz-algorithm",
    "x-amz-credential",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-signedheaders",
    "x-amz-signature",
    "x-amz-security-token",
];

/// The query string without presigning parameters, otherwise byte for byte as sent.
pub fn forwarded_query(query: &str) -> String {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter(|p| {
            let name = p.split_once('=').map_or(*p, |(k, _)| k);
            !PRESIGN_PARAMS.iter().any(|x| name.eq_ignore_ascii_case(x))
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// The upstream request for `head`, addressed to `target` on `endpoint`, unsigned.
/// `decoded` says the body was aws-chunked and is sent decoded; `trailers` are its trailing
/// headers (checksums), sent as headers.
pub fn upstream_request(
    head: &RequestHead,
    target: &Target,
    endpoint: &Endpoint,
    decoded: bool,
    trailers: &[(String, String)],
) -> Result<Request, ApiError> {
    let build = ApiError::from_build;
    let (host, path) = match (&target.bucket, &target.key) {
        (None, _) => (endpoint.host_header(None), "/".to_owned()),
        (Some(b), None) => endpoint.bucket_location(b).map_err(build)?,
        (Some(b), Some(k)) => endpoint.object_location(b, k).map_err(build)?,
    };
    let mut req = Request::new(head.method.clone(), path);
    req.query = forwarded_query(&head.query);
    req.add_header("Host", host);
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if NOT_FORWARDED.contains(&lower.as_str()) || s3_lite::rdma::is_rdma_header(&lower) {
            continue;
        }
        if decoded && CHUNKING.contains(&lower.as_str()) {
            continue;
        }
        if decoded && lower == "content-encoding" {
            let rest: Vec<&str> = value
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
                .collect();
            if !rest.is_empty() {
                req.add_header(name.clone(), rest.join(", "));
            }
            continue;
        }
        req.add_header(name.clone(), value.clone());
    }
    for (name, value) in trailers {
        if req.header(name).is_none() {
            req.add_header(name.clone(), value.trim());
        }
    }
    Ok(req)
}

/// The headers that describe the request body. On CompleteMultipartUpload
/// (`POST ?uploadId=`) the `x-amz-checksum-*` headers are the whole object's checksum, not the
/// XML body's, so they are left to the upstream.
fn body_checksum_headers(head: &RequestHead) -> Vec<(String, String)> {
    let complete = head.method == "POST"
        && head
            .query
            .split('&')
            .any(|p| p.split_once('=').map_or(p, |(k, _)| k) == "uploadId");
    head.headers
        .iter()
        .filter(|(n, _)| !(complete && n.to_ascii_lowercase().starts_with("x-amz-checksum-")))
        .cloned()
        .collect()
}

/// Whether the request carries a body to receive.
fn has_body(head: &RequestHead) -> bool {
    head.content_length() != Some(0)
}

/// Forwards the request to `upstream` and relays its answer to `out`.
pub fn forward(
    shared: &Shared,
    upstream: &Upstream,
    head: &RequestHead,
    auth: &Authenticated,
    target: &Target,
    body: &mut dyn BodySource,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let signed_chunks = crate::ops::signed_chunks::signing_for(&shared.auth, head, auth)?;
    let aws_chunked = matches!(
        auth.payload,
        PayloadHash::StreamingUnsignedTrailer
            | PayloadHash::StreamingSigned
            | PayloadHash::StreamingSignedTrailer
    );
    let mut spooled = None;
    if has_body(head) {
        let decoded_len =
            match head.header("x-amz-decoded-content-length") {
                Some(v) => Some(v.trim().parse::<u64>().map_err(|_| {
                    ApiError::invalid_argument("invalid x-amz-decoded-content-length")
                })?),
                None => None,
            };
        let opts = ReceiveOptions {
            aws_chunked,
            decoded_len,
            max_len: shared.config.max_object_size,
        };
        let dir = crate::backend::Backend::spool_dir(upstream);
        let (s, payload) = match signed_chunks {
            // Every chunk signature checked: the bytes are what the client signed.
            Some(signing) => (
                crate::ops::signed_chunks::receive(
                    body,
                    signing,
                    head,
                    dir,
                    shared.config.max_object_size,
                )?,
                PayloadHash::Unsigned,
            ),
            None => (body::receive(body, dir, opts)?, auth.payload.clone()),
        };
        // The gateway's own check of what the client signed (payload hash, Content-MD5,
        // x-amz-checksum-*); the upstream checks the headers again.
        body::verify(&s, &body_checksum_headers(head), &payload)?;
        spooled = Some(s);
    }
    let trailers = spooled
        .as_ref()
        .map(|s| s.trailers.clone())
        .unwrap_or_default();
    let req = upstream_request(head, target, upstream.endpoint(), aws_chunked, &trailers)?;
    let payload = match &auth.payload {
        PayloadHash::Hex(h) => PayloadHash::Hex(h.clone()),
        _ if spooled.is_none() => PayloadHash::Hex(s3_lite::sigv4::EMPTY_SHA256.into()),
        _ => PayloadHash::Unsigned,
    };
    upstream.relay(
        req,
        target.bucket.as_deref(),
        payload,
        spooled.as_mut(),
        out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presign_parameters_are_dropped_and_the_rest_kept_verbatim() {
        assert_eq!(
            forwarded_query("list-type=2&prefix=a%25b&X-Amz-Signature=ff&X-Amz-Date=1"),
            "list-type=2&prefix=a%25b"
        );
        assert_eq!(forwarded_query("delete"), "delete");
        assert_eq!(forwarded_query(""), "");
    }
}
