//! A forced `--fabric soft` the endpoint cannot take says so (issue 36, item 4): the README's
//! gateway without `--fabric soft` declines every RDMA token, the engine falls back to HTTP
//! bodies per request, and `put`/`get` — with `--json` too — print one warning naming that
//! fallback. Against a gateway with the soft fabric nothing is printed.

use std::process::Output;

use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use serde_json::Value;

const ACCESS: &str = "fallback-test";
const SECRET: &str = "fallback-test-secret-0123456789";

#[path = "support/cli.rs"]
mod cli;

/// Runs put then get of a small file with `--fabric soft --json`; returns both runs.
fn put_get(url: &str) -> [(Value, String); 2] {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("small.bin");
    let data = cli::random_bytes(100_000, 7);
    std::fs::write(&src, &data).unwrap();
    let out = dir.path().join("out.bin");
    let run = |args: &[&str]| {
        let o: Output = cli::hipobj(url, ACCESS, SECRET, args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let json = serde_json::from_slice(&cli::succeeded(args, o)).unwrap_or(Value::Null);
        (json, stderr)
    };
    cli::succeeded(
        &["mb"],
        cli::hipobj(url, ACCESS, SECRET, &["mb", "s3://bucket"]),
    );
    let put = run(&[
        "put",
        src.to_str().unwrap(),
        "s3://bucket/small.bin",
        "--fabric",
        "soft",
        "--json",
    ]);
    let get = run(&[
        "get",
        "s3://bucket/small.bin",
        out.to_str().unwrap(),
        "--fabric",
        "soft",
        "--json",
    ]);
    assert!(std::fs::read(&out).unwrap() == data);
    [put, get]
}

#[test]
fn forced_soft_against_a_gateway_without_it_warns_of_the_http_fallback() {
    let root = tempfile::tempdir().unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET.to_owned())
        .start()
        .unwrap();
    for (json, stderr) in put_get(&format!("http://{}", gateway.local_addr())) {
        assert_eq!(json["path"], "http", "{json}");
        assert_eq!(json["client"], "engine", "{json}");
        assert!(
            stderr.contains("hipobj: warning: --fabric soft was not used"),
            "{stderr}"
        );
        assert!(
            stderr.contains("fell back to HTTP bodies for all 100000 bytes"),
            "{stderr}"
        );
    }
}

#[test]
fn forced_soft_against_a_soft_gateway_is_quiet() {
    let root = tempfile::tempdir().unwrap();
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET.to_owned())
        .rdma_target(soft)
        .start()
        .unwrap();
    for (json, stderr) in put_get(&format!("http://{}", gateway.local_addr())) {
        assert_eq!(json["path"], "rdma-soft", "{json}");
        assert!(!stderr.contains("warning"), "{stderr}");
    }
}
