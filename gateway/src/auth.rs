//! SigV4 authentication of incoming requests with the configured keys.
//!
//! Every request must be signed (header or presigned-query mode); anonymous requests are
//! refused. Beyond the signature itself the gateway demands that every `x-amz-rdma-*` header
//! present is covered by the signature (docs/protocol.md, Signing the RDMA headers: otherwise a middlebox could
//! rewrite a token or target without breaking SigV4), that the scope names this gateway's
//! region and the `s3` service, and it hands the declared payload hash on so the body can be
//! checked against it once received.
//!
//! Two relaxations, on the hipobj-rc-v2 control routes (`/.hipobj-rc/*`) only, for the
//! third-party v2 clients seen in the wild (docs/interop.md): a body-less request without
//! `x-amz-content-sha256` is verified against the empty body's hash (what those clients sign),
//! and the credential scope may name the service `hipobj` as well as `s3`. Every other route
//! stays strict.

use std::collections::HashMap;

use s3_lite::credentials::Credentials;
use s3_lite::http::server::RequestHead;
use s3_lite::sigv4::{AmzDate, PayloadHash, SigningError, Verifier, VerifyError};

use crate::error::ApiError;
use crate::time::now_secs;

/// Path prefix of the hipobj-rc-v2 control routes (the only routes the relaxations apply to).
use s3_lite::rdma::v2::ROUTE_PREFIX as V2_ROUTE_PREFIX;

/// Credential-scope services accepted on the v2 control routes (`s3` everywhere else).
pub const V2_SERVICES: [&str; 2] = ["s3", "hipobj"];

/// S3's limit on clock skew (15 minutes).
pub const MAX_SKEW_SECS: u64 = 900;

/// An authenticated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    /// The access key that signed (the principal RDMA sessions will be bound to).
    pub access_key: String,
    /// The payload hash the signature covers; the body is checked against it.
    pub payload: PayloadHash,
}

/// The gateway's key table and verifier.
#[derive(Debug)]
pub struct Authenticator {
    keys: HashMap<String, Credentials>,
    verifier: Verifier,
    region: String,
}

fn query_has(query: &str, key: &str) -> bool {
    query
        .split('&')
        .any(|p| p.split_once('=').map_or(p, |(k, _)| k) == key)
}

impl Authenticator {
    /// Accepts signatures by `keys` for `region`.
    pub fn new(keys: Vec<Credentials>, region: impl Into<String>) -> Self {
        let keys = keys
            .into_iter()
            .map(|c| (c.access_key_id.clone(), c))
            .collect();
        Self {
            keys,
            verifier: Verifier::new(),
            region: region.into(),
        }
    }

    /// The region signatures must be scoped to.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// A signer for `access_key`'s credentials in this gateway's region (checking the chunk
    /// signatures of a signed aws-chunked body).
    pub fn signer_for(&self, access_key: &str) -> Option<s3_lite::sigv4::Signer> {
        let creds = self.keys.get(access_key)?.clone();
        s3_lite::sigv4::Signer::new(creds, self.region.clone(), "s3").ok()
    }

    /// Verifies `head`'s signature against the clock.
    pub fn authenticate(&self, head: &RequestHead) -> Result<Authenticated, ApiError> {
        self.authenticate_at(head, now_secs())
    }

    /// Verifies `head`'s signature as of `now` (Unix seconds).
    pub fn authenticate_at(&self, head: &RequestHead, now: u64) -> Result<Authenticated, ApiError> {
        let presigned = query_has(&head.query, "X-Amz-Algorithm");
        let v2_route = head.path.starts_with(V2_ROUTE_PREFIX);
        let bodiless = head.content_length() == Some(0);
        let declared = match (
            head.header("x-amz-content-sha256"),
            head.header("authorization"),
            presigned,
        ) {
            (Some(v), _, _) => v.trim().to_owned(),
            (None, _, true) => "UNSIGNED-PAYLOAD".to_owned(),
            // A v2 control request carries no body: its signature covers the empty body.
            (None, Some(_), false) if v2_route && bodiless => {
                s3_lite::sigv4::EMPTY_SHA256.to_owned()
            }
            (None, Some(_), false) => {
                return Err(ApiError::new(
                    400,
                    "InvalidRequest",
                    "Missing required header for this request: x-amz-content-sha256",
                ));
            }
            (None, None, false) => {
                return Err(ApiError::new(
                    403,
                    "AccessDenied",
                    "Anonymous access is not allowed: sign the request with SigV4",
                ));
            }
        };
        let payload = PayloadHash::parse(&declared).map_err(|e| match e {
            SigningError::Unsupported(what) => ApiError::not_implemented(what),
            _ => ApiError::new(400, "InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-..., or a valid sha256 value."),
        })?;
        let now = AmzDate::from_unix_secs(now).map_err(ApiError::internal)?;
        let req = head.to_request();
        let principal = self
            .verifier
            .verify(
                &req,
                &declared,
                |k| self.keys.get(k).cloned(),
                now,
                MAX_SKEW_SECS,
            )
            .map_err(|e| map_verify_error(e, presigned))?;
        let service_ok = if v2_route {
            V2_SERVICES.contains(&principal.service.as_str())
        } else {
            principal.service == "s3"
        };
        if !service_ok {
            let expecting = if v2_route { "'s3' or 'hipobj'" } else { "'s3'" };
            return Err(ApiError::new(
                400,
                "AuthorizationHeaderMalformed",
                format!(
                    "the service '{}' is wrong; expecting {expecting}",
                    principal.service
                ),
            ));
        }
        if principal.region != self.region {
            return Err(ApiError::new(
                400,
                "AuthorizationHeaderMalformed",
                format!("The authorization header is malformed; the region '{}' is wrong; expecting '{}'", principal.region, self.region),
            )
            .with_detail("Region", self.region.clone()));
        }
        for (name, _) in &head.headers {
            if s3_lite::rdma::is_rdma_header(name)
                && !principal.is_signed(&name.to_ascii_lowercase())
            {
                return Err(ApiError::new(
                    403,
                    "AccessDenied",
                    format!(
                        "header {} must be signed (SignedHeaders)",
                        name.to_ascii_lowercase()
                    ),
                ));
            }
        }
        Ok(Authenticated {
            access_key: principal.access_key,
            payload,
        })
    }
}

fn map_verify_error(e: VerifyError, presigned: bool) -> ApiError {
    let malformed = if presigned {
        "AuthorizationQueryParametersError"
    } else {
        "AuthorizationHeaderMalformed"
    };
    match e {
        VerifyError::MissingAuthentication => ApiError::new(403, "AccessDenied", "Anonymous access is not allowed"),
        VerifyError::UnknownAccessKey(k) => {
            ApiError::new(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.").with_detail("AWSAccessKeyId", k)
        }
        VerifyError::SignatureDoesNotMatch { canonical_request, string_to_sign } => ApiError::new(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
        )
        .with_detail("StringToSign", string_to_sign)
        .with_detail("CanonicalRequest", canonical_request),
        VerifyError::RequestTimeTooSkewed { skew_secs } => ApiError::new(
            403,
            "RequestTimeTooSkewed",
            format!("The difference between the request time and the current time is too large ({skew_secs} s)."),
        )
        .with_detail("MaxAllowedSkewMilliseconds", (MAX_SKEW_SECS * 1000).to_string()),
        VerifyError::Expired => ApiError::new(403, "AccessDenied", "Request has expired"),
        VerifyError::InvalidSecurityToken => ApiError::new(403, "InvalidToken", "The provided token is malformed or otherwise invalid."),
        VerifyError::MalformedDate(m) => ApiError::new(403, "AccessDenied", format!("AWS authentication requires a valid Date or x-amz-date header: {m}")),
        VerifyError::MissingSignedHeader(h) | VerifyError::HeaderNotSigned(h) => {
            ApiError::new(403, "AccessDenied", format!("signed header problem: {h}"))
        }
        VerifyError::AmbiguousAuthentication => {
            ApiError::invalid_argument("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization header should be specified")
        }
        VerifyError::Canonicalization(err) => ApiError::new(400, "InvalidRequest", format!("request cannot be canonicalized: {err}")),
        other => ApiError::new(400, malformed, other.to_string()),
    }
}
