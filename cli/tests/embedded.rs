//! The README's main job, smaller: `hipobj bench --embedded` must upload, read back and verify.

use std::process::Command;

#[test]
fn embedded_main_job_verifies_every_byte() {
    run(None, "rdma-soft");
}

#[test]
fn embedded_main_job_over_forced_http() {
    run(Some("http"), "http");
}

/// The table a person reads: exit 0, and a title that does not read as an error (it once
/// began with `hipobj: error:`), on stdout; nothing on stdout says error.
#[test]
fn embedded_main_job_table_title_reads_as_success() {
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "bench",
            "--embedded",
            "--object-size",
            "8MiB",
            "--ops",
            "200",
            "--concurrency",
            "4",
        ])
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .output()
        .expect("run hipobj");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "exit {:?}: {stdout}", out.status);
    let title = stdout.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    assert!(
        title.starts_with("hipobj bench --embedded: 200 range-gets of a 8.0 MiB model"),
        "{stdout}"
    );
    assert!(title.ends_with("every byte verified"), "{stdout}");
    assert!(!stdout.contains("error:"), "{stdout}");
}

fn run(fabric: Option<&str>, want_path: &str) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hipobj"));
    cmd.args([
        "bench",
        "--embedded",
        "--object-size",
        "24MiB",
        "--ops",
        "1000",
        "--concurrency",
        "8",
        "--json",
    ])
    .env_clear()
    .env("HOME", "/nonexistent-home-for-tests");
    if let Some(f) = fabric {
        cmd.env("HIPOBJ_EMBEDDED_FABRIC", f);
    }
    let out = cmd.output().expect("run hipobj");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["ops"], 1000, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        report["object_size"].as_u64().unwrap(),
        24 << 20,
        "exactly --object-size"
    );
    assert!(report["tensors"].as_u64().unwrap() > 10);
    let verified = report["bytes_verified"].as_u64().unwrap();
    assert!(verified > 0);
    // Every verified byte is attributed to the path that carried it.
    // `paths` has the shape of get/put's: {"path": bytes}.
    let paths = report["paths"].as_object().unwrap();
    let carried: u64 = paths.values().map(|b| b.as_u64().unwrap()).sum();
    assert_eq!(carried, verified, "{report}");
    // One path carried every byte: RDMA over the soft fabric unless HTTP was forced.
    assert_eq!(paths.len(), 1, "{report}");
    assert!(paths.contains_key(want_path), "{report}");
}
