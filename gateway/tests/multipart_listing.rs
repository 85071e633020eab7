//! ListParts, ListMultipartUploads and conditional CompleteMultipartUpload in directory mode
//! (issue 17): S3's XML and pagination against the gateway in-process, and ListParts and the
//! conditional Complete cross-checked against s3s-fs (a strict S3 server) where s3s-fs
//! implements them (it has no ListMultipartUploads).

#[path = "support/raw.rs"]
mod raw;
#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::net::SocketAddr;

use raw::*;

/// An S3 endpoint with the keys it accepts.
struct Server {
    addr: SocketAddr,
    access: &'static str,
    secret: &'static str,
}

impl Server {
    fn call(
        &self,
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut r = req(self.addr, method, path, query);
        for (n, v) in headers {
            r.add_header(*n, *v);
        }
        signer(self.access, self.secret)
            .sign_headers(&mut r, &s3_lite::sigv4::PayloadHash::of_body(body), now())
            .unwrap();
        send(self.addr, &r, body)
    }

    fn create(&self, path: &str, headers: &[(&str, &str)]) -> String {
        let r = self.call("POST", path, "uploads", headers, b"");
        assert_eq!(r.status(), 200, "{}", r.text());
        tag(&r.text(), "UploadId")
    }

    fn part(&self, path: &str, id: &str, n: u32, body: &[u8]) -> String {
        let r = self.call(
            "PUT",
            path,
            &format!("partNumber={n}&uploadId={id}"),
            &[],
            body,
        );
        assert_eq!(r.status(), 200, "{}", r.text());
        r.header("etag").unwrap().to_owned()
    }

    fn complete(&self, path: &str, id: &str, etags: &[String], h: &[(&str, &str)]) -> Response {
        let mut doc = String::from("<CompleteMultipartUpload>");
        for (i, e) in etags.iter().enumerate() {
            doc.push_str(&format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{e}</ETag></Part>",
                i + 1
            ));
        }
        doc.push_str("</CompleteMultipartUpload>");
        self.call("POST", path, &format!("uploadId={id}"), h, doc.as_bytes())
    }
}

fn gateway() -> (hipobj_gateway::RunningGateway, tempfile::TempDir, Server) {
    let root = tempfile::tempdir().unwrap();
    let gw = raw::start(root.path());
    let s = Server {
        addr: gw.local_addr(),
        access: ACCESS,
        secret: SECRET,
    };
    (gw, root, s)
}

/// Every `<name>` text in document order.
fn tags(doc: &str, name: &str) -> Vec<String> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    doc.split(&open)
        .skip(1)
        .filter_map(|s| s.split(&close).next())
        .map(|t| t.replace("&quot;", "\"").replace("&amp;", "&"))
        .collect()
}

fn tag(doc: &str, name: &str) -> String {
    tags(doc, name)
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no <{name}> in {doc}"))
}

#[test]
fn list_parts_pages_with_s3_xml_and_checksums() {
    let (_gw, _root, s) = gateway();
    assert_eq!(s.call("PUT", "/lparts", "", &[], b"").status(), 200);
    let id = s.create("/lparts/obj", &[("x-amz-checksum-algorithm", "CRC32C")]);
    let bodies: [Vec<u8>; 3] = [vec![1u8; 1500], vec![2u8; 1600], b"tail".to_vec()];
    // Uploaded out of order; listed in part-number order.
    let mut etags = vec![String::new(); 3];
    for i in [2usize, 0, 1] {
        etags[i] = s.part("/lparts/obj", &id, i as u32 + 1, &bodies[i]);
    }
    let r = s.call("GET", "/lparts/obj", &format!("uploadId={id}"), &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(t.contains("<ListPartsResult"), "{t}");
    assert_eq!(tag(&t, "UploadId"), id);
    assert_eq!(tag(&t, "Key"), "obj");
    assert_eq!(tags(&t, "PartNumber"), ["1", "2", "3"]);
    assert_eq!(tags(&t, "Size"), ["1500", "1600", "4"]);
    assert_eq!(tags(&t, "ETag"), etags);
    assert_eq!(tag(&t, "IsTruncated"), "false");
    assert_eq!(tag(&t, "ChecksumAlgorithm"), "CRC32C");
    assert_eq!(tag(&t, "ChecksumType"), "COMPOSITE");
    let crc = |b: &[u8]| {
        s3_lite::checksum::encode_crc32c(s3_lite::checksum::Crc32c::new().update(b).finish())
    };
    assert_eq!(
        tags(&t, "ChecksumCRC32C"),
        bodies.iter().map(|b| crc(b)).collect::<Vec<_>>()
    );

    // max-parts / part-number-marker.
    let r = s.call(
        "GET",
        "/lparts/obj",
        &format!("uploadId={id}&max-parts=2"),
        &[],
        b"",
    );
    let t = r.text();
    assert_eq!(tags(&t, "PartNumber"), ["1", "2"], "{t}");
    assert_eq!(tag(&t, "IsTruncated"), "true");
    assert_eq!(tag(&t, "NextPartNumberMarker"), "2");
    assert_eq!(tag(&t, "MaxParts"), "2");
    let r = s.call(
        "GET",
        "/lparts/obj",
        &format!("uploadId={id}&max-parts=2&part-number-marker=2"),
        &[],
        b"",
    );
    let t = r.text();
    assert_eq!(tags(&t, "PartNumber"), ["3"], "{t}");
    assert_eq!(tag(&t, "IsTruncated"), "false");
    assert_eq!(tag(&t, "PartNumberMarker"), "2");

    // Bad arguments and unknown uploads.
    let r = s.call(
        "GET",
        "/lparts/obj",
        &format!("uploadId={id}&max-parts=x"),
        &[],
        b"",
    );
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidArgument"));
    let r = s.call("GET", "/lparts/other", &format!("uploadId={id}"), &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchUpload"));
    let r = s.call("GET", "/lparts/obj", "uploadId=00ff", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchUpload"));

    // Completed: the upload is gone, and the object is the parts in order.
    let r = s.complete("/lparts/obj", &id, &etags, &[]);
    assert_eq!(r.status(), 200, "{}", r.text());
    let r = s.call("GET", "/lparts/obj", &format!("uploadId={id}"), &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchUpload"));
    assert_eq!(
        s.call("GET", "/lparts/obj", "", &[], b"").body,
        bodies.concat()
    );
}

#[test]
fn list_multipart_uploads_pages_by_key_and_upload_id_markers() {
    let (_gw, _root, s) = gateway();
    for b in ["luploads", "lu-other"] {
        assert_eq!(s.call("PUT", &format!("/{b}"), "", &[], b"").status(), 200);
    }
    let mut ids = Vec::new();
    for key in ["d/1", "d/2", "e", "k", "k"] {
        ids.push((key, s.create(&format!("/luploads/{key}"), &[])));
    }
    s.create("/lu-other/k", &[]);
    let r = s.call("GET", "/luploads", "uploads", &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert!(t.contains("<ListMultipartUploadsResult"), "{t}");
    assert_eq!(tags(&t, "Key"), ["d/1", "d/2", "e", "k", "k"], "{t}");
    assert_eq!(tag(&t, "IsTruncated"), "false");
    let listed_ids = tags(&t, "UploadId");
    for (key, id) in &ids {
        assert!(listed_ids.contains(id), "{key} {id} not in {t}");
    }

    // Page by two with the markers each page gives; every upload once, in order.
    let mut seen = Vec::new();
    let mut query = "uploads&max-uploads=2".to_owned();
    for round in 0.. {
        assert!(round < 5, "paging does not end");
        let t = s.call("GET", "/luploads", &query, &[], b"").text();
        let keys = tags(&t, "Key");
        assert!(keys.len() <= 2, "{t}");
        seen.extend(keys.into_iter().zip(tags(&t, "UploadId")));
        if tag(&t, "IsTruncated") == "false" {
            break;
        }
        query = format!(
            "uploads&max-uploads=2&key-marker={}&upload-id-marker={}",
            s3_lite::uri::encode_component(&tag(&t, "NextKeyMarker")),
            tag(&t, "NextUploadIdMarker")
        );
    }
    let keys: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["d/1", "d/2", "e", "k", "k"]);
    let mut got: Vec<&String> = seen.iter().map(|(_, i)| i).collect();
    got.sort();
    got.dedup();
    assert_eq!(got.len(), 5);

    // Delimiter and prefix.
    let t = s
        .call("GET", "/luploads", "uploads&delimiter=%2F", &[], b"")
        .text();
    assert_eq!(tags(&t, "Prefix"), ["", "d/"], "{t}");
    assert_eq!(tags(&t, "Key"), ["e", "k", "k"]);
    let t = s
        .call("GET", "/luploads", "uploads&prefix=d%2F", &[], b"")
        .text();
    assert_eq!(tags(&t, "Key"), ["d/1", "d/2"], "{t}");
    let t = s
        .call(
            "GET",
            "/luploads",
            "uploads&delimiter=%2F&max-uploads=1",
            &[],
            b"",
        )
        .text();
    assert_eq!(tag(&t, "NextKeyMarker"), "d/", "{t}");
    let t = s
        .call(
            "GET",
            "/luploads",
            "uploads&delimiter=%2F&key-marker=d%2F",
            &[],
            b"",
        )
        .text();
    assert_eq!(tags(&t, "Key"), ["e", "k", "k"], "{t}");

    // Aborted uploads leave the listing.
    let (key, id) = &ids[2];
    let r = s.call(
        "DELETE",
        &format!("/luploads/{key}"),
        &format!("uploadId={id}"),
        &[],
        b"",
    );
    assert_eq!(r.status(), 204);
    let t = s.call("GET", "/luploads", "uploads", &[], b"").text();
    assert_eq!(tags(&t, "Key"), ["d/1", "d/2", "k", "k"]);

    let r = s.call("GET", "/luploads", "uploads&max-uploads=-1", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (400, "InvalidArgument"));
    let r = s.call("GET", "/nosuch", "uploads", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchBucket"));
}

/// Conditional CompleteMultipartUpload on one server; the statuses of each step.
fn conditional_complete(s: &Server, bucket: &str) -> Vec<(&'static str, u16)> {
    assert_eq!(
        s.call("PUT", &format!("/{bucket}"), "", &[], b"").status(),
        200
    );
    let path = format!("/{bucket}/cond");
    let mut steps = Vec::new();
    // No object yet: If-None-Match: * completes.
    let id = s.create(&path, &[]);
    let e = s.part(&path, &id, 1, b"first version");
    let r = s.complete(&path, &id, &[e], &[("If-None-Match", "*")]);
    steps.push(("if-none-match * on a new key", r.status()));
    let first_etag = tag(&r.text(), "ETag");
    // Now it exists: If-None-Match: * and a wrong If-Match are refused, and the object is kept.
    let id = s.create(&path, &[]);
    let e = s.part(&path, &id, 1, b"second version");
    let etags = [e];
    let r = s.complete(&path, &id, &etags, &[("If-None-Match", "*")]);
    steps.push(("if-none-match * on an existing key", r.status()));
    let r = s.complete(&path, &id, &etags, &[("If-Match", "\"0123456789abcdef\"")]);
    steps.push(("if-match with another etag", r.status()));
    let body = s.call("GET", &path, "", &[], b"").body;
    assert_eq!(
        body, b"first version",
        "a refused Complete replaced the object"
    );
    // The right ETag completes the same upload (it stayed open).
    let r = s.complete(&path, &id, &etags, &[("If-Match", &first_etag)]);
    steps.push(("if-match with the current etag", r.status()));
    assert_eq!(s.call("GET", &path, "", &[], b"").body, b"second version");
    steps
}

#[test]
fn conditional_complete_matches_s3s_fs() {
    let (_gw, _root, s) = gateway();
    let ours = conditional_complete(&s, "ccomplete");
    assert_eq!(
        ours,
        [
            ("if-none-match * on a new key", 200),
            ("if-none-match * on an existing key", 412),
            ("if-match with another etag", 412),
            ("if-match with the current etag", 200),
        ]
    );
    // If-Match on a key with no object: 404 NoSuchKey, as PutObject answers (S3).
    let id = s.create("/ccomplete/none", &[]);
    let e = s.part("/ccomplete/none", &id, 1, b"x");
    let r = s.complete("/ccomplete/none", &id, &[e], &[("If-Match", "\"abc\"")]);
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchKey"));
    let r = s.call("GET", "/ccomplete/none", "", &[], b"");
    assert_eq!(r.status(), 404);

    let up = s3s_fs::S3sFs::start();
    let theirs = conditional_complete(
        &Server {
            addr: up.addr,
            access: s3s_fs::ACCESS_KEY,
            secret: s3s_fs::SECRET_KEY,
        },
        "ccomplete",
    );
    assert_eq!(ours, theirs, "the gateway and s3s-fs disagree");
}

/// Uploads three parts out of order on one server; the listed `(PartNumber, Size)` pairs,
/// sorted (s3s-fs lists them in directory order and without pagination).
fn listed_parts(s: &Server, bucket: &str) -> Vec<(String, String)> {
    assert_eq!(
        s.call("PUT", &format!("/{bucket}"), "", &[], b"").status(),
        200
    );
    let path = format!("/{bucket}/parts");
    let id = s.create(&path, &[]);
    for (n, len) in [(3u32, 10usize), (1, 1500), (2, 1600)] {
        s.part(&path, &id, n, &vec![n as u8; len]);
    }
    let r = s.call("GET", &path, &format!("uploadId={id}"), &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    let t = r.text();
    assert_eq!(tag(&t, "UploadId"), id);
    let mut got: Vec<(String, String)> = tags(&t, "PartNumber")
        .into_iter()
        .zip(tags(&t, "Size"))
        .collect();
    got.sort_by_key(|(n, _)| n.parse::<u32>().unwrap_or(0));
    got
}

#[test]
fn list_parts_matches_s3s_fs() {
    let (_gw, _root, s) = gateway();
    let ours = listed_parts(&s, "lpcross");
    let up = s3s_fs::S3sFs::start();
    let theirs = listed_parts(
        &Server {
            addr: up.addr,
            access: s3s_fs::ACCESS_KEY,
            secret: s3s_fs::SECRET_KEY,
        },
        "lpcross",
    );
    assert_eq!(ours, theirs);
    let want: Vec<(String, String)> = [("1", "1500"), ("2", "1600"), ("3", "10")]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(ours, want);
}
