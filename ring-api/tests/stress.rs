//! Two-thread stress test: an application thread and a worker thread exchange millions of
//! entries through both rings, parking on their doorbells whenever they run dry.
//!
//! Checked: every submission completes exactly once, in submission order, with the payload
//! the worker derived from it; a full completion ring back-pressures the worker instead of
//! dropping; and no wakeup is ever lost (both sides park with no timeout, so a lost wakeup
//! hangs the test, which a watchdog turns into a failure).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use ring_api::opcode::RangeGet;
use ring_api::{BufHandle, BufSlice, Cqe, DataPath, ObjectId, Op, ParkWaiter, queue_pair};

/// Deterministic xorshift for batch sizes, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn payload(ud: u64) -> u64 {
    ud.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40
}

fn run(total: u64, sq_entries: u32, cq_entries: u32, seed: u64) {
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = Arc::clone(&done);
        thread::spawn(move || {
            for _ in 0..1800 {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                thread::sleep(Duration::from_millis(100));
            }
            eprintln!("stress test hung for 180 s: lost wakeup or lost entry");
            std::process::abort();
        })
    };

    let waiter = ParkWaiter::new();
    let (mut app, mut worker) =
        queue_pair(sq_entries, cq_entries, Some(waiter.doorbell())).unwrap();

    let worker_thread = thread::spawn(move || {
        let mut processed = 0u64;
        let mut parks = 0u64;
        let mut max_pending = 0usize;
        loop {
            let mut progress = 0;
            {
                let backpressured = worker.backpressured();
                let (reader, mut writer) = worker.split();
                if backpressured {
                    progress += writer.flush_pending();
                } else {
                    for sqe in reader.take(64) {
                        let v = sqe.validate().expect("app only submits valid entries");
                        let Op::RangeGet { offset, dst, .. } = v.op else {
                            panic!("unexpected op")
                        };
                        assert_eq!(offset, v.user_data, "entry fields survive the ring");
                        assert_eq!(dst.len, payload(v.user_data) + 1);
                        writer.push(Cqe::success(
                            v.user_data,
                            payload(v.user_data),
                            DataPath::Http,
                        ));
                        processed += 1;
                        progress += 1;
                    }
                }
                max_pending = max_pending.max(writer.pending_len());
            } // reader releases SQ slots, writer publishes and wakes the app if parked
            if processed == total && !worker.backpressured() {
                return (parks, max_pending);
            }
            if progress == 0 {
                if worker.prepare_park() {
                    parks += 1;
                    waiter.wait(None);
                }
                worker.finish_park();
            }
        }
    });

    let mut rng = Rng(seed | 1);
    let (mut submitted, mut reaped) = (0u64, 0u64);
    while reaped < total {
        {
            let mut sq = app.submission();
            let batch = 1 + rng.below(2 * u64::from(sq_entries));
            for _ in 0..batch.min(total - submitted) {
                let ud = submitted;
                let dst = BufSlice::new(BufHandle(1), ud, payload(ud) + 1);
                if sq
                    .push(&RangeGet::new(ObjectId(7), ud, dst).user_data(ud).build())
                    .is_err()
                {
                    break;
                }
                submitted += 1;
            }
        }
        let before = reaped;
        for cqe in app.completion() {
            assert_eq!(cqe.user_data(), reaped, "completions arrive once, in order");
            assert_eq!(cqe.bytes(), payload(reaped));
            assert_eq!(cqe.path(), Some(DataPath::Http));
            reaped += 1;
        }
        if reaped == before && (submitted == total || rng.below(4) == 0) {
            app.wait_completions(1, None);
        }
    }
    assert_eq!(submitted, total);
    let (parks, max_pending) = worker_thread.join().unwrap();
    assert_eq!(app.completion().count(), 0, "nothing extra");
    done.store(true, Ordering::Relaxed);
    watchdog.join().unwrap();
    eprintln!(
        "{total} entries, sq {sq_entries}, cq {cq_entries}: worker parked {parks} times, max pending {max_pending}"
    );
}

/// Millions in release, fewer in debug, and a few hundred under Miri (which checks the same
/// code for data races and weak-memory effects, about 10^5 times slower).
fn scale(n: u64) -> u64 {
    if cfg!(miri) {
        n / 10_000
    } else if cfg!(debug_assertions) {
        n / 2
    } else {
        n
    }
}

#[test]
fn millions_through_roomy_rings() {
    run(scale(4_000_000), 256, 512, 0x5EED);
}

#[test]
fn small_completion_ring_forces_back_pressure() {
    run(scale(2_000_000), 256, 16, 0xBEEF);
}

#[test]
fn single_slot_rings_park_constantly() {
    run(scale(200_000), 1, 1, 0xF00D);
}
