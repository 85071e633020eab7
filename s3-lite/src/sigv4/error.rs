//! Typed errors of the signer and the verifier.
//!
//! Signing errors are caller mistakes or unusable input (a request without `Host`, a path with a
//! broken escape); verification errors describe why a peer's request is refused, and carry enough
//! context (the canonical request and string to sign we computed) for a gateway to answer
//! `SignatureDoesNotMatch` the way S3 does.

use thiserror::Error;

use crate::uri::DecodeError;

/// Why a request could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SigningError {
    /// SigV4 signs `host`; a request without it cannot be signed.
    #[error("the request has no Host header; SigV4 requires it")]
    MissingHost,
    /// The path contains a malformed percent-escape.
    #[error("bad request path: {0}")]
    BadPath(DecodeError),
    /// A query parameter contains a malformed percent-escape.
    #[error("bad query string: {0}")]
    BadQuery(DecodeError),
    /// A header name is not an HTTP token, or a value contains CR, LF or NUL.
    #[error("header {name:?} cannot be signed: {reason}")]
    InvalidHeader {
        /// The offending header name (as given).
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An `x-amz-date` header already present disagrees with the signing time.
    #[error("x-amz-date header {header:?} differs from the signing time {expected}")]
    DateMismatch {
        /// The value found in the request.
        header: String,
        /// The signing time.
        expected: String,
    },
    /// An `x-amz-content-sha256` header already present disagrees with the payload hash.
    #[error("x-amz-content-sha256 header {header:?} differs from the payload hash {expected}")]
    PayloadHashMismatch {
        /// The value found in the request.
        header: String,
        /// The payload hash being signed.
        expected: String,
    },
    /// A declared payload hash is neither 64 hex digits nor one of the S3 literals.
    #[error("payload hash {0:?} is neither 64 hex digits nor an S3 payload literal")]
    BadPayloadHash(String),
    /// Presigned URLs live between 1 second and 7 days (604800 s).
    #[error("expires {0} s is outside 1..=604800")]
    InvalidExpires(u64),
    /// A previous signature (chunk or trailer chaining) is not 64 lower-case hex digits.
    #[error("previous signature {0:?} is not 64 lower-case hex digits")]
    InvalidPreviousSignature(String),
    /// A trailing-header line is not `name:value`.
    #[error("trailer line {line} is not `name:value`: {text:?}")]
    BadTrailer {
        /// 1-based line number.
        line: usize,
        /// The line as given.
        text: String,
    },
    /// A date outside what `YYYYMMDDTHHMMSSZ` can express, or a malformed one.
    #[error("invalid signing date: {0}")]
    InvalidDate(&'static str),
    /// Region, service or access key is empty or contains `/`, whitespace or control bytes
    /// (they become part of the credential scope).
    #[error("invalid {what} {value:?}: must be non-empty without '/', whitespace or controls")]
    InvalidScopeComponent {
        /// Which component.
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// Something SigV4 defines that this signer does not implement.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

/// Why a signed request was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Neither an `Authorization` header nor presigned query parameters.
    #[error("the request carries no SigV4 authentication")]
    MissingAuthentication,
    /// Both an `Authorization` header and `X-Amz-Algorithm` in the query.
    #[error("the request carries both an Authorization header and presigned query parameters")]
    AmbiguousAuthentication,
    /// The algorithm is not `AWS4-HMAC-SHA256`.
    #[error("unsupported signature algorithm {0:?}")]
    UnsupportedAlgorithm(String),
    /// The `Authorization` header (or presigned query) does not follow the grammar.
    #[error("malformed authorization: {0}")]
    MalformedAuthorization(&'static str),
    /// The request time is missing or unparseable.
    #[error("missing or malformed request date: {0}")]
    MalformedDate(&'static str),
    /// The credential scope date is not the request date's day.
    #[error("credential scope date {scope} does not match request date {request}")]
    ScopeDateMismatch {
        /// `YYYYMMDD` from the credential.
        scope: String,
        /// `YYYYMMDD` of the request time.
        request: String,
    },
    /// The request time differs from the server clock by more than allowed.
    #[error("request time is {skew_secs} s away from the server clock")]
    RequestTimeTooSkewed {
        /// Absolute difference in seconds.
        skew_secs: u64,
    },
    /// A presigned URL is used after `X-Amz-Date + X-Amz-Expires`.
    #[error("presigned request expired")]
    Expired,
    /// `X-Amz-Expires` is not an integer in 1..=604800.
    #[error("X-Amz-Expires must be an integer in 1..=604800")]
    ExpiresOutOfRange,
    /// A header named in `SignedHeaders` is absent from the request.
    #[error("signed header {0:?} is not present in the request")]
    MissingSignedHeader(String),
    /// A header that must be signed (e.g. `host`) is not in `SignedHeaders`.
    #[error("header {0:?} must be signed")]
    HeaderNotSigned(String),
    /// The access key is unknown to the lookup.
    #[error("unknown access key {0:?}")]
    UnknownAccessKey(String),
    /// The credentials carry a session token and the request's token differs or is absent.
    #[error("security token missing or invalid")]
    InvalidSecurityToken,
    /// The request cannot be canonicalized (bad escapes, bad header bytes, ...).
    #[error("request cannot be canonicalized: {0}")]
    Canonicalization(SigningError),
    /// The signature is well formed but wrong. Carries what we computed, as S3 does in its
    /// `SignatureDoesNotMatch` error, so a client can compare with its own.
    #[error("the request signature does not match")]
    SignatureDoesNotMatch {
        /// Canonical request the verifier computed.
        canonical_request: String,
        /// String to sign the verifier computed.
        string_to_sign: String,
    },
}
