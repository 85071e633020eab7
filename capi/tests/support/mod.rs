//! Shared by the C tests: find the built `libhipobj.so`, compile C programs against it with the
//! system `cc`, start the gateway, run programs and report their output.
//!
//! The library is found in the test binary's own directory (`target/<profile>/deps/`), where
//! the same `cargo test` run compiled this package's lib target with all its crate types (see
//! [`lib_dir`]). If it is missing (a custom build layout), `cargo build -p hipobj-capi` is run
//! once to make it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub const ACCESS: &str = "capi-test-access";
pub const SECRET: &str = "capi-test-secret-key";
pub const BUCKET: &str = "capi-bucket";

/// `capi/`; `HIPOBJ_CAPI_DIR` overrides it when the test binary runs on another machine than
/// the one that built it (the GPU lane: `benches/gpu/run_capi_on_device.sh`).
pub fn crate_dir() -> PathBuf {
    std::env::var_os("HIPOBJ_CAPI_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
}

/// The directory holding `libhipobj.so`.
///
/// `target/<profile>/deps/`: `cargo test` compiles this package's lib target there with all its
/// crate types (cdylib included) before building the test binaries, but only `cargo build`
/// copies ("uplifts") it to `target/<profile>/` — a copy there may be stale.
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
        if !deps.join("libhipobj.so").exists() {
            let release = deps
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "release");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args(["build", "-p", "hipobj-capi", "--lib"]);
            if release {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("running cargo build");
            assert!(st.success(), "cargo build -p hipobj-capi failed");
        }
        assert!(
            deps.join("libhipobj.so").exists(),
            "libhipobj.so not found in {}",
            deps.display()
        );
        deps
    })
}

/// Compiles `capi/tests/c/<name>.c` into `out_dir`, linked against `libhipobj.so`.
pub fn compile(name: &str, out_dir: &Path) -> PathBuf {
    compile_with(name, out_dir, false)
}

/// Compiles `capi/tests/c/<name>.c` against `libhipobj.a` (the documented static link line).
pub fn compile_static(name: &str, out_dir: &Path) -> PathBuf {
    compile_with(name, out_dir, true)
}

fn compile_with(name: &str, out_dir: &Path, static_lib: bool) -> PathBuf {
    // A machine without a C compiler (the GPU lane may be one) can bring programs built
    // elsewhere: `HIPOBJ_PREBUILT_C_DIR/<name>`, linked with RUNPATH $ORIGIN.
    if let Some(dir) = std::env::var_os("HIPOBJ_PREBUILT_C_DIR") {
        let exe = PathBuf::from(dir).join(name);
        if !static_lib && exe.exists() {
            return exe;
        }
    }
    let src = crate_dir().join("tests/c").join(format!("{name}.c"));
    let exe = out_dir.join(name);
    let lib = lib_dir();
    let mut cmd = Command::new("cc");
    cmd.args([
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-O1",
        "-D_GNU_SOURCE",
    ])
    .arg("-I")
    .arg(crate_dir().join("include"))
    .arg(&src)
    .arg("-o")
    .arg(&exe);
    if static_lib {
        cmd.arg(lib.join("libhipobj.a"));
    } else {
        cmd.arg("-L")
            .arg(lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lhipobj");
    }
    let out = cmd
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .expect("running cc");
    assert!(
        out.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// A gateway on a free loopback port serving `root`, with [`BUCKET`] created.
pub fn gateway(root: &Path) -> hipobj_gateway::RunningGateway {
    std::fs::create_dir_all(root.join(BUCKET)).expect("bucket directory");
    hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .threads(8)
        .start()
        .expect("gateway starts")
}

/// [`gateway`] with the soft RDMA target (what `hipobj serve --fabric soft` runs): clients that
/// pair move payloads over `rdma-soft`.
pub fn gateway_soft(root: &Path) -> hipobj_gateway::RunningGateway {
    std::fs::create_dir_all(root.join(BUCKET)).expect("bucket directory");
    let target = hipobj_gateway::RcTarget::start(
        std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
        hipobj_gateway::RcLimits::default(),
    )
    .expect("soft RDMA target starts");
    hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .threads(8)
        .rdma_target(target)
        .start()
        .expect("gateway starts")
}

/// Runs `exe` with `args` in an environment without AWS settings (HOME points at an empty
/// directory, so no profile is read by accident), loading the library from [`lib_dir`].
pub fn run(exe: &Path, args: &[&str], home: &Path) -> Output {
    run_with_env(exe, args, home, &[])
}

/// [`run`] with extra environment variables.
pub fn run_with_env(exe: &Path, args: &[&str], home: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(exe);
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home);
    // cargo's LD_LIBRARY_PATH lists target/<profile>/ too, where a stale uplifted copy of the
    // library may sit; LD_LIBRARY_PATH would win over the program's RUNPATH.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.envs(env.iter().copied());
    cmd.output().expect("running the C program")
}

/// Asserts the program exited 0 and its stdout contains `needle`; returns stdout.
pub fn expect_ok(out: &Output, needle: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(needle),
        "status {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout
}
