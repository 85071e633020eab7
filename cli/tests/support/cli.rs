//! Running the `hipobj` binary from integration tests: a clean environment with the given
//! endpoint and keys, so no user configuration leaks in.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `hipobj args...` against `endpoint` with the given access key and secret.
pub fn hipobj(endpoint: &str, access: &str, secret: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", access)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", endpoint)
        .output()
        .expect("run hipobj")
}

/// Asserts that the run succeeded (showing stderr and stdout otherwise); returns stdout.
pub fn succeeded(args: &[&str], out: Output) -> Vec<u8> {
    assert!(
        out.status.success(),
        "hipobj {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out.stdout
}

/// Deterministic xorshift bytes: incompressible enough for transfer tests.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
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
