//! AWS Signature Version 4, the way S3 applies it.
//!
//! Sans-IO like the rest of the crate: the signing time is an argument ([`AmzDate`]), nothing
//! reads a clock. One [`Signer`] per identity, region and service caches the derived signing
//! key, so per request only the canonical-request SHA-256 and one HMAC remain.
//!
//! - Header mode: [`Signer::sign_headers`] / [`Signer::sign_headers_with`] add `X-Amz-Date`,
//!   `X-Amz-Content-Sha256`, `X-Amz-Security-Token` and `Authorization`.
//! - Query mode (presigned URLs): [`Signer::presign`] / [`Signer::presign_with`].
//! - aws-chunked streaming: [`Signer::sign_chunk`], [`Signer::sign_trailer`].
//! - Verification (gateway side): [`parse_authorization`], [`verify_request`], [`Verifier`].
//!
//! Every stage (canonical request, string to sign, signature) is returned in
//! [`SigningOutput`], which is what `hipobj debug sigv4` prints: the CLI calls this signer and
//! nothing else, so what it shows is what the client sends.
//!
//! S3 rules that differ from generic SigV4: the path is decoded once and re-encoded (never
//! normalized, never double-encoded); `+` in a query is a literal plus.

mod auth_header;
mod canonical;
mod error;
mod hex;
mod key;
mod presign;
mod sign;
mod streaming;
mod time;
mod verify;

pub use auth_header::{
    MAX_ACCESS_KEY_LEN, MAX_AUTHORIZATION_LEN, MAX_HEADER_NAME_LEN, MAX_SCOPE_PART_LEN,
    MAX_SIGNED_HEADERS, ParsedAuthorization, parse_authorization,
};
pub use canonical::{
    CanonicalHeaders, EMPTY_SHA256, PayloadHash, canonical_query, canonical_uri,
    normalize_header_value, query_pairs,
};
pub use error::{SigningError, VerifyError};
pub use key::{SecretFingerprint, SigningKeyCache, derive_signing_key};
pub use presign::{AUTH_QUERY_PARAMS, MAX_EXPIRES_SECS, Presigned};
pub use sign::{
    ALGORITHM, SessionTokenMode, Signer, SigningOptions, SigningOutput, string_to_sign,
};
pub use streaming::{
    CHUNK_ALGORITHM, ChainedSignature, MAX_TRAILER_LINES, TRAILER_ALGORITHM, canonical_trailer,
};
pub use time::{AmzDate, http_date, iso8601};
pub use verify::{AuthMode, VerifiedPrincipal, Verifier, verify_request};
