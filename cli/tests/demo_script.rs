//! `benches/scripts/demo.sh`, which the README advertises, runs to the end with this build's
//! `hipobj` (it died with exit 141 after its first range: `tail | head` under `pipefail`).
//! Needs what the demo needs: bash, python3, coreutils and s3s-fs (see the README).

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::path::Path;
use std::process::Command;

#[test]
fn demo_script_runs_to_the_end() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Fail with the install command, as the other s3s-fs tests do, rather than inside the script.
    let _ = s3s_fs::binary();
    let out = Command::new("bash")
        .arg(root.join("benches/scripts/demo.sh"))
        .env("HIPOBJ", env!("CARGO_BIN_EXE_hipobj"))
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "demo.sh exited {:?}\n{stdout}\n{stderr}",
        out.status.code()
    );
    assert!(
        stdout.contains("whole object: 20971520 bytes verified"),
        "{stdout}"
    );
    assert!(stdout.contains("demo finished"), "{stdout}");
}
