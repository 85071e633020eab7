//! Fuzz bodies for the SigV4 parsers.
//!
//! - [`parse_authorization`]: never panics; whatever parses re-formats into a header that parses
//!   back to the same value (decode → encode → decode round trip).
//! - [`canonical_forms`]: canonical URI and query are fixed points (canonicalizing a canonical
//!   form changes nothing), and presigned-query verification of arbitrary input never panics.

use crate::Request;
use crate::credentials::Credentials;
use crate::sigv4::{self, AmzDate};

/// Round-trips an `Authorization` header value.
pub fn parse_authorization(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(parsed) = sigv4::parse_authorization(text) {
        let formatted = parsed.to_header_value();
        let reparsed = sigv4::parse_authorization(&formatted);
        assert_eq!(
            reparsed.as_ref(),
            Ok(&parsed),
            "re-formatted header {formatted:?} does not parse back"
        );
        assert_eq!(
            reparsed.map(|p| p.to_header_value()).ok().as_deref(),
            Some(formatted.as_str())
        );
    }
}

/// Canonicalization fixed points, and verification of `data` as a presigned query.
pub fn canonical_forms(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = sigv4::canonical_query(text) {
        assert_eq!(
            sigv4::canonical_query(&q).as_ref(),
            Ok(&q),
            "canonical query is not a fixed point"
        );
    }
    if let Ok(u) = sigv4::canonical_uri(text) {
        assert_eq!(
            sigv4::canonical_uri(&u).as_ref(),
            Ok(&u),
            "canonical uri is not a fixed point"
        );
    }
    let mut req = Request::new("GET", "/k");
    req.query = text.to_owned();
    req.add_header("Host", "h");
    if let Ok(now) = AmzDate::from_unix_secs(1_369_353_600) {
        let lookup = |ak: &str| Some(Credentials::new(ak, "secret"));
        let _ = sigv4::verify_request(&req, "UNSIGNED-PAYLOAD", lookup, now, 900);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn authorization_seeds() {
        let mut parsed = 0;
        for (_, data) in crate::fuzzing::seeds("sigv4_authorization", 5) {
            super::parse_authorization(&data);
            super::canonical_forms(&data);
            let text = String::from_utf8_lossy(&data);
            parsed += usize::from(crate::sigv4::parse_authorization(&text).is_ok());
        }
        assert!(parsed >= 2, "some seeds are valid headers");
    }
}
