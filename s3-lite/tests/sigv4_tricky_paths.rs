//! S3 canonicalization corner cases, checked against hand-derived expected strings.

use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer, SigningError, canonical_query, canonical_uri};

#[test]
fn paths_with_spaces_utf8_plus_percent_and_dot_segments() {
    let cases = [
        ("/bucket/my key.txt", "/bucket/my%20key.txt"),
        ("/bucket/my%20key.txt", "/bucket/my%20key.txt"),
        ("/bucket/a+b", "/bucket/a%2Bb"),
        ("/bucket/a%2Bb", "/bucket/a%2Bb"),
        ("/bucket/100%25", "/bucket/100%25"),
        ("/bucket/ü€🙂", "/bucket/%C3%BC%E2%82%AC%F0%9F%99%82"),
        ("/bucket//double//slash/", "/bucket//double//slash/"),
        ("/bucket/./a/../b", "/bucket/./a/../b"),
        ("/bucket/..", "/bucket/.."),
        ("/bucket/~user_x-y.z", "/bucket/~user_x-y.z"),
        (
            "/bucket/!*'()[];:@&=$,?#",
            "/bucket/%21%2A%27%28%29%5B%5D%3B%3A%40%26%3D%24%2C%3F%23",
        ),
        ("/bucket/%e2%82%ac", "/bucket/%E2%82%AC"),
        ("/bucket/%FF", "/bucket/%FF"),
    ];
    for (input, expected) in cases {
        assert_eq!(canonical_uri(input).unwrap(), expected, "{input:?}");
    }
    for bad in ["/a%", "/a%2", "/a%G0"] {
        assert!(
            matches!(canonical_uri(bad), Err(SigningError::BadPath(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn queries_with_repeats_empty_values_and_plus() {
    let cases = [
        ("", ""),
        ("acl", "acl="),
        ("acl=", "acl="),
        ("b=1&a=2", "a=2&b=1"),
        ("a=2&a=1&a=10", "a=1&a=10&a=2"),
        ("a=&a", "a=&a="),
        ("q=a+b", "q=a%2Bb"),
        ("q=a%2Bb", "q=a%2Bb"),
        ("q=a b", "q=a%20b"),
        ("q=a%20b", "q=a%20b"),
        ("k=v=w", "k=v%3Dw"),
        ("prefix=dir/sub/", "prefix=dir%2Fsub%2F"),
        ("%C3%BC=1&z=1&A=1", "%C3%BC=1&A=1&z=1"),
        ("a=1&&b=2&", "a=1&b=2"),
        (
            "continuation-token=1%2Fx%3D%3D&list-type=2",
            "continuation-token=1%2Fx%3D%3D&list-type=2",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(canonical_query(input).unwrap(), expected, "{input:?}");
    }
    // Sorting is on encoded bytes: '%' (0x25) < 'A' < 'a'.
    assert_eq!(canonical_query("a=1&%41=2&%25=3").unwrap(), "%25=3&A=2&a=1");
    assert!(matches!(
        canonical_query("a=%Z1"),
        Err(SigningError::BadQuery(_))
    ));
}

#[test]
fn signer_refuses_what_cannot_be_signed_and_leaves_the_request_alone() {
    let signer = Signer::new(Credentials::new("AK", "SK"), "us-east-1", "s3").unwrap();
    let now = AmzDate::parse("20240101T000000Z").unwrap();
    let mut r = Request::new("GET", "/k");
    assert_eq!(
        signer.sign_headers(&mut r, &PayloadHash::Unsigned, now),
        Err(SigningError::MissingHost)
    );
    r.add_header("Host", "h");
    r.add_header("X-Evil", "a\r\nInjected: 1");
    let before = r.clone();
    assert!(matches!(
        signer.sign_headers(&mut r, &PayloadHash::Unsigned, now),
        Err(SigningError::InvalidHeader { .. })
    ));
    assert_eq!(r, before);
    let mut r = Request::new("GET", "/k");
    r.add_header("Host", "h");
    r.add_header("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
    assert!(matches!(
        signer.sign_headers(&mut r, &PayloadHash::of_body(b""), now),
        Err(SigningError::PayloadHashMismatch { .. })
    ));
    assert!(matches!(
        signer.presign(&r, 0, now),
        Err(SigningError::InvalidExpires(0))
    ));
    assert!(matches!(
        signer.presign(&r, 604_801, now),
        Err(SigningError::InvalidExpires(_))
    ));
    assert!(Signer::new(Credentials::new("AK", "SK"), "us east", "s3").is_err());
    assert!(Signer::new(Credentials::new("A/K", "SK"), "us-east-1", "s3").is_err());
    assert!(matches!(
        signer.sign_chunk("XYZ", now, b""),
        Err(SigningError::InvalidPreviousSignature(_))
    ));
}

#[test]
fn resigning_replaces_the_old_authorization_and_is_stable() {
    let signer = Signer::new(Credentials::new("AK", "SK"), "us-east-1", "s3").unwrap();
    let now = AmzDate::parse("20240101T000000Z").unwrap();
    let mut r = Request::new("GET", "/k");
    r.add_header("Host", "h");
    let first = signer
        .sign_headers(&mut r, &PayloadHash::Unsigned, now)
        .unwrap();
    let second = signer
        .sign_headers(&mut r, &PayloadHash::Unsigned, now)
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("authorization"))
            .count(),
        1
    );
    // A different day derives a different key and signature.
    let later = AmzDate::parse("20240102T000000Z").unwrap();
    let mut r2 = Request::new("GET", "/k");
    r2.add_header("Host", "h");
    assert_ne!(
        signer
            .sign_headers(&mut r2, &PayloadHash::Unsigned, later)
            .unwrap()
            .signature,
        first.signature
    );
}
