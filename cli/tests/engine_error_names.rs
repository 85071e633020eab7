//! The engine path names failures as the server and the socket named them (issue 36): against
//! the gateway with the soft fabric (`hipobj serve --fabric soft`, started in this process),
//! `get`/`put --fabric soft` print the server's S3 code — `NoSuchBucket` for a missing bucket,
//! `SignatureDoesNotMatch` for a wrong secret — as the HTTP path does, not the code a bare
//! status implies (`NoSuchKey`, `AccessDenied`). A closed port is `connection refused`, with
//! host:port, on `bench` and on the engine's `put`, not `ConnectionReset`.

use std::process::Output;

use hipobj_gateway::{Gateway, RcLimits, RcTarget};

const ACCESS: &str = "engine-names-test";
const SECRET: &str = "engine-names-test-secret-0123456789";

#[path = "support/cli.rs"]
mod cli;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a failed run whose error names `want` and none of `not`. The engine's own words
/// may follow in `(engine: …)`; the error is what comes before them.
fn fails_naming(out: &Output, want: &str, not: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let named = err.split(" (engine: ").next().unwrap_or_default();
    assert!(named.starts_with("hipobj: error: "), "{err}");
    assert!(named.contains(want), "wanted {want}: {err}");
    for n in not {
        assert!(!named.contains(n), "{n} in: {err}");
    }
}

fn soft_gateway(root: &std::path::Path) -> hipobj_gateway::RunningGateway {
    let soft = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET.to_owned())
        .rdma_target(soft)
        .start()
        .unwrap()
}

#[test]
fn engine_path_names_the_servers_s3_code() {
    let root = tempfile::tempdir().unwrap();
    let gateway = soft_gateway(root.path());
    let url = format!("http://{}", gateway.local_addr());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("small.bin");
    std::fs::write(&src, cli::random_bytes(4096, 1)).unwrap();
    let src = src.to_str().unwrap();
    let out = dir.path().join("out.bin");
    let out = out.to_str().unwrap();
    let run = |secret: &str, args: &[&str]| cli::hipobj(&url, ACCESS, secret, args);
    cli::succeeded(&["mb"], run(SECRET, &["mb", "s3://there"]));
    cli::succeeded(
        &["put"],
        run(SECRET, &["put", src, "s3://there/k", "--fabric", "soft"]),
    );

    // A missing bucket: the engine's PUT completes NotFound, the get's HEAD has no body.
    let put = run(SECRET, &["put", src, "s3://missing/k", "--fabric", "soft"]);
    fails_naming(&put, "NoSuchBucket", &["NoSuchKey"]);
    let get = run(SECRET, &["get", "s3://missing/k", out, "--fabric", "soft"]);
    fails_naming(&get, "NoSuchBucket", &["NoSuchKey"]);
    // The HTTP path said it first; the engine path now says the same.
    let http = run(SECRET, &["get", "s3://missing/k", out, "--fabric", "http"]);
    fails_naming(&http, "NoSuchBucket", &["NoSuchKey"]);
    // A missing key in a bucket that exists is still NoSuchKey.
    let get = run(SECRET, &["get", "s3://there/nope", out, "--fabric", "soft"]);
    fails_naming(&get, "NoSuchKey", &["NoSuchBucket"]);

    // A wrong secret: the server says SignatureDoesNotMatch, not the status's AccessDenied.
    let put = run(
        "wrong-secret",
        &["put", src, "s3://there/k2", "--fabric", "soft"],
    );
    fails_naming(&put, "SignatureDoesNotMatch", &["AccessDenied"]);
    let get = run(
        "wrong-secret",
        &["get", "s3://there/k", out, "--fabric", "soft"],
    );
    fails_naming(&get, "SignatureDoesNotMatch", &["AccessDenied"]);
    let head = run("wrong-secret", &["head", "s3://there/k"]);
    fails_naming(&head, "SignatureDoesNotMatch", &["AccessDenied"]);
    assert!(!std::path::Path::new(out).exists());
}

/// A port nothing listens on (bound, then closed).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap()
}

#[test]
fn a_refused_connection_is_named_refused_not_reset() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let want = format!("{}: connection refused", url.trim_start_matches("http://"));
    let bench = cli::hipobj(
        &url,
        ACCESS,
        SECRET,
        &[
            "bench",
            "--endpoint-url",
            &url,
            "s3://bucket/small.bin",
            "--ops",
            "1",
            "--size",
            "4KiB",
            "--concurrency",
            "1",
        ],
    );
    fails_naming(&bench, &want, &["ConnectionReset"]);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("f.bin");
    std::fs::write(&src, b"some bytes").unwrap();
    let put = cli::hipobj(
        &url,
        ACCESS,
        SECRET,
        &[
            "put",
            src.to_str().unwrap(),
            "s3://bucket/k",
            "--fabric",
            "soft",
        ],
    );
    fails_naming(&put, &want, &["ConnectionReset"]);
}
