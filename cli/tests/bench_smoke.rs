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
}
