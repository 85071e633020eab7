//! `hipobj debug sigv4` driven through `hipobj_cli::debug_sigv4::run` with in-memory stdio:
//! AWS's published S3 signing examples (stage by stage), tricky paths, and the exit codes.

use clap::Parser;
use hipobj_cli::debug_sigv4::{Sigv4Args, run};
use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, verify_request};
use serde_json::Value;

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const DATE: &str = "20130524T000000Z";

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    args: Sigv4Args,
}

struct Outcome {
    code: i32,
    json: Value,
    stderr: String,
}

impl Outcome {
    fn str(&self, key: &str) -> &str {
        self.json
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no {key} in {}", self.json))
    }
}

/// Runs with the AWS example identity plus `extra` flags, `stdin` as input.
fn sigv4(extra: &[&str], stdin: &[u8]) -> Outcome {
    let mut argv = vec![
        "sigv4",
        "--access-key",
        AK,
        "--secret-key",
        SK,
        "--region",
        "us-east-1",
        "--service",
        "s3",
        "--date",
        DATE,
    ];
    argv.extend_from_slice(extra);
    let args = Wrapper::try_parse_from(argv).expect("arguments parse").args;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &mut &stdin[..], &mut out, &mut err);
    let json = serde_json::from_slice(&out).expect("stdout is one JSON object");
    Outcome {
        code,
        json,
        stderr: String::from_utf8(err).unwrap(),
    }
}

fn sts(hash: &str) -> String {
    format!("AWS4-HMAC-SHA256\n{DATE}\n20130524/us-east-1/s3/aws4_request\n{hash}")
}

#[test]
fn aws_get_object_with_range_verbatim_from_the_docs() {
    // The request exactly as the documentation prints it, placeholder Authorization included.
    let req = format!(
        "GET /test.txt HTTP/1.1\r\nHost: examplebucket.s3.amazonaws.com\r\nAuthorization: SignatureToBeCalculated\r\n\
         Range: bytes=0-9\r\nx-amz-content-sha256:{EMPTY_SHA256}\r\nx-amz-date: {DATE}\r\n\r\n"
    );
    let o = sigv4(&[], req.as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(
        o.str("canonical_request"),
        format!(
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\nx-amz-content-sha256:{EMPTY_SHA256}\n\
             x-amz-date:{DATE}\n\nhost;range;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
        )
    );
    assert_eq!(
        o.str("string_to_sign"),
        sts("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972")
    );
    assert_eq!(
        o.str("signature"),
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
    assert_eq!(
        o.str("authorization"),
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
         SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
         Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
    let signed = o.str("signed_request");
    assert!(signed.starts_with("GET /test.txt HTTP/1.1\r\n"));
    assert!(!signed.contains("SignatureToBeCalculated"));
    assert_eq!(signed.matches("Authorization: AWS4-HMAC-SHA256").count(), 1);
}

#[test]
fn aws_put_object_hashes_the_body_and_adds_the_header() {
    // Request line as in the docs (`PUT test$file.text`), bare LF line endings.
    let req = "PUT test$file.text HTTP/1.1\nHost: examplebucket.s3.amazonaws.com\n\
               Date: Fri, 24 May 2013 00:00:00 GMT\nx-amz-storage-class: REDUCED_REDUNDANCY\n\nWelcome to Amazon S3.";
    let o = sigv4(&[], req.as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let h = "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072";
    assert_eq!(
        o.str("canonical_request"),
        format!(
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\nhost:examplebucket.s3.amazonaws.com\n\
             x-amz-content-sha256:{h}\nx-amz-date:{DATE}\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n\
             date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n{h}"
        )
    );
    assert_eq!(
        o.str("string_to_sign"),
        sts("9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d")
    );
    assert_eq!(
        o.str("signature"),
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
    );
    assert!(
        o.str("signed_request")
            .contains(&format!("X-Amz-Content-Sha256: {h}\r\n"))
    );
}

#[test]
fn aws_get_lifecycle_and_list_objects() {
    let o = sigv4(
        &[],
        b"GET ?lifecycle HTTP/1.1\nHost: examplebucket.s3.amazonaws.com\n\n",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.str("canonical_request")
            .starts_with("GET\n/\nlifecycle=\nhost:")
    );
    assert_eq!(
        o.str("string_to_sign"),
        sts("9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca")
    );
    assert_eq!(
        o.str("signature"),
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
    );

    let o = sigv4(
        &[],
        b"GET /?max-keys=2&prefix=J HTTP/1.1\nHost: examplebucket.s3.amazonaws.com\n\n",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.str("canonical_request")
            .starts_with("GET\n/\nmax-keys=2&prefix=J\nhost:")
    );
    assert_eq!(
        o.str("string_to_sign"),
        sts("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7")
    );
    assert_eq!(
        o.str("signature"),
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    );
}

#[test]
fn aws_presigned_get() {
    let o = sigv4(
        &["--mode", "query", "--expires", "86400"],
        b"GET /test.txt HTTP/1.1\nHost: examplebucket.s3.amazonaws.com\n\n",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host";
    assert_eq!(
        o.str("canonical_request"),
        format!(
            "GET\n/test.txt\n{q}\nhost:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD"
        )
    );
    assert_eq!(
        o.str("string_to_sign"),
        sts("3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04")
    );
    let sig = "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    assert_eq!(o.str("signature"), sig);
    assert!(o.json.get("authorization").is_none());
    assert!(o.str("signed_request").starts_with(&format!(
        "GET /test.txt?{q}&X-Amz-Signature={sig} HTTP/1.1\r\n"
    )));
}

#[test]
fn aws_chunk_and_trailer_signatures() {
    let seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    let o = sigv4(&["--chunk-signature", seed], &[b'a'; 65536]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.json.get("canonical_request").is_none());
    assert_eq!(
        o.str("string_to_sign"),
        format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n{DATE}\n20130524/us-east-1/s3/aws4_request\n{seed}\n{EMPTY_SHA256}\n\
             bf718b6f653bebc184e1479f1935b8da974d701b893afcf49e701f3e2f9f9c5a"
        )
    );
    assert_eq!(
        o.str("signature"),
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
    );

    // Final chunk of the trailer example, then its trailer.
    let o = sigv4(
        &[
            "--trailer-signature",
            "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
        ],
        b"x-amz-checksum-crc32c:sOO8/Q==\r\n",
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.str("string_to_sign")
            .starts_with("AWS4-HMAC-SHA256-TRAILER\n")
    );
    assert_eq!(
        o.str("signature"),
        "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
    );
}

/// Signs `raw` (header mode), then verifies the result with the gateway-side verifier, as a
/// server would see it: the raw target, the headers as sent.
fn sign_and_verify(raw: &str) -> Outcome {
    let o = sigv4(&[], raw.as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let mut lines = raw.lines();
    let first = lines.next().unwrap();
    let (method, rest) = first.split_once(' ').unwrap();
    let target = &rest[..rest.rfind(' ').unwrap()];
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request::new(method, path);
    req.query = query.into();
    for l in lines.take_while(|l| !l.is_empty()) {
        let (n, v) = l.split_once(':').unwrap();
        req.add_header(n, v.trim());
    }
    req.add_header("x-amz-date", DATE);
    req.add_header("x-amz-content-sha256", EMPTY_SHA256);
    req.add_header("Authorization", o.str("authorization"));
    let now = AmzDate::parse(DATE).unwrap();
    let p = verify_request(
        &req,
        EMPTY_SHA256,
        |ak| (ak == AK).then(|| Credentials::new(AK, SK)),
        now,
        900,
    )
    .expect("the verifier accepts what debug sigv4 signed");
    assert_eq!(p.access_key, AK);
    o
}

#[test]
fn tricky_paths_are_encoded_once_and_never_normalized() {
    let o =
        sign_and_verify("GET /b/my folder/ü/a+b/100%25/./x/../y//z~_-.txt HTTP/1.1\nHost: h\n\n");
    let creq = o.str("canonical_request").to_owned();
    assert_eq!(
        creq.lines().nth(1),
        Some("/b/my%20folder/%C3%BC/a%2Bb/100%25/./x/../y//z~_-.txt")
    );
    // The printed request line is valid on the wire (no raw space or UTF-8).
    assert!(
        o.str("signed_request")
            .starts_with("GET /b/my%20folder/%C3%BC/a%2Bb/100%25/./x/../y//z~_-.txt HTTP/1.1\r\n")
    );

    let o = sign_and_verify(
        "GET /k?prefix=a b&tag=x+y&empty=&flag&tag=a%2Fb&%C3%BC=%e2%82%AC HTTP/1.1\nHost: h\n\n",
    );
    assert_eq!(
        o.str("canonical_request").lines().nth(2),
        Some("%C3%BC=%E2%82%AC&empty=&flag=&prefix=a%20b&tag=a%2Fb&tag=x%2By")
    );

    // Already-encoded input is not encoded twice; %2F decodes to '/' which the path keeps.
    let o = sign_and_verify("GET /a%20b/c%2Fd/%7Etilde HTTP/1.1\nHost: h\n\n");
    assert_eq!(
        o.str("canonical_request").lines().nth(1),
        Some("/a%20b/c/d/~tilde")
    );
}

#[test]
fn headers_are_folded_trimmed_collapsed_and_joined() {
    let raw = "GET /x HTTP/1.1\r\nHost:  h  \r\nX-Amz-Meta-A:  a   b \r\n\t  c\r\nx-amz-meta-a: second\r\n\r\n";
    let o = sigv4(&[], raw.as_bytes());
    assert_eq!(o.code, 0, "{}", o.stderr);
    let creq = o.str("canonical_request");
    assert!(creq.contains("\nhost:h\nx-amz-content-sha256:"), "{creq}");
    assert!(creq.contains("\nx-amz-meta-a:a b c,second\n"), "{creq}");
    assert!(
        creq.contains("\nhost;x-amz-content-sha256;x-amz-date;x-amz-meta-a\n"),
        "{creq}"
    );
}

#[test]
fn content_sha256_and_session_token_knobs() {
    let raw = b"PUT /k HTTP/1.1\nHost: h\n\nbody";
    let body_hash = "230d8358dc8e8890b4c58deeb62912ee2f20357ae92a5cc861b98e68fe31acb5"; // sha256("body")
    let o = sigv4(&["--content-sha256", "omit"], raw);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.str("canonical_request")
            .ends_with(&format!("\nhost;x-amz-date\n{body_hash}"))
    );
    assert!(
        !o.str("signed_request")
            .to_ascii_lowercase()
            .contains("x-amz-content-sha256")
    );

    let o = sigv4(&["--content-sha256", "unsigned"], raw);
    assert!(
        o.str("canonical_request")
            .ends_with("\nhost;x-amz-content-sha256;x-amz-date\nUNSIGNED-PAYLOAD")
    );

    let o = sigv4(&["--session-token", "TOKEN"], raw);
    assert!(
        o.str("canonical_request")
            .contains("\nx-amz-security-token:TOKEN\n")
    );
    assert!(
        o.str("authorization")
            .contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,")
    );

    let o = sigv4(&["--session-token", "TOKEN", "--omit-session-token"], raw);
    assert!(!o.str("canonical_request").contains("x-amz-security-token"));
    assert!(
        o.str("signed_request")
            .contains("X-Amz-Security-Token: TOKEN\r\n")
    );

    let o = sigv4(
        &["--mode", "query", "--session-token", "T/K"],
        b"GET /k HTTP/1.1\nHost: h\n\n",
    );
    assert!(
        o.str("canonical_request")
            .contains("&X-Amz-Security-Token=T%2FK&X-Amz-SignedHeaders=host\n")
    );

    // A declared x-amz-content-sha256 is the payload hash as given.
    let o = sigv4(
        &[],
        b"PUT /k HTTP/1.1\nHost: h\nx-amz-content-sha256: UNSIGNED-PAYLOAD\n\nbody",
    );
    assert!(o.str("canonical_request").ends_with("\nUNSIGNED-PAYLOAD"));
}

#[test]
fn malformed_input_exits_2() {
    let cases: &[(&[&str], &[u8])] = &[
        (&[], b"GET /x HTTP/1.1\n\n"),                      // no Host
        (&[], b""),                                         // no request line
        (&[], b"GET /x\nHost: h\n\n"),                      // no version
        (&[], b"GET /x HTTP/1.1\nHost h\n\n"),              // header without ':'
        (&[], b"GET /x HTTP/1.1\n continued\nHost: h\n\n"), // continuation first
        (&[], b"GET /100% HTTP/1.1\nHost: h\n\n"),          // broken escape
        (
            &[],
            b"GET /x HTTP/1.1\nHost: h\nx-amz-date: 20200101T000000Z\n\n",
        ), // date mismatch
        (
            &[],
            b"GET /x HTTP/1.1\nHost: h\nx-amz-content-sha256: nope\n\n",
        ), // bad payload hash
        (
            &["--mode", "query", "--expires", "604801"],
            b"GET /x HTTP/1.1\nHost: h\n\n",
        ),
        (&["--chunk-signature", "abc"], b"data"),
        (&["--trailer-signature", EMPTY_SHA256], b"no colon here\n"),
    ];
    for (flags, stdin) in cases {
        let o = sigv4(flags, stdin);
        assert_eq!(
            o.code,
            2,
            "{flags:?} {:?}: {}",
            String::from_utf8_lossy(stdin),
            o.json
        );
        assert!(o.json.get("error").is_some());
        assert!(!o.stderr.is_empty());
    }
    let mut args = Wrapper::try_parse_from([
        "sigv4",
        "--access-key",
        AK,
        "--secret-key",
        SK,
        "--region",
        "us-east-1",
        "--service",
        "s3",
        "--date",
        "2013",
    ])
    .unwrap()
    .args;
    let mut out = Vec::new();
    assert_eq!(
        run(
            &args,
            &mut &b"GET / HTTP/1.1\nHost: h\n\n"[..],
            &mut out,
            &mut Vec::new()
        ),
        2
    );
    args.date = DATE.into();
    args.region = "us east".into();
    assert_eq!(
        run(
            &args,
            &mut &b"GET / HTTP/1.1\nHost: h\n\n"[..],
            &mut Vec::new(),
            &mut Vec::new()
        ),
        2
    );
}

#[test]
fn unsupported_options_exit_3_with_a_reason() {
    let cases: &[(&[&str], &[u8])] = &[
        (&["--expires", "60"], b"GET /x HTTP/1.1\nHost: h\n\n"),
        (&["--mode", "query", "--chunk-signature", EMPTY_SHA256], b"x"),
        // A presigned request carries no x-amz-content-sha256 header (issue 18).
        (&["--mode", "query", "--content-sha256", "header"], b"GET /x HTTP/1.1\nHost: h\n\n"),
        (&["--content-sha256", "omit", "--chunk-signature", EMPTY_SHA256], b"x"),
        (&[], b"GET /x HTTP/2\nHost: h\n\n"),
        (&[], b"GET http://h/x HTTP/1.1\nHost: h\n\n"),
        (&[], b"PUT /x HTTP/1.1\nHost: h\nx-amz-content-sha256: STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD\n\n"),
    ];
    for (flags, stdin) in cases {
        let o = sigv4(flags, stdin);
        assert_eq!(o.code, 3, "{flags:?}: {}", o.json);
        assert!(!o.str("unsupported").is_empty());
    }
}

#[test]
fn the_real_binary_signs_the_aws_get_example() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "debug",
            "sigv4",
            "--access-key",
            AK,
            "--secret-key",
            SK,
            "--region",
            "us-east-1",
            "--service",
            "s3",
        ])
        .args(["--date", DATE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"GET /test.txt HTTP/1.1\nHost: examplebucket.s3.amazonaws.com\nRange: bytes=0-9\n\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["signature"],
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    );
}
