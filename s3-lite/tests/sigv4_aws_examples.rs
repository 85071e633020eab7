//! AWS's published S3 SigV4 examples ("Examples: Signature Calculations in AWS Signature
//! Version 4", S3 API reference: sig-v4-header-based-auth, sigv4-query-string-auth,
//! sigv4-streaming, sigv4-streaming-trailers), asserted stage by stage: canonical request,
//! string to sign, signature and Authorization header.
//!
//! All use access key AKIAIOSFODNN7EXAMPLE, secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY,
//! time 20130524T000000Z, region us-east-1, bucket examplebucket.

use s3_lite::Request;
use s3_lite::credentials::Credentials;
use s3_lite::sigv4::{AmzDate, EMPTY_SHA256, PayloadHash, Signer, canonical_trailer};

const AK: &str = "AKIAIOSFODNN7EXAMPLE";
const SK: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const HOST: &str = "examplebucket.s3.amazonaws.com";

fn signer() -> Signer {
    Signer::new(Credentials::new(AK, SK), "us-east-1", "s3").unwrap()
}

fn now() -> AmzDate {
    AmzDate::parse("20130524T000000Z").unwrap()
}

fn sts(hash: &str) -> String {
    format!("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n{hash}")
}

fn auth(signed: &str, sig: &str) -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders={signed}, Signature={sig}"
    )
}

#[test]
fn get_object_with_range() {
    let mut req = Request::new("GET", "/test.txt");
    req.add_header("Host", HOST);
    req.add_header("Range", "bytes=0-9");
    let out = signer()
        .sign_headers(&mut req, &PayloadHash::of_body(b""), now())
        .unwrap();
    assert_eq!(
        out.canonical_request,
        format!(
            "GET\n/test.txt\n\nhost:{HOST}\nrange:bytes=0-9\nx-amz-content-sha256:{EMPTY_SHA256}\n\
             x-amz-date:20130524T000000Z\n\nhost;range;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
        )
    );
    assert_eq!(
        out.string_to_sign,
        sts("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972")
    );
    let sig = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
    assert_eq!(out.signature, sig);
    let expected_auth = auth("host;range;x-amz-content-sha256;x-amz-date", sig);
    assert_eq!(out.authorization.as_deref(), Some(expected_auth.as_str()));
    assert_eq!(req.header("authorization"), Some(expected_auth.as_str()));
    assert_eq!(req.header("x-amz-date"), Some("20130524T000000Z"));
    assert_eq!(req.header("x-amz-content-sha256"), Some(EMPTY_SHA256));
}

#[test]
fn put_object_with_dollar_in_key() {
    let body = b"Welcome to Amazon S3.";
    let payload = PayloadHash::of_body(body);
    assert_eq!(
        payload.as_str(),
        "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
    );
    let mut req = Request::new("PUT", "/test$file.text");
    req.add_header("Host", HOST);
    req.add_header("Date", "Fri, 24 May 2013 00:00:00 GMT");
    req.add_header("x-amz-storage-class", "REDUCED_REDUNDANCY");
    let out = signer().sign_headers(&mut req, &payload, now()).unwrap();
    let h = payload.as_str();
    assert_eq!(
        out.canonical_request,
        format!(
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\nhost:{HOST}\n\
             x-amz-content-sha256:{h}\nx-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n\
             date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n{h}"
        )
    );
    assert_eq!(
        out.string_to_sign,
        sts("9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d")
    );
    assert_eq!(
        out.signature,
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
    );
}

#[test]
fn get_bucket_lifecycle() {
    let mut req = Request::new("GET", "/");
    req.query = "lifecycle".into();
    req.add_header("Host", HOST);
    let out = signer()
        .sign_headers(&mut req, &PayloadHash::of_body(b""), now())
        .unwrap();
    assert_eq!(
        out.canonical_request,
        format!(
            "GET\n/\nlifecycle=\nhost:{HOST}\nx-amz-content-sha256:{EMPTY_SHA256}\nx-amz-date:20130524T000000Z\n\n\
             host;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
        )
    );
    assert_eq!(
        out.string_to_sign,
        sts("9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca")
    );
    assert_eq!(
        out.signature,
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
    );
}

#[test]
fn list_objects_sorts_the_query() {
    let mut req = Request::new("GET", "/");
    req.query = "prefix=J&max-keys=2".into(); // deliberately unsorted
    req.add_header("Host", HOST);
    let out = signer()
        .sign_headers(&mut req, &PayloadHash::of_body(b""), now())
        .unwrap();
    assert_eq!(
        out.canonical_request,
        format!(
            "GET\n/\nmax-keys=2&prefix=J\nhost:{HOST}\nx-amz-content-sha256:{EMPTY_SHA256}\n\
             x-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n{EMPTY_SHA256}"
        )
    );
    assert_eq!(
        out.string_to_sign,
        sts("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7")
    );
    assert_eq!(
        out.signature,
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    );
}

#[test]
fn presigned_get() {
    let mut req = Request::new("GET", "/test.txt");
    req.add_header("Host", HOST);
    let p = signer().presign(&req, 86400, now()).unwrap();
    let q = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host";
    assert_eq!(
        p.output.canonical_request,
        format!("GET\n/test.txt\n{q}\nhost:{HOST}\n\nhost\nUNSIGNED-PAYLOAD")
    );
    assert_eq!(
        p.output.string_to_sign,
        sts("3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04")
    );
    let sig = "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";
    assert_eq!(p.output.signature, sig);
    assert_eq!(p.output.authorization, None);
    assert_eq!(p.request.query, format!("{q}&X-Amz-Signature={sig}"));
    assert!(p.request.header("authorization").is_none());
}

/// The seed request of the chunked-upload example (sigv4-streaming).
#[test]
fn chunked_upload_seed_and_chunks() {
    let mut req = Request::new("PUT", "/examplebucket/chunkObject.txt");
    req.add_header("Host", "s3.amazonaws.com");
    req.add_header("x-amz-storage-class", "REDUCED_REDUNDANCY");
    req.add_header("Content-Encoding", "aws-chunked");
    req.add_header("x-amz-decoded-content-length", "66560");
    req.add_header("Content-Length", "66824");
    let s = signer();
    let out = s
        .sign_headers(&mut req, &PayloadHash::StreamingSigned, now())
        .unwrap();
    assert_eq!(
        out.canonical_request,
        "PUT\n/examplebucket/chunkObject.txt\n\ncontent-encoding:aws-chunked\ncontent-length:66824\n\
         host:s3.amazonaws.com\nx-amz-content-sha256:STREAMING-AWS4-HMAC-SHA256-PAYLOAD\nx-amz-date:20130524T000000Z\n\
         x-amz-decoded-content-length:66560\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n\
         content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class\n\
         STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    );
    assert_eq!(
        out.string_to_sign,
        sts("cee3fed04b70f867d036f722359b0b1f2f0e5dc0efadbc082b76c4c60e316455")
    );
    let seed = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
    assert_eq!(out.signature, seed);

    let scope = "20130524/us-east-1/s3/aws4_request";
    let chunk_sts = |prev: &str, hash: &str| {
        format!(
            "AWS4-HMAC-SHA256-PAYLOAD\n20130524T000000Z\n{scope}\n{prev}\n{EMPTY_SHA256}\n{hash}"
        )
    };
    let c1 = s.sign_chunk(seed, now(), &[b'a'; 65536]).unwrap();
    assert_eq!(
        c1.string_to_sign,
        chunk_sts(
            seed,
            "bf718b6f653bebc184e1479f1935b8da974d701b893afcf49e701f3e2f9f9c5a"
        )
    );
    assert_eq!(
        c1.signature,
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648"
    );
    let c2 = s.sign_chunk(&c1.signature, now(), &[b'a'; 1024]).unwrap();
    assert_eq!(
        c2.string_to_sign,
        chunk_sts(
            &c1.signature,
            "2edc986847e209b4016e141a6dc8716d3207350f416969382d431539bf292e4a"
        )
    );
    assert_eq!(
        c2.signature,
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497"
    );
    let c3 = s.sign_chunk(&c2.signature, now(), b"").unwrap();
    assert_eq!(c3.string_to_sign, chunk_sts(&c2.signature, EMPTY_SHA256));
    assert_eq!(
        c3.signature,
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"
    );
}

/// The trailing-header example (sigv4-streaming-trailers): seed, chunks, then the trailer
/// `x-amz-checksum-crc32c:sOO8/Q==` signed with `AWS4-HMAC-SHA256-TRAILER`.
#[test]
fn chunked_upload_with_signed_trailer() {
    let mut req = Request::new("PUT", "/examplebucket/chunkObject.txt");
    req.add_header("Host", "s3.amazonaws.com");
    req.add_header("x-amz-storage-class", "REDUCED_REDUNDANCY");
    req.add_header("Content-Encoding", "aws-chunked");
    req.add_header("x-amz-decoded-content-length", "66560");
    req.add_header("x-amz-trailer", "x-amz-checksum-crc32c");
    let s = signer();
    let out = s
        .sign_headers(&mut req, &PayloadHash::StreamingSignedTrailer, now())
        .unwrap();
    assert_eq!(
        out.signed_headers,
        "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer"
    );
    assert_eq!(
        out.string_to_sign,
        sts("44d48b8c2f70eae815a0198cc73d7a546a73a93359c070abbaa5e6c7de112559")
    );
    let seed = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e";
    assert_eq!(out.signature, seed);
    let c1 = s.sign_chunk(seed, now(), &[b'a'; 65536]).unwrap();
    assert_eq!(
        c1.signature,
        "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2"
    );
    let c2 = s.sign_chunk(&c1.signature, now(), &[b'a'; 1024]).unwrap();
    assert_eq!(
        c2.signature,
        "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7"
    );
    let c3 = s.sign_chunk(&c2.signature, now(), b"").unwrap();
    assert_eq!(
        c3.signature,
        "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992"
    );
    let trailer = canonical_trailer("x-amz-checksum-crc32c:sOO8/Q==\r\n").unwrap();
    assert_eq!(trailer, "x-amz-checksum-crc32c:sOO8/Q==\n");
    let t = s.sign_trailer(&c3.signature, now(), &trailer).unwrap();
    assert!(t.string_to_sign.starts_with(&format!(
        "AWS4-HMAC-SHA256-TRAILER\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n{}\n",
        c3.signature
    )));
    assert_eq!(
        t.signature,
        "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
    );
}
