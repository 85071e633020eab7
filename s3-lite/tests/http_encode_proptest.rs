//! Property: any valid request head we encode parses back, identically, with httparse.

use proptest::prelude::*;
use s3_lite::Request;
use s3_lite::http::{BodyFraming, encode_request_head};

fn token() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,16}"
}

fn value() -> impl Strategy<Value = String> {
    // Visible ASCII with inner spaces/tabs; no leading or trailing whitespace.
    "([!-~]([ \t!-~]{0,30}[!-~])?)?"
}

fn target_part() -> impl Strategy<Value = String> {
    "[!-~&&[^#?]]{0,30}"
}

proptest! {
    #[test]
    fn encode_then_httparse(
        method in "[A-Z]{1,8}",
        path in target_part(),
        query in "[!-~&&[^#]]{0,30}",
        headers in proptest::collection::vec((token(), value()), 0..12),
        length in proptest::option::of(0u64..1 << 40),
    ) {
        let mut req = Request::new(method.clone(), format!("/{path}"));
        req.query = query.clone();
        req.add_header("Host", "example.com:9000");
        for (n, v) in &headers {
            if !n.eq_ignore_ascii_case("content-length") && !n.eq_ignore_ascii_case("transfer-encoding") {
                req.add_header(n.clone(), v.clone());
            }
        }
        let framing = length.map_or(BodyFraming::None, BodyFraming::Length);
        let mut out = Vec::new();
        encode_request_head(&req, framing, &mut out).unwrap();

        let mut slots = [httparse::EMPTY_HEADER; 32];
        let mut parsed = httparse::Request::new(&mut slots);
        let n = match parsed.parse(&out).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("partial"),
        };
        prop_assert_eq!(n, out.len());
        prop_assert_eq!(parsed.method, Some(method.as_str()));
        prop_assert_eq!(parsed.path.map(str::to_owned), Some(req.target()));
        prop_assert_eq!(parsed.version, Some(1));
        let mut expected: Vec<(String, Vec<u8>)> =
            req.headers.iter().map(|(n, v)| (n.clone(), v.clone().into_bytes())).collect();
        if let Some(l) = length {
            expected.push(("Content-Length".into(), l.to_string().into_bytes()));
        }
        let got: Vec<(String, Vec<u8>)> =
            parsed.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
        prop_assert_eq!(got, expected);
    }
}
