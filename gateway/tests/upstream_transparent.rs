//! Upstream mode is transparent (issue 17): requests the gateway does not serve itself go to
//! the upstream S3 store (s3s-fs here) re-signed, and its answers come back unchanged. Raw
//! signed requests, so every byte of the exchange is checked.

#[path = "support/raw.rs"]
mod raw;
#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::net::SocketAddr;

use hipobj_gateway::{Gateway, RunningGateway};
use raw::{ACCESS, SECRET, call};
use s3_lite::credentials::Credentials;

struct Bridge {
    gw: RunningGateway,
    up: s3s_fs::S3sFs,
}

impl Bridge {
    fn start() -> Self {
        let up = s3s_fs::S3sFs::start();
        let gw = Gateway::builder()
            .listen("127.0.0.1:0")
            .credentials(ACCESS, SECRET)
            .upstream(
                up.endpoint_url(),
                Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY),
                "us-east-1",
            )
            .start()
            .unwrap();
        Self { gw, up }
    }

    fn addr(&self) -> SocketAddr {
        self.gw.local_addr()
    }

    fn bucket(&self, name: &str) {
        let r = call(self.addr(), "PUT", &format!("/{name}"), "", &[], b"");
        assert_eq!(r.status(), 200, "{}", r.text());
    }

    fn put(&self, bucket: &str, encoded_key: &str, body: &[u8]) {
        let r = call(
            self.addr(),
            "PUT",
            &format!("/{bucket}/{encoded_key}"),
            "",
            &[],
            body,
        );
        assert_eq!(r.status(), 200, "{}", r.text());
    }
}

#[test]
fn list_buckets_is_the_upstreams() {
    let b = Bridge::start();
    b.bucket("alpha");
    b.bucket("beta");
    let r = call(b.addr(), "GET", "/", "", &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(
        t.contains("<Name>alpha</Name>") && t.contains("<Name>beta</Name>"),
        "{t}"
    );
}

#[test]
fn keys_with_percent_list_and_read_back_faithfully() {
    let b = Bridge::start();
    b.bucket("pct");
    // The key `a%b 100%.txt`, percent-encoded on the wire.
    b.put("pct", "a%25b%20100%25.txt", b"percent");
    for query in [
        "encoding-type=url&list-type=2",
        "list-type=2",
        "encoding-type=url",
    ] {
        let r = call(b.addr(), "GET", "/pct", query, &[], b"");
        assert_eq!(r.status(), 200, "{query}: {}", r.text());
        let t = r.text();
        let encoded = t.contains("<Key>a%25b%20100%25.txt</Key>");
        let raw_key = t.contains("<Key>a%b 100%.txt</Key>");
        if query.contains("encoding-type=url") {
            // Whatever the upstream answers is relayed: its key, encoded or not, and the
            // EncodingType it declared.
            assert!(encoded || raw_key, "{query}: {t}");
        } else {
            assert!(raw_key, "{query}: {t}");
        }
    }
    let r = call(b.addr(), "GET", "/pct/a%25b%20100%25.txt", "", &[], b"");
    assert_eq!(r.status(), 200);
    assert_eq!(r.body, b"percent");
    assert_eq!(
        std::fs::read(b.up.root.path().join("pct/a%b 100%.txt")).unwrap(),
        b"percent",
        "stored upstream under the client's key bytes"
    );
}

#[test]
fn delete_objects_reaches_the_upstream() {
    let b = Bridge::start();
    b.bucket("del");
    b.put("del", "one", b"1");
    b.put("del", "two", b"2");
    let doc = b"<Delete><Object><Key>one</Key></Object><Object><Key>two</Key></Object></Delete>";
    let md5 = {
        use base64::Engine as _;
        use md5::Digest as _;
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(doc))
    };
    let r = call(
        b.addr(),
        "POST",
        "/del",
        "delete",
        &[("Content-MD5", &md5)],
        doc,
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    assert!(r.text().contains("<Deleted>"), "{}", r.text());
    assert!(!b.up.root.path().join("del/one").exists());
    assert!(!b.up.root.path().join("del/two").exists());
}

#[test]
fn copy_object_and_errors_come_from_the_upstream() {
    let b = Bridge::start();
    b.bucket("cpy");
    b.put("cpy", "src", b"copy me");
    let r = call(
        b.addr(),
        "PUT",
        "/cpy/dst",
        "",
        &[("x-amz-copy-source", "/cpy/src")],
        b"",
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    assert!(r.text().contains("CopyObjectResult"), "{}", r.text());
    assert_eq!(
        std::fs::read(b.up.root.path().join("cpy/dst")).unwrap(),
        b"copy me"
    );
    // The upstream's error document, status and code, unchanged.
    let r = call(b.addr(), "GET", "/cpy/missing", "", &[], b"");
    assert_eq!(r.status(), 404);
    assert_eq!(r.code(), "NoSuchKey");
    // Only one of each header the client connection would also write.
    let ids = r
        .head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-amz-request-id"))
        .count();
    assert!(ids <= 1, "{:?}", r.head.headers);
}

#[test]
fn head_and_ranged_get_are_relayed() {
    let b = Bridge::start();
    b.bucket("hdr");
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    b.put("hdr", "obj", &data);
    let r = call(b.addr(), "HEAD", "/hdr/obj", "", &[], b"");
    assert_eq!(r.status(), 200);
    assert_eq!(r.header("content-length"), Some("100000"));
    assert!(r.body.is_empty());
    let r = call(
        b.addr(),
        "GET",
        "/hdr/obj",
        "",
        &[("Range", "bytes=100-199")],
        b"",
    );
    assert_eq!(r.status(), 206);
    assert_eq!(r.header("content-range"), Some("bytes 100-199/100000"));
    assert_eq!(r.body, &data[100..200]);
    // A signature by a key the gateway does not know never reaches the upstream.
    let mut q = raw::req(b.addr(), "GET", "/hdr/obj", "");
    raw::signer("nobody", "nothing")
        .sign_headers(
            &mut q,
            &s3_lite::sigv4::PayloadHash::of_body(b""),
            raw::now(),
        )
        .unwrap();
    let r = raw::send(b.addr(), &q, b"");
    assert_eq!(r.status(), 403);
    assert_eq!(r.code(), "InvalidAccessKeyId");
}

#[test]
fn signed_aws_chunked_uploads_are_verified_then_forwarded() {
    let b = Bridge::start();
    b.bucket("sgn");
    let data: Vec<u8> = (0..150_000u32).map(|i| (i * 29 % 256) as u8).collect();
    let r = raw::signed_chunked_put(b.addr(), "/sgn/obj", &data, 65_536, None, false);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(
        std::fs::read(b.up.root.path().join("sgn/obj")).unwrap(),
        data
    );
    let r = raw::signed_chunked_put(b.addr(), "/sgn/bad", &data, 65_536, None, true);
    assert!(
        matches!(r.status(), 400 | 403),
        "{} {}",
        r.status(),
        r.text()
    );
    assert!(
        !b.up.root.path().join("sgn/bad").exists(),
        "nothing forwarded"
    );
}
