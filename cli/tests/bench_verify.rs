//! `hipobj bench` never counts damaged ranges as good (issues 19 and 33): a relay flips one
//! byte in every 10th range body. Against s3s-fs (no range checksums) the default run compares
//! every range no checksum proved with the object and counts each flip as a mismatch error, as
//! `--verify` does; `--no-verify` compares nothing and says how many ranges were unverified.
//! Against our gateway the engine refuses each flipped range on the gateway's range checksum.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::net::SocketAddr;
use std::process::Command;

use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};

const RANGE: u64 = 16 << 10;
const OPS: &str = "100";

fn bench(url: &str, access: &str, secret: &str, extra: &[&str]) -> (bool, serde_json::Value) {
    let (ok, v, _) = bench_stderr(url, access, secret, extra);
    (ok, v)
}

/// [`bench`], with its stderr.
fn bench_stderr(
    url: &str,
    access: &str,
    secret: &str,
    extra: &[&str],
) -> (bool, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["--endpoint-url", url, "--region", "us-east-1", "--json"])
        .args([
            "bench",
            "s3://bench/obj",
            "--ops",
            OPS,
            "--size",
            "16KiB",
            "--concurrency",
            "4",
            "--warmup",
            "0",
            "--fabric",
            "http",
        ])
        .args(extra)
        .env("AWS_ACCESS_KEY_ID", access)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.success(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn flipper(backend: SocketAddr) -> Relay {
    Relay::start(
        "127.0.0.1:0",
        &backend.to_string(),
        vec![Fault::always(FaultKind::FlipBodiesOfLength {
            at: 1000,
            len: RANGE,
            every: 10,
        })],
    )
    .unwrap()
}

#[test]
fn bench_verify_counts_flipped_ranges_as_mismatches() {
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir("bench");
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    server.put_file("bench", "obj", &data);
    let backend: SocketAddr = server
        .endpoint_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();

    let relay = flipper(backend);
    let url = format!("http://{}", relay.addr());
    let (ok, v) = bench(&url, s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY, &["--verify"]);
    let flips = relay.stats().flips();
    assert!(flips >= 5, "the relay flipped {flips} bytes");
    assert!(!ok, "a run with mismatches exited 0: {v}");
    assert_eq!(v["verify"], true, "{v}");
    assert_eq!(v["mismatches"], flips, "{v}");
    assert_eq!(v["errors"], flips, "{v}");
    assert_eq!(
        v["error_codes"],
        serde_json::json!([["Mismatch", flips]]),
        "{v}"
    );

    // Straight to the server: every range matches.
    let (ok, v) = bench(
        &server.endpoint_url(),
        s3s_fs::ACCESS_KEY,
        s3s_fs::SECRET_KEY,
        &["--verify"],
    );
    assert!(ok, "{v}");
    assert_eq!(v["mismatches"], 0, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
}

/// Issue 33, item 3: no flag needed. A server that sends no range checksums (s3s-fs) behind a
/// relay that flips one byte in every 10th range: the default run counts each flip as a
/// mismatch and exits 1; `--no-verify` is the explicit opt-out (exit 0, every range counted
/// as unverified, a warning on stderr).
#[test]
fn bench_verifies_by_default_and_no_verify_opts_out() {
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir("bench");
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    server.put_file("bench", "obj", &data);
    let backend: SocketAddr = server
        .endpoint_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();

    let relay = flipper(backend);
    let url = format!("http://{}", relay.addr());
    let (ok, v) = bench(&url, s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY, &[]);
    let flips = relay.stats().flips();
    assert!(flips >= 5, "the relay flipped {flips} bytes");
    assert!(
        !ok,
        "flipped ranges counted as successes without --verify: {v}"
    );
    assert_eq!(v["verify_mode"], "unproven", "{v}");
    assert_eq!(v["mismatches"], flips, "{v}");
    assert_eq!(v["errors"], flips, "{v}");
    assert_eq!(v["unverified"], 0, "{v}");

    let relay = flipper(backend);
    let url = format!("http://{}", relay.addr());
    let (ok, v, stderr) = bench_stderr(
        &url,
        s3s_fs::ACCESS_KEY,
        s3s_fs::SECRET_KEY,
        &["--no-verify"],
    );
    assert!(relay.stats().flips() >= 5, "{v}");
    assert!(ok, "--no-verify: {v}\n{stderr}");
    assert_eq!(v["verify"], false, "{v}");
    assert_eq!(v["verify_mode"], "off", "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["unverified"], v["ops"], "{v}");
    assert!(
        stderr.contains(&format!("{} of {} ranges unverified", v["ops"], v["ops"])),
        "{stderr}"
    );
}

#[test]
fn against_our_gateway_flipped_ranges_fail_on_its_range_checksum() {
    const ACCESS: &str = "bench-verify-key";
    const SECRET: &str = "bench-verify-secret-0123456789";
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bench")).unwrap();
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(40_503) >> 7) as u8)
        .collect();
    let gw = hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let src = scratch.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let put = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["--endpoint-url", &format!("http://{}", gw.local_addr())])
        .args(["put", src.to_str().unwrap(), "s3://bench/obj"])
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .output()
        .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let relay = flipper(gw.local_addr());
    let (ok, v) = bench(&format!("http://{}", relay.addr()), ACCESS, SECRET, &[]);
    let flips = relay.stats().flips();
    assert!(flips >= 5, "the relay flipped {flips} bytes");
    assert!(!ok, "{v}");
    assert_eq!(v["errors"], flips, "{v}");
    assert_eq!(
        v["error_codes"],
        serde_json::json!([["Integrity", flips]]),
        "{v}"
    );
    // Every range that succeeded was proven by the gateway's checksum.
    let ok_ops = v["ops"].as_u64().unwrap() - flips;
    assert_eq!(v["checksum_verified"], ok_ops, "{v}");
}
