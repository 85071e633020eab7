//! `hipobj bench --embedded --memory ...` on a host without a GPU: `cuda` fails with a clear
//! "no GPU runtime" error before doing any work, `auto` falls back to host memory. On a host
//! with a GPU the child runs with every device hidden (`CUDA_VISIBLE_DEVICES=`,
//! `HIP_VISIBLE_DEVICES=`, `ROCR_VISIBLE_DEVICES=`), so the tests run there too instead of
//! passing without checking anything.

use std::process::Command;

fn hipobj(memory: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "bench",
            "--embedded",
            "--memory",
            memory,
            "--object-size",
            "8MiB",
            "--ops",
            "200",
            "--json",
        ])
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("HIP_VISIBLE_DEVICES", "")
        .env("ROCR_VISIBLE_DEVICES", "")
        .output()
        .expect("run hipobj")
}

#[test]
fn cuda_memory_without_a_gpu_is_a_clear_error() {
    let out = hipobj("cuda");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--memory cuda: no GPU runtime: "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "no report may be printed");
    // It fails before starting the gateway or uploading anything.
    assert!(!stderr.contains("uploading"), "{stderr}");
}

#[test]
fn auto_memory_without_a_gpu_falls_back_to_host() {
    let out = hipobj("auto");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["memory"], "host", "{report}");
    assert_eq!(report["ops"], 200, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["bytes_verified"].as_u64().unwrap() > 0, "{report}");
}

#[test]
fn host_verify_after_checks_the_same_bytes() {
    let out = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args([
            "bench",
            "--embedded",
            "--verify-after",
            "--range-size",
            "64KiB",
            "--object-size",
            "8MiB",
        ])
        .args(["--ops", "300", "--json"])
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .output()
        .expect("run hipobj");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["workload"], "sequential", "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    // 300 sequential 64 KiB ranges of an object larger than 300 x 64 KiB: all full length.
    assert_eq!(report["bytes_verified"], 300 * 65536, "{report}");
}
