//! `https://` endpoints: a TLS front (rustls, a certificate for `localhost` from a test CA)
//! relaying to a real s3s-fs. Verification must fail without the CA, pass with `--ca-bundle`, and be
//! skippable only with `--insecure-skip-tls-verify`.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

#[path = "support/tls_front.rs"]
mod tls_front;

use std::process::{Command, Output};

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};
use tls_front::TlsFront;

fn hipobj(port: u16, extra: &[&str]) -> Output {
    hipobj_env(port, extra, &[])
}

fn hipobj_env(port: u16, extra: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "ls",
            "s3://tls-bucket",
            "--endpoint-url",
            &format!("https://localhost:{port}"),
        ])
        .args(extra)
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn https_verifies_certificates_by_default_and_honours_ca_bundle() {
    let server = S3sFs::start();
    server.create_bucket_dir("tls-bucket");
    std::fs::write(server.root.path().join("tls-bucket/hello.txt"), b"hi").unwrap();
    let front = TlsFront::start(server.addr);
    let port = front.port;
    let dir = tempfile::tempdir().unwrap();
    let bundle = front.write_ca(dir.path());

    let out = hipobj(port, &[]);
    assert!(!out.status.success(), "an unknown CA must be refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    let out = hipobj(port, &["--ca-bundle", bundle.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello.txt"));

    let out = hipobj(port, &["--insecure-skip-tls-verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("verification is disabled"));
}

/// The AWS conventions: `AWS_CA_BUNDLE`, else the profile's `ca_bundle` (`--ca-bundle` wins).
#[test]
fn https_trusts_aws_ca_bundle_and_the_profile_ca_bundle() {
    let server = S3sFs::start();
    server.create_bucket_dir("tls-bucket");
    std::fs::write(server.root.path().join("tls-bucket/hello.txt"), b"hi").unwrap();
    let front = TlsFront::start(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let bundle = front.write_ca(dir.path());
    let bundle = bundle.to_str().unwrap();

    let out = hipobj_env(front.port, &[], &[("AWS_CA_BUNDLE", bundle)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "AWS_CA_BUNDLE: {stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello.txt"));

    let config = dir.path().join("config");
    std::fs::write(&config, format!("[default]\nca_bundle = {bundle}\n")).unwrap();
    let out = hipobj_env(
        front.port,
        &[],
        &[("AWS_CONFIG_FILE", config.to_str().unwrap())],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "profile ca_bundle: {stderr}");

    // A wrong bundle named by the environment is used (and refused), not silently skipped.
    let other = TlsFront::start(server.addr);
    let other_dir = tempfile::tempdir().unwrap();
    let wrong = other.write_ca(other_dir.path());
    let out = hipobj_env(
        front.port,
        &[],
        &[("AWS_CA_BUNDLE", wrong.to_str().unwrap())],
    );
    assert!(
        !out.status.success(),
        "a CA that did not issue the certificate"
    );
}

/// `hipobj bench` runs the engine: over an `https://` endpoint it verifies the certificate
/// against `AWS_CA_BUNDLE` and carries every range over TLS; without the CA it fails.
#[test]
fn bench_through_the_engine_over_https() {
    let server = S3sFs::start();
    server.create_bucket_dir("tls-bucket");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
    server.put_file("tls-bucket", "obj", &data);
    let front = TlsFront::start(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let bundle = front.write_ca(dir.path());
    let bench = |env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .args([
                "--endpoint-url",
                &format!("https://localhost:{}", front.port),
                "--json",
                "bench",
                "s3://tls-bucket/obj",
                "--ops",
                "64",
                "--size",
                "16KiB",
                "--concurrency",
                "4",
                "--warmup",
                "0",
                "--verify",
            ])
            .env_clear()
            .env("HOME", "/nonexistent-home-for-tests")
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_REGION", "us-east-1")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = bench(&[("AWS_CA_BUNDLE", bundle.to_str().unwrap())]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["mismatches"], 0, "{v}");
    assert_eq!(v["ops"], 64, "{v}");

    let out = bench(&[]);
    assert!(!out.status.success(), "an unknown CA must be refused");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.to_lowercase().contains("certificate"), "{all}");
}

/// `hipobj serve --upstream https://...`: the bridge verifies the upstream's certificate
/// against `AWS_CA_BUNDLE` and relays over TLS; without the CA the bridge answers 502.
#[test]
fn serve_bridges_to_an_https_upstream() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let server = S3sFs::start();
    server.create_bucket_dir("tls-bucket");
    std::fs::write(server.root.path().join("tls-bucket/hello.txt"), b"hi").unwrap();
    let front = TlsFront::start(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let bundle = front.write_ca(dir.path());
    let serve = |ca: Option<&std::path::Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hipobj"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--upstream"])
            .arg(format!("https://localhost:{}", front.port))
            .args(["--access-key", "gw-key", "--secret-key", "gw-secret"])
            .args(["--upstream-access-key", ACCESS_KEY])
            .args(["--upstream-secret-key", SECRET_KEY])
            .env_clear()
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(ca) = ca {
            cmd.env("AWS_CA_BUNDLE", ca);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve did not start: {line:?}"))
            .to_owned();
        (child, url)
    };
    let ls = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .args(["ls", "s3://tls-bucket", "--endpoint-url", url])
            .env_clear()
            .env("HOME", "/nonexistent-home-for-tests")
            .env("AWS_ACCESS_KEY_ID", "gw-key")
            .env("AWS_SECRET_ACCESS_KEY", "gw-secret")
            .output()
            .unwrap()
    };
    let (mut child, url) = serve(Some(&bundle));
    let out = ls(&url);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello.txt"));

    let (mut child, url) = serve(None);
    let out = ls(&url);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !out.status.success(),
        "an unknown upstream CA must be refused"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("BadGateway") || stderr.contains("502"),
        "{stderr}"
    );
}
