//! `hipobj bench` end to end through the binary against s3s-fs (needs `bench` wired into
//! main.rs, which copies the global --endpoint-url/--region/--json into BenchArgs).

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::process::Command;

#[test]
fn bench_prints_json_against_s3s_fs() {
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir("bench");
    std::fs::write(server.root.path().join("bench/obj"), vec![7u8; 256 << 10]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "--endpoint-url",
            &server.endpoint_url(),
            "--region",
            "us-east-1",
            "--json",
        ])
        .args([
            "bench",
            "s3://bench/obj",
            "--ops",
            "100",
            "--size",
            "4KiB",
            "--concurrency",
            "4",
        ])
        .env("AWS_ACCESS_KEY_ID", s3s_fs::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", s3s_fs::SECRET_KEY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["ops"], 100);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["object_size"], 256 << 10);
    // s3s-fs knows nothing of RDMA: the default `--fabric auto` learns that and every byte
    // goes over HTTP.
    assert_eq!(v["paths"], serde_json::json!({"http": 100 * 4096}), "{v}");
    assert_eq!(
        v["dialects"],
        serde_json::json!({"http": 100 * 4096}),
        "{v}"
    );
    // Bytes per NIC: an object; its sum is the payload when the workers serve NICs.
    let nics = v["nics"].as_object().expect("nics is an object");
    let sum: u64 = nics.values().map(|b| b.as_u64().unwrap()).sum();
    assert!(nics.is_empty() || sum == 100 * 4096, "{v}");
}

/// Against our gateway with the soft fabric, the default `--fabric auto` pairs and the bytes
/// move over `rdma-soft`; `--fabric http` keeps them in HTTP bodies.
#[test]
fn bench_names_the_path_that_carried_the_bytes() {
    const ACCESS: &str = "bench-path-key";
    const SECRET: &str = "bench-path-secret-0123456789";
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bench")).unwrap();
    let soft = hipobj_gateway::RcTarget::start(
        "127.0.0.1:0".parse().unwrap(),
        hipobj_gateway::RcLimits::default(),
    )
    .unwrap();
    let gw = hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET)
        .rdma_target(soft)
        .start()
        .unwrap();
    let url = format!("http://{}", gw.local_addr());
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src.bin");
    std::fs::write(&src, vec![9u8; 256 << 10]).unwrap();
    let put = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "--endpoint-url",
            &url,
            "put",
            src.to_str().unwrap(),
            "s3://bench/obj",
        ])
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    for (fabric, path, dialect) in [
        ("auto", "rdma-soft", "rc-persistent"),
        ("http", "http", "http"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .args(["--endpoint-url", &url, "--json", "bench", "s3://bench/obj"])
            .args(["--ops", "64", "--size", "4KiB", "--concurrency", "4"])
            .args(["--fabric", fabric, "--warmup", "0"])
            .env("AWS_ACCESS_KEY_ID", ACCESS)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        assert_eq!(v["errors"], 0, "{v}");
        assert_eq!(
            v["paths"],
            serde_json::json!({path: 64 * 4096}),
            "--fabric {fabric}: {v}"
        );
        assert_eq!(
            v["dialects"],
            serde_json::json!({dialect: 64 * 4096}),
            "--fabric {fabric}: {v}"
        );
    }
    gw.shutdown();
}
