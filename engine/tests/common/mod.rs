//! Shared helpers for the engine's end-to-end tests against a real s3s-fs server.
#![allow(dead_code)]

#[path = "../../../cli/tests/support/s3s_fs.rs"]
pub mod s3s_fs;

use std::path::PathBuf;
use std::time::Duration;

use engine::{Engine, EngineBuilder, Placement, RetryPolicy};
use s3_lite::credentials::Credentials;

pub use s3s_fs::S3sFs;

/// Deterministic pseudo-random bytes (xorshift), so failures are reproducible.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Writes `data` as `bucket/key` directly into the server's directory.
pub fn put_file(server: &S3sFs, bucket: &str, key: &str, data: &[u8]) -> PathBuf {
    server.create_bucket_dir(bucket);
    server.put_file(bucket, key, data)
}

/// A builder pointed at `server` with its credentials, one worker and quick retries.
pub fn builder(server: &S3sFs) -> EngineBuilder {
    Engine::builder()
        .endpoint_url(server.endpoint_url())
        .credentials(Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            3,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
}
