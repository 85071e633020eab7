//! The embedding surface: everything below comes from `engine` alone (ring types,
//! credentials, opcodes re-exported), `Cqe::into_result` decodes completions, and
//! `queue(0)` is refused instead of silently giving one slot.

mod common;

use std::time::Duration;

use common::{S3sFs, builder, pattern, put_file};
use engine::opcode::RangeGet;
use engine::{BufSlice, DataPath, EngineError, ErrorClass, ErrorCode, OpError, RegisterOptions};

#[test]
fn queue_of_depth_zero_is_refused() {
    let server = S3sFs::start();
    let engine = builder(&server).build().unwrap();
    let err = engine.queue(0).unwrap_err();
    assert!(matches!(err, EngineError::Config(_)), "{err:?}");
    assert!(err.to_string().contains("at least 1"), "{err}");
    assert_eq!(engine.queue(1).unwrap().sq_capacity(), 1);
}

#[test]
fn completions_decode_into_results() {
    let server = S3sFs::start();
    put_file(&server, "api", "obj", &pattern(8192, 5));
    let engine = builder(&server).build().unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let present = engine.object("api", "obj").unwrap();
    let absent = engine.object("api", "nope").unwrap();
    q.push(
        &RangeGet::new(present, 0, BufSlice::new(buf, 0, 4096))
            .user_data(1)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    assert_eq!(q.completion().next().unwrap().into_result(), Ok(4096));
    q.push(
        &RangeGet::new(absent, 0, BufSlice::new(buf, 0, 4096))
            .user_data(2)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let err: OpError = q.completion().next().unwrap().into_result().unwrap_err();
    assert_eq!(err.user_data, 2);
    assert_eq!(err.code, Some(ErrorCode::NotFound));
    assert_eq!(err.class, Some(ErrorClass::Client));
    assert_eq!(err.errno, 2);
    assert_eq!(err.path, Some(DataPath::None));
    let boxed: Box<dyn std::error::Error> = err.into();
    assert!(boxed.to_string().contains("op 2"), "{boxed}");
}
