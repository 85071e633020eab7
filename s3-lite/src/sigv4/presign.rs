//! Query-mode signing: presigned URLs.
//!
//! The authentication parameters (`X-Amz-Algorithm`, `-Credential`, `-Date`, `-Expires`,
//! `-SignedHeaders`, and `-Security-Token` for session credentials) join the query *before*
//! canonicalization; `X-Amz-Signature` is appended afterwards and is never signed.

use super::canonical::{self, CanonicalHeaders, PayloadHash};
use super::error::SigningError;
use super::sign::{self, ALGORITHM, SessionTokenMode, Signer, SigningOptions, SigningOutput};
use super::time::AmzDate;
use crate::Request;
use crate::uri;

/// Longest lifetime S3 accepts for a presigned URL: 7 days.
pub const MAX_EXPIRES_SECS: u64 = 604_800;

/// Query parameters owned by query-mode signing; any already in the request are replaced.
pub const AUTH_QUERY_PARAMS: [&str; 7] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
    "X-Amz-Security-Token",
];

/// A presigned request: its query carries the signature; send it (or `request.target()` as a
/// URL path) without an `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Presigned {
    /// The request with the authentication parameters appended to its query.
    pub request: Request,
    /// The stages of the signature (`authorization` is `None`).
    pub output: SigningOutput,
}

/// Whether an encoded query piece `key[=value]` names one of [`AUTH_QUERY_PARAMS`].
fn is_auth_piece(piece: &str) -> bool {
    let key = piece.split_once('=').map_or(piece, |(k, _)| k);
    uri::decode(key).is_ok_and(|k| {
        AUTH_QUERY_PARAMS
            .iter()
            .any(|p| p.as_bytes() == k.as_slice())
    })
}

fn push_param(query: &mut String, key: &str, value: &str) {
    if !query.is_empty() {
        query.push('&');
    }
    query.push_str(key);
    query.push('=');
    uri::encode_bytes(value.as_bytes(), false, query);
}

impl Signer {
    /// Presigns `req` with `UNSIGNED-PAYLOAD` and default options, valid `expires_secs`
    /// (1..=604800) seconds from `now`.
    pub fn presign(
        &self,
        req: &Request,
        expires_secs: u64,
        now: AmzDate,
    ) -> Result<Presigned, SigningError> {
        self.presign_with(
            req,
            &PayloadHash::Unsigned,
            &SigningOptions::default(),
            expires_secs,
            now,
        )
    }

    /// Presigns `req` (query mode). Every header present is signed (`Host` is required; an
    /// `Authorization` header is dropped). `payload` is the canonical request's last line,
    /// normally [`PayloadHash::Unsigned`]. `options.add_content_sha256_header` is ignored: query
    /// mode adds no headers.
    pub fn presign_with(
        &self,
        req: &Request,
        payload: &PayloadHash,
        options: &SigningOptions,
        expires_secs: u64,
        now: AmzDate,
    ) -> Result<Presigned, SigningError> {
        if !(1..=MAX_EXPIRES_SECS).contains(&expires_secs) {
            return Err(SigningError::InvalidExpires(expires_secs));
        }
        let mut signed = req.clone();
        signed.remove_header("authorization");
        sign::prepare_common(&signed)?;
        let headers = CanonicalHeaders::build(
            signed.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            |_| true,
        )?;
        let scope = self.scope(now);
        let credential = format!("{}/{scope}", self.credentials().access_key_id);

        let mut query = String::with_capacity(signed.query.len() + 256);
        for piece in signed
            .query
            .split('&')
            .filter(|p| !p.is_empty() && !is_auth_piece(p))
        {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str(piece);
        }
        push_param(&mut query, "X-Amz-Algorithm", ALGORITHM);
        push_param(&mut query, "X-Amz-Credential", &credential);
        push_param(&mut query, "X-Amz-Date", now.as_str());
        push_param(&mut query, "X-Amz-Expires", &expires_secs.to_string());
        push_param(&mut query, "X-Amz-SignedHeaders", &headers.signed_headers);
        let token = self.credentials().session_token.clone();
        if let (Some(t), SessionTokenMode::Signed) = (&token, options.session_token) {
            push_param(&mut query, "X-Amz-Security-Token", t);
        }

        let canonical_request = canonical::assemble(
            &signed.method,
            &canonical::canonical_uri(&signed.path)?,
            &canonical::canonical_query(&query)?,
            &headers,
            payload.as_str(),
        );
        let string_to_sign = sign::string_to_sign(now, &scope, &canonical_request);
        let signature = self.sign_string(now, &string_to_sign);
        push_param(&mut query, "X-Amz-Signature", &signature);
        if let (Some(t), SessionTokenMode::AppendedUnsigned) = (&token, options.session_token) {
            push_param(&mut query, "X-Amz-Security-Token", t);
        }
        signed.query = query;
        Ok(Presigned {
            request: signed,
            output: SigningOutput {
                canonical_request,
                string_to_sign,
                signature,
                signed_headers: headers.signed_headers,
                scope,
                authorization: None,
            },
        })
    }
}
