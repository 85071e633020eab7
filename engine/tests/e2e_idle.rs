//! An idle engine sleeps: ~0 CPU over a second with workers, a queue and warm connections.

mod common;

use std::time::Duration;

use common::{S3sFs, builder, pattern, put_file};
use engine::{RegisterOptions, process_cpu_time};
use ring_api::BufSlice;
use ring_api::opcode::RangeGet;

#[test]
fn idle_engine_uses_no_cpu() {
    let server = S3sFs::start();
    put_file(&server, "idle", "obj", &pattern(4096, 1));
    let engine = builder(&server)
        .placement(engine::Placement::Workers(2))
        .build()
        .unwrap();
    let obj = engine.object("idle", "obj").unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(&RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(10))), 1);
    assert!(q.completion().next().unwrap().is_ok());
    std::thread::sleep(Duration::from_millis(100));
    let before = process_cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let used = process_cpu_time() - before;
    eprintln!("idle CPU over 1 s: {used:?}");
    assert!(
        used < Duration::from_millis(20),
        "idle engine used {used:?} of CPU in 1 s"
    );
    // And it still wakes up for new work.
    q.push(&RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(10))), 1);
}
