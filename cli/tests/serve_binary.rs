//! `hipobj serve` as a process: it prints `listening on http://ADDR`, serves the object
//! commands, and refuses fabrics that do not exist yet with exit code 2.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_process_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let exe = env!("CARGO_BIN_EXE_hipobj");
    let mut child = Command::new(exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("root"))
        .args(["--access-key", "proc-key", "--secret-key", "proc-secret"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _server = Server(child);
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("first line names the address")
        .to_owned();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    let run = |args: &[&str]| {
        Command::new(exe)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent-home-for-tests")
            .env("AWS_ACCESS_KEY_ID", "proc-key")
            .env("AWS_SECRET_ACCESS_KEY", "proc-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT_URL", &url)
            .output()
            .unwrap()
    };
    assert!(run(&["mb", "s3://proc-bucket"]).status.success());
    let src = dir.path().join("x.bin");
    std::fs::write(&src, b"hello gateway").unwrap();
    assert!(
        run(&["put", src.to_str().unwrap(), "s3://proc-bucket/x"])
            .status
            .success()
    );
    let out = run(&["get", "s3://proc-bucket/x", "-"]);
    assert_eq!(out.stdout, b"hello gateway");

    let out = Command::new(exe)
        .args([
            "serve",
            "--root",
            "/tmp/unused",
            "--fabric",
            "verbs",
            "--rdma-device",
            "no-such-rdma-device0",
            "--access-key",
            "k",
            "--secret-key",
            "s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--fabric verbs:"));
}
