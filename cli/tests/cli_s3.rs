//! The `hipobj` binary against a real S3 server (s3s-fs) on 127.0.0.1: every object command,
//! ranges of every form, a multipart upload of several parts, checksum round trips and failures;
//! the default `--fabric auto` keeps the blocking client against it (it advertises no RDMA).

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::path::Path;
use std::process::{Command, Output};

use cli::random_bytes;
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

fn hipobj(server: &S3sFs, secret: &str, args: &[&str]) -> Output {
    cli::hipobj(&server.endpoint_url(), ACCESS_KEY, secret, args)
}

fn ok(server: &S3sFs, args: &[&str]) -> String {
    String::from_utf8_lossy(&cli::succeeded(args, hipobj(server, SECRET_KEY, args))).into_owned()
}

fn write(path: &Path, data: &[u8]) -> String {
    std::fs::write(path, data).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn put_get_ranges_ls_head_rm_round_trip() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    ok(&server, &["mb", "s3://bucket-a"]);

    // 20 MiB with 6 MiB parts: a multipart upload of 4 parts.
    let data = random_bytes(20 << 20, 7);
    let src = write(&dir.path().join("model.bin"), &data);
    let put = ok(
        &server,
        &[
            "put",
            &src,
            "s3://bucket-a/models/model.bin",
            "--part-size",
            "6MiB",
            "--json",
        ],
    );
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    assert_eq!(put["parts"], 4, "{put}");
    assert_eq!(put["bytes"], 20 << 20);

    // Ranges of every form return exactly the requested bytes.
    let cases: [(&str, std::ops::Range<usize>); 5] = [
        ("0-0", 0..1),
        ("100-199", 100..200),
        ("6291455-6291457", 6291455..6291458), // across a part boundary
        ("20971000-", 20971000..20 << 20),
        ("-777", (20 << 20) - 777..20 << 20),
    ];
    for (range, expect) in cases {
        let dest = dir.path().join("range.out");
        ok(
            &server,
            &[
                "get",
                "s3://bucket-a/models/model.bin",
                dest.to_str().unwrap(),
                "--range",
                range,
            ],
        );
        let got = std::fs::read(&dest).unwrap();
        assert_eq!(got.len(), expect.len(), "range {range}");
        assert!(got == data[expect.clone()], "range {range}: bytes differ");
    }

    // Whole object, to a file and to stdout.
    let whole = dir.path().join("whole.out");
    let get = ok(
        &server,
        &[
            "get",
            "s3://bucket-a/models/model.bin",
            whole.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(std::fs::read(&whole).unwrap() == data);
    let get: serde_json::Value = serde_json::from_str(get.trim()).unwrap();
    assert_eq!(get["bytes"], 20 << 20);

    let small = random_bytes(1000, 3);
    let small_src = write(&dir.path().join("small.bin"), &small);
    ok(
        &server,
        &["put", &small_src, "s3://bucket-a/small key+ü.bin"],
    );
    let out = hipobj(
        &server,
        SECRET_KEY,
        &["get", "s3://bucket-a/small key+ü.bin", "-"],
    );
    assert!(out.status.success());
    assert!(out.stdout == small);

    // ls: the prefix rolls up, recursive lists everything.
    let ls = ok(&server, &["ls", "s3://bucket-a"]);
    assert!(ls.contains("PRE") && ls.contains("models/"), "{ls}");
    assert!(ls.contains("small key+ü.bin"), "{ls}");
    let ls = ok(&server, &["ls", "s3://bucket-a/models/", "--json"]);
    let ls: serde_json::Value = serde_json::from_str(ls.trim()).unwrap();
    assert_eq!(ls["objects"][0]["key"], "models/model.bin");
    assert_eq!(ls["objects"][0]["size"], 20 << 20);

    let head = ok(
        &server,
        &["head", "s3://bucket-a/models/model.bin", "--json"],
    );
    let head: serde_json::Value = serde_json::from_str(head.trim()).unwrap();
    assert_eq!(head["content_length"], 20 << 20);

    ok(&server, &["rm", "s3://bucket-a/small key+ü.bin"]);
    let out = hipobj(
        &server,
        SECRET_KEY,
        &["head", "s3://bucket-a/small key+ü.bin"],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NoSuchKey"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn listing_follows_continuation_tokens() {
    let server = S3sFs::start();
    server.create_bucket_dir("many");
    for i in 0..1203 {
        std::fs::write(
            server.root.path().join("many").join(format!("k{i:05}")),
            b"x",
        )
        .unwrap();
    }
    let ls = ok(&server, &["ls", "s3://many", "--json"]);
    let ls: serde_json::Value = serde_json::from_str(ls.trim()).unwrap();
    assert_eq!(ls["objects"].as_array().unwrap().len(), 1203);
    assert!(ls["pages"].as_u64().unwrap() >= 2, "{}", ls["pages"]);
}

#[test]
fn wrong_secret_fails_with_signature_does_not_match() {
    let server = S3sFs::start();
    server.create_bucket_dir("bkt");
    let out = hipobj(&server, "not-the-secret", &["ls", "s3://bkt"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SignatureDoesNotMatch"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

#[test]
fn errors_are_one_clear_line() {
    let server = S3sFs::start();
    let cases: [(&[&str], &str); 5] = [
        (&["get", "bucket/key"], "s3://"),
        (&["get", "s3://nobucket/key", "-"], "NoSuch"),
        (&["get", "s3://b/k", "-", "--range", "9-3"], "range"),
        (
            &["put", "/nonexistent/file", "s3://b/k"],
            "/nonexistent/file",
        ),
        (
            &["put", "Cargo.toml", "s3://b/k", "--part-size", "1KiB"],
            "part-size",
        ),
    ];
    for (args, needle) in cases {
        let out = hipobj(&server, SECRET_KEY, args);
        assert!(!out.status.success(), "{args:?} should fail");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // A server that is not there: a connection error, not a hang.
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["ls", "s3://bkt", "--endpoint-url", "http://127.0.0.1:1"])
        .env("AWS_ACCESS_KEY_ID", "a")
        .env("AWS_SECRET_ACCESS_KEY", "b")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("connect"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn checksums_round_trip_and_corruption_is_detected() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    ok(&server, &["mb", "s3://sums"]);
    let data = random_bytes(300_000, 11);
    let src = write(&dir.path().join("w.bin"), &data);
    let put = ok(&server, &["put", &src, "s3://sums/w.bin", "--json"]);
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    let expected = s3_lite::checksum::Checksum::compute(
        s3_lite::checksum::ChecksumAlgorithm::Crc64Nvme,
        &data,
    );
    assert_eq!(put["sent_crc64nvme"], expected.to_base64());
    // s3s-fs echoes the CRC64NVME of a PutObject: the upload is proven, not just sent.
    assert_eq!(put["verified"], true, "{put}");
    // The default `--fabric auto` asked s3s-fs once whether it speaks RDMA; a plain S3 server
    // answers the capability probe with an error, so the blocking client carried the bytes.
    assert_eq!(
        (put["client"].as_str(), put["path"].as_str()),
        (Some("blocking"), Some("http")),
        "{put}"
    );
    let probed = put["fabric_probe"]["status"].as_u64().unwrap_or(0);
    assert!((400..500).contains(&probed), "{put}");

    // With data on stdout, the JSON result goes to stderr so the data stream stays clean.
    let out = hipobj(
        &server,
        SECRET_KEY,
        &["get", "s3://sums/w.bin", "-", "--json"],
    );
    assert!(out.status.success());
    assert!(out.stdout == data);
    let get: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(
        get["checksum_verified"], true,
        "the server returned the stored CRC64NVME and it matched"
    );
    assert_eq!(
        (get["client"].as_str(), get["path"].as_str()),
        (Some("blocking"), Some("http")),
        "{get}"
    );
    assert!(
        get["fabric_probe"]["status"]
            .as_u64()
            .is_some_and(|s| s != 200),
        "{get}"
    );

    // Flip one byte of the stored object behind the server's back: the stored checksum no longer
    // matches, and the download must fail instead of delivering corrupt bytes.
    let stored = server.root.path().join("sums/w.bin");
    let mut bytes = std::fs::read(&stored).unwrap();
    bytes[12345] ^= 0x40;
    std::fs::write(&stored, &bytes).unwrap();
    let dest = dir.path().join("corrupt.out");
    let out = hipobj(
        &server,
        SECRET_KEY,
        &["get", "s3://sums/w.bin", dest.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("checksum mismatch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dest.exists(),
        "no file is left under the final name after a failed download"
    );
}
