//! End to end: batches of range-gets through the engine against s3s-fs on 127.0.0.1.
//!
//! Throughput is set in bytes, so results read as GB/s. Needs `engine` and `tempfile` as
//! dependencies of this crate, and the s3s-fs binary (found or installed by the shared test
//! harness). The numbers include the server, which shares the machine's cores.

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use engine::{Engine, Placement, RegisterOptions};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, Cqe};
use s3_lite::credentials::Credentials;

const BATCH: u64 = 256;
const CONCURRENCY: u64 = 16;

fn batch_range_gets(c: &mut Criterion) {
    let server = s3s_fs::S3sFs::start();
    server.create_bucket_dir("bench");
    // s3s-fs hashes the whole object per GET (measured: ~2 ms per op at 1 MiB on the loaded
    // 2-core VM), so the object is kept at 1 MiB and small; the engine is not the bottleneck.
    let object: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(server.root.path().join("bench/obj"), &object).expect("write object");
    let engine = Engine::builder()
        .endpoint_url(server.endpoint_url())
        .credentials(Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .connections_per_worker(CONCURRENCY as usize)
        .build()
        .expect("engine");
    let obj = engine.object("bench", "obj").expect("intern");
    let mut group = c.benchmark_group("engine_e2e_range_get");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for size in [4u64 << 10, 64 << 10] {
        let buf = engine
            .register_host((CONCURRENCY * size) as usize, RegisterOptions::pageable())
            .expect("register");
        let mut q = engine.queue(CONCURRENCY as u32).expect("queue");
        group.throughput(Throughput::Bytes(BATCH * size));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            b.iter(|| run_batch(&mut q, obj, buf, size));
        });
        drop(q);
        engine
            .deregister(buf, Duration::from_secs(5))
            .expect("deregister");
    }
    group.finish();
}

/// `BATCH` range-gets of `size` bytes, `CONCURRENCY` in flight.
fn run_batch(q: &mut engine::Queue, obj: ring_api::ObjectId, buf: ring_api::BufHandle, size: u64) {
    let slots = (1u64 << 20) / size;
    let (mut sent, mut done) = (0u64, 0u64);
    let mut free: Vec<u64> = (0..CONCURRENCY).collect();
    let mut cqes = [Cqe::default(); CONCURRENCY as usize];
    while done < BATCH {
        while sent < BATCH {
            let Some(slot) = free.pop() else { break };
            let off = (sent * 7919 % slots) * size;
            let sqe = RangeGet::new(obj, off, BufSlice::new(buf, slot * size, size))
                .user_data(slot)
                .build();
            q.push(&sqe).expect("push");
            sent += 1;
        }
        q.wait(1, Some(Duration::from_secs(30)));
        let n = q.reap(&mut cqes);
        for c in &cqes[..n] {
            assert!(c.is_ok(), "range-get failed: {:?}", c.error_code());
            free.push(c.user_data());
            done += 1;
        }
    }
}

criterion_group!(benches, batch_range_gets);
criterion_main!(benches);
