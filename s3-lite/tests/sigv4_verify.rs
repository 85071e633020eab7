//! Verification: what the signer produces verifies; every tampering, skew and expiry is refused
//! with the right typed error; AWS's published presigned URL verifies inside its window.

use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::sigv4::{
    AmzDate, AuthMode, EMPTY_SHA256, PayloadHash, SessionTokenMode, Signer, SigningOptions,
    Verifier, VerifyError, verify_request,
};

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const T0: u64 = 1_369_353_600; // 20130524T000000Z

fn at(secs: u64) -> AmzDate {
    AmzDate::from_unix_secs(secs).unwrap()
}

fn lookup(ak: &str) -> Option<Credentials> {
    (ak == AK).then(|| Credentials::new(AK, SK))
}

fn signed_get() -> Request {
    let mut req = Request::new("GET", "/bucket/a b/ü+%25");
    req.query = "x=1&y=a+b".into();
    req.add_header("Host", "127.0.0.1:9000");
    req.add_header("x-amz-rdma-token", "00ff");
    let signer = Signer::new(Credentials::new(AK, SK), "us-east-1", "s3").unwrap();
    signer
        .sign_headers(&mut req, &PayloadHash::of_body(b""), at(T0))
        .unwrap();
    req
}

#[test]
fn signed_request_verifies_and_names_its_signed_headers() {
    let req = signed_get();
    let p = verify_request(&req, EMPTY_SHA256, lookup, at(T0 + 60), 900).unwrap();
    assert_eq!(p.access_key, AK);
    assert_eq!(p.mode, AuthMode::Header);
    assert_eq!(
        p.signed_headers,
        [
            "host",
            "x-amz-content-sha256",
            "x-amz-date",
            "x-amz-rdma-token"
        ]
    );
    assert!(p.is_signed("x-amz-rdma-token"));
    assert!(!p.is_signed("range"));
    assert_eq!((p.region.as_str(), p.service.as_str()), ("us-east-1", "s3"));
    // The verifier's cache serves the second request.
    let v = Verifier::new();
    v.verify(&req, EMPTY_SHA256, lookup, at(T0), 900).unwrap();
    v.verify(&req, EMPTY_SHA256, lookup, at(T0), 900).unwrap();
}

#[test]
fn tampering_is_detected() {
    let base = signed_get();
    let mut tampered: Vec<Request> = Vec::new();
    let mut r = base.clone();
    r.set_header("x-amz-rdma-token", "00fe");
    tampered.push(r);
    let mut r = base.clone();
    r.path = "/bucket/a b/ü+%26".into();
    tampered.push(r);
    let mut r = base.clone();
    r.query = "x=2&y=a+b".into();
    tampered.push(r);
    let mut r = base.clone();
    r.method = "PUT".into();
    tampered.push(r);
    for r in &tampered {
        match verify_request(r, EMPTY_SHA256, lookup, at(T0), 900) {
            Err(VerifyError::SignatureDoesNotMatch {
                canonical_request,
                string_to_sign,
            }) => {
                assert!(
                    !canonical_request.is_empty()
                        && string_to_sign.starts_with("AWS4-HMAC-SHA256\n")
                );
            }
            other => panic!("expected SignatureDoesNotMatch, got {other:?}"),
        }
    }
    // A different declared payload hash changes the canonical request too.
    assert!(matches!(
        verify_request(&base, "UNSIGNED-PAYLOAD", lookup, at(T0), 900),
        Err(VerifyError::SignatureDoesNotMatch { .. })
    ));
    // Wrong secret.
    let wrong = |ak: &str| (ak == AK).then(|| Credentials::new(AK, "not-the-secret"));
    assert!(matches!(
        verify_request(&base, EMPTY_SHA256, wrong, at(T0), 900),
        Err(VerifyError::SignatureDoesNotMatch { .. })
    ));
    // An unsigned header may be added freely, and is reported as unsigned.
    let mut r = base.clone();
    r.add_header("x-amz-rdma-extra", "1");
    assert!(
        !verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900)
            .unwrap()
            .is_signed("x-amz-rdma-extra")
    );
}

#[test]
fn refusals_are_typed() {
    let base = signed_get();
    assert!(matches!(
        verify_request(&base, EMPTY_SHA256, lookup, at(T0 + 7200), 900),
        Err(VerifyError::RequestTimeTooSkewed { skew_secs: 7200 })
    ));
    assert!(matches!(
        verify_request(&base, EMPTY_SHA256, |_| None, at(T0), 900),
        Err(VerifyError::UnknownAccessKey(k)) if k == AK
    ));
    let mut r = base.clone();
    r.remove_header("x-amz-rdma-token");
    assert_eq!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900),
        Err(VerifyError::MissingSignedHeader("x-amz-rdma-token".into()))
    );
    let mut r = base.clone();
    r.remove_header("authorization");
    assert_eq!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900),
        Err(VerifyError::MissingAuthentication)
    );
    let mut r = base.clone();
    r.query.push_str("&X-Amz-Algorithm=AWS4-HMAC-SHA256");
    assert_eq!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900),
        Err(VerifyError::AmbiguousAuthentication)
    );
    let mut r = base.clone();
    r.set_header("authorization", "AWS4-HMAC-SHA256 Credential=garbage");
    assert!(matches!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900),
        Err(VerifyError::MalformedAuthorization(_))
    ));
    let mut r = base.clone();
    r.set_header("x-amz-date", "20130525T000000Z");
    assert!(matches!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0 + 86400), 900),
        Err(VerifyError::ScopeDateMismatch { .. })
    ));
    // Host must be signed: craft an Authorization that omits it.
    let mut r = Request::new("GET", "/");
    r.add_header("Host", "h");
    r.add_header("x-amz-date", "20130524T000000Z");
    r.add_header(
        "Authorization",
        format!("AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders=x-amz-date, Signature={}", "0".repeat(64)),
    );
    assert_eq!(
        verify_request(&r, EMPTY_SHA256, lookup, at(T0), 900),
        Err(VerifyError::HeaderNotSigned("host".into()))
    );
}

#[test]
fn session_tokens_must_match() {
    let creds = Credentials::new(AK, SK).with_session_token("TOKEN");
    let with_token =
        |ak: &str| (ak == AK).then(|| Credentials::new(AK, SK).with_session_token("TOKEN"));
    let signer = Signer::new(creds, "us-east-1", "s3").unwrap();
    let mut req = Request::new("GET", "/k");
    req.add_header("Host", "h");
    signer
        .sign_headers(&mut req, &PayloadHash::Unsigned, at(T0))
        .unwrap();
    verify_request(&req, "UNSIGNED-PAYLOAD", with_token, at(T0), 900).unwrap();
    assert_eq!(
        verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0), 900),
        Err(VerifyError::InvalidSecurityToken)
    );

    // Token appended unsigned: still accepted (it is compared, just not signed).
    let mut req = Request::new("GET", "/k");
    req.add_header("Host", "h");
    let opts = SigningOptions::default().with_session_token(SessionTokenMode::AppendedUnsigned);
    let out = signer
        .sign_headers_with(&mut req, &PayloadHash::Unsigned, &opts, at(T0))
        .unwrap();
    assert!(!out.signed_headers.contains("x-amz-security-token"));
    let p = verify_request(&req, "UNSIGNED-PAYLOAD", with_token, at(T0), 900).unwrap();
    assert!(!p.is_signed("x-amz-security-token"));
}

#[test]
fn aws_presigned_url_verifies_inside_its_window_only() {
    let mut req = Request::new("GET", "/test.txt");
    req.query = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404".into();
    req.add_header("Host", "examplebucket.s3.amazonaws.com");
    let p = verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0 + 3600), 900).unwrap();
    assert_eq!(p.mode, AuthMode::Query);
    assert_eq!(p.signed_headers, ["host"]);
    verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0 + 86400), 900).unwrap();
    assert_eq!(
        verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0 + 86401), 900),
        Err(VerifyError::Expired)
    );
    assert!(matches!(
        verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0 - 901), 900),
        Err(VerifyError::RequestTimeTooSkewed { .. })
    ));
    let mut r = req.clone();
    r.query = r.query.replace("aeeed9bb", "aeeed9bc");
    assert!(matches!(
        verify_request(&r, "UNSIGNED-PAYLOAD", lookup, at(T0), 900),
        Err(VerifyError::SignatureDoesNotMatch { .. })
    ));
    let mut r = req.clone();
    r.query = r
        .query
        .replace("X-Amz-Expires=86400", "X-Amz-Expires=604801");
    assert_eq!(
        verify_request(&r, "UNSIGNED-PAYLOAD", lookup, at(T0), 900),
        Err(VerifyError::ExpiresOutOfRange)
    );
    let mut r = req.clone();
    r.query.push_str("&X-Amz-Date=20130524T000000Z");
    assert!(matches!(
        verify_request(&r, "UNSIGNED-PAYLOAD", lookup, at(T0), 900),
        Err(VerifyError::MalformedAuthorization(_))
    ));

    // Our own presign of the same request round-trips through the verifier.
    let signer = Signer::new(Credentials::new(AK, SK), "us-east-1", "s3").unwrap();
    let mut plain = Request::new("GET", "/a b/ü");
    plain.query = "versionId=3&x".into();
    plain.add_header("Host", "h");
    plain.add_header("x-amz-rdma-token", "abc");
    let p = signer.presign(&plain, 60, at(T0)).unwrap();
    let v = verify_request(&p.request, "UNSIGNED-PAYLOAD", lookup, at(T0 + 30), 900).unwrap();
    assert!(v.is_signed("x-amz-rdma-token"));
}

mod properties {
    use proptest::prelude::*;
    use s3_lite::uri;

    use super::*;

    proptest! {
        /// Whatever key, query and header value a client signs, the verifier accepts the
        /// request as sent (raw or pre-encoded path) and rejects it once the key changes.
        #[test]
        fn sign_then_verify(
            key in "\\PC{0,40}",
            params in proptest::collection::vec(("[a-zA-Z0-9 +%/=&ü-]{0,8}", "\\PC{0,8}"), 0..5),
            meta in "[ -~]{0,30}",
            encode_path in any::<bool>(),
            presign in any::<bool>(),
        ) {
            let path = if encode_path { format!("/b/{}", uri::encode_path(&key)) } else {
                // Raw form must still decode: escape only '%'.
                format!("/b/{}", key.replace('%', "%25"))
            };
            let mut req = Request::new("PUT", path);
            req.query = params
                .iter()
                .map(|(k, v)| format!("{}={}", uri::encode_component(k), uri::encode_component(v)))
                .collect::<Vec<_>>()
                .join("&");
            req.add_header("Host", "h:9000");
            req.add_header("x-amz-meta-m", meta);
            let signer = Signer::new(Credentials::new(AK, SK), "us-east-1", "s3").unwrap();
            let req = if presign {
                signer.presign(&req, 300, at(T0)).unwrap().request
            } else {
                let mut r = req;
                signer.sign_headers(&mut r, &PayloadHash::Unsigned, at(T0)).unwrap();
                r
            };
            prop_assert!(verify_request(&req, "UNSIGNED-PAYLOAD", lookup, at(T0 + 1), 900).is_ok());
            let mut other = req.clone();
            other.path.push('x');
            let rejected = matches!(
                verify_request(&other, "UNSIGNED-PAYLOAD", lookup, at(T0 + 1), 900),
                Err(VerifyError::SignatureDoesNotMatch { .. })
            );
            prop_assert!(rejected);
        }
    }
}
