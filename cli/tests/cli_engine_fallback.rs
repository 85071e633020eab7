//! `hipobj get/put --fabric auto` against s3s-fs, a server that knows nothing of RDMA: the engine
//! learns the endpoint does not pair and the bytes move in HTTP bodies, byte-exact, with `--json`
//! naming `http`; the stored object holds exactly our bytes (no 0-byte object).

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::process::{Command, Output};

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};
use serde_json::Value;

fn hipobj(server: &S3sFs, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", server.endpoint_url())
        .output()
        .expect("run hipobj")
}

fn ok_json(server: &S3sFs, args: &[&str]) -> Value {
    let out = hipobj(server, args);
    assert!(
        out.status.success(),
        "hipobj {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn auto_against_a_plain_s3_server_falls_back_to_http_byte_exact() {
    let server = S3sFs::start();
    server.create_bucket_dir("plain");
    let dir = tempfile::tempdir().unwrap();
    let len = (9 << 20) + 3; // two 8 MiB chunks on GET
    let data = random_bytes(len, 5);
    let src = dir.path().join("f.bin");
    std::fs::write(&src, &data).unwrap();

    let put = ok_json(
        &server,
        &[
            "--json",
            "put",
            src.to_str().unwrap(),
            "s3://plain/k/f.bin",
            "--fabric",
            "auto",
        ],
    );
    assert_eq!(put["path"], "http", "{put}");
    assert_eq!(put["client"], "engine", "{put}");
    assert_eq!(put["paths"]["http"], len, "{put}");
    let stored = std::fs::read(server.root.path().join("plain/k/f.bin")).unwrap();
    assert!(
        stored == data,
        "s3s-fs stored {} bytes, not our {len}",
        stored.len()
    );

    let out = dir.path().join("whole.out");
    let get = ok_json(
        &server,
        &[
            "--json",
            "get",
            "s3://plain/k/f.bin",
            out.to_str().unwrap(),
            "--fabric",
            "auto",
        ],
    );
    assert_eq!(get["path"], "http", "{get}");
    assert_eq!(get["client"], "engine", "{get}");
    assert_eq!(get["bytes"], len, "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data,
        "whole-object download differs"
    );

    let out = dir.path().join("range.out");
    let get = ok_json(
        &server,
        &[
            "--json",
            "get",
            "s3://plain/k/f.bin",
            out.to_str().unwrap(),
            "--range",
            "8388000-8389000",
            "--fabric",
            "auto",
        ],
    );
    assert_eq!(get["path"], "http", "{get}");
    assert_eq!(get["client"], "engine", "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data[8388000..8389001],
        "range differs"
    );
}
