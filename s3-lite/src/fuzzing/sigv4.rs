//! Fuzz bodies for the SigV4 parsers.
//!
//! - [`parse_authorization`]: never panics; whatever parses re-formats into a header that parses
//!   back to the same value (decode → encode → decode round trip).
//! - [`canonical_forms`]: canonical URI and query are fixed points (canonicalizing a canonical
//!   form changes nothing); signer and verifier agree: a request presigned with the input as its
//!   query verifies, and the input itself (no valid signature can be guessed) never does.

use crate::Request;
use crate::credentials::Credentials;
use crate::sigv4::{self, AmzDate, AuthMode, Signer};

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
    let Ok(now) = AmzDate::from_unix_secs(1_369_353_600) else {
        return;
    };
    let lookup = |ak: &str| Some(Credentials::new(ak, "secret"));
    let unsigned = sigv4::verify_request(&req, "UNSIGNED-PAYLOAD", lookup, now, 900);
    assert!(unsigned.is_err(), "unsigned input verified: {unsigned:?}");
    let Ok(signer) = Signer::new(Credentials::new("AKIDFUZZ", "secret"), "us-east-1", "s3") else {
        return;
    };
    // The signer refuses some queries (e.g. bad percent-encoding); whatever it signs verifies.
    if let Ok(p) = signer.presign(&req, 900, now) {
        let verified = sigv4::verify_request(&p.request, "UNSIGNED-PAYLOAD", lookup, now, 900);
        assert!(
            verified
                .as_ref()
                .is_ok_and(|v| v.access_key == "AKIDFUZZ" && v.mode == AuthMode::Query),
            "presigned query {:?} did not verify: {verified:?}",
            p.request.query
        );
        let mut tampered = p.request.clone();
        tampered.path.push('x');
        assert!(
            sigv4::verify_request(&tampered, "UNSIGNED-PAYLOAD", lookup, now, 900).is_err(),
            "a changed path still verified"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_seeds() {
        let mut presigned = 0;
        for (name, data) in crate::fuzzing::seeds("sigv4_canonical", 4) {
            println!("{name}");
            canonical_forms(&data);
            let mut req = Request::new("GET", "/k");
            req.query = String::from_utf8_lossy(&data).into_owned();
            req.add_header("Host", "h");
            let signer = Signer::new(Credentials::new("AKIDFUZZ", "secret"), "us-east-1", "s3");
            let now = AmzDate::from_unix_secs(1_369_353_600).unwrap();
            presigned += usize::from(signer.unwrap().presign(&req, 900, now).is_ok());
        }
        assert!(presigned >= 3, "most seeds are queries the signer signs");
    }

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
