//! Directory mode behaves like S3 for the operations issue 17 lists: DeleteObjects,
//! ListObjects v1, MaxKeys=0, conditional requests, stored metadata, SHA checksums,
//! CopyObject and UploadPartCopy. Raw signed requests against the gateway in-process.

#[path = "support/raw.rs"]
mod raw;

use std::net::SocketAddr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use raw::*;
use s3_lite::checksum::{Checksum, ChecksumAlgorithm};

struct Dir {
    gw: hipobj_gateway::RunningGateway,
    _root: tempfile::TempDir,
}

impl Dir {
    fn start(bucket: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let gw = raw::start(root.path());
        let d = Self { gw, _root: root };
        let r = call(d.addr(), "PUT", &format!("/{bucket}"), "", &[], b"");
        assert_eq!(r.status(), 200, "{}", r.text());
        d
    }

    fn addr(&self) -> SocketAddr {
        self.gw.local_addr()
    }

    fn put(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
        call(self.addr(), "PUT", path, "", headers, body)
    }

    fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        call(self.addr(), "GET", path, "", headers, b"")
    }
}

fn md5_b64(data: &[u8]) -> String {
    use md5::Digest as _;
    STANDARD.encode(md5::Md5::digest(data))
}

fn delete_doc(quiet: bool, keys: &[&str]) -> Vec<u8> {
    let mut d = String::from("<Delete>");
    if quiet {
        d.push_str("<Quiet>true</Quiet>");
    }
    for k in keys {
        d.push_str(&format!("<Object><Key>{k}</Key></Object>"));
    }
    d.push_str("</Delete>");
    d.into_bytes()
}

#[test]
fn delete_objects_reports_each_key_and_honours_quiet() {
    let d = Dir::start("dels");
    for k in ["a", "b", "c"] {
        assert_eq!(
            d.put(&format!("/dels/{k}"), &[], k.as_bytes()).status(),
            200
        );
    }
    let long = "k".repeat(1100);
    let doc = delete_doc(false, &["a", "missing", &long]);
    let r = call(
        d.addr(),
        "POST",
        "/dels",
        "delete",
        &[("Content-MD5", &md5_b64(&doc))],
        &doc,
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(t.contains("<Deleted><Key>a</Key></Deleted>"), "{t}");
    // Deleting a key that does not exist is a success in S3.
    assert!(t.contains("<Deleted><Key>missing</Key></Deleted>"), "{t}");
    assert!(t.contains("<Code>KeyTooLongError</Code>"), "{t}");
    assert_eq!(d.get("/dels/a", &[]).status(), 404);
    assert_eq!(d.get("/dels/b", &[]).status(), 200);

    let doc = delete_doc(true, &["b", "c"]);
    let r = call(
        d.addr(),
        "POST",
        "/dels",
        "delete",
        &[("Content-MD5", &md5_b64(&doc))],
        &doc,
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    assert!(!r.text().contains("<Deleted>"), "quiet: {}", r.text());
    assert_eq!(d.get("/dels/b", &[]).status(), 404);

    // S3 requires an integrity header; a wrong Content-MD5 is BadDigest; junk is MalformedXML.
    let r = call(d.addr(), "POST", "/dels", "delete", &[], &doc);
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidRequest"));
    let r = call(
        d.addr(),
        "POST",
        "/dels",
        "delete",
        &[("Content-MD5", &md5_b64(b"other"))],
        &doc,
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "BadDigest"));
    let junk = b"<Delete><Object></Delete>";
    let r = call(
        d.addr(),
        "POST",
        "/dels",
        "delete",
        &[("Content-MD5", &md5_b64(junk))],
        junk,
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "MalformedXML"));
}

#[test]
fn list_objects_v1_markers() {
    let d = Dir::start("lst");
    for k in ["a/1", "a/2", "b", "c/1", "d"] {
        assert_eq!(d.put(&format!("/lst/{k}"), &[], b"x").status(), 200);
    }
    let r = d.get("/lst", &[]);
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(
        t.contains("<Marker></Marker>") && t.contains("<Key>d</Key>"),
        "{t}"
    );
    assert!(!t.contains("KeyCount"), "v1 has no KeyCount: {t}");

    let r = call(
        d.addr(),
        "GET",
        "/lst",
        "delimiter=%2F&max-keys=2",
        &[],
        b"",
    );
    let t = r.text();
    assert!(t.contains("<IsTruncated>true</IsTruncated>"), "{t}");
    assert!(
        t.contains("<Prefix>a/</Prefix>") && t.contains("<Key>b</Key>"),
        "{t}"
    );
    assert!(t.contains("<NextMarker>b</NextMarker>"), "{t}");

    let r = call(
        d.addr(),
        "GET",
        "/lst",
        "delimiter=%2F&marker=b&max-keys=2",
        &[],
        b"",
    );
    let t = r.text();
    assert!(t.contains("<Marker>b</Marker>"), "{t}");
    assert!(
        t.contains("<Prefix>c/</Prefix>") && t.contains("<Key>d</Key>"),
        "{t}"
    );
    assert!(t.contains("<IsTruncated>false</IsTruncated>"), "{t}");
    assert!(!t.contains("NextMarker"), "{t}");
}

#[test]
fn conditional_put() {
    let d = Dir::start("cond");
    let r = d.put("/cond/k", &[("If-None-Match", "*")], b"first");
    assert_eq!(r.status(), 200, "{}", r.text());
    let etag = r.header("etag").unwrap().to_owned();
    let r = d.put("/cond/k", &[("If-None-Match", "*")], b"second");
    assert_eq!((r.status(), r.code().as_str()), (412, "PreconditionFailed"));
    let r = d.put("/cond/k", &[("If-Match", "\"0000\"")], b"second");
    assert_eq!((r.status(), r.code().as_str()), (412, "PreconditionFailed"));
    let r = d.put("/cond/none", &[("If-Match", &etag)], b"x");
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchKey"));
    assert_eq!(d.get("/cond/k", &[]).body, b"first", "nothing overwritten");
    let r = d.put("/cond/k", &[("If-Match", &etag)], b"second");
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(d.get("/cond/k", &[]).body, b"second");
}

#[test]
fn conditional_get_and_head() {
    let d = Dir::start("cget");
    let etag = d
        .put("/cget/k", &[], b"body")
        .header("etag")
        .unwrap()
        .to_owned();
    let past = "Sat, 01 Jan 2000 00:00:00 GMT";
    let future = "Fri, 01 Jan 2100 00:00:00 GMT";
    let cases: &[(&[(&str, &str)], u16)] = &[
        (&[("If-None-Match", etag.as_str())], 304),
        (&[("If-None-Match", "\"other\"")], 200),
        (&[("If-Match", "\"other\"")], 412),
        (&[("If-Match", etag.as_str())], 200),
        (&[("If-Modified-Since", future)], 304),
        (&[("If-Modified-Since", past)], 200),
        (&[("If-Unmodified-Since", past)], 412),
        (&[("If-Unmodified-Since", future)], 200),
        // S3's precedence: a true If-Match overrides a false If-Unmodified-Since, and a
        // false If-None-Match (the ETag matches) answers 304 whatever If-Modified-Since says.
        (
            &[("If-Match", etag.as_str()), ("If-Unmodified-Since", past)],
            200,
        ),
        (
            &[
                ("If-None-Match", etag.as_str()),
                ("If-Modified-Since", past),
            ],
            304,
        ),
        (
            &[
                ("If-None-Match", "\"other\""),
                ("If-Modified-Since", future),
            ],
            200,
        ),
    ];
    for (headers, want) in cases {
        for method in ["GET", "HEAD"] {
            let r = call(d.addr(), method, "/cget/k", "", headers, b"");
            assert_eq!(r.status(), *want, "{method} {headers:?}: {}", r.text());
            if *want == 304 {
                assert!(r.body.is_empty());
                assert_eq!(r.header("etag"), Some(etag.as_str()));
            }
            if *want == 412 && method == "GET" {
                assert_eq!(r.code(), "PreconditionFailed");
            }
            if *want == 200 && method == "GET" {
                assert_eq!(r.body, b"body");
            }
        }
    }
}

#[test]
fn metadata_headers_are_stored_and_returned() {
    let d = Dir::start("meta");
    let stored = [
        ("x-amz-meta-color", "blue"),
        ("Cache-Control", "max-age=60"),
        ("Expires", "Thu, 01 Dec 2094 16:00:00 GMT"),
        ("Content-Disposition", "attachment; filename=\"a.txt\""),
        ("Content-Encoding", "gzip"),
        ("Content-Language", "de"),
    ];
    assert_eq!(d.put("/meta/k", &stored, b"data").status(), 200);
    for method in ["GET", "HEAD"] {
        let r = call(d.addr(), method, "/meta/k", "", &[], b"");
        for (n, v) in stored {
            assert_eq!(r.header(n), Some(v), "{method} {n}");
        }
    }
    // Metadata given to CreateMultipartUpload is kept on the completed object.
    let r = call(
        d.addr(),
        "POST",
        "/meta/mp",
        "uploads",
        &[
            ("x-amz-meta-origin", "multipart"),
            ("Cache-Control", "no-store"),
        ],
        b"",
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    let id = t
        .split("<UploadId>")
        .nth(1)
        .and_then(|s| s.split("</UploadId>").next())
        .unwrap()
        .to_owned();
    let r = call(
        d.addr(),
        "PUT",
        "/meta/mp",
        &format!("partNumber=1&uploadId={id}"),
        &[],
        b"part",
    );
    let etag = r.header("etag").unwrap().to_owned();
    let doc = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    );
    let r = call(
        d.addr(),
        "POST",
        "/meta/mp",
        &format!("uploadId={id}"),
        &[],
        doc.as_bytes(),
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let r = d.get("/meta/mp", &[]);
    assert_eq!(r.header("x-amz-meta-origin"), Some("multipart"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
}

#[test]
fn sha_checksums_are_verified_and_returned() {
    let d = Dir::start("sums");
    let data = b"checksummed bytes";
    let sha256 = STANDARD.encode(ring::digest::digest(&ring::digest::SHA256, data));
    let sha1 = STANDARD.encode(ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        data,
    ));
    let r = d.put("/sums/a", &[("x-amz-checksum-sha256", &sha256)], data);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-sha256"), Some(sha256.as_str()));
    let r = d.put("/sums/b", &[("x-amz-checksum-sha1", &sha1)], data);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-sha1"), Some(sha1.as_str()));
    let r = d.put("/sums/c", &[("x-amz-checksum-sha1", &sha256[..28])], data);
    assert_eq!((r.status(), r.code().as_str()), (400, "BadDigest"));
    assert_eq!(d.get("/sums/c", &[]).status(), 404, "nothing stored");

    let mode = [("x-amz-checksum-mode", "ENABLED")];
    assert_eq!(
        d.get("/sums/a", &mode).header("x-amz-checksum-sha256"),
        Some(sha256.as_str())
    );
    assert_eq!(
        d.get("/sums/b", &mode).header("x-amz-checksum-sha1"),
        Some(sha1.as_str())
    );
    assert!(
        d.get("/sums/b", &[])
            .header("x-amz-checksum-sha1")
            .is_none()
    );
}

#[test]
fn copy_object_with_directives_and_conditions() {
    let d = Dir::start("copy");
    let src = d.put(
        "/copy/src%20key",
        &[("x-amz-meta-a", "1"), ("Content-Type", "text/plain")],
        b"source bytes",
    );
    assert_eq!(src.status(), 200);
    let etag = src.header("etag").unwrap().to_owned();
    let copy = |dst: &str, extra: &[(&str, &str)]| {
        let mut h = vec![("x-amz-copy-source", "/copy/src%20key")];
        h.extend_from_slice(extra);
        call(d.addr(), "PUT", dst, "", &h, b"")
    };
    let r = copy("/copy/dst1", &[]);
    assert_eq!(r.status(), 200, "{}", r.text());
    let want = format!("<ETag>{}</ETag>", etag.replace('"', "&quot;"));
    assert!(r.text().contains(&want), "{}", r.text());
    let g = d.get("/copy/dst1", &[]);
    assert_eq!(g.body, b"source bytes");
    assert_eq!(g.header("x-amz-meta-a"), Some("1"));
    assert_eq!(g.header("content-type"), Some("text/plain"));

    let r = copy(
        "/copy/dst2",
        &[
            ("x-amz-metadata-directive", "REPLACE"),
            ("x-amz-meta-b", "2"),
        ],
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let g = d.get("/copy/dst2", &[]);
    assert_eq!(g.header("x-amz-meta-b"), Some("2"));
    assert!(g.header("x-amz-meta-a").is_none());

    let r = copy("/copy/dst3", &[("x-amz-copy-source-if-match", "\"nope\"")]);
    assert_eq!((r.status(), r.code().as_str()), (412, "PreconditionFailed"));
    let r = copy("/copy/dst3", &[("x-amz-copy-source-if-none-match", &etag)]);
    assert_eq!((r.status(), r.code().as_str()), (412, "PreconditionFailed"));
    let r = copy(
        "/copy/dst3",
        &[(
            "x-amz-copy-source-if-unmodified-since",
            "Sat, 01 Jan 2000 00:00:00 GMT",
        )],
    );
    assert_eq!((r.status(), r.code().as_str()), (412, "PreconditionFailed"));
    assert_eq!(d.get("/copy/dst3", &[]).status(), 404);
    let r = copy("/copy/src%20key", &[]);
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidRequest"));
    let r = call(
        d.addr(),
        "PUT",
        "/copy/x",
        "",
        &[("x-amz-copy-source", "/copy/absent")],
        b"",
    );
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchKey"));
}

#[test]
fn upload_part_copy_with_a_range() {
    let d = Dir::start("upc");
    let data: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(d.put("/upc/src", &[], &data).status(), 200);
    let r = call(d.addr(), "POST", "/upc/dst", "uploads", &[], b"");
    let t = r.text();
    let id = t
        .split("<UploadId>")
        .nth(1)
        .and_then(|s| s.split("</UploadId>").next())
        .unwrap()
        .to_owned();
    let mut etags = Vec::new();
    for (n, range) in [(1, "bytes=0-1999"), (2, "bytes=2000-3999")] {
        let r = call(
            d.addr(),
            "PUT",
            "/upc/dst",
            &format!("partNumber={n}&uploadId={id}"),
            &[
                ("x-amz-copy-source", "upc/src"),
                ("x-amz-copy-source-range", range),
            ],
            b"",
        );
        assert_eq!(r.status(), 200, "{}", r.text());
        let t = r.text();
        assert!(t.contains("<CopyPartResult"), "{t}");
        let e = t
            .split("<ETag>")
            .nth(1)
            .and_then(|s| s.split("</ETag>").next())
            .unwrap()
            .replace("&quot;", "\"");
        etags.push(e);
    }
    let doc = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag></Part></CompleteMultipartUpload>",
        etags[0], etags[1]
    );
    let r = call(
        d.addr(),
        "POST",
        "/upc/dst",
        &format!("uploadId={id}"),
        &[],
        doc.as_bytes(),
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(d.get("/upc/dst", &[]).body, data);
    let r = call(
        d.addr(),
        "PUT",
        "/upc/dst",
        &format!("partNumber=3&uploadId={id}"),
        &[
            ("x-amz-copy-source", "upc/src"),
            ("x-amz-copy-source-range", "bytes=5-"),
        ],
        b"",
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidArgument"));
}

#[test]
fn a_refused_request_head_is_described_as_a_request() {
    use std::io::Write;
    let d = Dir::start("heads");
    let mut s = std::net::TcpStream::connect(d.addr()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    // Five lines under the per-line limit, together over the 64 KiB head limit.
    let lines: String = (0..5)
        .map(|i| format!("x-big-{i}: {}\r\n", "v".repeat(15_000)))
        .collect();
    let head = format!("GET /heads/k HTTP/1.1\r\nHost: {}\r\n{lines}\r\n", d.addr());
    // The gateway may answer and close before the whole head is written.
    let _ = s.write_all(head.as_bytes());
    let r = read_response(&mut s, false);
    assert_eq!(r.status(), 431, "{}", r.text());
    let t = r.text();
    assert!(t.contains("request head exceeds 65536 bytes"), "{t}");
    assert!(!t.contains("response"), "{t}");
}

fn upload_id(r: &Response) -> String {
    let t = r.text();
    t.split("<UploadId>")
        .nth(1)
        .and_then(|s| s.split("</UploadId>").next())
        .unwrap_or_else(|| panic!("no UploadId: {t}"))
        .to_owned()
}

#[test]
fn multipart_sha256_is_composite_and_a_wrong_part_checksum_is_refused() {
    let d = Dir::start("comp");
    let parts: [&[u8]; 2] = [&[7u8; 1500], b"tail"];
    let sha = |b: &[u8]| {
        ring::digest::digest(&ring::digest::SHA256, b)
            .as_ref()
            .to_vec()
    };
    let r = call(
        d.addr(),
        "POST",
        "/comp/k",
        "uploads",
        &[("x-amz-checksum-algorithm", "SHA256")],
        b"",
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let id = upload_id(&r);
    let mut etags = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let r = call(
            d.addr(),
            "PUT",
            "/comp/k",
            &format!("partNumber={}&uploadId={id}", i + 1),
            &[("x-amz-checksum-sha256", &STANDARD.encode(sha(p)))],
            p,
        );
        assert_eq!(r.status(), 200, "{}", r.text());
        etags.push(r.header("etag").unwrap().to_owned());
    }
    let doc = |sums: [&str; 2]| {
        format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag><ChecksumSHA256>{}</ChecksumSHA256></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag><ChecksumSHA256>{}</ChecksumSHA256></Part></CompleteMultipartUpload>",
            etags[0], sums[0], etags[1], sums[1]
        )
    };
    let good = [
        STANDARD.encode(sha(parts[0])),
        STANDARD.encode(sha(parts[1])),
    ];
    let wrong = STANDARD.encode(sha(b"something else"));
    let r = call(
        d.addr(),
        "POST",
        "/comp/k",
        &format!("uploadId={id}"),
        &[],
        doc([&good[0], &wrong]).as_bytes(),
    );
    assert_eq!(
        (r.status(), r.code().as_str()),
        (400, "InvalidPart"),
        "{}",
        r.text()
    );
    let r = call(
        d.addr(),
        "POST",
        "/comp/k",
        &format!("uploadId={id}"),
        &[],
        doc([&good[0], &good[1]]).as_bytes(),
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let mut joined = sha(parts[0]);
    joined.extend(sha(parts[1]));
    let composite = format!("{}-2", STANDARD.encode(sha(&joined)));
    assert!(
        r.text()
            .contains(&format!("<ChecksumSHA256>{composite}</ChecksumSHA256>")),
        "{}",
        r.text()
    );
    assert!(r.text().contains("<ChecksumType>COMPOSITE</ChecksumType>"));
    let h = call(
        d.addr(),
        "HEAD",
        "/comp/k",
        "",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(h.header("x-amz-checksum-sha256"), Some(composite.as_str()));
    assert_eq!(h.header("x-amz-checksum-type"), Some("COMPOSITE"));
    assert!(h.header("x-amz-checksum-crc64nvme").is_none());
}

#[test]
fn part_number_reads_and_object_attributes() {
    let d = Dir::start("prt");
    let r = call(
        d.addr(),
        "POST",
        "/prt/mp",
        "uploads",
        &[("x-amz-checksum-algorithm", "SHA256")],
        b"",
    );
    let id = upload_id(&r);
    let parts: Vec<Vec<u8>> = vec![vec![1u8; 1500], vec![2u8; 1200], b"end".to_vec()];
    let sha = |b: &[u8]| STANDARD.encode(ring::digest::digest(&ring::digest::SHA256, b));
    let mut xml = String::from("<CompleteMultipartUpload>");
    for (i, p) in parts.iter().enumerate() {
        let r = call(
            d.addr(),
            "PUT",
            "/prt/mp",
            &format!("partNumber={}&uploadId={id}", i + 1),
            &[("x-amz-checksum-sha256", &sha(p))],
            p,
        );
        assert_eq!(r.status(), 200, "{}", r.text());
        xml.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
            i + 1,
            r.header("etag").unwrap()
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    let r = call(
        d.addr(),
        "POST",
        "/prt/mp",
        &format!("uploadId={id}"),
        &[],
        xml.as_bytes(),
    );
    assert_eq!(r.status(), 200, "{}", r.text());

    let r = call(d.addr(), "GET", "/prt/mp", "partNumber=2", &[], b"");
    assert_eq!(r.status(), 206, "{}", r.text());
    assert_eq!(r.body, parts[1]);
    assert_eq!(r.header("content-range"), Some("bytes 1500-2699/2703"));
    assert_eq!(r.header("x-amz-mp-parts-count"), Some("3"));
    let r = call(d.addr(), "HEAD", "/prt/mp", "partNumber=3", &[], b"");
    assert_eq!(r.status(), 206);
    assert_eq!(r.header("content-length"), Some("3"));
    let r = call(d.addr(), "GET", "/prt/mp", "partNumber=4", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidPart"));
    let r = call(d.addr(), "GET", "/prt/mp", "partNumber=0", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidArgument"));
    d.put("/prt/single", &[], b"whole");
    let r = call(d.addr(), "GET", "/prt/single", "partNumber=1", &[], b"");
    assert_eq!((r.status(), r.body.as_slice()), (200, b"whole".as_slice()));

    let r = call(
        d.addr(),
        "GET",
        "/prt/mp",
        "attributes",
        &[(
            "x-amz-object-attributes",
            "ETag,Checksum,ObjectParts,StorageClass,ObjectSize",
        )],
        b"",
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(t.contains("<ObjectSize>2703</ObjectSize>"), "{t}");
    assert!(t.contains("<StorageClass>STANDARD</StorageClass>"), "{t}");
    assert!(t.contains("<PartsCount>3</PartsCount>"), "{t}");
    assert!(
        t.contains(&format!(
            "<PartNumber>2</PartNumber><Size>1200</Size><ChecksumSHA256>{}</ChecksumSHA256>",
            sha(&parts[1])
        )),
        "{t}"
    );
    assert!(t.contains("<ChecksumType>COMPOSITE</ChecksumType>"), "{t}");
    assert!(t.contains("-3</ChecksumSHA256>"), "{t}");
    let r = call(
        d.addr(),
        "GET",
        "/prt/single",
        "attributes",
        &[("x-amz-object-attributes", "ETag,ObjectSize")],
        b"",
    );
    let t = r.text();
    assert!(
        t.contains("<ObjectSize>5</ObjectSize>") && t.contains("<ETag>") && !t.contains("&quot;"),
        "{t}"
    );
    let r = call(
        d.addr(),
        "GET",
        "/prt/single",
        "attributes",
        &[("x-amz-object-attributes", "Bogus")],
        b"",
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidArgument"));
}

#[test]
fn signed_aws_chunked_uploads_are_verified_chunk_by_chunk() {
    let d = Dir::start("sgn");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 256) as u8).collect();
    let r = signed_chunked_put(d.addr(), "/sgn/plain", &data, 65_536, None, false);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(d.get("/sgn/plain", &[]).body, data);

    let crc = Checksum::compute(ChecksumAlgorithm::Crc32c, &data).to_base64();
    let r = signed_chunked_put(
        d.addr(),
        "/sgn/trailer",
        &data,
        50_000,
        Some(("x-amz-checksum-crc32c", &crc)),
        false,
    );
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-crc32c"), Some(crc.as_str()));
    assert_eq!(d.get("/sgn/trailer", &[]).body, data);

    // A flipped byte anywhere (data, size line or signature) is refused; nothing is stored.
    let r = signed_chunked_put(d.addr(), "/sgn/tampered", &data, 65_536, None, true);
    assert!(
        matches!(r.status(), 400 | 403),
        "{} {}",
        r.status(),
        r.text()
    );
    assert_eq!(d.get("/sgn/tampered", &[]).status(), 404);
    // A trailer checksum that does not match the signed bytes: BadDigest.
    let wrong = Checksum::compute(ChecksumAlgorithm::Crc32c, b"other").to_base64();
    let r = signed_chunked_put(
        d.addr(),
        "/sgn/wrongsum",
        &data,
        65_536,
        Some(("x-amz-checksum-crc32c", &wrong)),
        false,
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "BadDigest"));
    assert_eq!(d.get("/sgn/wrongsum", &[]).status(), 404);
}

#[test]
fn max_keys_zero_is_an_empty_untruncated_page() {
    let d = Dir::start("mk0");
    assert_eq!(d.put("/mk0/a", &[], b"x").status(), 200);
    for query in ["list-type=2&max-keys=0", "max-keys=0"] {
        let r = call(d.addr(), "GET", "/mk0", query, &[], b"");
        let t = r.text();
        assert!(
            t.contains("<IsTruncated>false</IsTruncated>"),
            "{query}: {t}"
        );
        assert!(!t.contains("<Contents>"), "{query}: {t}");
    }
}
