//! The signer: header-mode signing (the `Authorization` header) and the shared pieces the
//! query-mode, streaming and verification paths reuse.

use ring::{digest, hmac};

use super::canonical::{self, CanonicalHeaders, PayloadHash};
use super::error::SigningError;
use super::hex;
use super::key::{SecretFingerprint, SigningKeyCache};
use super::time::AmzDate;
use crate::Request;
use crate::credentials::Credentials;

/// The SigV4 algorithm name, first line of every string to sign.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// How the session token of temporary credentials takes part in signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SessionTokenMode {
    /// Added (`X-Amz-Security-Token` header or query parameter) and signed. What S3 expects.
    #[default]
    Signed,
    /// Added after signing, not covered by the signature (some services want this; useful to
    /// reproduce a client that does it).
    AppendedUnsigned,
}

/// Knobs of one signing call. The defaults are what an S3 client sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SigningOptions {
    /// Header mode: add `X-Amz-Content-Sha256: <payload hash>` when the request has none.
    /// S3 requires it; `false` reproduces clients that leave it out (the payload hash is still
    /// the last line of the canonical request).
    pub add_content_sha256_header: bool,
    /// What to do with the session token, when the credentials have one.
    pub session_token: SessionTokenMode,
}

impl Default for SigningOptions {
    fn default() -> Self {
        Self {
            add_content_sha256_header: true,
            session_token: SessionTokenMode::Signed,
        }
    }
}

impl SigningOptions {
    /// Sets [`SigningOptions::add_content_sha256_header`].
    pub fn with_content_sha256_header(mut self, add: bool) -> Self {
        self.add_content_sha256_header = add;
        self
    }

    /// Sets [`SigningOptions::session_token`].
    pub fn with_session_token(mut self, mode: SessionTokenMode) -> Self {
        self.session_token = mode;
        self
    }
}

/// Every stage of one signature, so `hipobj debug sigv4` and error reports can show them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SigningOutput {
    /// The canonical request (no trailing newline).
    pub canonical_request: String,
    /// The string to sign.
    pub string_to_sign: String,
    /// 64 lower-case hex digits.
    pub signature: String,
    /// `a;b;c`, the signed header names.
    pub signed_headers: String,
    /// `YYYYMMDD/region/service/aws4_request`.
    pub scope: String,
    /// Header mode: the `Authorization` value that was added. `None` in query mode.
    pub authorization: Option<String>,
}

/// Signs requests for one identity, region and service.
///
/// Thread safety: `Send + Sync`; all methods take `&self`. The signing key is derived once per
/// day into an internal [`SigningKeyCache`], so one signer should be kept per endpoint and
/// shared (e.g. in an `Arc`) rather than rebuilt per request.
pub struct Signer {
    credentials: Credentials,
    region: String,
    service: String,
    fingerprint: SecretFingerprint,
    cache: SigningKeyCache,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("credentials", &self.credentials)
            .field("region", &self.region)
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

fn check_scope_part(what: &'static str, value: &str) -> Result<(), SigningError> {
    let bad = value.is_empty()
        || value
            .bytes()
            .any(|b| b == b'/' || b.is_ascii_whitespace() || b.is_ascii_control());
    if bad {
        Err(SigningError::InvalidScopeComponent {
            what,
            value: value.to_owned(),
        })
    } else {
        Ok(())
    }
}

impl Signer {
    /// A signer for `credentials` in `region` (e.g. `us-east-1`) for `service` (`s3`).
    pub fn new(
        credentials: Credentials,
        region: impl Into<String>,
        service: impl Into<String>,
    ) -> Result<Self, SigningError> {
        let (region, service) = (region.into(), service.into());
        check_scope_part("access key", &credentials.access_key_id)?;
        check_scope_part("region", &region)?;
        check_scope_part("service", &service)?;
        let fingerprint = SecretFingerprint::of(&credentials.secret_access_key);
        Ok(Self {
            credentials,
            region,
            service,
            fingerprint,
            cache: SigningKeyCache::new(),
        })
    }

    /// The identity this signer signs as.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The region of the credential scope.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The service of the credential scope.
    pub fn service(&self) -> &str {
        &self.service
    }

    /// `YYYYMMDD/region/service/aws4_request`.
    pub fn scope(&self, now: AmzDate) -> String {
        format!(
            "{}/{}/{}/aws4_request",
            now.date_stamp(),
            self.region,
            self.service
        )
    }

    /// HMAC of `string_to_sign` under the (cached) signing key of `now`'s day, as hex.
    pub(crate) fn sign_string(&self, now: AmzDate, string_to_sign: &str) -> String {
        let key = self.cache.key(
            &self.credentials.secret_access_key,
            self.fingerprint,
            now.date_stamp(),
            &self.region,
            &self.service,
        );
        hex::encode(hmac::sign(&key, string_to_sign.as_bytes()).as_ref())
    }

    /// Signs in header mode with the default options: see [`Signer::sign_headers_with`].
    pub fn sign_headers(
        &self,
        req: &mut Request,
        payload: &PayloadHash,
        now: AmzDate,
    ) -> Result<SigningOutput, SigningError> {
        self.sign_headers_with(req, payload, &SigningOptions::default(), now)
    }

    /// Signs `req` in header mode.
    ///
    /// Adds `X-Amz-Date` (an existing one must equal `now`), `X-Amz-Content-Sha256` (per
    /// options; an existing one must equal `payload`), `X-Amz-Security-Token` (session
    /// credentials) and `Authorization` (an existing one is replaced, never signed). Every
    /// other header present is signed; `Host` is required. On error `req` is left unchanged.
    pub fn sign_headers_with(
        &self,
        req: &mut Request,
        payload: &PayloadHash,
        options: &SigningOptions,
        now: AmzDate,
    ) -> Result<SigningOutput, SigningError> {
        // Validate and canonicalize without touching `req`, then commit: on error the request
        // is unchanged, and the hot path clones nothing.
        prepare_common(req)?;
        let date_present = match req.header("x-amz-date") {
            Some(d) if d.trim() != now.as_str() => {
                return Err(SigningError::DateMismatch {
                    header: d.to_owned(),
                    expected: now.to_string(),
                });
            }
            Some(_) => true,
            None => false,
        };
        let add_sha = match req.header("x-amz-content-sha256") {
            Some(h) if h.trim() != payload.as_str() => {
                return Err(SigningError::PayloadHashMismatch {
                    header: h.to_owned(),
                    expected: payload.as_str().to_owned(),
                });
            }
            Some(_) => false,
            None => options.add_content_sha256_header,
        };
        let token = self.credentials.session_token.as_deref();
        let signed_token = token.filter(|_| options.session_token == SessionTokenMode::Signed);
        let mut added: Vec<(&str, &str)> = Vec::with_capacity(3);
        if !date_present {
            added.push(("X-Amz-Date", now.as_str()));
        }
        if add_sha {
            added.push(("X-Amz-Content-Sha256", payload.as_str()));
        }
        if let Some(t) = signed_token {
            added.push(("X-Amz-Security-Token", t));
        }
        let existing = req
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .filter(|(n, _)| {
                let replaced = n.eq_ignore_ascii_case("authorization")
                    || (token.is_some() && n.eq_ignore_ascii_case("x-amz-security-token"));
                !replaced
            });
        let headers = CanonicalHeaders::build(existing.chain(added.iter().copied()), |_| true)?;
        let canonical_request = canonical::assemble(
            &req.method,
            &canonical::canonical_uri(&req.path)?,
            &canonical::canonical_query(&req.query)?,
            &headers,
            payload.as_str(),
        );
        let scope = self.scope(now);
        let string_to_sign = string_to_sign(now, &scope, &canonical_request);
        let signature = self.sign_string(now, &string_to_sign);
        let authorization = format!(
            "{ALGORITHM} Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
            self.credentials.access_key_id, headers.signed_headers
        );

        req.remove_header("authorization");
        if token.is_some() {
            req.remove_header("x-amz-security-token");
        }
        for (n, v) in added {
            req.add_header(n, v);
        }
        req.add_header("Authorization", authorization.as_str());
        if let (Some(t), SessionTokenMode::AppendedUnsigned) = (token, options.session_token) {
            req.add_header("X-Amz-Security-Token", t);
        }
        Ok(SigningOutput {
            canonical_request,
            string_to_sign,
            signature,
            signed_headers: headers.signed_headers,
            scope,
            authorization: Some(authorization),
        })
    }
}

/// Checks shared by both modes: `Host` present (every header's bytes are checked while
/// canonicalizing, excluded ones included, since they are sent too).
pub(crate) fn prepare_common(req: &Request) -> Result<(), SigningError> {
    if req.header("host").is_none_or(|h| h.trim().is_empty()) {
        return Err(SigningError::MissingHost);
    }
    Ok(())
}

/// `AWS4-HMAC-SHA256\n<date>\n<scope>\n<hex sha256(canonical request)>`.
pub fn string_to_sign(now: AmzDate, scope: &str, canonical_request: &str) -> String {
    let hash = hex::encode(digest::digest(&digest::SHA256, canonical_request.as_bytes()).as_ref());
    format!("{ALGORITHM}\n{now}\n{scope}\n{hash}")
}
