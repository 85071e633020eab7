//! Shared helpers for the engine's end-to-end tests against a real s3s-fs server.
#![allow(dead_code)]

#[path = "../../../cli/tests/support/s3s_fs.rs"]
pub mod s3s_fs;
pub mod test_gpu;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use engine::{Engine, EngineBuilder, Placement, RetryPolicy};
use ring_api::opcode::RangeGet;
use ring_api::{BufHandle, BufSlice, Cqe, DataPath};
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

/// Slots of [`range_gets_into`]: range-gets in flight at once.
pub const RANGE_GETS_DEPTH: usize = 32;
/// Bytes per range-get of [`range_gets_into`] (and per slot of its buffer).
pub const RANGE_GET_LEN: u64 = 8 << 10;

/// `ops` range-gets of [`RANGE_GET_LEN`] bytes of `bucket/key` at varying offsets into the
/// [`RANGE_GETS_DEPTH`] slots of `buf` (at least `RANGE_GETS_DEPTH * RANGE_GET_LEN` bytes),
/// all in flight through one queue; every byte checked against `data`. Returns the path each
/// completion named.
pub fn range_gets_into(
    engine: &Engine,
    buf: BufHandle,
    bucket: &str,
    key: &str,
    data: &[u8],
    ops: usize,
) -> Vec<DataPath> {
    const DEPTH: usize = RANGE_GETS_DEPTH;
    const LEN: u64 = RANGE_GET_LEN;
    let obj = engine.object(bucket, key).unwrap();
    let mut q = engine.queue(DEPTH as u32).unwrap();
    let offset = |i: usize| (i as u64 * 7919) % (data.len() as u64 - LEN);
    let mut slot_op: Vec<Option<usize>> = vec![None; DEPTH];
    let (mut next, mut done) = (0, 0);
    let mut paths = Vec::new();
    let mut cqes = vec![Cqe::default(); DEPTH];
    let end = Instant::now() + Duration::from_secs(120);
    while done < ops {
        assert!(Instant::now() < end, "{done} of {ops} done in 120 s");
        {
            let mut sq = q.submission();
            for (slot, op) in slot_op.iter_mut().enumerate() {
                if op.is_none() && next < ops {
                    let dst = BufSlice::new(buf, slot as u64 * LEN, LEN);
                    sq.push(
                        &RangeGet::new(obj, offset(next), dst)
                            .user_data(slot as u64)
                            .build(),
                    )
                    .unwrap();
                    *op = Some(next);
                    next += 1;
                }
            }
        }
        q.wait(1, Some(Duration::from_secs(5)));
        let n = q.reap(&mut cqes);
        for c in &cqes[..n] {
            assert!(c.is_ok(), "{c:?}");
            assert_eq!(c.bytes(), LEN);
            let slot = c.user_data() as usize;
            let i = slot_op[slot].take().unwrap();
            let got = engine.read(buf, slot as u64 * LEN, LEN).unwrap().to_vec();
            let at = offset(i) as usize;
            assert!(got == data[at..at + LEN as usize], "op {i}: bytes differ");
            paths.push(c.path().unwrap());
            done += 1;
        }
    }
    paths
}
