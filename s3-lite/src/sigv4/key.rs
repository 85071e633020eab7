//! Signing-key derivation and its cache.
//!
//! `kSigning = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), service), "aws4_request")`
//! costs four HMACs; it changes once a day per (region, service, secret), so it is derived once
//! and reused. Per request only the canonical-request SHA-256 and the final HMAC remain.

use std::sync::Mutex;

use ring::{digest, hmac};

/// Derives the SigV4 signing key for one day, region and service.
pub fn derive_signing_key(
    secret: &str,
    date_stamp: &str,
    region: &str,
    service: &str,
) -> hmac::Key {
    let mut k_secret = Vec::with_capacity(4 + secret.len());
    k_secret.extend_from_slice(b"AWS4");
    k_secret.extend_from_slice(secret.as_bytes());
    let mut k = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &k_secret),
        date_stamp.as_bytes(),
    );
    for part in [region, service, "aws4_request"] {
        k = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, k.as_ref()),
            part.as_bytes(),
        );
    }
    hmac::Key::new(hmac::HMAC_SHA256, k.as_ref())
}

/// A digest that identifies a secret without keeping it in the cache key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SecretFingerprint([u8; 32]);

impl SecretFingerprint {
    /// Fingerprint of `secret` (domain-separated SHA-256).
    pub fn of(secret: &str) -> Self {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"hipobj-sigv4-key-cache\0");
        ctx.update(secret.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(ctx.finish().as_ref());
        Self(out)
    }
}

impl std::fmt::Debug for SecretFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretFingerprint(..)")
    }
}

struct Entry {
    fingerprint: SecretFingerprint,
    date_stamp: [u8; 8],
    region: String,
    service: String,
    key: hmac::Key,
}

/// How many (secret, day, region, service) keys one cache holds. A client signer needs one
/// (two around midnight); a gateway verifier a handful per active access key.
const CAPACITY: usize = 16;

/// Cache of derived signing keys keyed by (secret fingerprint, date stamp, region, service).
///
/// Thread safety: `Send + Sync`; lookups take a short uncontended `Mutex` (no derivation happens
/// under contention except on a miss). Share one per signer, or wrap a verifier's in an `Arc`.
/// Bounded: at most 16 entries, the oldest replaced first.
pub struct SigningKeyCache {
    entries: Mutex<Vec<Entry>>,
}

impl Default for SigningKeyCache {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SigningKeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries.lock().map(|e| e.len()).unwrap_or(0);
        f.debug_struct("SigningKeyCache")
            .field("entries", &n)
            .finish()
    }
}

impl SigningKeyCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            entries: Mutex::new(Vec::with_capacity(2)),
        }
    }

    /// The signing key for `(secret, date_stamp, region, service)`, derived at most once while
    /// it stays cached. `fingerprint` must be `SecretFingerprint::of(secret)` (callers with a
    /// fixed secret compute it once).
    pub fn key(
        &self,
        secret: &str,
        fingerprint: SecretFingerprint,
        date_stamp: &str,
        region: &str,
        service: &str,
    ) -> hmac::Key {
        let mut stamp = [0u8; 8];
        let stamp_ok = date_stamp.len() == 8;
        if stamp_ok {
            stamp.copy_from_slice(date_stamp.as_bytes());
        }
        // A poisoned lock only means another thread panicked mid-push; the Vec is still valid.
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if stamp_ok
            && let Some(e) = entries.iter().find(|e| {
                e.fingerprint == fingerprint
                    && e.date_stamp == stamp
                    && e.region == region
                    && e.service == service
            })
        {
            return e.key.clone();
        }
        let key = derive_signing_key(secret, date_stamp, region, service);
        if stamp_ok {
            if entries.len() >= CAPACITY {
                entries.remove(0);
            }
            entries.push(Entry {
                fingerprint,
                date_stamp: stamp,
                region: region.to_owned(),
                service: service.to_owned(),
                key: key.clone(),
            });
        }
        key
    }

    /// Number of cached keys (for tests and metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_derives_once_per_scope_and_bounds_itself() {
        let c = SigningKeyCache::new();
        let s = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let fp = SecretFingerprint::of(s);
        let a = c.key(s, fp, "20130524", "us-east-1", "s3");
        let b = c.key(s, fp, "20130524", "us-east-1", "s3");
        assert_eq!(c.len(), 1);
        assert_eq!(hmac::sign(&a, b"x").as_ref(), hmac::sign(&b, b"x").as_ref());
        let d = c.key(s, fp, "20130525", "us-east-1", "s3");
        assert_ne!(hmac::sign(&a, b"x").as_ref(), hmac::sign(&d, b"x").as_ref());
        let other = SecretFingerprint::of("other");
        let e = c.key("other", other, "20130524", "us-east-1", "s3");
        assert_ne!(hmac::sign(&a, b"x").as_ref(), hmac::sign(&e, b"x").as_ref());
        for i in 0..40 {
            c.key(s, fp, "20130524", &format!("r{i}"), "s3");
        }
        assert_eq!(c.len(), CAPACITY);
    }
}
