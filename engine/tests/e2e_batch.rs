//! 10,000 range-gets of mixed sizes into one registered buffer, every byte verified.

mod common;

use std::time::{Duration, Instant};

use common::{S3sFs, builder, pattern, put_file};
use engine::RegisterOptions;
use rand::{Rng, SeedableRng};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, Cqe};

const OPS: usize = 10_000;
const SLOTS: usize = 64;
const MAX: u64 = 256 * 1024;

#[test]
fn ten_thousand_mixed_range_gets_verified() {
    let server = S3sFs::start();
    // s3s-fs hashes the whole object on every GET, so the object stays small (512 KiB) to keep
    // the server, not the engine, from dominating the run.
    let size = 512 << 10;
    let data = pattern(size, 42);
    put_file(&server, "batch", "weights.bin", &data);
    let engine = builder(&server)
        .connections_per_worker(SLOTS)
        .build()
        .unwrap();
    let obj = engine.object("batch", "weights.bin").unwrap();
    // One registration, SLOTS disjoint windows of MAX bytes, reused as operations complete.
    let buf = engine
        .register_host(SLOTS * MAX as usize, RegisterOptions::pinned())
        .unwrap();
    let mut q = engine.queue(SLOTS as u32).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    // Sizes log-uniform over 1 B ..= 256 KiB: many small, some large, every power of two.
    let plan = |rng: &mut rand::rngs::StdRng| {
        let bits = rng.random_range(0..=18u32);
        let len = rng
            .random_range((1u64 << bits) / 2 + 1..=(1u64 << bits))
            .min(MAX);
        let off = rng.random_range(0..=size as u64 - len);
        (off, len)
    };
    let mut in_slot: Vec<Option<(u64, u64)>> = vec![None; SLOTS];
    let (mut submitted, mut completed, mut bytes) = (0usize, 0usize, 0u64);
    let mut cqes = vec![Cqe::default(); SLOTS];
    let start = Instant::now();
    while completed < OPS {
        {
            let mut sq = q.submission();
            for (slot, state) in in_slot.iter_mut().enumerate() {
                if state.is_none() && submitted < OPS {
                    let (off, len) = plan(&mut rng);
                    let dst = BufSlice::new(buf, slot as u64 * MAX, len);
                    sq.push(&RangeGet::new(obj, off, dst).user_data(slot as u64).build())
                        .unwrap();
                    *state = Some((off, len));
                    submitted += 1;
                }
            }
        }
        q.wait(1, Some(Duration::from_secs(30)));
        let n = q.reap(&mut cqes);
        assert!(n > 0, "no completion within 30 s ({completed} done)");
        for c in &cqes[..n] {
            let slot = c.user_data() as usize;
            let (off, len) = in_slot[slot].take().expect("completion for an idle slot");
            assert!(
                c.is_ok(),
                "op {off}+{len} failed: {:?} {:?}",
                c.error_code(),
                c.error_class()
            );
            assert_eq!(c.bytes(), len);
            let view = engine.read(buf, slot as u64 * MAX, len).unwrap();
            assert!(
                *view == data[off as usize..(off + len) as usize],
                "bytes differ for {off}+{len}"
            );
            bytes += len;
            completed += 1;
        }
    }
    let took = start.elapsed();
    eprintln!(
        "{OPS} range-gets, {:.1} MiB in {took:?}: {:.0} ops/s, {:.1} MiB/s",
        bytes as f64 / 1048576.0,
        OPS as f64 / took.as_secs_f64(),
        bytes as f64 / 1048576.0 / took.as_secs_f64()
    );
}
