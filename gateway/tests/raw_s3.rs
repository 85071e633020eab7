//! The gateway against hand-built requests: authentication failures with the right codes,
//! RDMA headers, checksums, hostile keys, framing, addressing, limits.

#[path = "support/raw.rs"]
mod raw;

use raw::*;
use s3_lite::checksum::{Checksum, ChecksumAlgorithm};
use s3_lite::sigv4::PayloadHash;

fn crc64(data: &[u8]) -> String {
    Checksum::compute(ChecksumAlgorithm::Crc64Nvme, data).to_base64()
}

#[test]
fn auth_failures_have_s3_codes() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/auth-bucket", "", &[], b"").status(), 200);

    // Anonymous.
    let r = send(a, &req(a, "GET", "/auth-bucket", "list-type=2"), b"");
    assert_eq!((r.status(), r.code().as_str()), (403, "AccessDenied"));
    assert!(r.header("x-amz-request-id").is_some());
    assert!(r.text().contains("<RequestId>"));

    // Wrong secret.
    let mut q = req(a, "GET", "/auth-bucket", "list-type=2");
    signer(ACCESS, "wrong")
        .sign_headers(&mut q, &PayloadHash::of_body(b""), now())
        .unwrap();
    let r = send(a, &q, b"");
    assert_eq!(
        (r.status(), r.code().as_str()),
        (403, "SignatureDoesNotMatch")
    );
    assert!(
        r.text()
            .contains("<CanonicalRequest>GET\n/auth-bucket\nlist-type=2"),
        "{}",
        r.text()
    );

    // Unknown key.
    let mut q = req(a, "GET", "/auth-bucket", "list-type=2");
    signer("nobody", SECRET)
        .sign_headers(&mut q, &PayloadHash::of_body(b""), now())
        .unwrap();
    assert_eq!(send(a, &q, b"").code(), "InvalidAccessKeyId");

    // The second configured key works.
    let mut q = req(a, "GET", "/auth-bucket", "list-type=2");
    signer("second-key", "second-secret")
        .sign_headers(&mut q, &PayloadHash::of_body(b""), now())
        .unwrap();
    assert_eq!(send(a, &q, b"").status(), 200);

    // A signed header tampered with after signing.
    let mut q = req(a, "GET", "/auth-bucket/k", "");
    q.add_header("Range", "bytes=0-1");
    let mut q = sign(q, b"", None);
    q.set_header("Range", "bytes=0-2");
    assert_eq!(send(a, &q, b"").code(), "SignatureDoesNotMatch");

    // Skewed clock.
    let mut q = req(a, "GET", "/auth-bucket", "list-type=2");
    let old = s3_lite::sigv4::AmzDate::from_unix_secs(now().unix_secs() - 3600).unwrap();
    signer(ACCESS, SECRET)
        .sign_headers(&mut q, &PayloadHash::of_body(b""), old)
        .unwrap();
    assert_eq!(send(a, &q, b"").code(), "RequestTimeTooSkewed");

    // Presigned GET works; a tampered presigned URL does not.
    let put = call(a, "PUT", "/auth-bucket/pre", "", &[], b"presigned!");
    assert_eq!(put.status(), 200);
    let p = signer(ACCESS, SECRET)
        .presign(&req(a, "GET", "/auth-bucket/pre", ""), 300, now())
        .unwrap();
    let mut q = req(a, "GET", "/auth-bucket/pre", "");
    q.query = p.request.query.clone();
    let r = send(a, &q, b"");
    assert_eq!(
        (r.status(), r.body.as_slice()),
        (200, &b"presigned!"[..]),
        "{}",
        r.text()
    );
    q.path = "/auth-bucket/other".into();
    assert_eq!(send(a, &q, b"").code(), "SignatureDoesNotMatch");
    gw.shutdown();
}

#[test]
fn rdma_headers_must_be_signed_and_are_declined() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    call(a, "PUT", "/rdma-bucket", "", &[], b"");
    let data = b"0123456789abcdef";
    assert_eq!(
        call(a, "PUT", "/rdma-bucket/obj", "", &[], data).status(),
        200
    );
    let rc = "0".repeat(86) + "01"; // 88 hex: shape of a hipObject RC token

    // Unsigned x-amz-rdma-* header → 403 even with a valid signature over the rest.
    let q = sign(req(a, "GET", "/rdma-bucket/obj", ""), b"", None);
    let mut q2 = q.clone();
    q2.add_header("x-amz-rdma-token", rc.clone());
    let r = send(a, &q2, b"");
    assert_eq!(
        (r.status(), r.code().as_str()),
        (403, "AccessDenied"),
        "{}",
        r.text()
    );

    // Signed but malformed token → 400 without a reply header.
    let r = call(
        a,
        "GET",
        "/rdma-bucket/obj",
        "",
        &[("x-amz-rdma-token", "zz")],
        b"",
    );
    assert_eq!(
        (r.status(), r.code().as_str(), r.header("x-amz-rdma-reply")),
        (400, "InvalidArgument", None)
    );

    // A signed RC token on GET: data in the body, reply 501 and the v2 marker.
    let r = call(
        a,
        "GET",
        "/rdma-bucket/obj",
        "",
        &[("x-amz-rdma-token", rc.as_str()), ("Range", "bytes=2-5")],
        b"",
    );
    assert_eq!((r.status(), r.body.as_slice()), (206, &data[2..6]));
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    assert_eq!(r.header("x-amz-rdma-protocol-status"), Some("unsupported"));

    // A body-less RDMA PUT is refused with 501 and nothing is stored.
    let r = call(
        a,
        "PUT",
        "/rdma-bucket/rdma-put",
        "",
        &[
            ("x-amz-rdma-token", rc.as_str()),
            ("x-amz-checksum-crc64nvme", &crc64(data)),
        ],
        b"",
    );
    assert_eq!(
        (r.status(), r.code().as_str(), r.header("x-amz-rdma-reply")),
        (501, "NotImplemented", Some("501"))
    );
    assert_eq!(
        call(a, "HEAD", "/rdma-bucket/rdma-put", "", &[], b"").status(),
        404
    );
    gw.shutdown();
}

#[test]
fn checksums_are_verified_before_storing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    call(a, "PUT", "/sum-bucket", "", &[], b"");
    let data = vec![7u8; 100_000];

    let r = call(
        a,
        "PUT",
        "/sum-bucket/bad",
        "",
        &[("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")],
        &data,
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "BadDigest"));
    assert_eq!(
        call(a, "HEAD", "/sum-bucket/bad", "", &[], b"").status(),
        404,
        "nothing stored"
    );
    let r = call(
        a,
        "PUT",
        "/sum-bucket/bad",
        "",
        &[("x-amz-checksum-crc32c", "AAAAAA==")],
        &data,
    );
    assert_eq!(r.code(), "BadDigest");

    // Payload hash that does not match the body.
    let mut q = req(a, "PUT", "/sum-bucket/sha", "");
    q = sign(q, b"", Some(PayloadHash::of_body(b"something else")));
    let r = send(a, &q, &data);
    assert_eq!(r.code(), "XAmzContentSHA256Mismatch");
    assert_eq!(
        call(a, "HEAD", "/sum-bucket/sha", "", &[], b"").status(),
        404
    );

    // Correct checksum: stored and echoed; the empty-body CRC of an ignored RDMA PUT is refused.
    let good = crc64(&data);
    let r = call(
        a,
        "PUT",
        "/sum-bucket/good",
        "",
        &[("x-amz-checksum-crc64nvme", &good)],
        &data,
    );
    assert_eq!(
        (r.status(), r.header("x-amz-checksum-crc64nvme")),
        (200, Some(good.as_str()))
    );
    let r = call(
        a,
        "PUT",
        "/sum-bucket/empty",
        "",
        &[("x-amz-checksum-crc64nvme", &good)],
        b"",
    );
    assert_eq!(r.code(), "BadDigest");

    // GET with checksum mode returns the stored value; If-Match guards.
    let r = call(
        a,
        "GET",
        "/sum-bucket/good",
        "",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(
        (
            r.status(),
            r.body.len(),
            r.header("x-amz-checksum-crc64nvme")
        ),
        (200, data.len(), Some(good.as_str()))
    );
    let etag = r.header("etag").unwrap().to_owned();
    assert_eq!(
        call(
            a,
            "GET",
            "/sum-bucket/good",
            "",
            &[("If-Match", &etag)],
            b""
        )
        .status(),
        200
    );
    let r = call(
        a,
        "HEAD",
        "/sum-bucket/good",
        "",
        &[("If-Match", "\"nope\"")],
        b"",
    );
    assert_eq!(r.status(), 412);
    assert_eq!(
        call(
            a,
            "GET",
            "/sum-bucket/good",
            "",
            &[("If-Match", "\"nope\"")],
            b""
        )
        .code(),
        "PreconditionFailed"
    );

    // STREAMING-UNSIGNED-PAYLOAD-TRAILER (aws-chunked with a trailing checksum).
    let chunked = format!(
        "186a0\r\n{}\r\n0\r\nx-amz-checksum-crc64nvme:{good}\r\n\r\n",
        "\x07".repeat(100_000)
    );
    let mut q = req(a, "PUT", "/sum-bucket/chunked", "");
    q.add_header("Content-Encoding", "aws-chunked");
    q.add_header("x-amz-decoded-content-length", "100000");
    q.add_header("x-amz-trailer", "x-amz-checksum-crc64nvme");
    let q = sign(q, b"", Some(PayloadHash::StreamingUnsignedTrailer));
    let r = send(a, &q, chunked.as_bytes());
    assert_eq!(r.status(), 200, "{}", r.text());
    let r = call(a, "GET", "/sum-bucket/chunked", "", &[], b"");
    assert_eq!(r.body, data);
    // Signed streaming is verified chunk by chunk (dir_s3_ops.rs); a chunk without its
    // signature is refused and nothing is stored.
    let mut q = req(a, "PUT", "/sum-bucket/signed-stream", "");
    q.add_header("x-amz-decoded-content-length", "0");
    let q = sign(q, b"", Some(PayloadHash::StreamingSigned));
    assert_eq!(send(a, &q, b"0\r\n\r\n").code(), "InvalidRequest");
    let r = call(a, "GET", "/sum-bucket/signed-stream", "", &[], b"");
    assert_eq!(r.status(), 404);
    gw.shutdown();
}

#[test]
fn hostile_keys_stay_inside_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let gw = start(&root);
    let a = gw.local_addr();
    call(a, "PUT", "/keys-bucket", "", &[], b"");
    for (key_path, content) in [
        ("/keys-bucket/../../escape", &b"one"[..]),
        ("/keys-bucket/%2E%2E/%2E%2E/escape2", b"two"),
        ("/keys-bucket//abs", b"three"),
        ("/keys-bucket/a", b"file"),
        ("/keys-bucket/a/b", b"nested"),
    ] {
        let r = call(a, "PUT", key_path, "", &[], content);
        assert_eq!(r.status(), 200, "{key_path}: {}", r.text());
        let r = call(a, "GET", key_path, "", &[], b"");
        assert_eq!(r.body, content, "{key_path}");
    }
    assert!(!dir.path().join("escape").exists() && !dir.path().join("escape2").exists());
    let r = call(a, "PUT", "/keys-bucket/nul%00key", "", &[], b"x");
    assert_eq!(r.status(), 400);
    let r = call(a, "GET", "/keys-bucket", "list-type=2", &[], b"");
    for k in [
        "<Key>../../escape</Key>",
        "<Key>/abs</Key>",
        "<Key>a</Key>",
        "<Key>a/b</Key>",
    ] {
        assert!(r.text().contains(k), "{k} in {}", r.text());
    }
    // Bucket names are validated: no traversal through them either.
    assert_eq!(call(a, "PUT", "/..", "", &[], b"").status(), 400);
    gw.shutdown();
}

#[test]
fn keep_alive_virtual_host_smuggling_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path());
    let a = gw.local_addr();
    call(a, "PUT", "/vh-bucket", "", &[], b"");

    // Virtual-host addressing.
    let mut q = req(a, "PUT", "/v/key", "");
    q.set_header("Host", format!("vh-bucket.s3.test:{}", a.port()));
    let r = send(a, &sign(q, b"vh", None), b"vh");
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(call(a, "GET", "/vh-bucket/v/key", "", &[], b"").body, b"vh");

    // Keep-alive: three requests on one connection, including an error answered in between.
    let mut s = std::net::TcpStream::connect(a).unwrap();
    for (key, status) in [("v/key", 200), ("missing", 404), ("v/key", 200)] {
        let r = send_on(
            &mut s,
            &sign(req(a, "GET", &format!("/vh-bucket/{key}"), ""), b"", None),
            b"",
        );
        assert_eq!(r.status(), status);
        assert_eq!(r.header("connection"), None);
    }

    // TE + CL smuggling is refused with 400 and the connection closed.
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(a).unwrap();
    s.write_all(b"POST /vh-bucket/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(out.contains("Connection: close"));

    // Range forms and 416.
    call(a, "PUT", "/vh-bucket/r", "", &[], b"0123456789");
    for (range, body, cr) in [
        ("bytes=2-4", &b"234"[..], "bytes 2-4/10"),
        ("bytes=7-", b"789", "bytes 7-9/10"),
        ("bytes=-3", b"789", "bytes 7-9/10"),
        ("bytes=8-100", b"89", "bytes 8-9/10"),
    ] {
        let r = call(a, "GET", "/vh-bucket/r", "", &[("Range", range)], b"");
        assert_eq!(
            (r.status(), r.body.as_slice(), r.header("content-range")),
            (206, body, Some(cr)),
            "{range}"
        );
    }
    let r = call(a, "GET", "/vh-bucket/r", "", &[("Range", "bytes=10-")], b"");
    assert_eq!(
        (r.status(), r.header("content-range")),
        (416, Some("bytes */10"))
    );
    gw.shutdown();
}

#[test]
fn capability_route_advertises_the_fabric_only_when_signed() {
    const PATH: &str = "/.hipobj/rc/capabilities";
    let dir = tempfile::tempdir().unwrap();

    // Fabric none: signed → 501 with the RDMA reply marker, so a client keeps plain HTTP.
    let plain = start(dir.path());
    let a = plain.local_addr();
    let r = call(a, "GET", PATH, "", &[], b"");
    assert_eq!(
        (r.status(), r.code().as_str(), r.header("x-amz-rdma-reply")),
        (501, "NotImplemented", Some("501")),
        "{}",
        r.text()
    );
    assert_eq!(r.header("x-amz-rdma-fabric"), None);
    plain.shutdown();

    // Soft fabric: signed → 200 naming the fabric, the protocol and both dialects.
    let soft = hipobj_gateway::RcTarget::start(
        "127.0.0.1:0".parse().unwrap(),
        hipobj_gateway::RcLimits::default(),
    )
    .unwrap();
    let gw = hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(ACCESS, SECRET)
        .rdma_target(soft)
        .start()
        .unwrap();
    let a = gw.local_addr();
    let r = call(a, "GET", PATH, "", &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-fabric"), Some("soft"));
    assert_eq!(r.header("x-amz-rdma-protocol"), Some("rc-persistent"));
    assert_eq!(
        r.header("x-amz-rdma-dialects"),
        Some("rc-persistent,hipobj-rc-v2")
    );
    assert!(r.body.is_empty());

    // Unsigned → 403, and the answer gives nothing of the fabric away.
    let r = send(a, &req(a, "GET", PATH, ""), b"");
    assert_eq!(
        (r.status(), r.code().as_str()),
        (403, "AccessDenied"),
        "{}",
        r.text()
    );
    assert_eq!(r.header("x-amz-rdma-fabric"), None);

    // Signed with a wrong secret → 403 SignatureDoesNotMatch.
    let mut q = req(a, "GET", PATH, "");
    signer(ACCESS, "not-the-secret")
        .sign_headers(&mut q, &PayloadHash::of_body(b""), now())
        .unwrap();
    let r = send(a, &q, b"");
    assert_eq!(
        (r.status(), r.code().as_str()),
        (403, "SignatureDoesNotMatch"),
        "{}",
        r.text()
    );

    // Another method → 405.
    assert_eq!(call(a, "PUT", PATH, "", &[], b"").status(), 405);
    gw.shutdown();
}
