//! Ring round-trip throughput on one thread: the application pushes a batch of NOP SQEs and
//! publishes, a "null backend" worker drains the SQ, validates each entry and posts one CQE per
//! SQE, then the application reaps the batch. Every SQE makes the full SQ → CQ trip, including
//! the SeqCst wakeup fence on each publish (a worker doorbell is installed, as in the engine).
//!
//! Throughput is in elements (operations), so criterion reports ops/s; the goal is
//! ≥ 20 M ops/s on one core.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ring_api::opcode::Nop;
use ring_api::{AppQueue, Cqe, DataPath, Doorbell, Sqe, WorkerQueue, queue_pair};

/// A doorbell that is never rung in this single-threaded bench (nobody parks), but whose
/// presence makes every publish pay the wakeup-protocol fence.
struct NeverRung;

impl Doorbell for NeverRung {
    fn ring(&self) {}
}

/// The null backend: every valid SQE completes at once with 0 bytes; an invalid one with its
/// validation error, exactly as the engine would post it.
fn null_backend(worker: &mut WorkerQueue) -> usize {
    let (sqes, mut cqes) = worker.split();
    let mut n = 0;
    for sqe in sqes {
        let cqe = match sqe.validate() {
            Ok(op) => Cqe::success(op.user_data, 0, DataPath::None),
            Err(e) => e.to_cqe(sqe.user_data()),
        };
        cqes.push(cqe);
        n += 1;
    }
    n
}

fn round_trip_one_by_one(app: &mut AppQueue, worker: &mut WorkerQueue, batch: u64, base: u64) {
    {
        let mut sq = app.submission();
        for i in 0..batch {
            // Building the entry is part of the measured submission cost.
            let _ = sq.push(&Nop::new().user_data(base + i).build());
        }
    }
    null_backend(worker);
    let mut sum = 0u64;
    for cqe in app.completion() {
        sum = sum.wrapping_add(cqe.user_data());
    }
    black_box(sum);
}

fn round_trip_multiple(
    app: &mut AppQueue,
    worker: &mut WorkerQueue,
    sqes: &[Sqe],
    out: &mut [Cqe],
) {
    {
        let mut sq = app.submission();
        let _ = sq.push_multiple(sqes);
    }
    null_backend(worker);
    let n = app.completion().fill(out);
    black_box(out.get(..n));
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring_nop_round_trip");
    for batch in [1u64, 8, 32, 128] {
        g.throughput(Throughput::Elements(batch));
        let bell: Arc<dyn Doorbell> = Arc::new(NeverRung);
        let (mut app, mut worker) = queue_pair(256, 512, Some(bell)).expect("queue");
        let mut base = 0u64;
        g.bench_with_input(BenchmarkId::new("push", batch), &batch, |b, &batch| {
            b.iter(|| {
                round_trip_one_by_one(&mut app, &mut worker, batch, base);
                base = base.wrapping_add(batch);
            });
        });
        let sqes: Vec<Sqe> = (0..batch)
            .map(|i| Nop::new().user_data(i).build())
            .collect();
        let mut out = vec![Cqe::default(); batch as usize];
        g.bench_with_input(BenchmarkId::new("push_multiple", batch), &batch, |b, _| {
            b.iter(|| round_trip_multiple(&mut app, &mut worker, &sqes, &mut out));
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
