//! A dead engine is not silent: after the `Engine` is dropped, pushes fail with
//! `PushError::Closed`, `wait` returns at once and `Queue::is_closed` tells why.

mod common;

use std::time::{Duration, Instant};

use common::{S3sFs, builder, pattern, put_file};
use engine::RegisterOptions;
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, PushError};

#[test]
fn push_and_wait_after_engine_drop_report_closed() {
    let server = S3sFs::start();
    put_file(&server, "shut", "obj", &pattern(4096, 7));
    let engine = builder(&server).build().unwrap();
    let obj = engine.object("shut", "obj").unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    let sqe = RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).build();
    q.push(&sqe).unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(10))), 1);
    assert!(q.completion().next().unwrap().is_ok());
    assert!(!q.is_closed());

    drop(engine);

    assert!(q.is_closed());
    assert_eq!(q.push(&sqe), Err(PushError::Closed));
    assert_eq!(q.push_multiple(&[sqe, sqe]), Err(PushError::Closed));
    assert_eq!(q.submission().push(&sqe), Err(PushError::Closed));
    let t = Instant::now();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 0);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(q.completion().next().is_none());
}

#[test]
fn engine_drop_wakes_a_thread_sleeping_in_wait() {
    let server = S3sFs::start();
    let engine = builder(&server).build().unwrap();
    let mut q = engine.queue(8).unwrap();
    let reaper = std::thread::spawn(move || {
        let t = Instant::now();
        let ready = q.wait(1, Some(Duration::from_secs(30)));
        (ready, q.is_closed(), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    drop(engine);
    let (ready, closed, took) = reaper.join().unwrap();
    assert_eq!(ready, 0);
    assert!(closed, "wait returned without the queue being closed");
    assert!(
        took < Duration::from_secs(10),
        "wait slept {took:?} past shutdown"
    );
}
