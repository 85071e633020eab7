//! The `hipobj` binary follows the conventions of `aws s3 cp` and s5cmd (issue 18), against a
//! real S3 server (s3s-fs) on 127.0.0.1: a destination prefix or bucket gets the file's name, a
//! local directory gets the key's name.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::path::Path;

use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

fn ok(server: &S3sFs, args: &[&str]) -> String {
    let out = cli::hipobj(&server.endpoint_url(), ACCESS_KEY, SECRET_KEY, args);
    String::from_utf8_lossy(&cli::succeeded(args, out)).into_owned()
}

fn object_on_disk(server: &S3sFs, bucket: &str, key: &str) -> Option<Vec<u8>> {
    std::fs::read(server.root.path().join(bucket).join(key)).ok()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn put_to_a_prefix_or_bucket_appends_the_file_name() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("weights.bin");
    let data = cli::random_bytes(3000, 1);
    std::fs::write(&src, &data).unwrap();
    ok(&server, &["mb", "s3://conv"]);

    ok(&server, &["put", path(&src), "s3://conv/dir/"]);
    assert_eq!(
        object_on_disk(&server, "conv", "dir/weights.bin").as_deref(),
        Some(&data[..]),
        "s3://conv/dir/ must write dir/weights.bin"
    );
    ok(&server, &["put", path(&src), "s3://conv/a/b/", "--fabric", "http"]);
    assert!(object_on_disk(&server, "conv", "a/b/weights.bin").is_some());

    let put = ok(&server, &["put", path(&src), "s3://conv/", "--json"]);
    let put: serde_json::Value = serde_json::from_str(put.trim()).unwrap();
    assert_eq!(put["key"], "weights.bin", "{put}");
    assert_eq!(
        object_on_disk(&server, "conv", "weights.bin").as_deref(),
        Some(&data[..])
    );
    std::fs::remove_file(server.root.path().join("conv/weights.bin")).unwrap();
    ok(&server, &["put", path(&src), "s3://conv"]);
    assert!(object_on_disk(&server, "conv", "weights.bin").is_some());

    // A key that names the object is used as given.
    ok(&server, &["put", path(&src), "s3://conv/named.bin"]);
    assert!(object_on_disk(&server, "conv", "named.bin").is_some());
}

#[test]
fn get_into_a_directory_writes_the_key_name() {
    let server = S3sFs::start();
    server.create_bucket_dir("conv");
    let data = cli::random_bytes(5000, 2);
    server.put_file("conv", "models/layer.bin", &data);
    let dir = tempfile::tempdir().unwrap();

    // An existing directory, without a trailing slash.
    ok(&server, &["get", "s3://conv/models/layer.bin", path(dir.path())]);
    assert_eq!(std::fs::read(dir.path().join("layer.bin")).unwrap(), data);

    // A new directory named with a trailing slash is created.
    let fresh = format!("{}/fresh/", path(dir.path()));
    let get = ok(&server, &["get", "s3://conv/models/layer.bin", &fresh, "--json"]);
    let get: serde_json::Value = serde_json::from_str(get.trim()).unwrap();
    let written = dir.path().join("fresh/layer.bin");
    assert_eq!(get["dest"], path(&written), "{get}");
    assert_eq!(std::fs::read(&written).unwrap(), data);

    // A file path is used as given.
    let file = dir.path().join("copy.bin");
    ok(&server, &["get", "s3://conv/models/layer.bin", path(&file)]);
    assert_eq!(std::fs::read(&file).unwrap(), data);
}

/// Runs `hipobj args...` with no credentials anywhere (no AWS_* variables, no ~/.aws).
fn hipobj_without_credentials(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        .output()
        .unwrap()
}

#[test]
fn the_no_credentials_error_names_only_what_client_commands_accept() {
    let out = hipobj_without_credentials(&["ls", "s3://b"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("hipobj: error: no credentials"), "{stderr}");
    assert!(stderr.contains("AWS_ACCESS_KEY_ID"), "{stderr}");
    // Every flag the message names is one `ls` accepts.
    let help = String::from_utf8_lossy(&hipobj_without_credentials(&["ls", "--help"]).stdout)
        .into_owned();
    for flag in stderr
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--"))
    {
        assert!(help.contains(flag), "the error names {flag}, which `ls` rejects: {stderr}");
    }
    assert!(stderr.contains("--profile"), "{stderr}");
}
