//! `hipobj get/put --fabric soft` against the gateway started in this process with the soft RDMA
//! fabric: uploads under the multipart threshold and downloads (whole, ranged, several 8 MiB
//! chunks in flight) run on the engine, byte-exact, and `--json` names `rdma-soft` as the path
//! that carried every byte; an upload above the threshold is a multipart upload on the engine,
//! its parts over `rdma-soft` too. The default `--fabric auto` probes the gateway's capabilities once and runs
//! the engine when it advertises the soft fabric, the blocking client when it has none.

use std::process::Output;

use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use serde_json::Value;

const ACCESS: &str = "engine-cli-test";
const SECRET: &str = "engine-cli-test-secret-0123456789";

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;
use cli::random_bytes;

fn hipobj(url: &str, args: &[&str]) -> Output {
    cli::hipobj(url, ACCESS, SECRET, args)
}

fn ok_json(url: &str, args: &[&str]) -> Value {
    serde_json::from_slice(&cli::succeeded(args, hipobj(url, args))).unwrap_or(Value::Null)
}

#[test]
fn put_and_get_over_the_soft_fabric_are_byte_exact_and_named_rdma_soft() {
    let root = tempfile::tempdir().unwrap();
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET.to_owned())
        .rdma_target(soft)
        .start()
        .unwrap();
    let url = format!("http://{}", gateway.local_addr());
    let dir = tempfile::tempdir().unwrap();
    let mb = hipobj(&url, &["mb", "s3://soft"]);
    assert!(
        mb.status.success(),
        "{}",
        String::from_utf8_lossy(&mb.stderr)
    );

    // 20 MiB + 5 bytes: one engine PUT (under a 32 MiB threshold), three 8 MiB chunks to GET.
    let len = (20 << 20) + 5;
    let data = random_bytes(len, 11);
    let src = dir.path().join("model.bin");
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();
    let put = ok_json(
        &url,
        &[
            "--json",
            "put",
            src,
            "s3://soft/m/model.bin",
            "--multipart-threshold",
            "32MiB",
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(put["path"], "rdma-soft", "{put}");
    assert_eq!(put["paths"]["rdma-soft"], len, "{put}");
    assert_eq!(put["bytes"], len, "{put}");

    // Whole object.
    let out = dir.path().join("whole.out");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://soft/m/model.bin",
            out.to_str().unwrap(),
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(get["path"], "rdma-soft", "{get}");
    assert_eq!(get["paths"]["rdma-soft"], len, "{get}");
    assert_eq!(
        get["checksum_verified"], true,
        "the gateway's stored CRC64NVME checks the bytes: {get}"
    );
    assert_eq!(get["bytes"], len, "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data,
        "whole-object download differs"
    );

    // Ranges: inside one chunk, across a chunk boundary, open-ended, suffix.
    let cases: [(&str, std::ops::Range<usize>); 4] = [
        ("100-199", 100..200),
        ("8388000-16777300", 8388000..16777301),
        ("16777210-", 16777210..len),
        ("-777", len - 777..len),
    ];
    for (range, want) in cases {
        let out = dir.path().join("range.out");
        let get = ok_json(
            &url,
            &[
                "--json",
                "get",
                "s3://soft/m/model.bin",
                out.to_str().unwrap(),
                "--range",
                range,
                "--fabric",
                "soft",
            ],
        );
        assert_eq!(get["path"], "rdma-soft", "{range}: {get}");
        assert_eq!(get["bytes"], want.len(), "{range}: {get}");
        assert!(
            std::fs::read(&out).unwrap() == data[want.clone()],
            "range {range} differs"
        );
    }

    // An unsatisfiable range fails and leaves no file behind.
    let out = dir.path().join("bad.out");
    let bad = hipobj(
        &url,
        &[
            "get",
            "s3://soft/m/model.bin",
            out.to_str().unwrap(),
            "--range",
            "99999999-",
            "--fabric",
            "soft",
        ],
    );
    assert!(!bad.status.success());
    assert!(!out.exists());

    // Above the multipart threshold: a multipart upload on the engine, every part over
    // rdma-soft (the gateway READs it from the engine's registered ring), verified by the
    // stored full-object CRC64NVME.
    let put = ok_json(
        &url,
        &[
            "--json",
            "put",
            src,
            "s3://soft/m/big.bin",
            "--multipart-threshold",
            "8MiB",
            "--part-size",
            "8MiB",
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(put["path"], "rdma-soft", "{put}");
    assert_eq!(put["client"], "engine", "{put}");
    assert_eq!(put["paths"]["rdma-soft"], len, "{put}");
    assert_eq!(put["parts"], 3, "{put}");
    assert_eq!(put["verified"], true, "{put}");
    assert!(
        put["etag"].as_str().is_some_and(|e| e.ends_with("-3\"")),
        "a multipart ETag: {put}"
    );
    let out = dir.path().join("big.out");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://soft/m/big.bin",
            out.to_str().unwrap(),
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(get["path"], "rdma-soft", "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data,
        "multipart object downloaded over the engine differs"
    );

    // The default (--fabric auto): one signed capability probe, the gateway advertises the
    // soft fabric, and the engine carries the bytes over it.
    let out = dir.path().join("auto.out");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://soft/m/model.bin",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(
        (get["client"].as_str(), get["path"].as_str()),
        (Some("engine"), Some("rdma-soft")),
        "{get}"
    );
    assert_eq!(
        get["fabric_probe"],
        serde_json::json!({"status": 200, "fabric": "soft"}),
        "{get}"
    );
    assert_eq!(get["checksum_verified"], true, "{get}");
    assert!(std::fs::read(&out).unwrap() == data);
    let small = dir.path().join("small.bin");
    std::fs::write(&small, &data[..4096]).unwrap();
    let put = ok_json(
        &url,
        &[
            "--json",
            "put",
            small.to_str().unwrap(),
            "s3://soft/m/small.bin",
        ],
    );
    assert_eq!(
        (put["client"].as_str(), put["path"].as_str()),
        (Some("engine"), Some("rdma-soft")),
        "{put}"
    );
    let back = hipobj(
        &url,
        &["get", "s3://soft/m/small.bin", "-", "--fabric", "http"],
    );
    assert!(
        back.status.success() && back.stdout == data[..4096],
        "small PUT stored other bytes"
    );

    // --fabric verbs naming a device this host does not have: refused with the reason
    // (nothing carried over HTTP unasked); --rdma-device is refused with soft.
    let out = dir.path().join("verbs.out");
    let verbs = hipobj(
        &url,
        &[
            "get",
            "s3://soft/m/model.bin",
            out.to_str().unwrap(),
            "--fabric",
            "verbs",
            "--rdma-device",
            "no-such-rdma-dev9",
        ],
    );
    let stderr = String::from_utf8_lossy(&verbs.stderr);
    assert!(!verbs.status.success(), "{stderr}");
    assert!(
        stderr.contains("--fabric verbs: ") && stderr.contains("no-such-rdma-dev9"),
        "{stderr}"
    );
    assert!(!out.exists());
    let refused = hipobj(
        &url,
        &[
            "get",
            "s3://soft/m/model.bin",
            "-",
            "--fabric",
            "soft",
            "--rdma-device",
            "x",
        ],
    );
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--rdma-device"));

    // --fabric http keeps the blocking client and sends no probe.
    let out = dir.path().join("http.out");
    let get = ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://soft/m/model.bin",
            out.to_str().unwrap(),
            "--fabric",
            "http",
        ],
    );
    assert_eq!(get["path"], "http", "{get}");
    assert_eq!(get["client"], "blocking", "{get}");
    assert_eq!(get["fabric_probe"], Value::Null, "{get}");
    assert!(std::fs::read(&out).unwrap() == data);
}

#[test]
fn default_auto_against_a_gateway_without_a_fabric_uses_the_blocking_client() {
    let root = tempfile::tempdir().unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET.to_owned())
        .start()
        .unwrap();
    let url = format!("http://{}", gateway.local_addr());
    let dir = tempfile::tempdir().unwrap();
    let mb = hipobj(&url, &["mb", "s3://plain"]);
    assert!(
        mb.status.success(),
        "{}",
        String::from_utf8_lossy(&mb.stderr)
    );
    let data = random_bytes(100_000, 3);
    let src = dir.path().join("f.bin");
    std::fs::write(&src, &data).unwrap();
    let put = ok_json(
        &url,
        &["--json", "put", src.to_str().unwrap(), "s3://plain/f.bin"],
    );
    assert_eq!(
        (put["client"].as_str(), put["path"].as_str()),
        (Some("blocking"), Some("http")),
        "{put}"
    );
    assert_eq!(
        put["fabric_probe"],
        serde_json::json!({"status": 501}),
        "{put}"
    );
    let out = dir.path().join("f.out");
    let get = ok_json(
        &url,
        &["--json", "get", "s3://plain/f.bin", out.to_str().unwrap()],
    );
    assert_eq!(
        (get["client"].as_str(), get["path"].as_str()),
        (Some("blocking"), Some("http")),
        "{get}"
    );
    assert_eq!(
        get["fabric_probe"],
        serde_json::json!({"status": 501}),
        "{get}"
    );
    assert_eq!(get["checksum_verified"], true, "{get}");
    assert!(std::fs::read(&out).unwrap() == data);

    // A wrong secret: the probe is refused like any request (403), the blocking client then
    // reports the real error.
    let bad = cli::hipobj(
        &url,
        ACCESS,
        "wrong-secret",
        &["get", "s3://plain/f.bin", "-"],
    );
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("SignatureDoesNotMatch"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// The soft gateway of these tests, with `limits` and `min_part_size`, over a fresh root.
fn soft_gateway(
    root: &std::path::Path,
    limits: RcLimits,
    min_part_size: u64,
) -> hipobj_gateway::RunningGateway {
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), limits).unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET.to_owned())
        .min_part_size(min_part_size)
        .rdma_target(soft)
        .start()
        .unwrap()
}

/// Multipart uploads on the engine when the server does not take everything: a part the RDMA
/// target declines (larger than its 6 MiB `max_put`) goes over HTTP and the upload still
/// completes, verified; a Complete the server refuses (parts under its 16 MiB minimum) ends
/// the command with that error and aborts the upload, leaving no object and no upload behind.
/// Too many parts for S3 is refused before any request.
#[test]
fn multipart_on_the_engine_falls_back_per_part_and_aborts_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes((17 << 20) + 3, 5);
    let src = dir.path().join("big.bin");
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();
    let put_args = |key| {
        [
            "--json",
            "put",
            src,
            key,
            "--multipart-threshold",
            "8MiB",
            "--part-size",
            "8MiB",
            "--fabric",
            "soft",
        ]
    };

    let root = tempfile::tempdir().unwrap();
    let small_rdma = RcLimits {
        max_put: 6 << 20,
        ..RcLimits::default()
    };
    let gateway = soft_gateway(root.path(), small_rdma, 5 << 20);
    let url = format!("http://{}", gateway.local_addr());
    assert!(hipobj(&url, &["mb", "s3://soft"]).status.success());
    let put = ok_json(&url, &put_args("s3://soft/m/mixed.bin"));
    assert_eq!(put["path"], "mixed", "{put}");
    assert_eq!(
        put["paths"],
        serde_json::json!({"http": 16 << 20, "rdma-soft": (1 << 20) + 3}),
        "{put}"
    );
    assert_eq!(put["verified"], true, "{put}");
    let out = dir.path().join("mixed.out");
    ok_json(
        &url,
        &[
            "--json",
            "get",
            "s3://soft/m/mixed.bin",
            out.to_str().unwrap(),
        ],
    );
    assert!(std::fs::read(&out).unwrap() == data);

    let root = tempfile::tempdir().unwrap();
    let gateway = soft_gateway(root.path(), RcLimits::default(), 16 << 20);
    let url = format!("http://{}", gateway.local_addr());
    assert!(hipobj(&url, &["mb", "s3://soft"]).status.success());
    let args = put_args("s3://soft/m/small-parts.bin");
    let put = hipobj(&url, &args);
    let stderr = String::from_utf8_lossy(&put.stderr);
    assert!(!put.status.success(), "{stderr}");
    assert!(stderr.contains("CompleteMultipart"), "{stderr}");
    let uploads = std::fs::read_dir(root.path().join(".hipobj/uploads"))
        .unwrap()
        .count();
    assert_eq!(uploads, 0, "the failed upload was not aborted");
    let get = hipobj(&url, &["get", "s3://soft/m/small-parts.bin", "-"]);
    assert!(!get.status.success(), "an object was stored");

    // 10,001 parts of 5 MiB (a sparse file): refused before any request.
    let huge = dir.path().join("huge.bin");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(10_001 * (5 << 20))
        .unwrap();
    let put = hipobj(
        &url,
        &[
            "put",
            huge.to_str().unwrap(),
            "s3://soft/m/huge.bin",
            "--part-size",
            "5MiB",
            "--fabric",
            "soft",
        ],
    );
    let stderr = String::from_utf8_lossy(&put.stderr);
    assert!(
        !put.status.success() && stderr.contains("raise --part-size"),
        "{stderr}"
    );
}

/// A multipart upload on the engine to a plain S3 server (s3s-fs: no RDMA, so every part goes
/// over HTTP after the pairing is refused, and no full-object checksum is stored for a
/// multipart object): the proof is the multipart ETag, the MD5 of the parts' MD5s.
#[test]
fn multipart_on_the_engine_to_a_plain_server_is_proven_by_its_etag() {
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir("plain");
    let url = server.endpoint_url();
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes((13 << 20) + 7, 9);
    let src = dir.path().join("big.bin");
    std::fs::write(&src, &data).unwrap();
    let args = [
        "--json",
        "put",
        src.to_str().unwrap(),
        "s3://plain/big.bin",
        "--multipart-threshold",
        "6MiB",
        "--part-size",
        "6MiB",
        "--fabric",
        "soft",
    ];
    let out = cli::hipobj(&url, s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY, &args);
    let put: Value = serde_json::from_slice(&cli::succeeded(&args, out)).unwrap();
    assert_eq!(
        (put["client"].as_str(), put["path"].as_str()),
        (Some("engine"), Some("http")),
        "{put}"
    );
    assert_eq!(put["parts"], 3, "{put}");
    assert_eq!(put["verified_by"], "etag-md5", "{put}");
    let back = dir.path().join("big.out");
    let get_args = [
        "get",
        "s3://plain/big.bin",
        back.to_str().unwrap(),
        "--fabric",
        "http",
    ];
    let out = cli::hipobj(&url, s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY, &get_args);
    cli::succeeded(&get_args, out);
    assert!(std::fs::read(&back).unwrap() == data);
}
