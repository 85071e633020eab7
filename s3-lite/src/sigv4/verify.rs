//! Verification of SigV4-signed requests (the gateway's side), header and presigned-query modes.
//!
//! The verifier recomputes the canonical request from what arrived, with the same code the
//! signer uses, and compares signatures in constant time. The result names the signed headers
//! so the caller can demand that particular headers (every `x-amz-rdma-*`) were covered.

use ring::hmac;

use super::auth_header::{self, ParsedAuthorization};
use super::canonical::{self, CanonicalHeaders, PayloadHash};
use super::error::VerifyError;
use super::hex;
use super::key::{SecretFingerprint, SigningKeyCache};
use super::presign::MAX_EXPIRES_SECS;
use super::sign::{self, ALGORITHM};
use super::time::AmzDate;
use crate::Request;
use crate::credentials::Credentials;
use crate::uri;

/// Which SigV4 form authenticated the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AuthMode {
    /// `Authorization` header.
    Header,
    /// Presigned URL (`X-Amz-*` query parameters).
    Query,
}

/// Who signed a verified request, and what the signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifiedPrincipal {
    /// The access key id that signed.
    pub access_key: String,
    /// Header or query mode.
    pub mode: AuthMode,
    /// Signed header names, lower-case, ascending.
    pub signed_headers: Vec<String>,
    /// Region of the credential scope (compare with the gateway's own).
    pub region: String,
    /// Service of the credential scope.
    pub service: String,
    /// The request time.
    pub date: AmzDate,
    /// The verified signature: the seed for aws-chunked bodies.
    pub signature: String,
}

impl VerifiedPrincipal {
    /// Whether `name` (lower-case) is covered by the signature.
    pub fn is_signed(&self, name: &str) -> bool {
        self.signed_headers
            .binary_search_by(|h| h.as_str().cmp(name))
            .is_ok()
    }
}

/// A verifier with its own signing-key cache. `Send + Sync`; share one per gateway.
#[derive(Debug, Default)]
pub struct Verifier {
    cache: SigningKeyCache,
}

/// Verifies `req` once, without a shared key cache. See [`Verifier::verify`].
pub fn verify_request(
    req: &Request,
    payload_hash_declared: &str,
    lookup: impl Fn(&str) -> Option<Credentials>,
    now: AmzDate,
    max_skew_secs: u64,
) -> Result<VerifiedPrincipal, VerifyError> {
    Verifier::new().verify(req, payload_hash_declared, lookup, now, max_skew_secs)
}

/// The authentication data of either mode, before the signature check.
struct Claim {
    auth: ParsedAuthorization,
    date: AmzDate,
    mode: AuthMode,
    canonical_query: String,
    token: Option<String>,
}

impl Verifier {
    /// A verifier with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Verifies `req` as it arrived.
    ///
    /// `payload_hash_declared` is the last line of the canonical request: the request's
    /// `x-amz-content-sha256` value (header mode), or `UNSIGNED-PAYLOAD` for a presigned request
    /// without that header. The caller must still check the body against it. `lookup` maps an
    /// access key to its credentials. `max_skew_secs` bounds |now - request time| in header
    /// mode and how far in the future a presigned URL may be dated.
    pub fn verify(
        &self,
        req: &Request,
        payload_hash_declared: &str,
        lookup: impl Fn(&str) -> Option<Credentials>,
        now: AmzDate,
        max_skew_secs: u64,
    ) -> Result<VerifiedPrincipal, VerifyError> {
        let payload =
            PayloadHash::parse(payload_hash_declared).map_err(VerifyError::Canonicalization)?;
        let claim = match (
            req.header("authorization"),
            query_has(&req.query, "X-Amz-Algorithm"),
        ) {
            (Some(_), true) => return Err(VerifyError::AmbiguousAuthentication),
            (None, false) => return Err(VerifyError::MissingAuthentication),
            (Some(h), false) => header_claim(req, h, now, max_skew_secs)?,
            (None, true) => query_claim(req, now, max_skew_secs)?,
        };
        let auth = &claim.auth;
        if claim.date.date_stamp() != auth.date {
            return Err(VerifyError::ScopeDateMismatch {
                scope: auth.date.clone(),
                request: claim.date.date_stamp().to_owned(),
            });
        }
        if !auth.signed_headers.iter().any(|h| h == "host") {
            return Err(VerifyError::HeaderNotSigned("host".into()));
        }
        for name in &auth.signed_headers {
            if req.header(name).is_none() {
                return Err(VerifyError::MissingSignedHeader(name.clone()));
            }
        }
        let creds = lookup(&auth.access_key)
            .ok_or_else(|| VerifyError::UnknownAccessKey(auth.access_key.clone()))?;
        if creds.session_token.as_deref() != claim.token.as_deref() {
            return Err(VerifyError::InvalidSecurityToken);
        }

        let headers = CanonicalHeaders::build(
            req.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            |n| {
                auth.signed_headers
                    .binary_search_by(|h| h.as_str().cmp(n))
                    .is_ok()
            },
        )
        .map_err(VerifyError::Canonicalization)?;
        let canonical_uri =
            canonical::canonical_uri(&req.path).map_err(VerifyError::Canonicalization)?;
        let canonical_request = canonical::assemble(
            &req.method,
            &canonical_uri,
            &claim.canonical_query,
            &headers,
            payload.as_str(),
        );
        let scope = auth.scope();
        let string_to_sign = sign::string_to_sign(claim.date, &scope, &canonical_request);
        let key = self.cache.key(
            &creds.secret_access_key,
            SecretFingerprint::of(&creds.secret_access_key),
            &auth.date,
            &auth.region,
            &auth.service,
        );
        let mut expected = [0u8; 32];
        expected.copy_from_slice(hmac::sign(&key, string_to_sign.as_bytes()).as_ref());
        let given = hex::decode_signature(&auth.signature).ok_or(
            VerifyError::MalformedAuthorization("signature is not 64 lower-case hex digits"),
        )?;
        if !hex::constant_time_eq(&expected, &given) {
            return Err(VerifyError::SignatureDoesNotMatch {
                canonical_request,
                string_to_sign,
            });
        }
        Ok(VerifiedPrincipal {
            access_key: claim.auth.access_key,
            mode: claim.mode,
            signed_headers: claim.auth.signed_headers,
            region: claim.auth.region,
            service: claim.auth.service,
            date: claim.date,
            signature: claim.auth.signature,
        })
    }
}

fn query_has(query: &str, key: &str) -> bool {
    query.split('&').any(|p| {
        let k = p.split_once('=').map_or(p, |(k, _)| k);
        uri::decode(k).is_ok_and(|k| k == key.as_bytes())
    })
}

fn skew(now: AmzDate, t: AmzDate) -> u64 {
    now.unix_secs().abs_diff(t.unix_secs())
}

fn header_claim(
    req: &Request,
    header: &str,
    now: AmzDate,
    max_skew: u64,
) -> Result<Claim, VerifyError> {
    let auth = auth_header::parse_authorization(header)?;
    let date_text = req
        .header("x-amz-date")
        .ok_or(VerifyError::MalformedDate("missing x-amz-date"))?;
    let date = AmzDate::parse(date_text.trim())
        .map_err(|_| VerifyError::MalformedDate("x-amz-date is not YYYYMMDDTHHMMSSZ"))?;
    let skew_secs = skew(now, date);
    if skew_secs > max_skew {
        return Err(VerifyError::RequestTimeTooSkewed { skew_secs });
    }
    let canonical_query =
        canonical::canonical_query(&req.query).map_err(VerifyError::Canonicalization)?;
    let token = req
        .header("x-amz-security-token")
        .map(|t| t.trim().to_owned());
    Ok(Claim {
        auth,
        date,
        mode: AuthMode::Header,
        canonical_query,
        token,
    })
}

fn query_claim(req: &Request, now: AmzDate, max_skew: u64) -> Result<Claim, VerifyError> {
    let malformed = VerifyError::MalformedAuthorization;
    let pairs = canonical::query_pairs(&req.query).map_err(VerifyError::Canonicalization)?;
    let mut found: [Option<String>; 7] = Default::default();
    for (k, v) in &pairs {
        let Some(i) = super::presign::AUTH_QUERY_PARAMS
            .iter()
            .position(|p| p == k)
        else {
            continue;
        };
        let value =
            uri::decode_utf8(v).map_err(|_| malformed("presigned parameter is not UTF-8"))?;
        let Some(slot) = found.get_mut(i) else {
            continue;
        };
        if slot.replace(value).is_some() {
            return Err(malformed("presigned parameter given twice"));
        }
    }
    let [
        algorithm,
        credential,
        date,
        expires,
        signed,
        signature,
        token,
    ] = found;
    let algorithm = algorithm.ok_or(malformed("missing X-Amz-Algorithm"))?;
    if algorithm != ALGORITHM {
        return Err(VerifyError::UnsupportedAlgorithm(
            algorithm.chars().take(64).collect(),
        ));
    }
    let cred =
        auth_header::parse_credential(&credential.ok_or(malformed("missing X-Amz-Credential"))?)?;
    let date_text = date.ok_or(VerifyError::MalformedDate("missing X-Amz-Date"))?;
    let date = AmzDate::parse(&date_text)
        .map_err(|_| VerifyError::MalformedDate("X-Amz-Date is not YYYYMMDDTHHMMSSZ"))?;
    let expires = expires.ok_or(VerifyError::ExpiresOutOfRange)?;
    let expires: u64 =
        if expires.len() <= 6 && !expires.is_empty() && expires.bytes().all(|b| b.is_ascii_digit())
        {
            expires
                .parse()
                .map_err(|_| VerifyError::ExpiresOutOfRange)?
        } else {
            return Err(VerifyError::ExpiresOutOfRange);
        };
    if !(1..=MAX_EXPIRES_SECS).contains(&expires) {
        return Err(VerifyError::ExpiresOutOfRange);
    }
    if date.unix_secs() > now.unix_secs().saturating_add(max_skew) {
        return Err(VerifyError::RequestTimeTooSkewed {
            skew_secs: skew(now, date),
        });
    }
    if now.unix_secs() > date.unix_secs().saturating_add(expires) {
        return Err(VerifyError::Expired);
    }
    let signed_headers = auth_header::parse_signed_headers(
        &signed.ok_or(malformed("missing X-Amz-SignedHeaders"))?,
    )?;
    let signature =
        auth_header::parse_signature(&signature.ok_or(malformed("missing X-Amz-Signature"))?)?;
    let canonical_query = canonical::join_sorted_query(
        pairs
            .into_iter()
            .filter(|(k, _)| k != "X-Amz-Signature")
            .collect(),
    );
    let token = token.or_else(|| {
        req.header("x-amz-security-token")
            .map(|t| t.trim().to_owned())
    });
    let auth = ParsedAuthorization {
        access_key: cred.access_key,
        date: cred.date,
        region: cred.region,
        service: cred.service,
        signed_headers,
        signature,
    };
    Ok(Claim {
        auth,
        date,
        mode: AuthMode::Query,
        canonical_query,
        token,
    })
}
