//! The Quick Start in docs/c-api.md is a complete program: extracted from the page, compiled
//! with `-Wall -Wextra -Werror` against `capi/include/hipobj.h` and `libhipobj.so`, and run
//! against a gateway — with its bucket (success) and without (exit 1, `NoSuchBucket`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// The ```c block that follows the line "`quickstart.c`:" in docs/c-api.md.
fn quickstart_source() -> String {
    let page = crate_dir().join("../docs/c-api.md");
    let text = std::fs::read_to_string(&page).expect("docs/c-api.md");
    let after = text
        .split_once("`quickstart.c`:")
        .expect("docs/c-api.md names the Quick Start program `quickstart.c`")
        .1;
    let code = after.split_once("```c\n").expect("a ```c block after it").1;
    code.split_once("```")
        .expect("the block is closed")
        .0
        .to_owned()
}

fn compile_quickstart(dir: &Path) -> PathBuf {
    let src = dir.join("quickstart.c");
    std::fs::write(&src, quickstart_source()).unwrap();
    let exe = dir.join("quickstart");
    let lib = lib_dir();
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg(&src)
        .arg("-L")
        .arg(lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lhipobj")
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "the Quick Start of docs/c-api.md does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn the_documented_quick_start_compiles_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let exe = compile_quickstart(dir.path());
    let gw = gateway(&dir.path().join("objects"));
    let endpoint = format!("http://{}", gw.local_addr());
    let env = [
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ACCESS_KEY_ID", ACCESS),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
        ("AWS_REGION", "us-east-1"),
    ];
    let out = run_with_env(&exe, &[BUCKET], dir.path(), &env);
    expect_ok(&out, "read 1 MiB back: ok");

    // Without its bucket: a clear error and exit 1, not a crash.
    let out = run_with_env(&exe, &["no-such-bucket"], dir.path(), &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("NoSuchBucket"), "{stderr}");

    // Without arguments: the usage line, exit 2.
    let out = run_with_env(&exe, &[], dir.path(), &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hipobj mb"));
    gw.shutdown();
}
