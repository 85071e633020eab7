//! `hipobj get/put --fabric auto` against s3s-fs, a server that knows nothing of RDMA: the engine
//! learns the endpoint does not pair and the bytes move in HTTP bodies, byte-exact, with `--json`
//! naming `http`; the stored object holds exactly our bytes (no 0-byte object).

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::process::Output;

use cli::random_bytes;
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};
use serde_json::Value;

#[path = "support/cli.rs"]
mod cli;

fn hipobj(server: &S3sFs, args: &[&str]) -> Output {
    cli::hipobj(&server.endpoint_url(), ACCESS_KEY, SECRET_KEY, args)
}

fn ok_json(server: &S3sFs, args: &[&str]) -> Value {
    serde_json::from_slice(&cli::succeeded(args, hipobj(server, args))).unwrap_or(Value::Null)
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
            "soft",
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
            "soft",
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
            "soft",
        ],
    );
    assert_eq!(get["path"], "http", "{get}");
    assert_eq!(get["client"], "engine", "{get}");
    assert!(
        std::fs::read(&out).unwrap() == data[8388000..8389001],
        "range differs"
    );
}
