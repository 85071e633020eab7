//! S3 response parsing on realistic documents, and request builders through the HTTP encoder.

use s3_lite::http::{BodyFraming, Event, Limits, ResponseDecoder, encode_request_head};
use s3_lite::s3::{
    self, ByteRange, CompletedPart, ContentRange, Endpoint, GetOptions, ListOptions, ObjectMeta,
    ParseError, PutOptions, ResponseError,
};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target)
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn signature_does_not_match_prints_one_line() {
    let headers = vec![(
        "x-amz-request-id".to_owned(),
        "IGNORED-BODY-WINS".to_owned(),
    )];
    let e = s3::parse_error(403, &headers, &seed("error_xml", "signature_mismatch.xml"));
    assert_eq!(e.code, "SignatureDoesNotMatch");
    assert_eq!(e.request_id.as_deref(), Some("4442587FB7D0A2F9"));
    let line = e.to_string();
    assert!(
        line.starts_with(
            "SignatureDoesNotMatch: The request signature we calculated does not match"
        ),
        "{line}"
    );
    assert!(
        line.ends_with("(status 403, request id 4442587FB7D0A2F9)"),
        "{line}"
    );
    assert!(!line.contains('\n'));
    let as_error: &dyn std::error::Error = &e;
    assert_eq!(as_error.to_string(), line);
}

#[test]
fn no_such_key_with_entities() {
    let e = s3::parse_error(404, &[], &seed("error_xml", "no_such_key_entities.xml"));
    assert_eq!(
        (e.code.as_str(), e.message.as_str()),
        ("NoSuchKey", "The specified key does not exist.")
    );
    assert_eq!(e.resource.as_deref(), Some("/bkt/dir/a%20%26%20b.txt"));
    let wrapped = s3::parse_error_xml(&seed("error_xml", "error_response_wrapper.xml")).unwrap();
    assert_eq!(
        wrapped.message.as_deref(),
        Some("The security token \"x\" is invalid.")
    );
    assert_eq!(wrapped.request_id.as_deref(), Some("abc-123"));
    let cdata = s3::parse_error_xml(&seed("error_xml", "slowdown_cdata.xml")).unwrap();
    assert_eq!(
        cdata.message.as_deref(),
        Some("Please reduce your <request> rate.")
    );
    assert!(matches!(
        s3::parse_error_xml(&seed("error_xml", "doctype_entity.xml")),
        Err(ParseError::Malformed(_))
    ));
    let head_404 = s3::parse_error(404, &[("X-Amz-Request-Id".into(), "RID".into())], b"");
    assert_eq!(
        head_404.to_string(),
        "NoSuchKey: Not Found (status 404, request id RID)"
    );
}

#[test]
fn oversized_error_body_is_a_typed_error() {
    let mut body = b"<Error><Code>X</Code><Message>".to_vec();
    body.resize(s3::MAX_XML_BYTES + 10, b'a');
    body.extend_from_slice(b"</Message></Error>");
    assert!(matches!(
        s3::parse_error_xml(&body),
        Err(ParseError::TooLarge { .. })
    ));
    assert_eq!(s3::parse_error(500, &[], &body).code, "InternalError");
}

#[test]
fn list_pages_with_continuation() {
    let first = s3::parse_list_objects_v2(&seed("list_objects_v2", "truncated_page.xml")).unwrap();
    assert!(first.is_truncated);
    assert_eq!(
        first
            .contents
            .iter()
            .map(|c| c.key.as_str())
            .collect::<Vec<_>>(),
        vec!["a.txt", "b & c.txt"]
    );
    assert_eq!(first.contents[1].etag.as_deref(), Some("\"x-2\""));
    let token = first.next_continuation_token.clone().unwrap();
    let ep = Endpoint::parse("http://127.0.0.1:9000").unwrap();
    let opts = ListOptions {
        continuation_token: Some(token),
        max_keys: Some(2),
        ..ListOptions::default()
    };
    let req = s3::list_objects_v2(&ep, "bkt", &opts).unwrap();
    assert_eq!(
        req.query,
        "continuation-token=1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D&list-type=2&max-keys=2"
    );
    let last = s3::parse_list_objects_v2(&seed("list_objects_v2", "common_prefixes.xml")).unwrap();
    assert!(!last.is_truncated);
    assert_eq!(
        last.common_prefixes,
        vec!["photos/2006/".to_owned(), "photos/2007/".to_owned()]
    );
    let encoded = s3::parse_list_objects_v2(&seed("list_objects_v2", "url_encoded.xml")).unwrap();
    assert_eq!(encoded.contents[0].key, "ctl\u{1}key x");
    assert_eq!(
        s3::parse_list_objects_v2(&seed("list_objects_v2", "truncated_without_token.xml")),
        Err(ParseError::MissingElement("NextContinuationToken"))
    );
}

#[test]
fn complete_with_200_error() {
    let body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n   \n<Error><Code>InvalidPart</Code><Message>One or more of the specified parts could not be found.</Message><RequestId>R9</RequestId></Error>";
    match s3::parse_complete_multipart_upload(200, &[], body) {
        Err(ResponseError::S3(e)) => {
            assert_eq!(e.status, 200);
            assert_eq!(
                e.to_string(),
                "InvalidPart: One or more of the specified parts could not be found. (status 200, request id R9)"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn object_meta_from_a_decoded_206() {
    let wire = b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/100\r\nContent-Length: 10\r\n\
                 ETag: \"abc\"\r\nx-amz-checksum-crc32c: yZRlqg==\r\nx-amz-request-id: R\r\n\r\n0123456789";
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let d = dec.decode(wire).unwrap();
    let Event::Head(head) = d.event else {
        panic!("no head")
    };
    let meta = ObjectMeta::from_headers(&head.headers).unwrap();
    assert_eq!(
        meta.content_range,
        Some(ContentRange::Bytes {
            first: 10,
            last: 19,
            total: Some(100)
        })
    );
    assert_eq!(
        meta.content_range.unwrap().len(),
        head.content_length().unwrap()
    );
    assert_eq!(
        ByteRange::Inclusive(10, 19).resolve(meta.object_size().unwrap()),
        Some((10, 19))
    );
    assert_eq!(meta.checksum_crc32c.as_deref(), Some("yZRlqg=="));
}

/// Every builder's request goes through the encoder and parses back with httparse.
#[test]
fn builders_encode_to_valid_http() {
    let ep = Endpoint::parse("http://127.0.0.1:9000").unwrap();
    let put = PutOptions {
        content_type: Some("application/octet-stream".into()),
        ..PutOptions::default()
    };
    let parts = [CompletedPart {
        part_number: 1,
        etag: "\"e\"".into(),
        ..CompletedPart::default()
    }];
    let (complete, body) =
        s3::complete_multipart_upload(&ep, "bkt", "a/b c", "U1", &parts, &[]).unwrap();
    let requests = vec![
        (
            s3::get_object(
                &ep,
                "bkt",
                "a/b c",
                &GetOptions {
                    range: Some(ByteRange::From(5)),
                    ..GetOptions::default()
                },
            )
            .unwrap(),
            BodyFraming::None,
        ),
        (
            s3::head_object(&ep, "bkt", "k", &GetOptions::default()).unwrap(),
            BodyFraming::None,
        ),
        (
            s3::put_object(&ep, "bkt", "k", 3, &put).unwrap(),
            BodyFraming::Length(3),
        ),
        (
            s3::create_multipart_upload(&ep, "bkt", "k", &put).unwrap(),
            BodyFraming::Length(0),
        ),
        (
            s3::upload_part(&ep, "bkt", "k", "U1", 2, 9, &[]).unwrap(),
            BodyFraming::Length(9),
        ),
        (complete, BodyFraming::Length(body.len() as u64)),
        (
            s3::abort_multipart_upload(&ep, "bkt", "k", "U1").unwrap(),
            BodyFraming::None,
        ),
        (
            s3::list_objects_v2(
                &ep,
                "bkt",
                &ListOptions {
                    prefix: Some("a b".into()),
                    ..ListOptions::default()
                },
            )
            .unwrap(),
            BodyFraming::None,
        ),
        (
            s3::delete_object(&ep, "bkt", "k").unwrap(),
            BodyFraming::None,
        ),
        (
            s3::create_bucket(&ep, "bkt", "us-east-1").unwrap().0,
            BodyFraming::Length(0),
        ),
    ];
    for (req, framing) in requests {
        let mut out = Vec::new();
        encode_request_head(&req, framing, &mut out).unwrap_or_else(|e| panic!("{req:?}: {e}"));
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut slots);
        assert!(parsed.parse(&out).unwrap().is_complete());
        assert_eq!(parsed.path.unwrap(), req.target());
        assert_eq!(req.header("host"), Some("127.0.0.1:9000"));
    }
}
