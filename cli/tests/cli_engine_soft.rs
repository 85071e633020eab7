//! `hipobj get/put --fabric soft` against the gateway started in this process with the soft RDMA
//! fabric: uploads under the multipart threshold and downloads (whole, ranged, several 8 MiB
//! chunks in flight) run on the engine, byte-exact, and `--json` names `rdma-soft` as the path
//! that carried every byte; an upload above the threshold keeps the blocking multipart path and
//! says `http`. The default `--fabric auto` probes the gateway's capabilities once and runs
//! the engine when it advertises the soft fabric, the blocking client when it has none.

use std::process::Output;

use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use serde_json::Value;

const ACCESS: &str = "engine-cli-test";
const SECRET: &str = "engine-cli-test-secret-0123456789";

#[path = "support/cli.rs"]
mod cli;
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

    // Above the multipart threshold: the blocking multipart path, reported as http.
    let put = ok_json(
        &url,
        &[
            "--json",
            "put",
            src,
            "s3://soft/m/big.bin",
            "--multipart-threshold",
            "8MiB",
            "--fabric",
            "soft",
        ],
    );
    assert_eq!(put["path"], "http", "{put}");
    assert_eq!(put["client"], "blocking", "{put}");
    assert_eq!(put["parts"], 3, "{put}");
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
